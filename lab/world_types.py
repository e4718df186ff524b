"""The data a lab world or version file holds: frozen dataclasses, and the vocabularies the files may use
(fault effects and the start-up points where they fire, condition operators, log sources and levels,
the context keys of conditions and templates).

`lab.world` loads the files into these; the format is documented in `lab/README.md`.
Standard library only: the lab is also installed on remote hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import expr
from lab.release import Release

EFFECTS = (
    "launch_error",
    "load_error",
    "capture_error",
    "crash_at_first_decode",
    "wrong_output",
    "hang",
    "warning",
    "scheduler_dead",
    "signal_death",
    "degrade_accuracy",
)
# Where in the start-up sequence an effect may fire (first entry = default).
# Stages in start-up order (a release orders the two graph captures its own way: lab/release.py):
# init, weights, kv_pool, piecewise_capture (prefill graphs), capture = decode_capture, draft_worker,
# warmup, ready, serving (= first_decode: requests), shutdown (SIGTERM).
EFFECT_POINTS: dict[str, tuple[str, ...]] = {
    "launch_error": ("args",),
    "load_error": ("weights", "init", "kv_pool", "draft_worker"),
    "capture_error": ("capture", "decode_capture", "piecewise_capture", "draft_worker"),
    # `warmup` for these two: the warm-up request SGLang sends to itself before the ready line.
    "crash_at_first_decode": ("first_decode", "warmup", "serving"),
    "wrong_output": ("first_decode", "serving"),
    # Answers stay fluent but fewer are right: the probe set's questions (lab/README.md, "Graded wrong output").
    "degrade_accuracy": ("first_decode", "serving"),
    "hang": (
        "init", "weights", "kv_pool", "capture", "decode_capture", "piecewise_capture", "draft_worker", "warmup",
        "first_decode", "serving", "shutdown",
    ),
    "warning": (
        "init", "args", "weights", "kv_pool", "capture", "decode_capture", "piecewise_capture", "draft_worker",
        "warmup", "ready", "first_decode", "serving", "shutdown",
    ),
    # The scheduler process dies without telling the parent (e.g. the kernel's OOM killer SIGKILLs it,
    # so no SIGQUIT is sent): HTTP stays up, /health answers 503, generation requests never return.
    "scheduler_dead": ("first_decode", "ready", "serving"),
    # The scheduler process dies of a signal the platform raises (ROCm's HSA runtime aborts on a GPU
    # memory fault: SIGABRT; a native crash: SIGSEGV): faulthandler's "Fatal Python error", then the
    # launcher's reaction of the release (lab/release.py: child_died_launch, watchdog_crash).
    "signal_death": (
        "first_decode", "serving", "init", "weights", "kv_pool", "capture", "decode_capture", "piecewise_capture",
        "draft_worker",
    ),
}
#: Stage names that are another name of a point: the decode-graph capture is `capture`; requests being
#: served are `first_decode` (each decode request checks its faults).
POINT_ALIASES = {"decode_capture": "capture", "serving": "first_decode"}
# A scheduler that dies sends SIGQUIT to the launcher, whose handler calls kill_process_tree(os.getpid()):
# the launcher SIGKILLs itself, so the shell sees 137 (SGLang 0.5.9 and 0.5.23, entrypoints/engine.py
# `launch_phase_sigquit_handler`, managers/tokenizer_manager.py `running_phase_sigquit_handler`,
# utils/common.py `kill_process_tree`). Argument errors are raised in the launcher itself: exit 1.
DEFAULT_EXIT_CODES = {"launch_error": 1, "load_error": -9, "capture_error": -9, "crash_at_first_decode": -9}
#: signal_death: the signals a platform kills the scheduler with, and faulthandler's name for each
#: (CPython Python/faulthandler.c `faulthandler_handlers`; SIGKILL cannot be caught: nothing is printed).
DEATH_SIGNALS = {"SIGABRT": (6, "Aborted"), "SIGSEGV": (11, "Segmentation fault"), "SIGBUS": (7, "Bus error"),
                 "SIGFPE": (8, "Floating-point exception"), "SIGILL": (4, "Illegal instruction"), "SIGKILL": (9, "")}

OPERATORS = (
    "eq",
    "ne",
    "in",
    "not_in",
    "gt",
    "ge",
    "lt",
    "le",
    "contains",
    "not_contains",
    "is_set",
    "matches",
    "version_lt",
    "version_le",
    "version_gt",
    "version_ge",
)
SOURCES = ("scheduler", "server", "raw")
LEVELS = ("debug", "info", "warning", "error", "critical")
HW_KEYS = (
    "gpu_name",
    "gpu_count",
    "compute_capability",
    "cc_major",
    "cc_minor",
    "arch",
    "memory_mib",
    "memory_gb",
    "driver_version",
    "cuda_version",
    "vendor",
)
MEM_KEYS = ("total_gb", "avail_gb", "weights_gb", "kv_gb", "graph_gb", "max_total_num_tokens")
# Bare names that templates and conditions may use besides flag dests. `running_requests` is the number
# of requests decoded together in the batch being evaluated (first_decode faults only); `sampled` is true
# when that request samples (temperature > 0) and false for greedy decoding (temperature 0, argmax), as
# the server's own warm-up request does (first_decode faults only). The `req.*` and `batch.*` keys and
# `traffic_s` are the request's load shape (lab/load.py, lab/README.md "Load").
EXTRA_KEYS = (
    "version",
    "site",
    "pid",
    "rank",
    "max_total_num_tokens",
    "context_len",
    "max_running_requests",
    "running_requests",
    "sampled",
    "serving_s",
    "traffic_s",
    "req.prompt_tokens",
    "req.max_new_tokens",
    "req.output_tokens",
    "req.cached_tokens",
    "req.features",
    "batch.shrink",
    "batch.features",
)
#: Keys describing the batch a request decodes in: a world whose faults read one lets requests that
#: arrive together share a batch (lab/load.py, `BATCH_WINDOW_S`).
BATCH_KEYS = ("running_requests", "batch.shrink", "batch.features")
#: The load keys' values outside a request (start-up faults see no request).
REQUEST_DEFAULTS: dict[str, object] = {
    "running_requests": 0,
    "traffic_s": 0.0,
    "req.prompt_tokens": 0,
    "req.max_new_tokens": 0,
    "req.output_tokens": 0,
    "req.cached_tokens": 0,
    "req.features": [],
    "batch.shrink": 0,
    "batch.features": [],
}
# isolated: one change (or a chain of changes, one per blocker) fixes it; not_isolated: no change
# within reach fixes it (a broken package); not_reproduced: the reported failure does not happen here.
TRUTH_EXPECT = ("isolated", "not_isolated", "not_reproduced")
FIX_COSTS = ("none", "low", "medium", "high")

KEY_RE = re.compile(r"^(?:(args|user|hw|model|env|mem|pkg)\.)?([A-Za-z_][A-Za-z0-9_.\-]*)$")
TEMPLATE_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_.]*)(?::([^{}]*))?\}")


class WorldError(Exception):
    """A world, version or case file is missing or malformed; the message is one line."""


@dataclass(frozen=True)
class FlagDef:
    """One `launch_server` flag of an imitated SGLang version (argparse semantics)."""

    name: str
    aliases: tuple[str, ...]
    dest: str
    type: str  # "str" | "int" | "float"; ignored for switches
    action: str  # "store" | "store_true" | "store_false" | "boolean_optional" (--x / --no-x) |
    # "store_const" (stores `const`, takes no value) | "warn" (takes no value, stores nothing: prints its
    # `deprecated` message, like SGLang's DeprecatedAction)
    choices: tuple[str, ...] | tuple[int, ...] | tuple[float, ...] | None  # of the flag's type
    default: Any
    help: str
    nargs: str | None
    required: bool
    metavar: str | None
    deprecated: str | None = None  # warning printed when given (the flag still works)
    removed: str | None = None  # argparse error printed when given (exit 2): the flag is retired
    const: Any = None  # store_const: the value stored

    @property
    def takes_value(self) -> bool:
        """Whether the flag is followed by a value on the command line (store with nargs != 0)."""
        return self.action == "store"

    @property
    def is_list(self) -> bool:
        """Whether the flag takes several values (`nargs` '+' or '*': `--cuda-graph-bs 1 2 4 8`)."""
        return self.action == "store" and self.nargs in ("+", "*")

    def option_strings(self) -> tuple[str, ...]:
        """Every spelling argparse accepts: name, aliases and, for boolean_optional, `--no-<name>`."""
        neg = ("--no-" + self.name[2:],) if self.action == "boolean_optional" else ()
        return (self.name, *self.aliases, *neg)


@dataclass(frozen=True)
class Clause:
    """`key <op> operand`; key is a context key such as `kv_cache_dtype` or `hw.cc_major`."""

    key: str
    op: str
    operand: Any


@dataclass(frozen=True)
class Condition:
    """Any-of alternatives, each an all-of list of clauses. No alternatives means always true."""

    alternatives: tuple[tuple[Clause, ...], ...] = ()


@dataclass(frozen=True)
class LineSpec:
    """A log record template: first line gets the source's prefix, further lines are printed raw."""

    text: str
    source: str = "scheduler"
    level: str = "info"
    ranks: str = "0"  # "0" (TP0 only), "all", or a comma list of ranks ("6", "1,3")

    def rank_list(self, tp_size: int) -> list[int]:
        """The TP ranks that print this line (ranks beyond `tp_size` print nothing)."""
        if self.ranks == "all":
            return list(range(tp_size))
        return [r for r in (int(x) for x in self.ranks.split(",")) if r < max(tp_size, 1)]


