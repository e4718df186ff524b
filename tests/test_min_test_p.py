"""A one-change test is launched only when the evidence leaves it a chance worth a launch
(``choice.min_test_p`` of knowledge/planner.toml): below it the run ends, naming the reason, instead of
spending host time on an all-but-hopeless change (issue 20: launches <= chain length + 3)."""

from __future__ import annotations

from pathlib import Path

from test_in_play import GPU_HOST, SITE, _run

from agent.domain.knowledge_dir import use_knowledge
from bench.run import swept_knowledge


def test_a_change_below_the_least_chance_worth_a_launch_is_not_launched(tmp_path: Path) -> None:
    log = f"""[2026-12-01 10:00:00] server_args={{'model_path': '/m/tiny', 'attention_backend': 'flashinfer'}}
[2026-12-01 10:00:03] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler = Scheduler(
  File "{SITE}/sglang/srt/layers/attention/flashinfer_backend.py", line 812, in forward_decode
    o = decode_wrapper.forward(q, kv)
RuntimeError: CUDA error: no kernel image is available for execution on the device
"""
    _, _, every = _run(GPU_HOST, {"--model-path": "/m/tiny"}, log)
    assert every.experiment is not None and every.experiment.change is not None  # 0: every candidate
    with use_knowledge(swept_knowledge(tmp_path, "choice.min_test_p", "0.99")):
        planner, view, first = _run(GPU_HOST, {"--model-path": "/m/tiny"}, log)
        # before any change was tried, a low P(fix) is no evidence that no setting matters: the best
        # candidate is launched rather than the run ending without trying one (issue 20, ending rules)
        assert first.experiment is not None and first.experiment.change is not None
        tried = first.experiment.model_copy(update={"status": "done"})
        failed = view.outcomes[0].model_copy(update={"experiment_id": tried.id})
        view.experiments.append(tried)
        view.outcomes.append(failed)
        view.launches = 2
        none = planner.propose(view, planner.history(view))
    assert none.experiment is None
    assert none.conclude_reason is not None and "likely enough to be worth a launch" in none.conclude_reason
