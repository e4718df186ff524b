"""A value the user chose for speed is a localising suspect, never the fix (issue 20, point 5: root fix over
workaround, the user's intent kept).

EAGLE tree drafting (``--speculative-eagle-topk`` above 1; knowledge/served.toml role "intent", read by the
attention backends) crashes at decode in the attention backend SGLang picked. Reverting the user's topk is an
ordinary suspect; when it serves it is a workaround (the tree's speed is gone), and the run tries the other
implementations of the subsystem that reads it, with the user's tree kept, before anything is reported.
Shaped on https://github.com/sgl-project/sglang/issues/5491. Real parts: SGLang 0.5.23's own ``--help``, its
scheduler traceback as it logs it, the rule planner with the repository's knowledge, the conclusion.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import (
    after_failed_launch,
    after_served_launch,
    baseline_failed_with,
    experiment_of,
    ready_with_backend,
)

from agent.domain.models import Change, Conclusion
from agent.planning.planner import RulePlanner
from agent.planning.served import localising_intent
from agent.planning.view import PlannerView
from agent.run.nodes.conclude import build_conclusion
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/usr/local/lib/python3.12/dist-packages"
A100 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=2, compute_capability="8.0",
                       memory_total_mib=81920, sglang_version="0.5.23")
BASE = {"--model-path": "Qwen/QwQ-32B", "--tp-size": 2, "--speculative-algorithm": "EAGLE",
        "--speculative-draft-model-path": "/models/eagle-draft", "--speculative-num-steps": 3,
        "--speculative-eagle-topk": 2, "--speculative-num-draft-tokens": 8}

#: The scheduler's death as SGLang 0.5.23 logs it (srt/managers/scheduler.py, srt/speculative/eagle_worker.py).
CRASH = ready_with_backend("flashinfer") + f"""[2026-12-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 4001, in run_scheduler_process
    scheduler.run_event_loop()
  File "{SITE}/sglang/srt/managers/scheduler.py", line 2620, in run_batch
    batch_result = self.model_worker.forward_batch_generation(
  File "{SITE}/sglang/srt/speculative/eagle_worker.py", line 312, in forward_batch_generation
    spec_info = self.draft(batch)
  File "{SITE}/sglang/srt/speculative/eagle_worker.py", line 566, in draft
    parent_list, top_scores_index, draft_tokens = organize_draft_results(
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
[2026-12-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


def _conclusion(planner: RulePlanner, view: PlannerView) -> Conclusion:
    """The ending the graph's conclude node writes for the run so far."""
    return build_conclusion({
        "case": view.case.model_dump(mode="json"),
        "hypotheses": [h.model_dump(mode="json") for h in planner.history(view).hypotheses],
        "experiments": [e.model_dump(mode="json") for e in view.experiments],
        "outcomes": [o.model_dump(mode="json") for o in view.outcomes], "launches": view.launches})


def test_a_served_revert_of_the_users_draft_tree_is_followed_by_the_backends_that_read_it() -> None:
    planner, view, _ = baseline_failed_with(A100, BASE, CRASH, FLAGS)
    assert "--speculative-eagle-topk" in localising_intent(view.case, FLAGS)
    base = view.experiments[0].baseline
    revert = experiment_of(base, Change(kind="flag", name="--speculative-eagle-topk", before="2", after=None))
    nxt = after_served_launch(planner, view, revert, ready_with_backend("flashinfer"))
    exp = nxt.experiment
    assert exp is not None and exp.purpose == "test" and exp.change is not None, nxt
    # the reader of the tree, another implementation, with the user's topk kept: not a confirmation of the revert
    assert exp.change.name == "--attention-backend" and exp.change.after not in (None, "flashinfer"), exp.change
    assert exp.baseline == base and str(exp.config().flags["--speculative-eagle-topk"]) == "2"
    assert "workaround" in exp.rationale

    # The backend serves too and holds; the ending names it, the revert of the user's tree a workaround.
    nxt = after_served_launch(planner, view, exp, ready_with_backend(str(exp.change.after)))
    while nxt.experiment is not None and nxt.experiment.purpose == "confirm":
        nxt = after_served_launch(planner, view, nxt.experiment, ready_with_backend(str(exp.change.after)))
    c = _conclusion(planner, view)
    assert c.status == "isolated" and c.fix is not None and c.fix.name == "--attention-backend", c
    topk = [a for a in c.alternatives if a["name"] == "--speculative-eagle-topk"]
    assert topk and topk[0]["workaround"] is True and topk[0]["result"] == "fixed", c.alternatives


def test_a_draft_tree_the_user_says_they_need_is_ranked_last_and_a_failure_elsewhere_keeps_it_ordinary() -> None:
    """Said needed in the description, the tree is what the user keeps (a costly workaround, never the
    localising test); left to the engine (no topk), nothing of it is the user's to keep."""
    planner, view, prop = baseline_failed_with(A100, BASE, CRASH, FLAGS)
    view.case.description = "EAGLE crashes under load; we need --speculative-eagle-topk 2 for our latency target"
    assert "--speculative-eagle-topk" not in localising_intent(view.case, FLAGS)
    prop = planner.propose(view, planner.history(view))
    assert prop.experiment is not None and prop.experiment.change is not None
    assert prop.experiment.change.name != "--speculative-eagle-topk", prop.experiment.change
    plain = {k: v for k, v in BASE.items() if k != "--speculative-eagle-topk"}
    _, view2, _ = baseline_failed_with(A100, plain, CRASH, FLAGS)
    assert localising_intent(view2.case, FLAGS) == set()


def test_a_failure_after_the_revert_keeps_looking_for_the_fix() -> None:
    """The revert that did not serve says the tree is not the trigger: no backend search is forced."""
    planner, view, _ = baseline_failed_with(A100, BASE, CRASH, FLAGS)
    base = view.experiments[0].baseline
    revert = experiment_of(base, Change(kind="flag", name="--speculative-eagle-topk", before="2", after=None))
    nxt = after_failed_launch(planner, view, revert, CRASH)
    assert nxt.experiment is not None and nxt.experiment.change is not None
    assert "workaround" not in nxt.experiment.rationale
