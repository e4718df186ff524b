"""A pool the user capped by a slot count, short under load, is raised; the error's advice about a setting the
cap overrides is not followed (issue 20, point 5: root fix keeping the user's intent; point 2 read with what
the engine's source says).

SGLang 0.5.23 raises "Not enough space for mamba ping pong idx, try to increase --mamba-full-memory-ratio."
(srt/mem_cache/memory_pool.py) when the recurrent-state pool has no free slot. With --max-mamba-cache-size
set, that count is the pool and the ratio is not read (srt/mem_cache/kv_cache_configurator.py), so the advice
cannot matter: the engineer doubles the user's cap. In process: the rule planner with the repository's
knowledge (and the bench's empty catalog) on SGLang 0.5.23's own ``--help``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, fingerprint_with_model, under_catalog

from tools.fingerprint import HostFingerprint

SITE = "/usr/local/lib/python3.12/dist-packages"
L40S = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA L40S", gpu_count=1, compute_capability="8.9",
                       memory_total_mib=46068, sglang_version="0.5.23")
HYBRID = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 48,
          "num_attention_heads": 16, "num_key_value_heads": 2, "hidden_size": 2048, "torch_dtype": "bfloat16",
          "layer_types": ["linear_attention", "full_attention"]}
LOG = f"""[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', max_mamba_cache_size=CAP)
[2026-12-04 10:05:00] The server is fired up and ready to roll!
[2026-12-04 10:09:12] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/sglang/srt/mem_cache/memory_pool.py", line 1621, in alloc
    assert len(self.free_slots) >= need_size, (
AssertionError: Not enough space for mamba ping pong idx, try to increase --mamba-full-memory-ratio.
[2026-12-04 10:09:12] Received sigquit from a child process. It usually means the child failed.
"""


def _first(tmp_path: Path, cap: int | None) -> tuple[str, object] | None:
    fp, model = fingerprint_with_model(tmp_path, HYBRID, L40S)
    flags: dict[str, object] = {"--model-path": model, "--max-running-requests": 3}
    if cap is not None:
        flags["--max-mamba-cache-size"] = cap
    _, _, proposal = baseline_failed_with(fp, flags, LOG.replace("MODEL", model).replace("CAP", str(cap)),
                                          SGLANG_0_5_23_FLAGS)
    exp = proposal.experiment
    return (exp.change.name, exp.change.after) if exp is not None and exp.change is not None else None


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_short_state_pool_the_user_capped_is_doubled_not_the_ratio_the_cap_overrides(
        catalog: str, tmp_path: Path) -> None:
    """The user's --max-mamba-cache-size 16 and the pool-is-short assertion: the first change is the cap at 32,
    never --mamba-full-memory-ratio (which sizes nothing while the cap is set)."""
    first = under_catalog(catalog, tmp_path, lambda: _first(tmp_path, 16))
    assert first == ("--max-mamba-cache-size", "32"), first


def test_without_the_users_cap_the_pool_is_not_the_users_budget(tmp_path: Path) -> None:
    """The same assertion with no --max-mamba-cache-size: the engine sized the pool from its ratio, so there is
    no budget of the user's to raise (another change comes first)."""
    first = _first(tmp_path, None)
    assert first is None or first[0] != "--max-mamba-cache-size", first
