"""World and version files of the lab: loading, validation, and the data they hold.

A *world* (`lab/worlds/<name>/world.toml`) describes one simulated host: hardware, model, the SGLang
version it imitates, timing, memory, auto-resolution rules, fault rules and the ground truth. A
*version* file (`lab/versions/<version>.toml`) holds the command-line flags of one imitated SGLang
release plus version-wide default rules, so worlds share them. The format is documented in
`lab/README.md`; this module turns the TOML into frozen dataclasses and rejects mistakes with a
one-line `WorldError` that names the file and the field.

Standard library only: the lab is also installed on remote hosts.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import expr
from lab.release import Release, parse_release

LAB_DIR = Path(__file__).resolve().parent
WORLDS_DIR = LAB_DIR / "worlds"
VERSIONS_DIR = LAB_DIR / "versions"

ENV_WORLD = "HYPOLOOP_LAB_WORLD"
ENV_TIME_SCALE = "HYPOLOOP_LAB_TIME_SCALE"
ENV_SEED = "HYPOLOOP_LAB_SEED"
ENV_STATE = "HYPOLOOP_LAB_STATE"

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
# the server's own warm-up request does (first_decode faults only).
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
)
#: The simulated installed-source tree (lab/site/README.md): the value of the `site` template key, so a
#: world's traceback can point into files that exist on the host running the lab.
SITE_DIR = str(Path(__file__).resolve().parent / "site")
# isolated: one change (or a chain of changes, one per blocker) fixes it; not_isolated: no change
# within reach fixes it (a broken package); not_reproduced: the reported failure does not happen here.
TRUTH_EXPECT = ("isolated", "not_isolated", "not_reproduced")
FIX_COSTS = ("none", "low", "medium", "high")

_KEY_RE = re.compile(r"^(?:(args|user|hw|model|env|mem|pkg)\.)?([A-Za-z_][A-Za-z0-9_.\-]*)$")
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

    def uses(self, key: str) -> bool:
        """True if the fault's conditions read `key` (e.g. `running_requests`)."""
        conds = [self.when] + ([self.unless] if self.unless is not None else [])
        return any(c.key == key for cond in conds for alt in cond.alternatives for c in alt)


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
    fixes; every link is needed, in order, and each one alone moves the failure to the next link."""

    root_cause: str
    component: str
    fixes: tuple[dict[str, Any], ...]
    expect: str = "isolated"
    chain: tuple[tuple[dict[str, Any], ...], ...] = ()
    package: str | None = None


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


# ----------------------------------------------------------------------------------------- loading


def world_path(spec: str) -> Path:
    """Map a world name (`lab/worlds/<name>/world.toml`) or a path to a world.toml / its directory."""
    candidate = Path(spec)
    if spec.endswith(".toml") or os.sep in spec or candidate.is_absolute():
        path = candidate / "world.toml" if candidate.is_dir() else candidate
    else:
        path = WORLDS_DIR / spec / "world.toml"
    return path


def load_world_from_env(environ: dict[str, str] | None = None) -> World:
    """Load the world named by HYPOLOOP_LAB_WORLD.

    Raises:
        WorldError: the variable is unset, names no world, or the world is malformed.
    """
    env = os.environ if environ is None else environ
    spec = env.get(ENV_WORLD, "").strip()
    if not spec:
        raise WorldError(f"{ENV_WORLD} is not set (a world name under lab/worlds/ or a path to a world.toml)")
    return load_world(spec)


def time_scale_from_env(environ: dict[str, str] | None = None) -> float:
    """HYPOLOOP_LAB_TIME_SCALE as a positive float (default 1.0). Raises WorldError if invalid."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_TIME_SCALE, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        raise WorldError(f"{ENV_TIME_SCALE}={raw!r} is not a number") from None
    if not value > 0:
        raise WorldError(f"{ENV_TIME_SCALE}={raw!r} must be > 0")
    return value


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise WorldError(f"{what} not found: {path}")
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise WorldError(f"{path}: invalid TOML: {exc}") from None


