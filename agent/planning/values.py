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
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.domain.models import FlagValue, Outcome
from agent.planning.kv_layout import rank_share_cap
from agent.review.wording import count

#: Which way each rule moves its flag, so a hypothesis can tell whether a change is "its" fix.
DIRECTIONS: dict[str, str] = {
    "mem_fraction_for_kv_pool": "raise",
    "mem_fraction_for_graph_capture": "lower",
    "cuda_graph_max_bs_that_fits": "lower",
    # direction only (no entry in RULES): the budget generator computes the value (what one request
    # needs, agent/planning/budgets.py), and any larger budget is as much its fix
    "raise_budget": "raise",
}
#: The flag each rule computes a value for.
RULE_FLAGS: dict[str, str] = {
    "mem_fraction_for_kv_pool": "--mem-fraction-static",
    "mem_fraction_for_graph_capture": "--mem-fraction-static",
    "cuda_graph_max_bs_that_fits": "--cuda-graph-max-bs",
}
#: Smallest KV cache worth serving with (GB): a pool below this holds a few thousand tokens at most.
MIN_KV_GB = 1.0
#: Safety margin on an estimated capture need (graphs + workspace), and the share of the free memory
#: graphs may take when choosing a max batch size.
CAPTURE_MARGIN = 1.1
CAPTURE_SHARE = 0.95
#: SGLang's default static fraction when no flag and no fact says otherwise (server_args.py).
DEFAULT_FRACTION = 0.88


class Contradicted(str):
    """A rule's reason for giving no value when the figures are there and say the rule's premise is false
    (e.g. the capture's projected need fits in the memory it had): the intervention's literal values are
    then no fallback either, since the same figures speak against them."""


@dataclass
class ValueEvidence:
    """What the rules may read: facts of the failing run, per-GPU memory (GiB), the baseline's flags."""

    facts: Mapping[str, str] = field(default_factory=dict)
    total_gib: float | None = None
    flags: Mapping[str, FlagValue] = field(default_factory=dict)
    #: The host's CPU count (``HostFingerprint.cpu_count``), None when unknown.
    cpu_count: int | None = None
    #: The model's config.json digest (``tools.model_config.checkpoint_facts``), empty when unknown.
    checkpoint: Mapping[str, str] = field(default_factory=dict)
    #: The failing run reported an allocation failure (a fatal or error line whose component is memory's,
    #: knowledge/signatures.toml): the capture figures then never contradict a memory shortage, since they
    #: may come from another rank than the one that ran out.
    out_of_memory: bool = False

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


@dataclass
class CaptureCost:
    """What CUDA-graph capture costs, read from the capture progress lines (GB): a graph of batch size
    b costs ``base + per_bs × b``; ``workspace`` is what was gone before the first graph."""

    base: float
    per_bs: float
    workspace: float
    sizes: list[int]  # the batch sizes to capture, ascending
    free0: float  # free at capture start
    points: int  # how many graph costs the fit rests on

    def graph(self, bs: int) -> float:
        """The cost of the graph of batch size ``bs`` (GB)."""
        return self.base + self.per_bs * bs

    def up_to(self, max_bs: int) -> float:
        """Workspace plus every graph up to ``max_bs`` (GB): what capture needs with that max batch size."""
        return self.workspace + sum(self.graph(b) for b in self.sizes if b <= max_bs)

    def text(self) -> str:
        if self.per_bs > 0:
            return f"{self.base:.3f} GB + {self.per_bs * 1024:.2f} MB × batch size per graph"
        return f"{self.base:.3f} GB per graph"


