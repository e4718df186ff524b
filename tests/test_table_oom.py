"""A start-up table larger than the device is shrunk by the setting that sizes it (issue 20: reason from the
evidence; localise the allocation before touching memory fractions or backends).

SGLang 0.5.23 allocates its request-to-token table once (srt/mem_cache/memory_pool.py ReqToTokenPool:
``torch.zeros((max_running_requests + 1, context_len + 4), dtype=torch.int32)``). A model whose own window is
10M tokens asks for 80 GiB of an 80 GiB GPU there: no memory fraction, MoE runner or GEMM backend helps (a
development world spent five launches on those), a smaller --context-length does. In process: the rule
planner with the repository's knowledge (and the bench's empty catalog) on SGLang 0.5.23's own ``--help``,
after a launch that failed with the real frames and PyTorch's real message.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, fingerprint_with_model, under_catalog

from tools.fingerprint import HostFingerprint

SITE = "/usr/local/lib/python3.12/dist-packages"
H100 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=8, compute_capability="9.0",
                       memory_total_mib=81559, sglang_version="0.5.23")
LONG = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
        "text_config": {"max_position_embeddings": 10485760, "num_attention_heads": 40, "num_key_value_heads": 8,
                        "num_local_experts": 16, "hidden_size": 5120, "num_hidden_layers": 48},
        "torch_dtype": "bfloat16"}


def _log(frame: str, code: str, gib: str) -> str:
    return f"""[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', context_length=None)
[2026-12-04 10:02:30 TP0] Load weight end. elapsed=150.2 s, type=Llama4ForConditionalGeneration, avail mem=52.02 GB
[2026-12-04 10:02:31 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "{SITE}/sglang/srt/mem_cache/kv_cache_configurator.py", line 1771, in _build_default_req_pool
    req_to_token_pool = req_to_token_pool_cls(
  File "{SITE}/sglang/srt/mem_cache/{frame}", line 406, in __init__
    {code}
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib} GiB. GPU 0 has a total capacity of 79.19 GiB of which 51.77 GiB is free. Including non-PyTorch memory, this process has 27.61 GiB memory in use.
[2026-12-04 10:02:31] Received sigquit from a child process. It usually means the child failed.
"""


def _first_change(tmp_path: Path, log: str) -> tuple[str, object] | None:
    fp, model = fingerprint_with_model(tmp_path, LONG, H100)
    _, _, proposal = baseline_failed_with(fp, {"--model-path": model, "--tp-size": 8}, log.replace("MODEL", model),
                                          SGLANG_0_5_23_FLAGS)
    exp = proposal.experiment
    return (exp.change.name, exp.change.after) if exp is not None and exp.change is not None else None


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_request_table_larger_than_the_device_is_shrunk_by_the_context_length(catalog: str, tmp_path: Path) -> None:
    """The first change is --context-length at a value whose table takes at most a tenth of the device (the
    model's 10M window scaled by 7.9 / 80 GiB, rounded down: 1000000), with or without the catalog."""
    log = _log("memory_pool.py", "self.req_to_token = torch.zeros(", "80.04")
    first = under_catalog(catalog, tmp_path, lambda: _first_change(tmp_path, log))
    assert first == ("--context-length", "1000000"), first


def test_an_out_of_memory_elsewhere_or_a_small_table_proposes_no_shrink(tmp_path: Path) -> None:
    """The same message in the KV pool's own allocation, or a request table of 2 GiB (small beside the
    device: something else took the memory), is no table the context length makes fit."""
    elsewhere = _first_change(tmp_path / "a", _log("memory_pool.py", "self.k_buffer = torch.zeros(", "80.04"))
    small = _first_change(tmp_path / "b", _log("memory_pool.py", "self.req_to_token = torch.zeros(", "2.00"))
    assert elsewhere is None or elsewhere[0] != "--context-length", elsewhere
    assert small is None or small[0] != "--context-length", small
