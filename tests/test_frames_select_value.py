"""The path the user's value chose, read from every failing frame (issue 20: localise first): a ready server
dies on its first sampled request inside the speculative verify step (``speculative/eagle_worker_v2.verify``
-> ``eagle_utils.eagle_sample``), and the error surfaces below it in a shared kernel wrapper
(``sglang/utils.py __call__``: flashinfer's ``TopKRenormProb``, the shape of flashinfer-ai/flashinfer#1855 on
SM100). The frames spell the user's value (EAGLE) and the setting's own word (speculative): the failure ran
on the path ``--speculative-algorithm EAGLE`` selects, so reverting it is the first suspect, before the
parsers and backends the error never touched. The same crash in attention code leaves it an ordinary
revert. In process: the planner's ledger and proposal after a real-shaped SGLang 0.5.23 log."""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, fingerprint_with_model

from tools.fingerprint import HostFingerprint

SITE = "/usr/local/lib/python3.12/dist-packages"
B200X8 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA B200", gpu_count=8, compute_capability="10.0",
                         memory_total_mib=183359, sglang_version="0.5.23")
CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
          "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61, "n_routed_experts": 256,
          "num_experts_per_tok": 8, "kv_lora_rank": 512, "max_position_embeddings": 163840, "torch_dtype": "bfloat16"}
FLAGS = {"--tp-size": 8, "--speculative-algorithm": "EAGLE", "--attention-backend": "trtllm_mla",
         "--reasoning-parser": "deepseek-v3", "--tool-call-parser": "deepseekv31"}
SPECULATIVE = (f'  File "{SITE}/sglang/srt/speculative/eagle_worker_v2.py", line 1980, in verify\n'
               "    return run_eagle_verify(\n"
               f'  File "{SITE}/sglang/srt/speculative/eagle_utils.py", line 729, in eagle_sample\n'
               "    target_probs = top_k_renorm_prob(\n")
ATTENTION = (f'  File "{SITE}/sglang/srt/layers/radix_attention.py", line 183, in forward\n'
             "    return get_attn_backend().forward(\n"
             f'  File "{SITE}/sglang/srt/layers/attention/trtllm_mla_backend.py", line 702, in forward_decode\n'
             "    o = run_decode(\n")
LOG = f"""[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', attention_backend='trtllm_mla', speculative_algorithm='EAGLE')
[2026-12-04 10:00:30] The server is fired up and ready to roll!
[2026-12-04 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
  File "{SITE}/sglang/srt/managers/scheduler.py", line 4870, in run_batch
    batch_result = self.model_worker.forward_batch_generation(
PATH  File "{SITE}/sglang/utils.py", line 384, in __call__
    return module(*args, **kwargs)
RuntimeError: TopKRenormProb failed with error code too many resources requested for launch
[2026-12-04 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


#: The user's words: they serve with speculative decoding (agent.planning.served.description_keeps keeps it).
SERVED_WITH = "We serve DeepSeek-V3.1 at TP=8 with EAGLE speculative decoding. Sampled requests kill the server."


@pytest.mark.parametrize(("path", "first", "description"), [
    (SPECULATIVE, True, ""),
    # kept, its revert is still the localising test (served, it is the workaround it is)
    (SPECULATIVE, True, SERVED_WITH),
    (ATTENTION, False, ""),
], ids=["speculative", "speculative-kept", "attention"])
def test_frames_that_spell_the_users_value_make_its_revert_the_first_suspect(tmp_path: Path, path: str,
                                                                             first: bool, description: str) -> None:
    fp, model = fingerprint_with_model(tmp_path, CONFIG, B200X8)
    planner, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS},
                                               LOG.replace("MODEL", model).replace("PATH", path), SGLANG_0_5_23_FLAGS,
                                               description)
    assert prop.experiment is not None and prop.experiment.change is not None, prop.conclude_reason
    assert (prop.experiment.change.name == "--speculative-algorithm") is first, prop.experiment.change
    ledger = {h.id: h for h in planner.history(view).hypotheses}
    spec = ledger["revert:--speculative-algorithm"]
    assert ("the path the user's value selects" in " ".join(e.detail for e in spec.evidence)) is first
    if first:
        assert spec.posterior > ledger["revert:--reasoning-parser"].posterior
