"""A graded failure is fixed only by a launch that beats it on the same questions (issue 20: never a wrong
``isolated``; agent/planning/graded.py).

The probe set's pass says "not below the expected accuracy with 95% confidence". With a drop of a few points
(a lab world's 0.87 against an expected 0.91) a change that fixed nothing passes about half the time, and a
newcomer's run ended ``isolated`` on such a change (175/200 after 173/200 failing). A fix must beat the failing
launch on the same set (Fisher's exact test, one-sided, 95%). In process: the rule planner on SGLang 0.5.23's
help, with launches whose probe-set results carry the counts as the real verdict writes them.
"""

from __future__ import annotations

from math import comb

from planner_steps import SGLANG_0_5_23_FLAGS

from agent.domain.accuracy import improved_p, judge
from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline
from agent.planning.catalog import load_catalog
from agent.planning.conclusion import conclusion_of
from agent.planning.planner import PlannerView, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.probe_set import SET_PROBE_ID
from tools.probes import ProbeResult
from tools.signatures import for_engine, load_signatures

H200 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H200", gpu_count=1, compute_capability="9.0",
                       memory_total_mib=143771, sglang_version="0.5.23")
SERVED = ("[2026-12-04 10:00:00] server_args=ServerArgs(model_path='/m/x')\n"
          "[2026-12-04 10:00:30] The server is fired up and ready to roll!\n")


def test_the_one_sided_fisher_test_is_the_hypergeometric_tail() -> None:
    assert abs(improved_p((3, 4), (1, 4)) - (comb(4, 3) * comb(4, 1) + comb(4, 4)) / comb(8, 4)) < 1e-12
    assert improved_p((186, 200), (174, 200)) < 0.05  # restored: 0.93 against 0.87
    assert improved_p((175, 200), (173, 200)) > 0.4  # the same drop, a lucky pass


def _probes(right: int) -> list[ProbeResult]:
    verdict = judge(right, 200, 0.91)
    text = f"arithmetic-200: {verdict.text()}"
    return [ProbeResult(probe_id="chat", ok=True, status="ok", http_status=200, text="Paris", latency_s=1.0),
            ProbeResult(probe_id=SET_PROBE_ID, ok=not verdict.below, status="wrong_answer" if verdict.below else "ok",
                        http_status=200, text=text, latency_s=9.0, error=text if verdict.below else None)]


def _run(rights: list[int]) -> tuple[RulePlanner, PlannerView]:
    """A run whose launches (the baseline, then what the planner proposes) answered the set ``rights``."""
    case = Case.model_validate({"name": "c", "model": {"path": "/m/x"}, "reproduce": {"accuracy": 0.91},
                                "baseline": {"flags": {"--model-path": "/m/x", "--enable-mixed-chunk": True}}})
    case.baseline = Baseline(flags={SGLANG_0_5_23_FLAGS.resolve(k).name: v for k, v in case.baseline.flags.items()})
    planner, view = RulePlanner(load_catalog(), SGLANG_0_5_23_FLAGS), PlannerView(case=case, fingerprint=H200)
    sigs = for_engine(load_signatures(), "sglang")
    for right in rights:
        exp = planner.propose(view, planner.history(view)).experiment
        assert exp is not None
        raw = RawEvidence.from_log(exp.id, SERVED, sigs, "x.log").model_copy(
            update={"status": "ready", "probes": _probes(right)})
        view.experiments.append(exp.model_copy(update={"status": "done"}))
        view.outcomes.append(classify_outcome(raw))
        view.launches += 1
    return planner, view


def _state(planner: RulePlanner, view: PlannerView) -> dict[str, object]:
    hist = planner.history(view)
    return {"run_id": "r", "case": view.case.model_dump(mode="json"), "fingerprint": None,
            "experiments": [e.model_dump(mode="json") for e in view.experiments],
            "outcomes": [o.model_dump(mode="json") for o in view.outcomes], "rejections": [],
            "hypotheses": [h.model_dump(mode="json") for h in hist.hypotheses],
            "baseline": hist.baseline.model_dump(mode="json"), "launches": view.launches, "host_seconds": 1.0}


def test_a_pass_that_does_not_beat_the_failing_launch_is_no_fix() -> None:
    """173/200 fails (below 0.91), then a change answers 175 and its re-run 180: both pass the set, neither
    beats 173 with 95% confidence, so no fix is kept and the ending is not ``isolated``."""
    planner, view = _run([173, 175, 180])
    assert view.outcomes[0].stage == "wrong_output" and view.outcomes[1].stage == "ok"
    assert planner.history(view).best_fix is None
    assert conclusion_of(_state(planner, view)).status != "isolated"  # type: ignore[arg-type]


def test_a_pass_that_beats_the_failing_launch_is_the_fix() -> None:
    """173/200 fails, a change answers 190: above 173 with 95% confidence, the fix is kept."""
    planner, view = _run([173, 190])
    best = planner.history(view).best_fix
    assert best is not None and best.experiment_id == view.experiments[1].id
