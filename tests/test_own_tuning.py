"""Another implementation served, but the user had tuned the one it left: that tuning is tested first, and the
switch of implementation is the fix only once it failed (issue 20, point 5: root fix before workaround).

On a ROCm host the user runs the aiter attention backend with a variable of their own for it
(``SGLANG_AITER_MLA_PERSIST=1``, whose default is the same "on") and the library-wide ``SGLANG_USE_AITER=1``;
start-up dies with a GPU memory access fault. The triton backend serves. An engineer then reverts the
user's aiter variable and, since unsetting a switch that defaults to "on" changes nothing, also puts it in
its other position; the library-wide switch is no tuning of one backend and is left alone.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), the ROCm runtime's fault line
and aiter's kernel-load line as the host prints them, the repository's knowledge, the rule planner and its
conclusion.
"""

from __future__ import annotations

from typing import Any

from planner_steps import (
    SGLANG_0_5_23_FLAGS,
    after_failed_launch,
    after_served_launch,
    baseline_failed_with,
    experiment_of,
    ready_with_backend,
)

from agent.domain.models import Baseline, Change, Experiment
from agent.planning.own_tuning import tuning_exhausted, tuning_tests
from tools.fingerprint import HostFingerprint

HOST = HostFingerprint(gpu_vendor="amd", gpu_name="AMD Instinct MI350X", gpu_count=2, compute_capability="9.5",
                       memory_total_mib=294896, sglang_version="0.5.23")
FAULT = """[2026-12-01 09:59:00 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=43.20 GB
[aiter] LoadKernel: _ZN5aiter39mla_a8w8_qh64_qseqlen1_gqaratio64_v3_psE hsaco: /sgl-workspace/aiter/hsa//gfx950/mla/mla_a8w8_qh64_qseqlen1_gqaratio64_v3_ps.co
Memory access fault by GPU node-3 (Agent handle: 0x5581d2b4c6f0) on address 0x7f1e5a400000. Reason: Unknown.
Fatal Python error: Aborted
[2026-12-01 09:59:01] RuntimeError: Rank 0 scheduler died during initialization (exit code: -6).
"""
FLAGS: dict[str, object] = {"--model-path": "/m/model", "--tp-size": "2", "--attention-backend": "aiter"}
ENV = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_MLA_PERSIST": "1"}
TRITON = Change(kind="flag", name="--attention-backend", before="aiter", after="triton")
REVERT = Change(kind="env", name="SGLANG_AITER_MLA_PERSIST", before="1", after=None)
FLIP = Change(kind="env", name="SGLANG_AITER_MLA_PERSIST", before="1", after="0")


def _failed_on_rocm() -> tuple[Any, Any, Baseline]:
    planner, view, _ = baseline_failed_with(HOST, FLAGS, FAULT, SGLANG_0_5_23_FLAGS)
    view.case.baseline = Baseline(flags=view.case.baseline.flags, env=ENV)
    view.experiments[0] = view.experiments[0].model_copy(update={"baseline": view.case.baseline})
    return planner, view, view.case.baseline


def test_the_users_tuning_of_the_backend_left_is_reverted_then_flipped_and_the_flip_is_the_fix() -> None:
    planner, view, base = _failed_on_rocm()
    nxt = after_served_launch(planner, view, experiment_of(base, TRITON), ready_with_backend("triton"))
    own = Change(kind="flag", name="--attention-backend", before="aiter", after=None)
    assert nxt.experiment is not None and nxt.experiment.change == own, nxt.experiment  # SGLang's own choice first
    nxt = after_failed_launch(planner, view, experiment_of(base, own), FAULT)
    assert nxt.experiment is not None and nxt.experiment.change == REVERT, nxt.experiment
    assert "tuning" in nxt.experiment.rationale
    nxt = after_failed_launch(planner, view, experiment_of(base, REVERT), FAULT)
    assert nxt.experiment is not None and nxt.experiment.change == FLIP, nxt.experiment
    nxt = after_served_launch(planner, view, experiment_of(base, FLIP), ready_with_backend("aiter"))
    assert nxt.experiment is not None and nxt.experiment.purpose == "confirm", nxt.experiment
    assert nxt.experiment.config() == base.apply(FLIP), "the user's backend kept, its switch flipped"


