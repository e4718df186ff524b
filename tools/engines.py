"""Inference engines: the one place that knows how SGLang and vLLM differ.

An `Engine` says how its server is launched (which launcher runs it, how the model is named on the
command line), how its version and its full flag list are read, how a generate probe reaches it, where
its effective configuration is served and which environment variables are its own. The facts are data
in ``knowledge/engines.toml`` (each with its source); the two classes here add what is code: where the
model goes in the argv and how a ``check_env`` command is derived.

Which engine a case uses: ``[launcher] engine = "vllm"`` in the case, else `detect` from the launcher
(``python -m sglang.launch_server``, ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``),
else SGLang (the engine hypoloop started with).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.knowledge_files import KnowledgeFile, field_error, read_toml

__all__ = [
    "ENGINE_NAMES",
    "Engine",
    "EngineData",
    "EngineError",
    "SGLang",
    "VLLM",
    "detect",
    "deployment_flags",
    "detect_log",
    "engines_data",
    "model_flags",
    "port_flags",
    "get_engine",
]

ENGINE_NAMES = ("sglang", "vllm")
DEFAULT_ENGINE = "sglang"


class EngineError(ValueError):
    """An unknown engine name, or an unreadable ``engines.toml`` (one line naming it)."""


class EngineData(BaseModel):
    """One table of ``knowledge/engines.toml`` (its header comment explains each field)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    display: str
    modules: list[str] = Field(default_factory=list)
    programs: list[str] = Field(default_factory=list)
    default_argv: list[str]
    distributions: list[str]
    help_args: list[str] = Field(default_factory=lambda: ["--help"])
    model_flag: str
    fallback_model_flag: str
    host_flag: str = Field(min_length=1)
    port_flag: str = Field(min_length=1)
    generate_api: Literal["native", "completions"]
    server_info: list[str] = Field(default_factory=list)
    endpoints: list[str] = Field(default_factory=list)
    env_prefix: str
    envs_file: str
    check_env_module: str = ""
    settings_marker: str = ""
    dump_markers: list[str] = Field(default_factory=list)
    log_markers: list[str] = Field(default_factory=list)
    source: str


@runtime_checkable
class Engine(Protocol):
    """What the rest of hypoloop asks of an engine."""

    data: EngineData

    @property
    def name(self) -> str: ...

    @property
    def display(self) -> str: ...

    def version_argv(self, launcher_argv: Sequence[str] = ()) -> list[str]: ...

    def help_argv(self, launcher_argv: Sequence[str]) -> list[str]: ...

    def model_args(self, launcher_argv: Sequence[str], model: str) -> list[str]: ...

    def model_of(self, argv: Sequence[str], launcher_len: int) -> str | None: ...

    def check_env_argv(self, launcher_argv: Sequence[str]) -> list[str]: ...

    def session_flags(self) -> frozenset[str]: ...

    def owns_env(self, name: str) -> bool: ...