@dataclass(frozen=True)
class ResolveRule:
    """An auto-resolution rule: when the condition holds, set values and print log lines."""

    name: str
    when: Condition
    unless: Condition | None
    set: dict[str, Any]
    set_default: dict[str, Any]
    log: tuple[LineSpec, ...]


@dataclass(frozen=True)
class Fault:
    """A fault rule: a condition on the effective configuration and the effect it has."""

    id: str
    when: Condition
    unless: Condition | None
    effect: str
    at: str
    progress: float
    lines: tuple[LineSpec, ...]
    exit_code: int | None
    output: str
    probability: float = 1.0  # chance that the fault is live on a given launch (drawn once per launch)
    per_request: float = 1.0  # serving faults: chance that a request the fault matches is hit (drawn per request)
    per_minute: float = 0.0  # serving faults: events per simulated minute of serving; 0 = from the first request
    signal: str = "SIGABRT"  # signal_death: the signal the scheduler process dies of
    text: str | None = None  # wrong_output: the (arbitrary) text a broken model returns instead of `output`
    delay_s: float = 0.0  # simulated seconds between reaching the fault's point and its lines
    accuracy: float | None = None  # degrade_accuracy: the share of graded questions answered right
    drop: float = 0.0  # degrade_accuracy: how far below the model's healthy accuracy (when no `accuracy`)

    def uses(self, key: str) -> bool:
        """True if the fault's conditions read `key` (e.g. `running_requests`)."""
        conds = [self.when] + ([self.unless] if self.unless is not None else [])
        return any(
            c.key == key or (c.op == "expr" and key in expr.keys(c.operand))
            for cond in conds
            for alt in cond.alternatives
            for c in alt
        )


