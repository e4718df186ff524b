"""A chain: once the run got past a first blocker in the speculative worker, the server is ready and a decode
then runs out of KV-cache slots, raised in the KV allocator's own code ("Decode out of memory" from
``alloc_paged_token_slots_decode``). The frame is code of the allocator (knowledge/subsystems.toml
``kv_allocator``), whose page size the user set: that revert is the next launch, before the user's
speculative settings the old blocker pointed at and the words of the new frames touch only in passing (issue
20, points 1 and 4: the evidence of the failure now being fixed orders the candidates; a hypothesis the new
blocker proposes again is weighed as a new one would be). In process: the planner's proposals after launches
that failed with real-shaped SGLang logs."""

from __future__ import annotations

from pathlib import Path

from planner_steps import after_failed_launch, baseline_failed_with, fingerprint_with_model

from agent.domain.models import Change, Experiment
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/venv/lib/python3.11/site-packages"
GPU_HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=1,
                           compute_capability="8.0", memory_total_mib=81920, sglang_version="0.5.23")
DENSE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 36, "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
}
FLAGS_SET = {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "d/eagle3",
             "--speculative-num-steps": 5, "--speculative-eagle-topk": 4, "--speculative-num-draft-tokens": 8,
             "--page-size": 16, "--mem-fraction-static": 0.8}

#: The first blocker: the EAGLE worker's draft extend fails on mis-sized hidden states (frames as SGLang's
#: srt/speculative/eagle_worker.py; the message PyTorch's torch.cat gives).
SPEC_BLOCKER = f"""[2026-12-03 10:00:00] server_args=ServerArgs(model_path='MODEL', page_size=16, speculative_algorithm='EAGLE3', speculative_eagle_topk=4)
[2026-12-03 10:00:30] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_normal()
  File "{SITE}/sglang/srt/speculative/eagle_worker.py", line 520, in forward_draft_extend
    self.draft_model_runner.forward(forward_batch)
  File "{SITE}/sglang/srt/speculative/eagle_worker.py", line 611, in capture_for_decode
    hidden = torch.cat([hidden_states, draft_hidden], dim=1)
RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 6 but got size 8 for tensor number 1 in the list.
[2026-12-03 10:00:30] Received sigquit from a child process. It usually means the child failed.
"""

#: The second: ready, then the paged allocator cannot give a decode batch its slots (SGLang's
#: srt/mem_cache/allocation.py alloc_paged_token_slots_decode, reached through the EAGLE decode's
#: preparation, srt/speculative/eagle_info.py, as in the releases of the public reports).
DECODE_OOM = f"""[2026-12-03 10:00:00] server_args=ServerArgs(model_path='MODEL', page_size=16, speculative_algorithm='EAGLE3')
[2026-12-03 10:00:40] The server is fired up and ready to roll!
[2026-12-03 10:01:10 TP0] Decode out of memory. Try to lower your batch size.
Try to allocate 176 tokens.
Available tokens: 48 (available_size=48 + evictable_size=0)
[2026-12-03 10:01:10 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_normal()
  File "{SITE}/sglang/srt/managers/scheduler.py", line 2736, in update_running_batch
    batch.prepare_for_decode()
  File "{SITE}/sglang/srt/managers/schedule_batch.py", line 2281, in prepare_for_decode
    self.spec_info.prepare_for_decode(self)
  File "{SITE}/sglang/srt/speculative/eagle_info.py", line 704, in prepare_for_decode
    out_cache_loc = alloc_paged_token_slots_decode(
  File "{SITE}/sglang/srt/mem_cache/allocation.py", line 619, in alloc_paged_token_slots_decode
    raise RuntimeError(error_msg)
RuntimeError: Decode out of memory. Try to lower your batch size.
Try to allocate 176 tokens.
Available tokens: 48 (available_size=48 + evictable_size=0)
[2026-12-03 10:01:10] Received sigquit from a child process. It usually means the child failed.
"""


def test_past_a_blocker_the_allocators_own_setting_is_tried_first(tmp_path: Path) -> None:
    fp, model = fingerprint_with_model(tmp_path, DENSE, GPU_HOST)
    planner, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS_SET},
                                               SPEC_BLOCKER.replace("MODEL", model), FLAGS)
    first = prop.experiment
    assert first is not None and first.change is not None, prop.conclude_reason
    # one of the user's speculative settings reverted got the server past the first blocker (approved in
    # place of the proposal: which one does not matter here); a decode then ran out of KV slots
    change = Change(kind="flag", name="--speculative-num-steps", before="5", after=None)
    exp = first.model_copy(update={"change": change, "id": Experiment.make_id(first.baseline, change, "test",
                                                                              probes=first.probes)})
    nxt = after_failed_launch(planner, view, exp, DECODE_OOM.replace("MODEL", model))
    state = planner.history(view)
    assert state.adoptions and state.baseline.flags.get("--speculative-num-steps") is None, state.adoptions
    assert nxt.experiment is not None and nxt.experiment.change is not None, nxt.conclude_reason
    assert (nxt.experiment.change.name, nxt.experiment.change.after) == ("--page-size", None), nxt.experiment.change
    # the speculative settings the new frames only pass through weigh less than the allocator's own
    post = {h.id: h.posterior for h in state.hypotheses}
    for other in ("--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        assert post.get(f"revert:{other}", 0.0) < post["revert:--page-size"], post
