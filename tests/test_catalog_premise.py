"""A catalog hypothesis fires only where its premise holds: "the attention backend cannot use a low-precision KV
cache" (knowledge/hypotheses.toml ``kv-pool-lowprec-unsupported``) needs a low-precision KV cache in force, not
only a bare AssertionError. Before, any bare assertion proposed ``--kv-cache-dtype bf16`` first (P(fix) 0.32 on a
CPU host whose cache was BF16: a launch that could not matter). In process: the rule planner with the
repository's knowledge on SGLang 0.5.23's own ``--help``, after a launch that failed with an SGLang-shaped log."""

from __future__ import annotations

from pathlib import Path

from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, fingerprint_with_model

from tools.fingerprint import HostFingerprint

FLAGS = SGLANG_0_5_23_FLAGS
SITE = "/usr/local/lib/python3.12/dist-packages"
H100 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, compute_capability="9.0",
                       memory_total_mib=81559, sglang_version="0.5.23")
DENSE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 8, "num_hidden_layers": 28, "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
#: A bare assertion while the model is built (the frame as SGLang 0.5.23 srt/model_executor/model_runner.py).
LOG = f"""[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', kv_cache_dtype='KV')
[2026-12-04 10:00:20] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 1021, in load_model
    assert self.model is not None
AssertionError
[2026-12-04 10:00:20] Received sigquit from a child process. It usually means the child failed.
"""


def _ledger(tmp_path: Path, kv: str) -> set[str]:
    fp, model = fingerprint_with_model(tmp_path / kv, DENSE, H100)
    flags: dict[str, object] = {"--model-path": model}
    if kv != "auto":
        flags["--kv-cache-dtype"] = kv
    planner, view, _ = baseline_failed_with(fp, flags, LOG.replace("MODEL", model).replace("KV", kv), FLAGS)
    return {h.id for h in planner.history(view).hypotheses}


def test_a_bare_assertion_suspects_the_kv_cache_type_only_when_it_is_low_precision(tmp_path: Path) -> None:
    assert "kv-pool-lowprec-unsupported" in _ledger(tmp_path, "fp8_e4m3")
    assert "kv-pool-lowprec-unsupported" not in _ledger(tmp_path, "auto")
    assert "kv-pool-lowprec-unsupported" not in _ledger(tmp_path, "bfloat16")



#: The same bare assertion after the server was ready, while it served a batch (the scheduler's event loop,
#: SGLang 0.5.23 srt/managers/scheduler.py): the KV pool was built long before, at load.
SERVING = f"""[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', kv_cache_dtype='KV')
[2026-12-04 10:00:30] The server is fired up and ready to roll!
[2026-12-04 10:01:00] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
  File "{SITE}/sglang/srt/mem_cache/radix_cache.py", line 512, in load_back
    assert node.value is not None
AssertionError
[2026-12-04 10:01:00] Received sigquit from a child process. It usually means the child failed.
"""


def test_an_assertion_while_serving_is_not_the_kv_pool_refusing_its_type(tmp_path: Path) -> None:
    """The pool is created while the server loads: an assertion after it was ready does not suspect the
    low-precision KV cache's layout (its premise is the pool's creation)."""
    fp, model = fingerprint_with_model(tmp_path, DENSE, H100)
    flags: dict[str, object] = {"--model-path": model, "--kv-cache-dtype": "fp8_e4m3"}
    planner, view, _ = baseline_failed_with(fp, flags, SERVING.replace("MODEL", model).replace("KV", "fp8_e4m3"), FLAGS)
    assert "kv-pool-lowprec-unsupported" not in {h.id for h in planner.history(view).hypotheses}
