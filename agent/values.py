"""Values for numeric flags, chosen from the evidence: the memory figures SGLang prints and the GPU size.

A hypothesis catalog intervention may name a rule (``derive = "..."``) instead of a fixed value. Each
rule reads facts the log signatures captured (``knowledge/signatures.toml``) and the host's per-GPU
memory, and returns a value with the arithmetic that produced it, or ``None`` with the reason when the
log lacks the figures (the intervention's literal ``values`` are then the fallback).

Memory model (SGLang 0.5.x, ``model_runner``): the static pool is ``mem_fraction_static × total``; it
holds the weights and the KV cache, so the KV cache gets ``free after weights − total × (1 − f)``; what
stays outside the pool (``total × (1 − f)``) must hold CUDA graphs, their capture workspace and
activations. Capture runs the largest batch size first and logs the free memory after each batch
("Capturing batches (bs=... avail_mem=... GB)"), so the drop between two progress lines is what one
graph costs, and what was gone before the first graph is the workspace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.models import FlagValue

#: Which way each rule moves its flag, so a hypothesis can tell whether a change is "its" fix.
DIRECTIONS: dict[str, str] = {
    "mem_fraction_for_kv_pool": "raise",
    "mem_fraction_for_graph_capture": "lower",
    "cuda_graph_max_bs_that_fits": "lower",
}
#: Smallest KV cache worth serving with (GB): a pool below this holds a few thousand tokens at most.
MIN_KV_GB = 1.0
#: Safety margin on an estimated capture need (graphs + workspace), and the share of the free memory
#: graphs may take when choosing a max batch size.
CAPTURE_MARGIN = 1.1
CAPTURE_SHARE = 0.95
#: SGLang's default static fraction when no flag and no fact says otherwise (server_args.py).
DEFAULT_FRACTION = 0.88


@dataclass
class ValueEvidence:
    """What the rules may read: facts of the failing run, per-GPU memory (GiB), the baseline's flags."""

    facts: Mapping[str, str] = field(default_factory=dict)
    total_gib: float | None = None
    flags: Mapping[str, FlagValue] = field(default_factory=dict)

    def num(self, key: str) -> float | None:
        """A fact as a number (None if absent or not a number)."""
        return _num(self.facts.get(key))

    def fraction(self) -> float:
        """The static fraction in force: the baseline's flag, else the fact the server logged."""
        for value in (self.flags.get("--mem-fraction-static"), self.facts.get("mem_fraction_static")):
            n = _num(value)
            if n is not None:
                return n
        return DEFAULT_FRACTION