def load_world(spec: str) -> World:
    """Load and validate a world by name or path. Raises WorldError (one line) on any problem."""
    path = world_path(spec)
    if not path.is_file():
        known = (
            sorted(p.name for p in WORLDS_DIR.iterdir() if (p / "world.toml").is_file())
            if WORLDS_DIR.is_dir()
            else []
        )
        raise WorldError(
            f"unknown lab world {spec!r}: {path} does not exist (known: {', '.join(known) or 'none'})"
        )
    data = _read_toml(path, "world file")
    ctx = _Ctx(path)
    version_name = (
        ctx.req_str(data, "sglang", "version") if "sglang" in data else ctx.req_str(data, "", "version")
    )
    version = load_version(version_name, path.parent)
    hardware = _parse_hardware(ctx, data.get("hardware"))
    model = _parse_model(ctx, data.get("model"))
    timing = _parse_dataclass(ctx, data.get("timing", {}), Timing, "timing")
    memory = _parse_memory(ctx, data.get("memory", {}))
    keys = _KeyCheck(version, model)
    resolve = tuple(
        _parse_resolve(ctx, keys, item, f"resolve[{i}]") for i, item in enumerate(ctx.list(data, "resolve"))
    )
    faults = tuple(
        _parse_fault(ctx, keys, item, f"fault[{i}]") for i, item in enumerate(ctx.list(data, "fault"))
    )
    seen: set[str] = set()
    for fault in faults:
        if fault.id in seen:
            raise WorldError(f"{path}: fault id {fault.id!r} is used twice")
        seen.add(fault.id)
    truth = _parse_truth(ctx, data.get("truth"))
    packages, changes = _parse_packages(ctx, data, version)
    return World(
        name=str(data.get("name", path.parent.name)),
        path=path,
        description=str(data.get("description", "")),
        hardware=hardware,
        model=model,
        version=version,
        timing=timing,
        memory=memory,
        resolve=resolve,
        faults=faults,
        truth=truth,
        packages=packages,
        package_changes=changes,
    )