class _Base:
    """What both engines share; the data decides the rest."""

    def __init__(self, data: EngineData) -> None:
        self.data = data

    @property
    def name(self) -> str:
        """The engine's case-file name (``sglang``, ``vllm``)."""
        return self.data.name

    @property
    def display(self) -> str:
        """The engine's name in reports (``SGLang``, ``vLLM``)."""
        return self.data.display

    def __repr__(self) -> str:
        return f"<engine {self.name}>"

    def version_argv(self, launcher_argv: Sequence[str] = ()) -> list[str]:
        """A command printing the installed version (the first of `distributions` that is installed)
        on its last line; exits 1 with a message when none is. It runs the launcher's own interpreter
        (`launcher_python`), so the version is that of the environment the server runs in."""
        names = tuple(self.data.distributions)
        code = (
            "import importlib.metadata as m, sys\n"
            f"for d in {names!r}:\n"
            "    try:\n"
            "        print(m.version(d))\n"
            "        break\n"
            "    except m.PackageNotFoundError:\n"
            "        pass\n"
            "else:\n"
            f"    sys.exit('none of {', '.join(names)} is installed')\n"
        )
        return [launcher_python(launcher_argv), "-c", code]

    def help_argv(self, launcher_argv: Sequence[str]) -> list[str]:
        """The launcher asked for every flag it accepts (`help_args` appended)."""
        return [*launcher_argv, *self.data.help_args]

    def _program_launcher(self, launcher_argv: Sequence[str]) -> bool:
        """Whether the launcher ends in a program's subcommand (``vllm serve``, ``-m X.cli.main serve``)."""
        subs = {spec.partition(" ")[2] for spec in self.data.programs} - {""}
        return bool(launcher_argv) and str(launcher_argv[-1]) in subs

    def model_args(self, launcher_argv: Sequence[str], model: str) -> list[str]:
        """The argv items naming the model, placed right after the launcher."""
        if not self.data.model_flag and self._program_launcher(launcher_argv):
            return [model]
        return [self.data.model_flag or self.data.fallback_model_flag, model]

    def model_of(self, argv: Sequence[str], launcher_len: int) -> str | None:
        """The model a launch argv names (`launcher_len` items of launcher first), or None."""
        rest = list(argv[launcher_len:])
        for flag in {self.data.model_flag, self.data.fallback_model_flag} - {""}:
            if flag in rest[:-1]:
                return rest[rest.index(flag) + 1]
        if not self.data.model_flag and rest and not rest[0].startswith("-"):
            return rest[0]
        return None

    def check_env_argv(self, launcher_argv: Sequence[str]) -> list[str]:
        """``python -m PKG.check_env`` beside a ``python -m PKG.launch_server``-style launcher (any package:
        the lab's stand-in has one too), or [] when the engine has no such command."""
        if not self.data.check_env_module:
            return []
        ends = {m.rsplit(".", 1)[-1] for m in self.data.modules}
        for i, arg in enumerate(launcher_argv[:-1]):
            if arg == "-m" and str(launcher_argv[i + 1]).rsplit(".", 1)[-1] in ends:
                pkg = launcher_argv[i + 1].rsplit(".", 1)[0]
                return [*launcher_argv[: i + 1], f"{pkg}.{self.data.check_env_module}"]
        return []

    def session_flags(self) -> frozenset[str]:
        """The flags a launch sets itself: the model's (both spellings), where the server listens."""
        d = self.data
        return frozenset({d.model_flag, d.fallback_model_flag, d.host_flag, d.port_flag} - {""})

    def owns_env(self, name: str) -> bool:
        """Whether an environment variable is one of the engine's own (its prefix)."""
        return name.startswith(self.data.env_prefix)

    def envs_path(self, site_root: str) -> str:
        """The engine's environment declarations under a site-packages folder (posix path)."""
        return posixpath.join(site_root, self.data.envs_file)


class SGLang(_Base):
    """SGLang: ``python -m sglang.launch_server --model-path M``; POST /generate; ``srt/environ.py``."""


class VLLM(_Base):
    """vLLM: ``vllm serve M`` (positional) or ``python -m vllm.entrypoints.openai.api_server --model M``;
    no /generate (POST /v1/completions instead); ``vllm/envs.py``; `--help=all` lists every flag."""


_CLASSES: dict[str, type[_Base]] = {"sglang": SGLang, "vllm": VLLM}


def launcher_python(launcher_argv: Sequence[str]) -> str:
    """The interpreter of a launcher's environment: its first word when that is a Python
    (``{python}``, ``/venv/bin/python3``), the ``python`` beside a program given by path
    (``/venv/bin/vllm`` -> ``/venv/bin/python``), else ``python`` from the PATH."""
    if not launcher_argv:
        return "python"
    first = str(launcher_argv[0])
    base = posixpath.basename(first)
    if first == "{python}" or base.startswith("python"):
        return first
    if "/" in first:
        return posixpath.join(posixpath.dirname(first), "python")
    return "python"


def _program_match(argv: Sequence[str], programs: Sequence[str]) -> bool:
    words = [str(a) for a in argv]
    for spec in programs:
        prog, _, sub = spec.partition(" ")
        for i, w in enumerate(words):
            if posixpath.basename(w) == prog and (not sub or (i + 1 < len(words) and words[i + 1] == sub)):
                return True
    return False