def _curve(ev: ValueEvidence) -> list[tuple[int, float]]:
    """The (batch size, free GB after its graph) points of ``capture_curve``, in capture order."""
    out: list[tuple[int, float]] = []
    for item in str(ev.facts.get("capture_curve", "")).split():
        bs, _, mem = item.partition(":")
        if bs.isdigit() and _num(mem) is not None:
            out.append((int(bs), float(mem)))
    return out


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``cost = base + per_bs × bs`` over (bs, cost) points, both terms kept >= 0 (a
    constant when the sizes do not vary or the slope comes out negative; proportional when the
    intercept does)."""
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_c = sum(c for _, c in points) / n
    var = sum((b - mean_b) ** 2 for b, _ in points)
    if var == 0:
        return max(mean_c, 0.0), 0.0
    slope = sum((b - mean_b) * (c - mean_c) for b, c in points) / var
    if slope <= 0:
        return max(mean_c, 0.0), 0.0
    base = mean_c - slope * mean_b
    if base < 0:
        return 0.0, sum(c for _, c in points) / max(sum(b for b, _ in points), 1)
    return base, slope


def capture_cost(ev: ValueEvidence) -> CaptureCost | None:
    """The capture's cost model from the log's figures, or None when the log lacks them.

    With the whole curve (``capture_curve``), each graph's cost is the drop in free memory from the
    previous progress line, so the model is fitted per batch size (capture runs the largest first: one
    large graph's cost is not applied to the small ones). With only the first and the latest line, the
    average drop stands for every graph. With a single line, the workspace is folded into that one
    graph's cost (an overestimate: safe).
    """
    free0 = ev.num("capture_avail_mem_gb")
    done = ev.num("capture_batches_done")
    last = ev.num("capture_last_avail_mem_gb")
    first = ev.num("capture_first_avail_mem_gb")
    sizes = sorted(
        int(b) for b in str(ev.facts.get("cuda_graph_bs_list", "")).replace(" ", "").split(",") if b
    )
    if free0 is None:
        return None
    curve = _curve(ev)
    if len(curve) >= 2:
        drops = [(bs, prev - mem) for (_, prev), (bs, mem) in zip(curve, curve[1:], strict=False)]
        base, per_bs = _fit(drops)
        if base + per_bs * curve[0][0] > 0:
            workspace = max(free0 - curve[0][1] - (base + per_bs * curve[0][0]), 0.0)
            return CaptureCost(base, per_bs, workspace, sizes, free0, len(drops))
    if done is None or last is None or done < 1:
        return None
    if done >= 2 and first is not None and first > last:
        per_graph = (first - last) / (done - 1)
        workspace = max(free0 - first - per_graph, 0.0)
    else:
        per_graph = (free0 - last) / done
        workspace = 0.0
    if per_graph <= 0:
        return None
    return CaptureCost(per_graph, 0.0, workspace, sizes, free0, int(done))


def _need(ev: ValueEvidence) -> tuple[float, CaptureCost] | None:
    """(what the whole capture needs in GB, the cost model), or None."""
    cost = capture_cost(ev)
    if cost is None:
        return None
    total = int(ev.num("capture_batches_total") or len(cost.sizes) or 0)
    if not total:
        return None
    if cost.sizes:
        return cost.up_to(max(cost.sizes)), cost
    return cost.workspace + cost.base * total, cost


def mem_fraction_for_kv_pool(ev: ValueEvidence) -> tuple[str | None, str]:
    """Raise the static fraction so the KV cache gets room, with margin.

    The least fraction is ceil_0.01(1 − (free after weights − MIN_KV_GB) / total), total being the GPU's
    size (or, when unknown, the free memory before loading the weights). When SGLang's default fraction
    (``DEFAULT_FRACTION``) is above it, the value is halfway between the two: the least leaves a KV cache
    of a few requests, and too high a fraction makes capture run out of memory instead. Otherwise the
    least, which keeps the most memory outside the pool for CUDA graphs and activations.
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
    least = math.ceil((1 - (free - MIN_KV_GB) / total) * 100 - 1e-9) / 100
    least = max(least, round(ev.fraction() + 0.01, 2))
    if least >= 0.99:
        return None, f"it would take a fraction of {least:.2f}: no room is left for CUDA graphs"
    # The least fraction gives a KV cache of a few requests and a next failure one step away; halfway to
    # SGLang's own fraction, when that is higher, leaves margin on both sides (the KV cache and what
    # stays outside the pool) and keeps some of the room the user's lower value left.
    f = math.ceil((least + DEFAULT_FRACTION) / 2 * 100 - 1e-9) / 100 if DEFAULT_FRACTION > least else least
    margin = (f" (halfway from the least, {least:.2f}, to SGLang's default {DEFAULT_FRACTION:.2f}: margin for "
              "both)" if f > least else "")
    return (
        f"{f:.2f}",
        f"{free:.2f} GB free after the weights of {total:.2f} GB: the pool needs more than {need:.3f}; "
        f"{f:.2f}{margin} gives the KV cache {free - total * (1 - f):.2f} GB and leaves "
        f"{total * (1 - f):.2f} GB outside it for CUDA graphs",
    )


def leaves_no_kv_cache(name: str, value: object, ev: ValueEvidence) -> str | None:
    """Why a static fraction ``value`` for ``name`` (``--mem-fraction-static``) cannot serve on this
    evidence, or None: with the free memory after the weights (``weights_avail_mem_gb``, GB) and the
    GPU's size (GiB), a fraction at or below ``1 - free / total`` leaves no KV cache, whichever rule or
    finding proposed it (the failing run already bounds the pool from below)."""
    f, free, total = _num(value), ev.num("weights_avail_mem_gb"), ev.total_gib
    if name != "--mem-fraction-static" or f is None or free is None or not total:
        return None
    if free - total * (1 - f) > 0:
        return None
    return (f"a fraction of {f:g} would leave no KV cache: {free:.2f} GB free after the weights of "
            f"{total:.2f} GB, the pool needs more than {1 - free / total:.3f}")


def ran_out_of_memory(outcome: Outcome) -> bool:
    """Whether ``outcome`` shows an allocation failure: a fatal or error line whose signature's component
    is memory's (``memory.*`` in knowledge/signatures.toml: CUDA's "out of memory", HIP's)."""
    return any(m.kind in ("fatal", "error") and any(c.startswith("memory.") for c in m.components)
               for m in outcome.matches)


def _room_to_spare(need: float, cost: CaptureCost, ev: ValueEvidence) -> Contradicted | None:
    """Why memory cannot be what stopped a capture whose projected ``need`` (GB, with ``CAPTURE_MARGIN``)
    fits in the free memory it started with, or None when it does not fit or the run reported an allocation
    failure (``ValueEvidence.out_of_memory``)."""
    if ev.out_of_memory or need * CAPTURE_MARGIN > cost.free0:
        return None
    return Contradicted(
        f"capture needs about {need:.2f} GB ({cost.workspace:.2f} GB workspace + graphs at {cost.text()}) "
        f"and had {cost.free0:.2f} GB: memory is not what stops the capture")


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
    need, cost = est
    free0 = cost.free0
    if (spare := _room_to_spare(need, cost, ev)) is not None:
        return None, spare
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
        f"capture needs about {need:.2f} GB ({cost.workspace:.2f} GB workspace + graphs at {cost.text()}) "
        f"and had {free0:.2f} GB; {new:.2f} leaves {total * (1 - new):.2f} GB outside the static pool",
    )


