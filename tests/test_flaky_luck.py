"""Flaky failures read honestly (issue 20, point 6): a success that was luck says nothing about the causes.

On a flaky failure a change may serve once by chance. When its re-run fails, the planner drops the fix, and
the weakening the success gave the other hypotheses ("the symptom went away with ...": they predicted it
would persist) is taken back: that success was a draw of the flaky failure, as likely under each of them.
Otherwise two lucky successes leave every other cause below the launch threshold and the run ends before it
tests the user's own settings.

A change the engine resolved back to what it ran before (``--attention-backend`` unset on a host where
SGLang picks the user's backend anyway: its ``server_args`` line prints the same value) launches the failing
configuration again. If that launch serves, the success was luck: the change is not a fix, the hypotheses
that predicted it would fix it are ruled out, and the run now knows the failure is flaky.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its scheduler exception and
``server_args=`` line as SGLang logs them, the repository's knowledge and the rule planner.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import (
    TRITON_DECODE_CRASH,
    after_failed_launch,
    after_served_launch,
    baseline_failed_with,
    ready_with_backend,
)

from agent.domain.case import Case
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, Proposal, RulePlanner
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/usr/local/lib/python3.12/dist-packages"
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=2,
                       compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")
ONE_GPU = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1,
                          compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")
READY = "[2026-12-01 10:00:00] The server is fired up and ready to roll!\n"
#: the scheduler's exception under a burst of requests (srt/managers/scheduler.py), the radix cache's frame
CRASH = READY + f"""[2026-12-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/sglang/srt/managers/scheduler.py", line 1102, in event_loop_overlap
    batch = self.get_next_batch_to_run()
  File "{SITE}/sglang/srt/mem_cache/hiradix_cache.py", line 612, in load_back
    assert node.host_value is not None
AssertionError
[2026-12-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


READY_ARGS = ready_with_backend("triton")
CRASH_ARGS = TRITON_DECODE_CRASH


def _served(planner: RulePlanner, view: PlannerView, exp: Experiment, log: str = READY) -> Proposal:
    """Record ``exp`` as served with the log ``log``; the planner's next proposal."""
    return after_served_launch(planner, view, exp, log)


def test_a_success_that_did_not_hold_on_its_re_run_says_nothing_against_the_other_causes() -> None:
    flags = {"--model-path": "/m/model", "--tp-size": 2, "--enable-hierarchical-cache": True,
             "--hicache-ratio": 2}
    planner, view, first = baseline_failed_with(HOST, flags, CRASH, FLAGS)
    before = {h.id: h.posterior for h in planner.history(view).hypotheses}
    lucky = first.experiment
    assert lucky is not None and lucky.change is not None
    confirm = _served(planner, view, lucky).experiment
    assert confirm is not None and confirm.purpose == "confirm", "a change that served is re-run first"

    served_once = {h.id: h for h in planner.history(view).hypotheses}
    weakened = [i for i, h in served_once.items() if any(
        e.experiment_id == lucky.id and e.effect == "weakens" for e in h.evidence)]
    assert weakened, "the success counted against the causes that predicted the failure would persist"

    nxt = after_failed_launch(planner, view, confirm, CRASH)
    after = {h.id: h for h in planner.history(view).hypotheses}
    for i in weakened:
        h = after[i]
        assert any(e.experiment_id == confirm.id and e.effect == "neutral" and "luck" in e.detail
                   for e in h.evidence), h.id
        # back to about where the baseline's evidence put it (the lucky change's own causes lost weight)
        assert h.posterior >= before[i] * 0.9, (h.id, before[i], h.posterior)
    assert nxt.experiment is not None, nxt.conclude_reason
    assert nxt.experiment.change != lucky.change, "the change whose success was luck is not tried again"


def test_a_change_the_engine_resolved_back_to_the_failing_value_is_not_a_fix_even_when_it_served() -> None:
    base = Baseline(flags={"--model-path": "/m/model", "--attention-backend": "triton"})
    case = Case.model_validate({"name": "c", "model": {"path": "/m/model"}, "baseline": base.model_dump()})
    view = PlannerView(case=case, fingerprint=ONE_GPU)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    after_failed_launch(planner, view, first, CRASH_ARGS)
    revert = [h for h in planner.history(view).hypotheses if h.id == "revert:--attention-backend"]
    assert revert and revert[0].status == "open"

    change = Change(kind="flag", name="--attention-backend", before="triton", after=None)
    test = Experiment(id=Experiment.make_id(case.baseline, change, "test"), purpose="test", baseline=case.baseline,
                      change=change, attempt=1, status="done")
    # the engine picked triton again without the flag, and the launch served
    _served(planner, view, test, READY_ARGS)

    state = planner.history(view)
    assert not state.fixes, "a launch of the failing configuration that served is not a fix"
    assert state.flaky, "the failing configuration served: the failure is flaky"
    h = next(h for h in state.hypotheses if h.id == "revert:--attention-backend")
    assert h.status == "refuted"
    assert any("attention_backend=triton" in e.detail for e in h.evidence)
    nxt = planner.propose(view, state).experiment
    assert nxt is None or nxt.purpose != "confirm", "nothing to confirm"