def test_the_library_wide_switch_is_no_tuning_of_one_backend() -> None:
    base = Baseline(flags=FLAGS, env=ENV)
    assert tuning_tests(base, base, TRITON, SGLANG_0_5_23_FLAGS) == [REVERT, FLIP]
    # a backend the user did not choose has no tuning of theirs to test
    unset = Baseline(flags={"--model-path": "/m/model"}, env=ENV)
    assert tuning_tests(unset, unset, TRITON.model_copy(update={"before": None}), SGLANG_0_5_23_FLAGS) == []


def _ran(base: Baseline, change: Change | None, purpose: str = "test") -> Experiment:
    return Experiment(id=Experiment.make_id(base, change, purpose), purpose=purpose, baseline=base,  # type: ignore[arg-type]
                      change=change, attempt=1, status="done")


def test_switching_backends_is_the_fix_only_once_the_users_tuning_failed() -> None:
    from agent.domain.evidence import RawEvidence
    from agent.run.nodes.analyze import classify_outcome
    from tools.signatures import load_signatures

    base = Baseline(flags=FLAGS, env=ENV)
    fix = _ran(base, TRITON)

    def outcome(e: Experiment, log: str, status: str) -> Any:
        return classify_outcome(RawEvidence.from_log(e.id, log, load_signatures(), "x.log").model_copy(update={"status": status}))

    runs = {fix.id: (fix, outcome(fix, ready_with_backend("triton"), "ready"))}
    assert tuning_exhausted(fix, base, {k: e for k, (e, _) in runs.items()},
                            {k: o for k, (_, o) in runs.items()}, SGLANG_0_5_23_FLAGS) is False
    for change in (REVERT, FLIP):
        e = _ran(base, change)
        runs[e.id] = (e, outcome(e, FAULT, "crashed"))
    assert tuning_exhausted(fix, base, {k: e for k, (e, _) in runs.items()},
                            {k: o for k, (_, o) in runs.items()}, SGLANG_0_5_23_FLAGS) is True


def test_the_ending_calls_the_switch_a_workaround_until_the_tuning_failed_then_the_fix() -> None:
    from agent.domain.case import Case
    from agent.domain.evidence import RawEvidence
    from agent.run.nodes.analyze import classify_outcome
    from agent.run.nodes.conclude import build_conclusion
    from tools.probes import ProbeResult
    from tools.signatures import load_signatures

    base = Baseline(flags=FLAGS, env=ENV)

    def out(e: Experiment, ok: bool) -> dict[str, Any]:
        probes = [ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1)] if ok else []
        raw = RawEvidence.from_log(e.id, ready_with_backend("triton") if ok else FAULT, load_signatures(), "x.log")
        return classify_outcome(raw.model_copy(update={"status": "ready" if ok else "crashed", "probes": probes})).model_dump(mode="json")

    def ending(runs: list[tuple[Experiment, bool]]) -> Any:
        case = Case.model_validate({"name": "c", "model": {"path": "/m/model"}, "baseline": base.model_dump()})
        state = {"case": case.model_dump(mode="json"), "experiments": [e.model_dump(mode="json") for e, _ in runs],
                 "outcomes": [out(e, ok) for e, ok in runs], "hypotheses": [], "launches": len(runs),
                 "host_seconds": 100.0, "conclude_reason": "fix found and confirmed"}
        return build_conclusion(state, flags=SGLANG_0_5_23_FLAGS)  # type: ignore[arg-type]

    fix = _ran(base, TRITON)
    runs = [(_ran(base, None, "baseline"), False), (fix, True), (_ran(fix.config(), None, "confirm"), True)]
    c = ending(runs)
    assert c.status == "not_isolated" and "SGLANG_AITER_MLA_PERSIST" in c.reason, c.reason
    c = ending([*runs[:2], (_ran(base, REVERT), False), (_ran(base, FLIP), False), runs[2]])
    assert c.status == "isolated" and c.fix is not None and "triton" in str(c.fix), c.reason
    assert "narrowest change that served" in c.reason