def cuda_graph_max_bs_that_fits(ev: ValueEvidence) -> tuple[str | None, str]:
    """The largest captured batch size whose graphs fit in the memory capture had.

    The graphs of every batch size up to the value, each at its own cost (``capture_cost``: fitted per
    batch size from the progress lines), plus the workspace, must fit in the free memory at capture
    start × ``CAPTURE_SHARE``.
    """
    est = _need(ev)
    if est is None:
        return None, "needs the capture progress lines (free memory per captured batch)"
    need, cost = est
    sizes = cost.sizes
    if not sizes:
        return None, _room_to_spare(need, cost, ev) or "needs the list of captured batch sizes ('Capture cuda graph bs [...]')"
    room = cost.free0 * CAPTURE_SHARE
    fits = [b for b in sizes if cost.up_to(b) <= room]
    if not fits:
        return None, "not even the smallest batch size fits"
    if len(fits) == len(sizes):
        return None, Contradicted("every batch size should fit: memory is not what stops the capture")
    best = fits[-1]
    return (
        str(best),
        f"{cost.free0:.2f} GB free at capture start, {cost.workspace:.2f} GB workspace, graphs at "
        f"{cost.text()} (from {cost.points} captured graph{'s' if cost.points != 1 else ''}): "
        f"{len(fits)} of {count(len(sizes), 'batch size')} {'fits' if len(fits) == 1 else 'fit'} "
        f"({cost.up_to(best):.2f} GB), up to {best}",
    )


