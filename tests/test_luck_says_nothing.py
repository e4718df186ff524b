"""A success that a re-run showed to be luck says nothing against the other causes (issue 20, point 6).

On a flaky failure a change may serve once by chance; when its re-run fails, the planner drops the fix.
The other hypotheses had been weakened by "the symptom went away with ..." (they predicted it would
persist); that success was a draw of the flaky failure, as likely under each of them, so the weakening is
taken back: otherwise two lucky successes leave every other cause below the launch threshold and the run
ends before it tests the user's own settings.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), the repository's
knowledge and the rule planner; the failing log is the scheduler's exception as SGLang prints it.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import after_failed_launch, baseline_failed_with

from agent.domain.evidence import RawEvidence
from agent.domain.models import Experiment
from agent.planning.planner import PlannerView, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.probes import ProbeResult
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/usr/local/lib/python3.12/dist-packages"
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=2,
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


def _served(planner: RulePlanner, view: PlannerView, exp: Experiment):
    """Record ``exp`` as served (every probe answered) and return the planner's next proposal."""
    raw = RawEvidence.from_log(exp.id, READY, for_engine(load_signatures(), "sglang"), "x.log")
    probes = [ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1)]
    view.experiments.append(exp.model_copy(update={"status": "done"}))
    view.outcomes.append(classify_outcome(raw.model_copy(update={"status": "ready", "probes": probes})))
    view.launches += 1
    return planner.propose(view, planner.history(view))


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