def _parse_packages(ctx: _Ctx, data: dict[str, Any], version: VersionDef) -> tuple[dict[str, str], tuple[PackageChange, ...]]:
    """`[packages]` (name = "version"; false = not installed) over the release's pins; `[[package_change]]`."""
    raw = data.get("packages", {})
    if not isinstance(raw, dict):
        raise ctx.fail("packages", 'expected a table of package = "version" (false: not installed)')
    packages = dict(version.installed)
    for name, value in raw.items():
        if value is False:
            packages.pop(package_key(name), None)
        elif isinstance(value, str) and value:
            packages[package_key(name)] = value
        else:
            raise ctx.fail(f"packages.{name}", 'expected a version string such as "0.6.3", or false (not installed)')
    changes: list[PackageChange] = []
    for i, item in enumerate(ctx.list(data, "package_change")):
        where = f"package_change[{i}]"
        unknown = sorted(set(item) - {"name", "before", "after", "when", "note"})
        if unknown:
            raise ctx.fail(f"{where}.{unknown[0]}", "unknown field (allowed: after, before, name, note, when)")
        for key in ("name", "when"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise ctx.fail(f"{where}.{key}", "expected a non-empty string")
        for key in ("before", "after", "note"):
            if not isinstance(item.get(key, ""), str):
                raise ctx.fail(f"{where}.{key}", "expected a string (\"\" for not installed)")
        change = PackageChange(
            name=item["name"], before=item.get("before", ""), after=item.get("after", ""), when=item["when"],
            note=item.get("note", ""),
        )
        changes.append(change)
    last = {package_key(c.name): (i, c) for i, c in enumerate(changes)}
    for key, (i, change) in last.items():
        if packages.get(key, "") != change.after:
            now = packages.get(key) or "not installed"
            raise ctx.fail(
                f"package_change[{i}].after",
                f"{change.after or 'not installed'!r} is not what [packages] says is installed now ({now!r})",
            )
    return packages, tuple(changes)


def version_path(spec: str, base: Path | None = None) -> Path:
    """Map a version name (`lab/versions/<version>.toml`) or a path to a version file (relative paths
    against `base`, the directory of the world file that names it). Raises WorldError for a bad name."""
    if spec.endswith(".toml") or "/" in spec or os.sep in spec:
        path = Path(spec).expanduser()
        return path if path.is_absolute() or base is None else base / path
    if not re.fullmatch(r"[A-Za-z0-9._+-]+", spec):
        raise WorldError(f"invalid SGLang version name {spec!r}")
    return VERSIONS_DIR / f"{spec}.toml"


def known_versions() -> list[str]:
    """The releases under lab/versions/, oldest first."""
    names = [p.stem for p in VERSIONS_DIR.glob("*.toml")]
    return sorted(names, key=lambda v: [int(x) if x.isdigit() else x for x in re.split(r"[.+-]", v)])


def load_version(version: str, base: Path | None = None) -> VersionDef:
    """Load a version file by release name (`lab/versions/<version>.toml`) or by path. Raises WorldError."""
    path = version_path(version, base)
    if not path.is_file() and path.parent == VERSIONS_DIR:
        raise WorldError(
            f"flag definitions for SGLang {version} not found: {path} (known: {', '.join(known_versions())})"
        )
    data = _read_toml(path, f"flag definitions for SGLang {version}")
    ctx = _Ctx(path)
    flags: list[FlagDef] = []
    seen: set[str] = set()
    for i, item in enumerate(ctx.list(data, "flag")):
        flag = _parse_flag(ctx, item, f"flag[{i}]")
        for opt in flag.option_strings():
            if opt in seen:
                raise WorldError(f"{path}: flag[{i}]: option {opt} is defined twice")
            seen.add(opt)
        flags.append(flag)
    if not flags:
        raise WorldError(f"{path}: no [[flag]] entries")
    try:
        release = parse_release(data.get("release"), {f.dest for f in flags}, "release")
    except ValueError as exc:
        raise WorldError(f"{path}: {exc}") from None
    name = str(data.get("version", path.stem))
    installed = data.get("installed", {})
    listed = data.get("check_env_packages", [])
    if not isinstance(installed, dict) or not all(isinstance(v, str) for v in installed.values()):
        raise WorldError(f"{path}: installed: expected a table of package = \"version\"")
    if not isinstance(listed, list) or not all(isinstance(v, str) for v in listed):
        raise WorldError(f"{path}: check_env_packages: expected a list of package names")
    partial = VersionDef(
        version=name, path=path, flags=tuple(flags), resolve=(), release=release,
        installed={package_key(k): v for k, v in installed.items()}, check_env_packages=tuple(listed),
    )
    keys = _KeyCheck(partial, None)
    rules = tuple(
        _parse_resolve(ctx, keys, item, f"resolve[{i}]") for i, item in enumerate(ctx.list(data, "resolve"))
    )
    return dataclasses.replace(partial, resolve=rules)


# ------------------------------------------------------------------------------------ parse helpers


class _Ctx:
    """Error-reporting helper bound to one file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, msg: str) -> WorldError:
        return WorldError(f"{self.path}: {where}: {msg}")

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {type(value).__name__}")
        return value

    def list(self, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(key, f"expected an array of tables ([[{key}]])")
        return value

    def req_str(self, data: dict[str, Any], section: str, key: str) -> str:
        table = data.get(section, {}) if section else data
        where = f"{section}.{key}" if section else key
        value = table.get(key) if isinstance(table, dict) else None
        if not isinstance(value, str) or not value:
            raise self.fail(where, "expected a non-empty string")
        return value


_FLAG_ACTIONS = ("store", "store_true", "store_false", "boolean_optional", "store_const", "warn")
_FLAG_KEYS = frozenset(
    "name aliases type action choices default help nargs required metavar dest deprecated removed const".split()
)


def _parse_flag(ctx: _Ctx, item: dict[str, Any], where: str) -> FlagDef:
    name = item.get("name")
    if not isinstance(name, str) or not name.startswith("--"):
        raise ctx.fail(f"{where}.name", "expected a string starting with '--'")
    where = f"{where} ({name})"
    unknown = sorted(set(item) - _FLAG_KEYS)
    if unknown:
        raise ctx.fail(f"{where}.{unknown[0]}", f"unknown key (expected one of {', '.join(sorted(_FLAG_KEYS))})")
    aliases = item.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.startswith("-") for a in aliases):
        raise ctx.fail(f"{where}.aliases", "expected a list of option strings")
    action = item.get("action", "store")
    if action not in _FLAG_ACTIONS:
        raise ctx.fail(f"{where}.action", f"expected one of {', '.join(_FLAG_ACTIONS)}")
    ftype = item.get("type", "str")
    if ftype not in ("str", "int", "float"):
        raise ctx.fail(f"{where}.type", "expected 'str', 'int' or 'float'")
    choices = item.get("choices")
    pytypes: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float)}
    pytype = pytypes[ftype]
    if choices is not None and (
        not isinstance(choices, list)
        or not all(isinstance(c, pytype) and not isinstance(c, bool) for c in choices)
    ):
        raise ctx.fail(f"{where}.choices", f"expected a list of {ftype} values (the flag's type)")
    nargs = item.get("nargs")
    if nargs is not None and nargs not in ("+", "*", "?"):
        raise ctx.fail(f"{where}.nargs", "expected '+', '*' or '?'")
    switch_default = {"store_true": False, "store_false": True}.get(action)
    default = item.get("default", switch_default)
    dest = item.get("dest", name[2:].replace("-", "_"))
    for key in ("deprecated", "removed"):
        if key in item and not (isinstance(item[key], str) and item[key]):
            raise ctx.fail(f"{where}.{key}", "expected a non-empty message")
    return FlagDef(
        name=name,
        aliases=tuple(aliases),
        dest=str(dest),
        type=ftype,
        action=action,
        choices=tuple(choices) if choices is not None else None,
        default=default,
        help=str(item.get("help", "")),
        nargs=nargs,
        required=bool(item.get("required", False)),
        metavar=item.get("metavar"),
        deprecated=item.get("deprecated"),
        removed=item.get("removed"),
        const=item.get("const"),
    )


def _parse_hardware(ctx: _Ctx, raw: Any) -> Hardware:
    data = ctx.table(raw, "hardware")
    try:
        hw = Hardware(
            gpu_name=str(data["gpu_name"]),
            gpu_count=int(data["gpu_count"]),
            compute_capability=str(data["compute_capability"]),
            memory_mib=int(data["memory_mib"]),
            driver_version=str(data.get("driver_version", "580.95.05")),
            cuda_version=str(data.get("cuda_version", "13.0")),
            memory_used_mib=int(data.get("memory_used_mib", 0)),
            power_limit_w=float(data.get("power_limit_w", 600.0)),
            vendor=str(data.get("vendor", "nvidia")),
            gfx_target=str(data.get("gfx_target", "")),
        )
    except KeyError as exc:
        raise ctx.fail("hardware", f"missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ctx.fail("hardware", f"bad value: {exc}") from None
    if not re.fullmatch(r"\d+\.\d+", hw.compute_capability):
        raise ctx.fail("hardware.compute_capability", "expected a string like '12.0'")
    if hw.vendor not in ("nvidia", "amd", "cpu"):
        raise ctx.fail("hardware.vendor", "expected 'nvidia', 'amd' or 'cpu'")
    return hw


def _parse_model(ctx: _Ctx, raw: Any) -> Model:
    data = ctx.table(raw, "model")
    for key in ("path", "architecture"):
        if not isinstance(data.get(key), str):
            raise ctx.fail(f"model.{key}", "expected a string")
    features = data.get("features", [])
    if not isinstance(features, list):
        raise ctx.fail("model.features", "expected a list of strings")
    return Model(
        path=data["path"],
        aliases=tuple(data.get("aliases", [])),
        architecture=data["architecture"],
        model_type=str(data.get("model_type", "")),
        dtype=str(data.get("dtype", "torch.bfloat16")),
        context_length=int(data.get("context_length", 32768)),
        checkpoint_shards=max(1, int(data.get("checkpoint_shards", 4))),
        features=tuple(str(f) for f in features),
        fields=dict(data),
    )


def _parse_dataclass(ctx: _Ctx, raw: Any, cls: type, where: str) -> Any:
    data = ctx.table(raw, where)
    allowed = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in allowed:
            raise ctx.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    try:
        return cls(**{k: float(v) for k, v in data.items()})
    except (TypeError, ValueError) as exc:
        raise ctx.fail(where, f"bad value: {exc}") from None


def _parse_memory(ctx: _Ctx, raw: Any) -> Memory:
    data = dict(ctx.table(raw, "memory"))
    kv = data.pop("kv_bytes_per_token", None)
    enforce = data.pop("enforce", True)
    base = _parse_dataclass(ctx, {k: v for k, v in data.items()}, Memory, "memory")
    if kv is None:
        kv = {"default": 131072}
    if isinstance(kv, int):
        kv = {"default": kv}
    if not isinstance(kv, dict) or not all(isinstance(v, int) and v > 0 for v in kv.values()):
        raise ctx.fail("memory.kv_bytes_per_token", "expected an integer or a table of dtype = integer")
    return Memory(
        init_overhead_gb=base.init_overhead_gb,
        weights_gb_total=base.weights_gb_total,
        weights_gb_replicated=base.weights_gb_replicated,
        graph_gb=base.graph_gb,
        capture_reserve_gb=base.capture_reserve_gb,
        kv_bytes_per_token=dict(kv),
        k_fraction=base.k_fraction,
        enforce=bool(enforce),
    )


def _parse_truth(ctx: _Ctx, raw: Any) -> Truth | None:
    if raw is None:
        return None
    data = ctx.table(raw, "truth")
    fixes = data.get("fixes", [])
    if not isinstance(fixes, list) or not all(isinstance(f, dict) for f in fixes):
        raise ctx.fail("truth.fixes", "expected an array of tables {kind, name, value}")
    for i, fix in enumerate(fixes):
        _check_fix(ctx, fix, f"truth.fixes[{i}]")
    raw_chain = data.get("chain", [])
    if not isinstance(raw_chain, list):
        raise ctx.fail("truth.chain", "expected an array of links (a fix table, or an array of alternatives)")
    chain: list[tuple[dict[str, Any], ...]] = []
    for i, link in enumerate(raw_chain):
        alternatives = link if isinstance(link, list) else [link]
        if not alternatives or not all(isinstance(a, dict) for a in alternatives):
            raise ctx.fail(f"truth.chain[{i}]", "expected a fix table or a non-empty array of fix tables")
        for j, fix in enumerate(alternatives):
            _check_fix(ctx, fix, f"truth.chain[{i}][{j}]")
        chain.append(tuple(alternatives))
    expect = str(data.get("expect", "isolated"))
    if expect not in TRUTH_EXPECT:
        raise ctx.fail("truth.expect", f"expected one of {', '.join(TRUTH_EXPECT)}")
    package = data.get("package")
    if package is not None and (not isinstance(package, str) or not package):
        raise ctx.fail("truth.package", "expected the name of the implicated package")
    if expect == "not_isolated" and "chain" in data:
        raise ctx.fail("truth.chain", "a not_isolated world has no chain of fixes")
    return Truth(
        root_cause=str(data.get("root_cause", "")),
        component=str(data.get("component", "")),
        fixes=tuple(fixes),
        expect=expect,
        chain=tuple(chain),
        package=package,
    )


def _check_fix(ctx: _Ctx, fix: dict[str, Any], where: str) -> None:
    if fix.get("kind") not in ("flag", "env") or not isinstance(fix.get("name"), str):
        raise ctx.fail(where, "expected kind = 'flag'|'env' and a name")
    if "root" in fix and not isinstance(fix["root"], bool):
        raise ctx.fail(f"{where}.root", "expected true or false")
    if "cost" in fix and fix["cost"] not in FIX_COSTS:
        raise ctx.fail(f"{where}.cost", f"expected one of {', '.join(FIX_COSTS)}")


class _KeyCheck:
    """Validates context keys used in conditions, `set` tables and templates."""

    def __init__(self, version: VersionDef, model: Model | None) -> None:
        self.dests = set(version.dests)
        self.model_keys = set(model.fields) if model is not None else None

    def check(self, key: str, *, settable: bool = False) -> str | None:
        """Return an error message, or None if the key is valid."""
        m = _KEY_RE.match(key)
        if not m:
            return f"invalid key {key!r}"
        prefix, name = m.group(1), m.group(2)
        if settable:
            if prefix not in (None, "args") or name not in self.dests:
                return f"{key!r} is not a flag dest of this SGLang version"
            return None
        if prefix in (None, "args", "user"):
            if name in self.dests or (prefix is None and name in EXTRA_KEYS):
                return None
            return f"unknown key {key!r} (not a flag dest of this SGLang version)"
        if prefix == "hw" and name not in HW_KEYS:
            return f"unknown hardware key {key!r} (allowed: {', '.join(HW_KEYS)})"
        if prefix == "mem" and name not in MEM_KEYS:
            return f"unknown memory key {key!r} (allowed: {', '.join(MEM_KEYS)})"
        if prefix == "model" and self.model_keys is not None and name not in self.model_keys:
            return f"unknown model key {key!r} (not in [model])"
        return None


def _parse_condition(ctx: _Ctx, keys: _KeyCheck, raw: Any, where: str) -> Condition:
    if raw is None:
        return Condition()
    alternatives_raw = raw if isinstance(raw, list) else [raw]
    alternatives: list[tuple[Clause, ...]] = []
    for j, alt in enumerate(alternatives_raw):
        alt_where = f"{where}[{j}]" if isinstance(raw, list) else where
        if not isinstance(alt, dict):
            raise ctx.fail(alt_where, "expected a table of key = condition")
        clauses: list[Clause] = []
        for key, spec in alt.items():
            if key == "expr":  # a relation between settings (lab/expr.py)
                if not isinstance(spec, str):
                    raise ctx.fail(f"{alt_where}.expr", "expected an expression string")
                try:
                    tree = expr.parse(spec)
                except expr.ExprError as exc:
                    raise ctx.fail(f"{alt_where}.expr", f"{spec!r}: {exc}") from None
                for name in expr.keys(tree):
                    err = keys.check(name)
                    if err:
                        raise ctx.fail(f"{alt_where}.expr", f"{spec!r}: {err}")
                clauses.append(Clause("expr", "expr", tree))
                continue
            err = keys.check(key)
            if err:
                raise ctx.fail(alt_where, err)
            if isinstance(spec, dict):
                if not spec:
                    raise ctx.fail(f"{alt_where}.{key}", "empty operator table")
                for op, operand in spec.items():
                    if op not in OPERATORS:
                        raise ctx.fail(
                            f"{alt_where}.{key}", f"unknown operator {op!r} (allowed: {', '.join(OPERATORS)})"
                        )
                    if op in ("in", "not_in") and not isinstance(operand, list):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", "expected a list")
                    if op in ("gt", "ge", "lt", "le") and (
                        isinstance(operand, bool) or not isinstance(operand, int | float)
                    ):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", "expected a number")
                    if op.startswith("version_") and not isinstance(operand, str | int | float):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", 'expected a version such as "0.6.3"')
                    if op == "is_set" and not isinstance(operand, bool):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", "expected true or false")
                    if op == "matches":
                        try:
                            re.compile(str(operand))
                        except re.error as exc:
                            raise ctx.fail(f"{alt_where}.{key}.{op}", f"bad regex: {exc}") from None
                    clauses.append(Clause(key, op, operand))
            elif isinstance(spec, list):
                clauses.append(Clause(key, "in", spec))
            else:
                clauses.append(Clause(key, "eq", spec))
        alternatives.append(tuple(clauses))
    return Condition(tuple(alternatives))


def _check_template(ctx: _Ctx, keys: _KeyCheck, text: str, where: str) -> None:
    for m in TEMPLATE_RE.finditer(text):
        if m.group(1) is None:
            continue
        err = keys.check(m.group(1))
        if err:
            raise ctx.fail(where, f"template: {err} (write {{{{ and }}}} for literal braces)")
    stripped = TEMPLATE_RE.sub("", text)
    if "{" in stripped or "}" in stripped:
        raise ctx.fail(where, "template has an unmatched brace (write {{ and }} for literal braces)")


def _parse_lines(
    ctx: _Ctx, keys: _KeyCheck, raw: Any, where: str, *, source: str, level: str
) -> tuple[LineSpec, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ctx.fail(where, "expected a list of strings or tables {text, source, level, ranks}")
    out: list[LineSpec] = []
    for i, item in enumerate(raw):
        w = f"{where}[{i}]"
        if isinstance(item, str):
            spec = LineSpec(text=item, source=source, level=level)
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            spec = LineSpec(
                text=item["text"],
                source=str(item.get("source", source)),
                level=str(item.get("level", level)),
                ranks=str(item.get("ranks", "0")),
            )
        else:
            raise ctx.fail(w, "expected a string or a table with a 'text' string")
        if spec.source not in SOURCES:
            raise ctx.fail(w, f"source must be one of {', '.join(SOURCES)}")
        if spec.level not in LEVELS:
            raise ctx.fail(w, f"level must be one of {', '.join(LEVELS)}")
        if spec.ranks != "all" and not re.fullmatch(r"\d+(,\d+)*", spec.ranks):
            raise ctx.fail(w, "ranks must be 'all' or a comma list of rank numbers ('0', '1,3')")
        _check_template(ctx, keys, spec.text, w)
        out.append(spec)
    return tuple(out)


def _parse_set(ctx: _Ctx, keys: _KeyCheck, raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    data = ctx.table(raw, where)
    out: dict[str, Any] = {}
    for key, value in data.items():
        err = keys.check(key, settable=True)
        if err:
            raise ctx.fail(where, err)
        if isinstance(value, str):
            _check_template(ctx, keys, value, f"{where}.{key}")
        out[key.removeprefix("args.")] = value
    return out


def _parse_resolve(ctx: _Ctx, keys: _KeyCheck, item: dict[str, Any], where: str) -> ResolveRule:
    allowed = {"name", "when", "unless", "set", "set_default", "log", "level", "source"}
    for key in item:
        if key not in allowed:
            raise ctx.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    name = str(item.get("name", where))
    level = str(item.get("level", "warning"))
    source = str(item.get("source", "server"))
    return ResolveRule(
        name=name,
        when=_parse_condition(ctx, keys, item.get("when"), f"{where}.when"),
        unless=_parse_condition(ctx, keys, item["unless"], f"{where}.unless") if "unless" in item else None,
        set=_parse_set(ctx, keys, item.get("set"), f"{where}.set"),
        set_default=_parse_set(ctx, keys, item.get("set_default"), f"{where}.set_default"),
        log=_parse_lines(ctx, keys, item.get("log"), f"{where}.log", source=source, level=level),
    )


def _parse_fault(ctx: _Ctx, keys: _KeyCheck, item: dict[str, Any], where: str) -> Fault:
    allowed = {
        "id",
        "when",
        "unless",
        "effect",
        "at",
        "progress",
        "lines",
        "exit_code",
        "output",
        "source",
        "level",
        "probability",
        "per_request",
        "per_minute",
        "signal",
        "text",
        "delay_s",
    }
    for key in item:
        if key not in allowed:
            raise ctx.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    effect = item.get("effect")
    if effect not in EFFECTS:
        raise ctx.fail(f"{where}.effect", f"expected one of {', '.join(EFFECTS)}")
    points = EFFECT_POINTS[effect]
    at = str(item.get("at", points[0]))
    if at not in points:
        raise ctx.fail(f"{where}.at", f"effect {effect} can happen at: {', '.join(points)}")
    at = POINT_ALIASES.get(at, at)
    progress = item.get("progress", 0.0)
    if isinstance(progress, bool) or not isinstance(progress, int | float) or not 0.0 <= progress <= 1.0:
        raise ctx.fail(f"{where}.progress", "expected a number between 0 and 1")
    exit_code = item.get("exit_code", DEFAULT_EXIT_CODES.get(effect))
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise ctx.fail(f"{where}.exit_code", "expected an integer (-9 = killed by SIGKILL)")
    probability = item.get("probability", 1.0)
    if (
        isinstance(probability, bool)
        or not isinstance(probability, int | float)
        or not 0.0 < probability <= 1.0
    ):
        raise ctx.fail(f"{where}.probability", "expected a number in (0, 1]: the chance per launch")
    death = item.get("signal", "SIGABRT")
    if death not in DEATH_SIGNALS or ("signal" in item and effect != "signal_death"):
        raise ctx.fail(f"{where}.signal", f"a signal_death fault's signal: one of {', '.join(DEATH_SIGNALS)}")
    per_request = item.get("per_request", 1.0)
    if isinstance(per_request, bool) or not isinstance(per_request, int | float) or not 0.0 < per_request <= 1.0:
        raise ctx.fail(f"{where}.per_request", "expected a number in (0, 1]: the chance per request")
    per_minute = item.get("per_minute", 0.0)
    if isinstance(per_minute, bool) or not isinstance(per_minute, int | float) or per_minute < 0:
        raise ctx.fail(f"{where}.per_minute", "expected events per simulated minute of serving (>= 0)")
    if (per_request < 1.0 or per_minute > 0) and at != "first_decode":
        raise ctx.fail(f"{where}.at", "per_request and per_minute apply to serving faults (at = first_decode / serving)")
    text = item.get("text")
    if text is not None and (effect != "wrong_output" or not isinstance(text, str) or not text):
        raise ctx.fail(f"{where}.text", "only a wrong_output fault has a text (a non-empty string)")
    delay_s = item.get("delay_s", 0.0)
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float) or delay_s < 0:
        raise ctx.fail(f"{where}.delay_s", "expected simulated seconds >= 0")
    default_level = "warning" if effect in ("warning", "wrong_output") else "error"
    default_source = "raw" if effect in ("launch_error", "signal_death") else "scheduler"
    return Fault(
        id=str(item.get("id", where)),
        when=_parse_condition(ctx, keys, item.get("when"), f"{where}.when"),
        unless=_parse_condition(ctx, keys, item["unless"], f"{where}.unless") if "unless" in item else None,
        effect=effect,
        at=at,
        progress=float(progress),
        lines=_parse_lines(
            ctx,
            keys,
            item.get("lines"),
            f"{where}.lines",
            source=str(item.get("source", default_source)),
            level=str(item.get("level", default_level)),
        ),
        exit_code=exit_code,
        output=str(item.get("output", "!")),
        probability=float(probability),
        per_request=float(per_request),
        per_minute=float(per_minute),
        signal=str(death),
        text=text,
        delay_s=float(delay_s),
    )