def effective_before(kind: str, name: str, before: FlagValue, facts: Mapping[str, str]) -> FlagValue:
    """The value a change starts from as the server ran it: the baseline's, or when the baseline leaves
    the flag unset, the value the log's server arguments show for it (argparse dest: ``--cuda-graph-max-bs``
    is ``cuda_graph_max_bs``); None when neither says."""
    if before is not None or kind != "flag":
        return before
    return facts.get(name.lstrip("-").replace("-", "_"))


_SOLUTIONS_HEAD = re.compile(r"\bPossible (?:solutions|suggestions):?\s*$")
_SOLUTION_ITEM = re.compile(r"^\s*\d+\.\s+(?P<text>\S.*?)\s*$")


def suggestions_in_log(lines: Sequence[str]) -> list[tuple[int, str]]:
    """SGLang's own numbered "Possible solutions:" list after a failure (1-based line number, text),
    e.g. after "Capture cuda graph failed" (sglang/srt/model_executor/cuda_graph_runner.py, 0.5.9;
    runner_backend_utils CUDA_GRAPH_CAPTURE_FAILED_MSG, 0.5.23), or "Possible suggestions:" after a
    prefill graph's failure (runner_backend_utils PREFILL_CUDA_GRAPH_CAPTURE_FAILED_MSG, 0.5.23). Each
    list is read once."""
    out: list[tuple[int, str]] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        if _SOLUTIONS_HEAD.search(lines[i]):
            j = i + 1
            while j < len(lines) and (m := _SOLUTION_ITEM.match(lines[j])):
                if m.group("text") not in seen:
                    seen.add(m.group("text"))
                    out.append((j + 1, m.group("text")))
                j += 1
            i = j
        else:
            i += 1
    return out


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


def rule_for(flag: str, direction: str) -> str | None:
    """The rule that moves ``flag`` in ``direction`` (``raise``/``lower``), if there is one."""
    return next((r for r, f in RULE_FLAGS.items() if f == flag and DIRECTIONS.get(r) == direction), None)


#: Binary suffixes of a size an engine's integer parser reads (vLLM's ``human_readable_int``: ``1G`` = 2**30).
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _quantity(value: object) -> float | None:
    """A number, or a size with a binary suffix (``512K``), as a number; None otherwise."""
    text = str(value).strip() if value is not None and not isinstance(value, bool) else ""
    if text[-1:] in _BINARY and (n := _num(text[:-1])) is not None:
        return n * _BINARY[text[-1]]
    return _num(value)


def moves_in_direction(rule: str, before: object, after: object) -> bool | None:
    """Whether ``before → after`` goes the rule's way (None when either side is not a number); for a
    rule that gives a value of a shape rather than a direction (``SHAPES``), whether ``after`` has it."""
    if (shape := SHAPES.get(rule)) is not None:
        return shape(after)
    direction = DIRECTIONS.get(rule)
    b, a = _quantity(before), _quantity(after)
    if direction is None or b is None or a is None:
        return None
    return a > b if direction == "raise" else a < b


