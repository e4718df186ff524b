"""Real-engine cases: real SGLang and vLLM serving the bed's tiny model on this host's CPU (issue 22).

A case lives in ``bench/real/<engine>-<name>/``: ``case.toml`` is an ordinary hypoloop case in which
``{engines}`` stands for the real-engine bed (``.ci/real-engines``: its environment and its tiny model,
``{engines}/tiny-llama``); ``truth.toml`` beside it holds a ``[truth]`` table in the lab worlds' format
(lab/README.md) and is read only to score a run, never by the agent; an optional ``before.toml`` says what
already runs on the host when the user launches (``[[hold]]`` tables: a ``port`` and the ``argv`` of the
process that listens there, ``{python}`` for this Python), which `holding` starts before each run of the
case and stops after (a port already taken is a failure users meet). ``materialize`` writes the case
with ``{engines}`` filled in (what a user of that bed would have written), next to nothing else, so
the agent cannot see the truth.

The bed: ``$HYPOLOOP_ENGINES`` or ``~/.cache/hypoloop/engines-v1`` (``bed_root``); ``bed_missing`` says
in one line why it cannot be used.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.domain.case import Case, load_case
from lab.world import Truth, WorldError
from lab.world_tables import FileContext, parse_truth

if TYPE_CHECKING:
    from bench.method_result import MethodResult

REAL_DIR = Path(__file__).resolve().parent / "real"
#: The lab twins of the real cases: ``<name>/case.toml`` is the real case ``<name>`` run by the lab's
#: launcher on the bed written as a lab world (``world.toml`` there; lab/README.md, "Twins of the real cases").
TWINS_DIR = Path(__file__).resolve().parent.parent / "lab" / "worlds-twins"
#: In a real case file, the folder of the real-engine bed.
ENGINES = "{engines}"
BED_FILES = (
    "bin/python",
    ".hypoloop-bed-version",
    "tiny-llama/config.json",
    "tiny-llama/model.safetensors",
    "tiny-llama/healthy.json",
)


def bed_root() -> Path:
    """Where `.ci/real-engines` builds the bed: ``$HYPOLOOP_ENGINES`` or ``~/.cache/hypoloop/engines-v1``."""
    return Path(os.environ.get("HYPOLOOP_ENGINES") or Path.home() / ".cache" / "hypoloop" / "engines-v1")


def bed_missing(root: Path | None = None) -> str | None:
    """One line saying why the bed at ``root`` (default `bed_root()`) cannot be used, or None."""
    root = root or bed_root()
    for rel in BED_FILES:
        if not (root / rel).is_file():
            return f"the real-engine bed at {root} is not built ({rel} missing); build it with .ci/real-engines"
    return None


@dataclass(frozen=True)
class Hold:
    """A process that already listens on ``port`` (TCP, 127.0.0.1) when a case runs; ``argv`` starts it."""

    port: int
    argv: tuple[str, ...]


def load_holds(folder: Path) -> tuple[Hold, ...]:
    """The ``[[hold]]`` tables of ``folder/before.toml`` (none when the file is absent). Raises ValueError
    (one line naming the file and field) for a bad one."""
    path = folder / "before.toml"
    if not path.is_file():
        return ()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    holds = data.get("hold", [])
    if not isinstance(holds, list):
        raise ValueError(f"{path}: hold: expected an array of tables [[hold]]")
    out = []
    for i, h in enumerate(holds):
        port, argv = (h.get("port"), h.get("argv")) if isinstance(h, dict) else (None, None)
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"{path}: hold[{i}].port: expected a TCP port number (1-65535)")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"{path}: hold[{i}].argv: expected a non-empty list of strings")
        out.append(Hold(port, tuple(argv)))
    return tuple(out)


def _listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def holding(holds: tuple[Hold, ...], timeout_s: float = 60.0) -> Iterator[None]:
    """Start each of ``holds`` (``{python}``: this interpreter) and wait, up to ``timeout_s`` seconds each,
    until its port listens; stop them all on exit (SIGTERM, then SIGKILL after 10 s). Raises ValueError
    when a port is taken before its holder starts, or the holder exits or does not listen in time."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for h in holds:
            if _listening(h.port):
                raise ValueError(f"port {h.port} is already in use before the case's holder starts; free it")
            argv = [a.replace("{python}", sys.executable) for a in h.argv]
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            procs.append(proc)
            deadline = time.monotonic() + timeout_s
            while not _listening(h.port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ValueError(f"the holder of port {h.port} ({' '.join(argv)}) did not listen")
                time.sleep(0.1)  # polling the port, not waiting a fixed time
        yield
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class _TruthOnly:
    truth: Truth


@dataclass
class RealCase:
    """One real-engine case, shaped like `bench.worlds.BenchWorld` for scoring (``world.truth``,
    ``case``, ``expect``, ``chain``, ``package``). ``folder`` is its source folder, ``case_path`` the
    materialized case file that runs are given, ``engine`` the folder name's prefix."""

    name: str
    engine: str
    folder: Path
    case_path: Path
    case: Case
    world: _TruthOnly
    flaky: bool = False
    #: What before.toml says already listens on the host when the case runs (`holding`).
    holds: tuple[Hold, ...] = ()

    @property
    def truth(self) -> Truth:
        """The case's truth (read from truth.toml)."""
        return self.world.truth

    @property
    def expect(self) -> str:
        """How a good run ends: isolated, not_isolated or not_reproduced."""
        return self.truth.expect

    @property
    def chain(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        """The links of a chain case, in order; () otherwise."""
        return self.truth.chain

    @property
    def package(self) -> str | None:
        """The package a not_isolated ending must name, if any."""
        return self.truth.package

    @property
    def max_launches(self) -> int:
        """The most launches a good run may take: chain length (1 for a single link) + 3."""
        return max(1, len(self.chain)) + 3


def load_truth(path: Path) -> Truth:
    """The ``[truth]`` table of ``path``. Raises ValueError (one line naming the file) when it is bad."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if "truth" not in data:
        raise ValueError(f"{path}: expected a [truth] table")
    try:
        truth = parse_truth(FileContext(path), data["truth"])
    except WorldError as exc:
        raise ValueError(str(exc)) from None
    assert truth is not None
    return truth


def materialize(folder: Path, out_dir: Path, root: Path | None = None) -> Path:
    """Write ``folder``'s case.toml into ``out_dir`` with ``{engines}`` replaced by the bed's path;
    returns the written file. Only the case is written (never the truth)."""
    root = root or bed_root()
    text = (folder / "case.toml").read_text().replace(ENGINES, str(root))
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "case.toml"
    out.write_text(text)
    return out


def discover(
    engines: list[str] | None = None, names: list[str] | None = None, *, out_dir: Path, root: Path | None = None
) -> list[RealCase]:
    """The real cases under bench/real (sorted), of the given engines (folder prefixes, e.g. sglang,
    vllm; default all) and names (folder names; default all), each materialized under ``out_dir/NAME``.
    Raises ValueError for an unknown name or a bad case/truth file."""
    folders = sorted(p.parent for p in REAL_DIR.glob("*/case.toml") if (p.parent / "truth.toml").is_file())
    known = [f.name for f in folders]
    for name in names or []:
        if name not in known:
            raise ValueError(f"unknown real case {name!r} (known: {', '.join(known) or 'none'})")
    out = []
    for folder in folders:
        engine = folder.name.split("-", 1)[0]
        if engines and engine not in engines:
            continue
        if names and folder.name not in names:
            continue
        path = materialize(folder, out_dir / folder.name, root)
        try:
            case = load_case(str(path))
        except ValueError as exc:
            raise ValueError(str(exc).replace(str(path), str(folder / "case.toml"))) from None
        out.append(
            RealCase(
                name=folder.name,
                engine=engine,
                folder=folder,
                case_path=path,
                case=case,
                world=_TruthOnly(load_truth(folder / "truth.toml")),
                holds=load_holds(folder),
            )
        )
    return out


def twins(names: list[str] | None = None) -> list[RealCase]:
    """The lab twins under `TWINS_DIR` (sorted; the given real-case names, default all), each with its
    real case's truth (``bench/real/<name>/truth.toml``), so a twin's run is scored as the real run is.
    Raises ValueError for a name without a twin, a twin without a real case, or a bad file."""
    known = sorted(p.parent.name for p in TWINS_DIR.glob("*/case.toml"))
    for name in names or []:
        if name not in known:
            raise ValueError(f"no lab twin of real case {name!r} (twins: {', '.join(known) or 'none'})")
    out = []
    for name in names or known:
        truth = REAL_DIR / name / "truth.toml"
        if not truth.is_file():
            raise ValueError(f"{TWINS_DIR / name}: a twin of no real case ({truth} missing)")
        path = TWINS_DIR / name / "case.toml"
        case = load_case(str(path))
        out.append(RealCase(name, "lab", TWINS_DIR / name, path, case, _TruthOnly(load_truth(truth))))
    return out


# ------------------------------------------------------------------------------------------ the bench


def run_real(
    engines: list[str] | None = None,
    names: list[str] | None = None,
    *,
    methods: tuple[str, ...] = ("agent", "random"),
    seeds: int = 1,
    workdir: Path,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``python -m bench --real``: the agent and the random one-change baseline on each real case.

    Every method launches the real engine on this host; the random search may spend as many launches
    as a good agent run may (chain length + 3 per seed). Returns a JSON-plain dict: ``cases`` (per case
    and method: correct, launches, host-seconds, wall seconds, what it found, its ending) and
    ``wall_s``. Raises ValueError for an unknown case name or a bed that is not built (one line).
    """
    from agent.planning.catalog import load_catalog
    from bench.methods import run_agent
    from tools.signatures import load_signatures

    say = progress or (lambda _msg: None)
    missing = bed_missing()
    if missing is not None:
        raise ValueError(missing)
    cases = discover(engines, names, out_dir=workdir / "cases")
    if not cases:
        raise ValueError(f"no real cases under {REAL_DIR} for engines {', '.join(engines or ['any'])}")
    saved = os.environ.get("HYPOLOOP_HOME")
    os.environ["HYPOLOOP_HOME"] = str(workdir / "home")
    t0 = time.monotonic()
    out: list[dict[str, Any]] = []
    try:
        catalog, sigs = load_catalog(), load_signatures()
        for case in cases:
            row: dict[str, Any] = {"case": case.name, "engine": case.engine, "expect": case.expect, "methods": {}}
            if "agent" in methods:
                say(f"{case.name}: agent")
                with holding(case.holds):
                    r = run_agent(case, transcripts=workdir / "transcripts", seed=f"real:{case.name}")  # type: ignore[arg-type]
                row["methods"]["agent"] = r.as_json()
                say(f"{case.name}: agent: {r.status}, {r.found}, {r.launches:g} launches, {r.wall_s:.0f} s")
            if "random" in methods:
                with holding(case.holds):
                    r = _random_on_case(case, (catalog, sigs), workdir, seeds, say)
                row["methods"]["random"] = r.as_json()
                say(f"{case.name}: random: {r.status}, {r.launches:g} launches")
            out.append(row)
    finally:
        if saved is None:
            os.environ.pop("HYPOLOOP_HOME", None)
        else:
            os.environ["HYPOLOOP_HOME"] = saved
    return {"bed": str(bed_root()), "cases": out, "wall_s": round(time.monotonic() - t0, 1)}


def _random_on_case(
    case: RealCase, knowledge: tuple[Any, Any], workdir: Path, seeds: int, say: Callable[[str], None]
) -> MethodResult:
    """The random one-change baseline on one real case (`knowledge`: the hypothesis catalog and the
    signatures), at most the case's launch budget per seed."""
    from bench.launcher import Launcher
    from bench.method_result import LaunchCache
    from bench.random_search import plausible_changes, run_random
    from tools.flags import load_flag_catalog
    from tools.host import expand_argv
    from tools.knowledge import read_findings

    catalog, sigs = knowledge
    launcher = Launcher(case.case, sigs, workdir / "launches" / case.name)
    try:
        flags = load_flag_catalog(
            launcher.host, expand_argv(case.case.launcher.argv, launcher.host),
            cache_dir=workdir / "flag-cache", version=None,
            help_args=case.case.launcher.engine_impl().data.help_args,  # vLLM: --help=all
        )
        findings = [
            f for p in case.case.knowledge for f in read_findings(case.case.resolve_path(p))
            if f.outcome == "works"
        ]
        changes = plausible_changes(case.case.baseline, catalog, flags, findings)
        say(f"{case.name}: random over {len(changes)} plausible changes, at most "
            f"{case.max_launches} launches, {seeds} seed(s)")
        cache = LaunchCache(launcher, enabled=True, seed_env=dict)
        return run_random(case, cache, changes, seeds=seeds, max_launches=case.max_launches)  # type: ignore[arg-type]
    finally:
        launcher.close()