@dataclass(frozen=True)
class Hardware:
    gpu_name: str
    gpu_count: int
    compute_capability: str
    memory_mib: int
    driver_version: str
    cuda_version: str
    memory_used_mib: int = 0
    power_limit_w: float = 600.0
    #: "nvidia" (nvidia-smi answers), "amd" (amd-smi / rocm-smi answer; compute_capability is what
    #: torch reports on ROCm, e.g. "9.4" for gfx942) or "cpu" (no GPU tool answers).
    vendor: str = "nvidia"
    gfx_target: str = ""  # AMD only, e.g. "gfx942"
    #: Logical CPUs of the host (`getconf _NPROCESSORS_ONLN` there; `python -m lab.cpu_query` answers it);
    #: 0: this machine's own count.
    cpu_count: int = 0

    @property
    def cc_major(self) -> int:
        return int(self.compute_capability.split(".")[0])

    @property
    def cc_minor(self) -> int:
        parts = self.compute_capability.split(".")
        return int(parts[1]) if len(parts) > 1 else 0

    def context(self) -> dict[str, Any]:
        """Values visible to conditions and templates as `hw.<key>`."""
        return {
            "gpu_name": self.gpu_name,
            "gpu_count": self.gpu_count,
            "compute_capability": float(self.compute_capability),
            "cc_major": self.cc_major,
            "cc_minor": self.cc_minor,
            "arch": f"sm{self.cc_major}{self.cc_minor}",
            "memory_mib": self.memory_mib,
            "memory_gb": round(self.memory_mib / 1024, 2),
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "vendor": self.vendor,
        }