#: Punctuation that ends a sentence of prose around a value (``set it to 0-31|32-63.``), never a value's own.
_PROSE_TAIL = ".,;:!?)]}'\"`"
_PROSE_HEAD = "([{'\"`"


def clean_value(value: FlagValue) -> FlagValue:
    """A value copied out of prose, without the sentence's punctuation around it: quotes and backticks
    around it and a trailing full stop, comma, semicolon, colon or closing bracket go (``0-31|32-63.``
    is ``0-31|32-63``; ``'bf16'`` is ``bf16``); a number keeps its decimal point (``0.9``). Booleans,
    numbers and ``None`` pass unchanged."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    while text and text[0] in _PROSE_HEAD and (len(text) == 1 or text[-1] in _PROSE_TAIL):
        text = text[1:]
    while text and text[-1] in _PROSE_TAIL:
        text = text[:-1]
    return text


def prose_punctuation(value: FlagValue) -> str | None:
    """The prose punctuation ``value`` carries (what ``clean_value`` would remove), or None."""
    if not isinstance(value, str):
        return None
    text, cleaned = value.strip(), str(clean_value(value))
    if cleaned == text:
        return None
    at = text.find(cleaned) if cleaned else len(text)
    return text[:at] + text[at + len(cleaned) :]


#: Characters an environment value may hold: a value with others is refused by the guard (a shell would
#: interpret them), so the planner never proposes one; a CPU list is the one exception (``env_value_ok``).
SHELL_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_./:,+=@%-]*$")
#: A list of CPU ids as Linux and OpenMP write them (``0-31``, ``0-15|32-47``, ``0,2,4``): SGLang's
#: ``SGLANG_CPU_OMP_THREADS_BIND`` gives each rank's cores, ranks separated by ``|``
#: (sglang/srt/utils/numa_utils.py ``init_threads_binding``, 0.5.23).
_CPU_LIST = re.compile(r"^\d+(?:-\d+)?(?:[,|]\d+(?:-\d+)?)*$")
#: Words that introduce an example in an error text (the value is then for the machine the text imagines).
_EXAMPLE = re.compile(r"\b(?:for example|e\.g\.|such as|for instance|on a machine with)\b", re.I)


def env_value_ok(value: str) -> bool:
    """Whether the guard lets an experiment set an environment variable to ``value``: only characters no
    shell interprets (``SHELL_SAFE_VALUE``), or a CPU list, whose ``|`` separates ranks
    (``SGLANG_CPU_OMP_THREADS_BIND=0-3|4-7``: sglang/srt/utils/numa_utils.py ``init_threads_binding``,
    0.5.23; vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` the same way). Every host passes environment values
    ``shlex``-quoted or as an environment mapping, and ``command_text`` quotes them for a person, so the
    ``|`` of a CPU list is never read by a shell; the rule keeps anything else a shell would run out."""
    return bool(SHELL_SAFE_VALUE.match(value) or _CPU_LIST.match(value))


def cpu_ids(value: str) -> list[int] | None:
    """The CPU ids a CPU-list value names (``0-3|8`` -> 0, 1, 2, 3, 8), or None when it is not a CPU
    list (a single number is not: it is more often a count than a CPU id)."""
    if not _CPU_LIST.match(value) or value.isdigit():
        return None
    ids: list[int] = []
    for part in re.split(r"[,|]", value):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def split_cpus(cpu_count: int, ranks: int) -> str:
    """``cpu_count`` CPUs split into ``ranks`` contiguous groups, SGLang's per-rank form
    (``split_cpus(8, 2)`` is ``0-3|4-7``). Raises ValueError when there are fewer CPUs than ranks."""
    if ranks < 1 or cpu_count < ranks:
        raise ValueError(f"{cpu_count} CPUs cannot be split among {ranks} ranks")
    per = cpu_count // ranks
    return "|".join(f"{r * per}-{(r + 1) * per - 1}" if per > 1 else str(r * per) for r in range(ranks))


#: The workers a rank count is read from: vLLM's CPU workers its binding error counts
#: (``knowledge/signatures.toml`` vllm_cpu_numa_bind), else the tensor-parallel size the log shows.
_RANK_FACTS = ("cpu_workers", "tp_size", "tensor_parallel_size")


def cpu_list_per_rank(ev: ValueEvidence) -> tuple[str | None, str]:
    """One CPU list per rank for a thread-binding variable, this host's CPUs split evenly
    (``split_cpus``): each rank's OpenMP threads pinned to cores of their own. vLLM sets
    ``OMP_NUM_THREADS`` to the length of each rank's list (vllm/utils/ompmultiprocessing.py
    ``configure_omp_envs``, 0.32.0), where ``nobind`` skips that setup and leaves each rank's OpenMP
    default of one thread per CPU, so the ranks oversubscribe the cores; SGLang's
    ``SGLANG_CPU_OMP_THREADS_BIND`` takes the same form (sglang/srt/utils/numa_utils.py, 0.5.23)."""
    ranks = next((n for key in _RANK_FACTS if (n := ev.num(key)) is not None and n >= 1), None)
    if ranks is None:
        return None, "the log shows no rank count"
    if ev.cpu_count is None:
        return None, "this host's CPU count is unknown"
    try:
        value = split_cpus(ev.cpu_count, int(ranks))
    except ValueError as exc:
        return None, str(exc)
    return value, f"this host's {count(ev.cpu_count, 'CPU')} split among {int(ranks)} ranks, one list each"


def _is_cpu_list(value: object) -> bool:
    return isinstance(value, str) and (value.isdigit() or cpu_ids(value) is not None)


#: Requests vLLM's OpenAI server batches at once on the CPU backend, per rank (vLLM 0.32.0
#: engine/arg_utils.py ``get_batch_defaults``: ``max_num_seqs`` 128 x world size when the platform is CPU).
CPU_MAX_NUM_SEQS = 128


def max_total_tokens_for_rank_share(ev: ValueEvidence) -> tuple[str | None, str]:
    """A KV-pool cap in tokens for CPU ranks that share a NUMA node (``agent.planning.kv_layout.rank_share_cap``)."""
    return rank_share_cap(ev.facts, ev.flags, ev.checkpoint)


def kv_cache_for_max_seqs(ev: ValueEvidence) -> tuple[str | None, str]:
    """``kv_cache_gib_for_max_seqs`` as a size ``--kv-cache-memory-bytes`` reads (``NG``: N GiB)."""
    gib, why = kv_cache_gib_for_max_seqs(ev)
    return (f"{gib}G" if gib is not None else None), why


def kv_cache_gib_for_max_seqs(ev: ValueEvidence) -> tuple[str | None, str]:
    """A KV budget in whole GiB (``VLLM_CPU_KVCACHE_SPACE``'s unit) that holds the requests vLLM's CPU
    server batches at once (``CPU_MAX_NUM_SEQS``), from the cache it sized itself: the GiB it took
    (``kv_cache_auto_gib``, cpu_worker.py "Auto set (X/Y) GiB for KV cache") times the share of its
    concurrency (``kv_concurrency``, "Maximum concurrency for N tokens per request: Cx") those requests
    need, rounded up, at least 1 GiB. None when the log lacks either figure, or when the requests need
    the whole cache (a smaller budget would not serve them)."""
    auto, conc, total = ev.num("kv_cache_auto_gib"), ev.num("kv_concurrency"), ev.num("host_memory_gib")
    if auto is None or conc is None or conc <= 0:
        return None, "needs the KV cache vLLM sized itself ('Auto set (X/Y) GiB for KV cache') and its concurrency"
    need = auto * min(1.0, CPU_MAX_NUM_SEQS / conc)
    gib = max(1, math.ceil(need - 1e-9))
    if gib >= auto:
        return None, f"the {CPU_MAX_NUM_SEQS} requests vLLM batches need the whole {auto:.2f} GiB it took"
    of = f" of the host's {total:.2f} GiB" if total else ""
    return str(gib), (f"vLLM took {auto:.2f} GiB{of} for a KV cache that holds {conc:g} requests of the model "
                       f"length; the {CPU_MAX_NUM_SEQS} it batches at once need {need:.2f} GiB: {gib} GiB, in whole GiB")


RULES["cpu_list_per_rank"] = cpu_list_per_rank
RULES["kv_cache_for_max_seqs"] = kv_cache_for_max_seqs
RULES["kv_cache_gib_for_max_seqs"] = kv_cache_gib_for_max_seqs
RULE_FLAGS["kv_cache_for_max_seqs"] = "--kv-cache-memory-bytes"
DIRECTIONS["kv_cache_for_max_seqs"] = "lower"
RULES["max_total_tokens_for_rank_share"] = max_total_tokens_for_rank_share
RULE_FLAGS["max_total_tokens_for_rank_share"] = "--max-total-tokens"
DIRECTIONS["max_total_tokens_for_rank_share"] = "lower"
#: Rules whose value has a shape rather than a direction: a change matches when its value has it.
SHAPES: dict[str, Callable[[object], bool]] = {"cpu_list_per_rank": _is_cpu_list}


def fit_cpu_list(value: str, sentence: str, *, cpu_count: int | None, ranks: int | None) -> tuple[str | None, str]:
    """A CPU-list value read from an error text, checked against this host: (the value to propose or
    None, why). With the host's CPU count unknown, no list read from the text is proposed (it names CPUs
    of some machine). With it known, a value that names a CPU the host does not have, or that the text gives as
    an example, is never proposed as read: a value of the same shape (one group per rank) is derived for
    this host. With the CPU count unknown and the rank count known, each rank gets one CPU of its own
    (``0|1`` for two ranks); with neither, nothing is proposed. Values that are not CPU lists pass
    unchanged."""
    ids = cpu_ids(value)
    if ids is None:
        return value, ""
    example = bool(_EXAMPLE.search(sentence))
    if cpu_count is None:
        # CPU ids belong to one machine: unchecked, a list read from a text is never proposed as read (an
        # error's paragraph of examples has sentences without an example word: "the same as setting
        # X=0-31|32-63"). One CPU per rank, CPUs 0 to ranks-1, is the list of the same shape that any host
        # able to run that many ranks has (a rank needs a CPU of its own; Linux numbers CPUs from 0).
        said = "the error's example for another machine" if example else "read from the error"
        unknown = "this host's CPU count is unknown (analyze --cpus N, or --case to ask the host)"
        if not ranks or ranks < 1:
            return None, f"{value} is {said} (CPUs {min(ids)}-{max(ids)}); {unknown}"
        fitted = "|".join(str(r) for r in range(ranks))
        return fitted, (f"{value} is {said} (CPUs {min(ids)}-{max(ids)}); {unknown}: {fitted} gives each of "
                        f"the {count(ranks, 'rank')} one CPU of its own, CPUs any host that runs them has")
    if max(ids) >= cpu_count or example:
        groups = ranks or value.count("|") + 1
        try:
            fitted = split_cpus(cpu_count, groups)
        except ValueError as exc:
            return None, f"{value} does not fit this host: {exc}"
        why = (f"{value} names CPUs up to {max(ids)} and this host has {cpu_count}" if max(ids) >= cpu_count
               else f"{value} is the error's example for another machine")
        return fitted, f"{why}: {fitted} is this host's {count(cpu_count, 'CPU')} split among {groups} rank(s)"
    return value, ""