def _load(path: Path) -> dict[str, EngineData]:
    """``engines.toml`` at ``path``, one `EngineData` a table; EngineError (one line) for a file that
    cannot be used."""
    out: dict[str, EngineData] = {}
    for name, table in read_toml(path, EngineError).items():
        if name not in _CLASSES:
            raise EngineError(f"{path}: [{name}]: unknown engine (known: {', '.join(ENGINE_NAMES)})")
        if not isinstance(table, dict):
            raise EngineError(f"{path}: {name}: expected a table [{name}]")
        try:
            out[name] = EngineData.model_validate({"name": name, **table})
        except ValidationError as exc:
            where, msg = field_error(exc)
            raise EngineError(f"{path}: [{name}] {where}: {msg}") from None
    return out


#: ``engines.toml`` of the knowledge folder in force (``tools.knowledge_files``).
_ENGINES: KnowledgeFile[dict[str, EngineData]] = KnowledgeFile("engines.toml", _load)


def engines_data() -> dict[str, EngineData]:
    """Every engine's table of ``engines.toml`` in the knowledge folder in force (else the repository's),
    read once per file version. Raises EngineError (one line naming the file and the field)."""
    return _ENGINES()


def get_engine(name: str | None = None) -> Engine:
    """The engine called `name` (None: SGLang). Raises EngineError for a name it does not know."""
    name = name or DEFAULT_ENGINE
    data = engines_data()
    if name not in data:
        raise EngineError(f"unknown engine {name!r} (expected one of: {', '.join(sorted(data))})")
    return _CLASSES[name](data[name])


def model_flags() -> frozenset[str]:
    """Every engine's spellings of the model flag (``--model-path``, ``--model``; ``engines.toml``)."""
    return frozenset({f for d in engines_data().values() for f in (d.model_flag, d.fallback_model_flag) if f})


def port_flags() -> frozenset[str]:
    """Every engine's flag for the port the server listens on (``--port``; ``engines.toml``)."""
    return frozenset({d.port_flag for d in engines_data().values() if d.port_flag})


def deployment_flags() -> frozenset[str]:
    """Every engine's flags that say what the server loads and where it listens, not how it runs
    (``--model-path``, ``--model``, ``--host``, ``--port``; ``engines.toml``)."""
    return model_flags() | {f for d in engines_data().values() for f in (d.host_flag, d.port_flag)}


def detect(argv: Sequence[str]) -> str | None:
    """The engine a launcher runs: its ``-m MODULE`` or ``PROGRAM SUBCOMMAND``, or None when it names
    none of them (a wrapper script, the lab's stand-in)."""
    words = [str(a) for a in argv]
    for name, data in engines_data().items():
        for i, w in enumerate(words[:-1]):
            if w == "-m" and words[i + 1] in data.modules:
                return name
        if _program_match(words, data.programs):
            return name
    return None


def detect_log(text: str) -> str | None:
    """The engine whose log `text` is: the engine with the most `log_markers` in it, or None when it
    carries none (a bare Python traceback, a log cut before the engine spoke)."""
    best, best_n = None, 0
    for name, data in engines_data().items():
        n = sum(text.count(marker) for marker in data.log_markers)
        if n > best_n:
            best, best_n = name, n
    return best


def settings_markers() -> tuple[str, ...]:
    """What precedes each engine's printed settings line (``server_args=``, ``non-default args: ``)."""
    return tuple(d.settings_marker for d in engines_data().values() if d.settings_marker)


def settings_marker_in(text: str) -> str | None:
    """The settings marker `text` carries (`settings_markers`), or None."""
    return next((m for m in settings_markers() if m in text), None)


def is_settings_dump(text: str) -> bool:
    """Whether a log line prints an engine's configuration (its settings line or another dump): its
    values (``'warn'``, ``auto``) are settings, not warnings."""
    if settings_marker_in(text):
        return True
    return any(m in text for d in engines_data().values() for m in d.dump_markers)
