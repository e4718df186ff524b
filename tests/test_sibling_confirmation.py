"""A fix confirmed by another value of its own variable (issue 20, points 5 and 6).

The user set ``--attention-backend triton`` and the server crashes in the triton backend. Another backend
serves; the user's own setting is then reverted (the smallest change from the user's command), and that
serves too. Two launches without the user's value both served: if the variable did not matter and the
failure were flaky, both would have been luck, as unlikely as a passing re-run of the revert. So the revert
is confirmed by its sibling and no re-run is launched; a reviewer sees which launch confirmed it.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its scheduler exception and
``server_args=`` line as SGLang logs them, the repository's knowledge, the rule planner and the conclusion.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import (
    TRITON_DECODE_CRASH,
    after_served_launch,
    baseline_failed_with,
    experiment_of,
    ready_with_backend,
)

from agent.domain.case import Case
from agent.domain.models import Change, Experiment
from agent.planning.conclusion import conclusion_of
from agent.planning.planner import PlannerView, RulePlanner
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1,
                       compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")


def _run() -> tuple[Case, PlannerView, RulePlanner, Experiment]:
    planner, view, _ = baseline_failed_with(HOST, {"--model-path": "/m/model", "--attention-backend": "triton"},
                                            TRITON_DECODE_CRASH, FLAGS)
    other = experiment_of(view.case.baseline, Change(kind="flag", name="--attention-backend", before="triton",
                                                after="flashinfer"))
    return view.case, view, planner, other


def test_a_revert_that_serves_after_another_value_served_is_confirmed_without_a_re_run() -> None:
    case, view, planner, other = _run()
    nxt = after_served_launch(planner, view, other, ready_with_backend("flashinfer"))
    revert = nxt.experiment
    assert revert is not None and revert.purpose == "test", nxt.conclude_reason
    assert revert.change == Change(kind="flag", name="--attention-backend", before="triton", after=None), \
        "the user's own setting is reverted before another value of it is kept"

    done = after_served_launch(planner, view, revert, ready_with_backend("fa3"))  # the engine's own choice on this host
    assert done.experiment is None, f"no re-run: {done.experiment and done.experiment.rationale}"
    state = planner.history(view)
    assert state.confirmed_experiment_id == revert.id
    assert state.best_fix is not None and state.best_fix.change == revert.change

    run = {"case": case.model_dump(), "experiments": [e.model_dump() for e in view.experiments],
           "outcomes": [o.model_dump() for o in view.outcomes],
           "hypotheses": [h.model_dump() for h in state.hypotheses], "conclude_reason": done.conclude_reason}
    ending = conclusion_of(run)  # type: ignore[arg-type]
    assert ending.status == "isolated", ending.reason
    assert ending.fix == revert.change
    assert ending.confirmation_experiment_id in (other.id, revert.id)


def test_a_sibling_the_engine_resolved_back_confirms_nothing() -> None:
    """The other value served, but the revert's launch printed the user's value again: that launch ran the
    failing configuration, so it is no second pass of anything and the other value still needs its re-run."""
    case, view, planner, other = _run()
    revert = after_served_launch(planner, view, other, ready_with_backend("flashinfer")).experiment
    assert revert is not None and revert.change is not None and revert.change.after is None
    nxt = after_served_launch(planner, view, revert, ready_with_backend("triton"))
    state = planner.history(view)
    assert state.confirmed_experiment_id is None
    assert nxt.experiment is not None and nxt.experiment.purpose == "confirm", nxt.conclude_reason