def _num(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(str(value))
    except ValueError:
        return None


def _need(ev: ValueEvidence) -> tuple[float, float, float, list[int], float] | None:
    """(need, per_graph, workspace, batch sizes ascending, free at capture start) in GB, or None."""
    free0 = ev.num("capture_avail_mem_gb")
    done = ev.num("capture_batches_done")
    last = ev.num("capture_last_avail_mem_gb")
    first = ev.num("capture_first_avail_mem_gb")
    sizes = sorted(
        int(b) for b in str(ev.facts.get("cuda_graph_bs_list", "")).replace(" ", "").split(",") if b
    )
    total = ev.num("capture_batches_total") or (len(sizes) or None)
    if free0 is None or done is None or last is None or not total or done < 1:
        return None
    if done >= 2 and first is not None and first > last:
        per_graph = (first - last) / (done - 1)
        workspace = max(free0 - first - per_graph, 0.0)
    else:  # one point: the workspace is folded into the per-graph cost (an overestimate: safe)
        per_graph = (free0 - last) / done
        workspace = 0.0
    if per_graph <= 0:
        return None
    return workspace + per_graph * total, per_graph, workspace, sizes, free0


def mem_fraction_for_kv_pool(ev: ValueEvidence) -> tuple[str | None, str]:
    """Raise the static fraction just enough for a KV cache of at least ``MIN_KV_GB``.

    f = ceil_0.01(1 − (free after weights − MIN_KV_GB) / total), total being the GPU's size (or, when
    unknown, the free memory before loading the weights). The smallest such step keeps the most
    memory outside the pool for CUDA graphs and activations (too high a fraction makes capture run out
    of memory instead).
    """
    free = ev.num("weights_avail_mem_gb")
    if free is None:
        free = ev.num("avail_mem_gb")
    # Without the GPU's size, the free memory before loading stands for it: SGLang 0.5.23 sizes the
    # static budget from exactly that (mem_cache/kv_cache_configurator.py, pre_model_load_memory).
    total = ev.total_gib or ev.num("pre_load_avail_mem_gb")
    if free is None or total is None or total <= 0:
        return None, "needs the free memory after loading ('Load weight end ... avail mem') and the GPU size"
    if free <= MIN_KV_GB:
        return (
            None,
            f"the weights leave {free:.2f} GB: no fraction fits a KV cache (more GPUs or a smaller model)",
        )
    need = 1 - free / total
    f = math.ceil((1 - (free - MIN_KV_GB) / total) * 100 - 1e-9) / 100
    f = max(f, round(ev.fraction() + 0.01, 2))
    if f >= 0.99:
        return None, f"it would take a fraction of {f:.2f}: no room is left for CUDA graphs"
    return (
        f"{f:.2f}",
        f"{free:.2f} GB free after the weights of {total:.2f} GB: the pool needs more than {need:.3f}; "
        f"{f:.2f} gives the KV cache {free - total * (1 - f):.2f} GB and leaves {total * (1 - f):.2f} GB "
        "outside it for CUDA graphs",
    )


def mem_fraction_for_graph_capture(ev: ValueEvidence) -> tuple[str | None, str]:
    """Lower the static fraction so the memory outside the pool holds the capture's projected need.

    need = workspace + per-graph × number of batch sizes (from the capture progress lines), times
    ``CAPTURE_MARGIN``; f' = floor_0.01(f − (need − free at capture start) / total). The KV cache must
    stay positive.
    """
    est = _need(ev)
    total = ev.total_gib
    if est is None or total is None:
        return None, "needs the capture progress lines (free memory per captured batch) and the GPU size"
    need, per_graph, workspace, _, free0 = est
    f = ev.fraction()
    shortfall = max(need * CAPTURE_MARGIN - free0, 0.01 * total)
    new = math.floor((f - shortfall / total) * 100 + 1e-9) / 100
    new = min(new, round(f - 0.01, 2))
    free_after_weights = ev.num("weights_avail_mem_gb")
    if free_after_weights is not None and free_after_weights - total * (1 - new) <= 0:
        return None, f"a fraction of {new:.2f} would leave no KV cache"
    if new <= 0.3:
        return None, f"it would take a fraction of {new:.2f}"
    return (
        f"{new:.2f}",
        f"capture needs about {need:.2f} GB ({workspace:.2f} GB workspace + {per_graph:.3f} GB per graph) and "
        f"had {free0:.2f} GB; {new:.2f} leaves {total * (1 - new):.2f} GB outside the static pool",
    )


def cuda_graph_max_bs_that_fits(ev: ValueEvidence) -> tuple[str | None, str]:
    """The largest captured batch size whose graphs fit in the memory capture had.

    count = floor((free at capture start × ``CAPTURE_SHARE`` − workspace) / per-graph); the value is
    the count-th smallest batch size of the capture list.
    """
    est = _need(ev)
    if est is None:
        return None, "needs the capture progress lines (free memory per captured batch)"
    _, per_graph, workspace, sizes, free0 = est
    if not sizes:
        return None, "needs the list of captured batch sizes ('Capture cuda graph bs [...]')"
    count = int((free0 * CAPTURE_SHARE - workspace) // per_graph)
    if count < 1:
        return None, "not even the smallest batch size fits"
    if count >= len(sizes):
        return None, "every batch size should fit: memory is not what stops the capture"
    return (
        str(sizes[count - 1]),
        f"{free0:.2f} GB free at capture start, {workspace:.2f} GB workspace, {per_graph:.3f} GB per graph: "
        f"{count} of {len(sizes)} batch sizes fit, up to {sizes[count - 1]}",
    )


RULES: dict[str, Callable[[ValueEvidence], tuple[str | None, str]]] = {
    "mem_fraction_for_kv_pool": mem_fraction_for_kv_pool,
    "mem_fraction_for_graph_capture": mem_fraction_for_graph_capture,
    "cuda_graph_max_bs_that_fits": cuda_graph_max_bs_that_fits,
}


def derive(rule: str, ev: ValueEvidence) -> tuple[str | None, str]:
    """Run a rule by name: (value, how it was computed) or (None, why not). Unknown rule: None."""
    fn = RULES.get(rule)
    if fn is None:
        return None, f"unknown value rule {rule!r}"
    return fn(ev)


def moves_in_direction(rule: str, before: object, after: object) -> bool | None:
    """Whether ``before → after`` goes the rule's way (None when either side is not a number)."""
    direction = DIRECTIONS.get(rule)
    b, a = _num(before), _num(after)
    if direction is None or b is None or a is None:
        return None
    return a > b if direction == "raise" else a < b