@dataclass(frozen=True)
class Timing:
    """Simulated durations in seconds (multiplied by HYPOLOOP_LAB_TIME_SCALE when run)."""

    init_s: float = 20.0
    load_s: float = 60.0
    kv_pool_s: float = 3.0
    capture_s: float = 30.0
    warmup_s: float = 5.0
    piecewise_s: float = 10.0  # prefill (piecewise) CUDA-graph capture, when enabled
    draft_s: float = 15.0  # the speculative draft worker: its weights and its CUDA graphs
    prefill_tokens_per_s: float = 5000.0
    decode_tokens_per_s: float = 50.0


@dataclass(frozen=True)
class Memory:
    """Per-GPU memory model in GB (1 GB = 2**30 bytes, as SGLang prints it)."""

    init_overhead_gb: float = 1.0
    weights_gb_total: float = 16.0
    weights_gb_replicated: float = 0.0
    graph_gb: float = 1.0  # CUDA graphs of the default batch-size list; scales with the list's length
    capture_reserve_gb: float = 0.0  # workspace capture needs on top of the graphs (freed afterwards)
    kv_bytes_per_token: dict[str, int] = field(default_factory=lambda: {"default": 131072})
    k_fraction: float = 0.5
    enforce: bool = True


@dataclass(frozen=True)
class Model:
    path: str
    aliases: tuple[str, ...]
    architecture: str
    model_type: str
    dtype: str
    context_length: int
    checkpoint_shards: int
    features: tuple[str, ...]
    fields: dict[str, Any]  # every key of [model], for `model.<key>` conditions and templates


@dataclass(frozen=True)
class Truth:
    """Ground truth (lab tests and the bench only). `expect`: the honest ending of a good run
    (`isolated`; `not_isolated` when no change within reach fixes the failure, naming `package`;
    `not_reproduced` when the reported failure does not happen). Each fix is
    `{kind, name, value, root, cost, note}`: `root` false marks a workaround that avoids the broken
    component, `cost` its performance cost (none, low, medium, high); `value = false` means the flag
    or variable removed. `chain`: blockers one behind the other, each link a tuple of alternative
    fixes; every link is needed, in order, and each one alone moves the failure to the next link.
    `names`: text a `not_isolated` ending must name when the cause is not a package (a port taken on
    the host: "port 8000")."""

    root_cause: str
    component: str
    fixes: tuple[dict[str, Any], ...]
    expect: str = "isolated"
    chain: tuple[tuple[dict[str, Any], ...], ...] = ()
    package: str | None = None
    names: str | None = None


@dataclass(frozen=True)
class VersionDef:
    version: str
    path: Path
    flags: tuple[FlagDef, ...]
    resolve: tuple[ResolveRule, ...]
    release: Release = field(default_factory=Release)
    installed: dict[str, str] = field(default_factory=dict)  # package -> version `pip install` pins
    check_env_packages: tuple[str, ...] = ()  # what `check_env` reports, in its order

    @property
    def dests(self) -> tuple[str, ...]:
        return tuple(f.dest for f in self.flags)


@dataclass(frozen=True)
class PackageChange:
    """One entry of a host's package history (`[[package_change]]`): `name` went from `before` to
    `after` (either "" for installed / removed) at `when` (free text as a user would say it, e.g.
    "2026-11-30 14:00" or "yesterday"), with an optional `note` (how: `pip install -U flashinfer-python`)."""

    name: str
    before: str
    after: str
    when: str
    note: str = ""


def package_key(name: str) -> str:
    """A package name as pip compares them (PEP 503: case-folded, runs of '-', '_', '.' as one '-')."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class World:
    name: str
    path: Path
    description: str
    hardware: Hardware
    model: Model
    version: VersionDef
    timing: Timing
    memory: Memory
    resolve: tuple[ResolveRule, ...]
    faults: tuple[Fault, ...]
    truth: Truth | None
    packages: dict[str, str] = field(default_factory=dict)  # installed package -> version (normalised names)
    package_changes: tuple[PackageChange, ...] = ()

