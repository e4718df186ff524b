"""The lab's per-GPU memory model: weights, KV-cache pool, CUDA-graph capture (pure, no I/O).

Units are GB = 2**30 bytes, as SGLang prints them. The model follows SGLang 0.5.x:
- weights per GPU = `weights_gb_total / tp_size + weights_gb_replicated` (minus `--cpu-offload-gb`);
  loading runs out of memory when they exceed the free memory (less 0.5 GB of allocator slack);
- KV pool = free memory after the weights − total × (1 − mem_fraction_static)
  (model_runner's `rest_memory = available - total * (1 - mem_fraction_static)`); no room when ≤ 0;
- capture: the graphs of the default batch-size list take `graph_gb`, a shorter list proportionally
  less; capture also needs `capture_reserve_gb` of workspace while it runs. It captures the largest
  batch first and runs out of memory at the first batch whose cumulative need exceeds what the KV
  pool left free.

The stand-in server prints its log lines from a `MemoryPlan`; tests and the bench ask the same plan
"where would this command line run out of memory?" without starting anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lab.rules import resolve
from lab.world import World

GB = float(1 << 30)
#: What SGLang 0.5.x uses when no --mem-fraction-static is given and no rule chose one.
DEFAULT_MEM_FRACTION = 0.88
#: CUDA-graph max batch size when nothing chose one.
DEFAULT_CUDA_GRAPH_MAX_BS = 160


def capture_batch_sizes(max_bs: int) -> list[int]:
    """CUDA-graph batch sizes as SGLang 0.5.x generates them (1, 2, 4, 8, 12, then steps of 8/16)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 1025, 16)]
    out = [s for s in sizes if s <= max_bs]
    return out or [1]


def default_cuda_graph_max_bs(
    world: World, parsed_args: dict[str, Any], parsed_user: dict[str, Any], env: Mapping[str, str]
) -> int:
    """The max batch size the world resolves to when the user sets none (the capture baseline)."""
    roles = world.version.release.roles
    unset = {roles["cuda_graph_max_bs"], roles["cuda_graph_bs"]}
    args = {**parsed_args, **dict.fromkeys(unset)}
    user = {k: v for k, v in parsed_user.items() if k not in unset}
    base, _ = resolve(world, args, user, env)
    return int(base.args.get("cuda_graph_max_bs") or DEFAULT_CUDA_GRAPH_MAX_BS)


@dataclass
class MemoryPlan:
    """Where the memory of one GPU goes for one effective configuration (see the module docstring)."""

    enforce: bool
    total_gb: float
    avail_begin_gb: float
    weights_gb: float
    weights_oom_shard: int | None
    avail_after_load_gb: float
    mem_fraction_static: float
    kv_gb: float
    kv_bytes_per_token: int
    kv_tokens: int
    avail_after_kv_gb: float
    graphs_on: bool
    capture_batch_sizes: list[int] = field(default_factory=list)  # ascending
    graph_gb_per_batch: float = 0.0
    capture_reserve_gb: float = 0.0
    capture_oom_batch: int | None = None  # 1-based, in capture order (largest batch first)

    @property
    def graph_gb(self) -> float:
        """Memory of all captured graphs once capture completes."""
        return self.graph_gb_per_batch * len(self.capture_batch_sizes)

    def capture_need_gb(self, batches: int) -> float:
        """Memory capture holds after `batches` batches (workspace included)."""
        return self.capture_reserve_gb + self.graph_gb_per_batch * batches

    @property
    def failure(self) -> str | None:
        """The first memory failure of a launch: weights_oom, no_kv_room, capture_oom, or None."""
        if not self.enforce:
            return None
        if self.weights_oom_shard is not None:
            return "weights_oom"
        if self.kv_tokens <= 0:
            return "no_kv_room"
        if self.graphs_on and self.capture_oom_batch is not None:
            return "capture_oom"
        return None


def plan_memory(world: World, args: Mapping[str, Any], default_max_bs: int) -> MemoryPlan:
    """The memory plan of one launch from its effective arguments (after auto-resolution)."""
    mem = world.memory
    tp = max(1, int(args.get("tp_size") or 1))
    total = world.hardware.memory_mib / 1024
    avail_begin = total - mem.init_overhead_gb
    weights = mem.weights_gb_total / tp + mem.weights_gb_replicated
    weights = max(0.1, weights - float(args.get("cpu_offload_gb") or 0))
    shards = world.model.checkpoint_shards
    oom_shard: int | None = None
    if mem.enforce and weights > avail_begin - 0.5:
        oom_shard = max(1, int(shards * (avail_begin - 0.5) / weights))
    avail = avail_begin - weights
    frac = float(args.get("mem_fraction_static") or DEFAULT_MEM_FRACTION)
    kv_gb = avail - total * (1 - frac)
    dtype = str(args.get("kv_cache_dtype"))
    per_token = mem.kv_bytes_per_token.get(dtype) or mem.kv_bytes_per_token.get("default") or 131072
    page = max(1, int(args.get("page_size") or 1))
    tokens = int(max(kv_gb, 0) * GB / per_token) // page * page
    if args.get("max_total_tokens"):
        tokens = min(tokens, int(args["max_total_tokens"]))
        kv_gb = tokens * per_token / GB
    after_kv = avail - max(kv_gb, 0.0)
    plan = MemoryPlan(
        enforce=mem.enforce,
        total_gb=total,
        avail_begin_gb=avail_begin,
        weights_gb=weights,
        weights_oom_shard=oom_shard,
        avail_after_load_gb=avail,
        mem_fraction_static=frac,
        kv_gb=kv_gb,
        kv_bytes_per_token=per_token,
        kv_tokens=tokens,
        avail_after_kv_gb=after_kv,
        graphs_on=not bool(args.get("disable_cuda_graph")),
    )
    if not plan.graphs_on:
        return plan
    explicit = args.get("cuda_graph_bs")
    max_bs = int(args.get("cuda_graph_max_bs") or DEFAULT_CUDA_GRAPH_MAX_BS)
    sizes = sorted({int(b) for b in explicit}) if explicit else capture_batch_sizes(max_bs)
    plan.capture_batch_sizes = sizes
    plan.graph_gb_per_batch = mem.graph_gb / max(len(capture_batch_sizes(default_max_bs)), 1)
    plan.capture_reserve_gb = mem.capture_reserve_gb
    for i in range(1, len(sizes) + 1):
        if plan.capture_need_gb(i) > after_kv:
            plan.capture_oom_batch = i
            break
    return plan
