"""Every reproduction runs the case's own load (issue 20, point 6): when a load-only failure the case calls
intermittent did not show, the plain repeats of the unchanged baseline still send the case's concurrent
requests; without them a load-only failure could never show on a repeat."""

from __future__ import annotations

from test_localise import FLAGS, H200, SERVED, _launch

from agent.domain.case import Case
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, RulePlanner


def test_the_repeats_of_a_baseline_that_served_send_the_cases_load() -> None:
    case = Case.model_validate({"name": "c", "model": {"path": "/m/q"}, "baseline": {"flags": {}, "env": {}},
                                "reproduce": {"concurrency": 16, "intermittent": True}})
    planner, view = RulePlanner(load_catalog(), FLAGS), PlannerView(case=case, fingerprint=H200)
    first = _launch(planner, view, SERVED, status="ready")
    bursts = _launch(planner, view, SERVED, status="ready")
    repeat = planner.propose(view, planner.history(view)).experiment
    assert repeat is not None and repeat.purpose == "baseline"
    case_load = [p.concurrency for p in first.probes]
    assert case_load == [16] and len(bursts.probes) > 1  # the case's load, then the escalating bursts
    assert [p.concurrency for p in repeat.probes] == case_load
