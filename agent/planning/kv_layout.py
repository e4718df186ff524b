"""The KV cache's layout over a model's config.json, and what it gives a rank: bytes a token takes, and the KV-pool
cap that fits CPU ranks sharing a NUMA node. A leaf: the budgets and the value rules read it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["DTYPE_BYTES", "kv_bytes_per_token", "rank_share_cap"]

#: Bytes of one element of each dtype a config.json names (PyTorch's element sizes).
DTYPE_BYTES: dict[str, float] = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
                                 "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1, "int8": 1}


def _number(value: object) -> float | None:
    try:
        return float(str(value).strip())
    except (TypeError, ValueError):
        return None


def kv_bytes_per_token(checkpoint: Mapping[str, str], dtype_bytes: Mapping[str, float]) -> tuple[float | None, str]:
    """Bytes of KV cache one token takes over all layers, from a config.json digest
    (``tools.model_config.checkpoint_facts``): 2 (K and V) x layers x KV heads x head size x dtype bytes,
    as vLLM 0.32.0 lays out full attention (``AttentionSpec.page_size_bytes``, per layer). The head size
    is ``head_dim``, else hidden_size / attention heads; the KV heads ``num_key_value_heads``, else the
    attention heads. Returns (None, why) when the digest lacks a figure."""
    layers = _number(checkpoint.get("num_hidden_layers"))
    heads = _number(checkpoint.get("num_attention_heads"))
    kv_heads = _number(checkpoint.get("num_key_value_heads")) or heads
    head = _number(checkpoint.get("head_dim"))
    if head is None and heads and (hidden := _number(checkpoint.get("hidden_size"))):
        head = hidden / heads
    dtype = str(checkpoint.get("torch_dtype", "")).removeprefix("torch.").lower()
    size = dtype_bytes.get(dtype)
    missing = [n for n, v in (("num_hidden_layers", layers), ("num_key_value_heads", kv_heads),
                              ("head_dim", head), ("torch_dtype", size)) if not v]
    if missing:
        return None, f"config.json gives no {', '.join(missing)}"
    assert layers and kv_heads and head and size
    per_token = 2 * layers * kv_heads * head * size
    return per_token, (f"2 x {layers:g} layers x {kv_heads:g} KV heads x {head:g} head size x {size:g} bytes "
                       f"({dtype}) = {per_token:g} bytes a token")


#: The share of a rank's memory its KV pool may take when the engine cannot size it (the rest: activations,
#: the scheduler's own buffers, the system's page cache).
RANK_KV_SHARE = 0.8


def rank_share_cap(facts: Mapping[str, str], flags: Mapping[str, object], checkpoint: Mapping[str, str]) -> tuple[str | None, str]:
    """A KV-pool cap in tokens for CPU ranks that share a NUMA node (``--max-total-tokens``): each rank's share
    of the node's memory free after the weights loaded (``weights_avail_mem_gb`` over the ranks per node,
    ``cpu_ranks`` / ``numa_nodes``), ``RANK_KV_SHARE`` of it, over the KV bytes one token takes on one rank
    (2 x layers x KV heads split over the tensor-parallel ranks x head size x dtype bytes, from config.json),
    rounded down to one significant figure. SGLang 0.5.23 srt/utils/numa_utils.py: with more ranks than nodes
    "the available memory amount of each rank cannot be determined in prior. Please set proper
    `--max-total-tokens`"; each rank otherwise sizes its pool from the whole node's free memory."""
    free, ranks, nodes = (_number(facts.get(k)) for k in ("weights_avail_mem_gb", "cpu_ranks", "numa_nodes"))
    if not (free and ranks and nodes):
        return None, "the log gives no free memory after the weights or no ranks-per-node figure"
    per_token, how = kv_bytes_per_token(checkpoint, DTYPE_BYTES)
    if per_token is None:
        return None, how
    tp = _number(flags.get("--tp-size") or flags.get("--tensor-parallel-size")) or ranks
    kv_heads = _number(checkpoint.get("num_key_value_heads")) or 1.0
    per_rank = per_token / min(tp, kv_heads)
    share = free / math.ceil(ranks / nodes)
    tokens = share * RANK_KV_SHARE * 1e9 / per_rank
    step = 10 ** int(math.floor(math.log10(tokens))) if tokens >= 1 else 1
    value = int(tokens // step * step)
    return (str(value) if value >= 1024 else None,
            f"{free:g} GB free after the weights / {math.ceil(ranks / nodes)} ranks a node x {RANK_KV_SHARE} / "
            f"{per_rank:g} bytes a token a rank ({how}, KV heads over {min(tp, kv_heads):g} ranks) = {tokens:,.0f}")
