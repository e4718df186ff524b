"""CPU ranks that share a NUMA node get a KV-pool cap the engine asks for, with a value derived from the host's
own figures (issue 20, points 2 and 8: an error that names a setting is read as a remedy, with a value that
fits this host; CPU failures are signatures like CUDA's).

SGLang 0.5.23's CPU engine, with more ranks than NUMA nodes (threads bound by SGLANG_CPU_OMP_THREADS_BIND),
says "The total number of ranks (4) is larger than numa node number (2), in this case the available memory
amount of each rank cannot be determined in prior. Please set proper `--max-total-tokens` to avoid the
out-of-memory error." (srt/utils/numa_utils.py): each rank sizes its KV pool from the whole node, the node is
overcommitted and the kernel's OOM killer ends a scheduler. The line carries no level (SGLang's log format
prints none) and no figure: the value is each rank's share of the node's free memory over the KV bytes one
token takes on one rank. In process: the rule planner (and the bench's empty catalog) on SGLang 0.5.23's help.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, fingerprint_with_model, under_catalog

from tools.fingerprint import HostFingerprint

CPU = HostFingerprint(gpu_vendor="none", gpu_name=None, gpu_count=0, sglang_version="0.5.23", cpu_count=64)
QWEN3_32B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 64,
             "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 5120,
             "torch_dtype": "bfloat16", "max_position_embeddings": 40960}
RANKS = "".join(
    f"[2026-12-04 10:00:05 TP{r}] The total number of ranks (4) is larger than numa node number (2), in this case "
    "the available memory amount of each rank cannot be determined in prior. Please set proper `--max-total-tokens` "
    "to avoid the out-of-memory error.\n" for r in range(4))
LOG = ("[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', device='cpu', tp_size=4)\n" + RANKS +
       "".join(f"[2026-12-04 10:02:40 TP{r}] Load weight end. elapsed=155.4 s, type=Qwen3ForCausalLM, avail mem=215.7{r} "
               "GB, mem usage=15.25 GB.\n" for r in range(4)) +
       "[2026-12-04 10:02:41] RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code "
       "is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.\n")


def _first(tmp_path: Path, log: str) -> tuple[str, object] | None:
    fp, model = fingerprint_with_model(tmp_path, QWEN3_32B, CPU)
    flags: dict[str, object] = {"--model-path": model, "--device": "cpu", "--tp-size": 4}
    _, _, proposal = baseline_failed_with(fp, flags, log.replace("MODEL", model), SGLANG_0_5_23_FLAGS)
    exp = proposal.experiment
    return (exp.change.name, exp.change.after) if exp is not None and exp.change is not None else None


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_ranks_sharing_a_node_get_the_kv_cap_the_engine_asks_for(catalog: str, tmp_path: Path) -> None:
    """215.7 GB free / 2 ranks a node x 0.8 / (2 x 64 layers x 2 KV heads a rank x 128 x 2 bytes) = 1.3M
    tokens, rounded down: the first change is --max-total-tokens 1000000, with or without the catalog."""
    first = under_catalog(catalog, tmp_path, lambda: _first(tmp_path, LOG))
    assert first == ("--max-total-tokens", "1000000"), first


def test_without_the_ranks_per_node_figure_no_cap_is_made_up(tmp_path: Path) -> None:
    """The same death without the engine's ranks-per-node warning: no figure says how the node is shared, so no
    --max-total-tokens value is derived."""
    first = _first(tmp_path, LOG.replace(RANKS, ""))
    assert first is None or first[0] != "--max-total-tokens", first
