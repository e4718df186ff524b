"""Case files: what to debug, where, from which baseline, within which budget.

A case is a TOML file (format in README.md, "Case file"). ``lab:WORLD`` names the case shipped with a lab
world; it is located on disk (``lab/worlds/WORLD/case.toml``) without importing the lab.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.models import Baseline, FlagValue
from tools.host import HostError
from tools.probes import DEFAULT_PROBES, Probe
from tools.ssh import parse_target


class _Strict(BaseModel):
    """Case-file sections refuse unknown keys, so a typo (``knowlege``, ``[budjet]``) is an error."""

    model_config = ConfigDict(extra="forbid")


class CaseError(ValueError):
    """A case file that cannot be used; the message is one line naming the file and field."""


class HostSpec(_Strict):
    """Where the server runs: ``local`` or ``ssh://user@host[:port]``; ``env`` is the host environment.

    SSH hosts only: ``ssh_key`` and ``known_hosts`` are paths (relative to the case file),
    ``insecure_accept_host_key`` skips the host-key check, ``remote_python`` is what ``{python}`` means
    there (default ``python3``), ``remote_workdir`` where per-run directories go there,
    ``reconnect_timeout_s`` how long a dropped connection is retried.
    """

    target: str = "local"
    env: dict[str, str] = Field(default_factory=dict)
    ssh_key: str | None = None
    known_hosts: str | None = None
    insecure_accept_host_key: bool = False
    remote_python: str | None = None
    remote_workdir: str = "~/.hypoloop/runs"
    reconnect_timeout_s: float = Field(default=60.0, ge=0)

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        if v != "local" and not v.startswith("ssh://"):
            raise ValueError("expected 'local' or 'ssh://user@host[:port]'")
        if v.startswith("ssh://"):
            try:
                parse_target(v)
            except HostError as exc:
                raise ValueError(str(exc)) from None
        return v


class LauncherSpec(_Strict):
    """Commands on the host: the server launcher, its version query and the GPU query (argv lists)."""

    argv: list[str] = Field(default_factory=lambda: ["python", "-m", "sglang.launch_server"])
    version_argv: list[str] = Field(
        default_factory=lambda: ["python", "-c", "import importlib.metadata as m; print(m.version('sglang'))"]
    )
    gpu_query_argv: list[str] = Field(default_factory=lambda: ["nvidia-smi"])

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("expected a non-empty list of strings")
        return v


class ModelSpec(_Strict):
    """The model under test; ``features`` are optional hints such as moe, dsa, mla, nvfp4, fp8."""

    path: str = Field(min_length=1)
    features: list[str] = Field(default_factory=list)


class BudgetSpec(_Strict):
    """Limits of a run: experiments (launches, confirmation included) and modelled host-seconds."""

    experiments: int = Field(default=8, ge=1)
    host_seconds: float = Field(default=4 * 3600, gt=0)
    ready_timeout_s: float = Field(default=3600, gt=0)
    stall_timeout_s: float | None = Field(default=None, gt=0)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Case(_Strict):
    """A debugging case (docs/ARCHITECTURE.md, "Data contracts")."""

    name: str
    description: str = ""
    host: HostSpec = Field(default_factory=HostSpec)
    launcher: LauncherSpec = Field(default_factory=LauncherSpec)
    model: ModelSpec
    baseline: Baseline = Field(default_factory=Baseline)
    probes: list[Probe] = Field(default_factory=lambda: list(DEFAULT_PROBES))
    knowledge: list[str] = Field(default_factory=list)
    observed_log: str | None = None
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    approval: Literal["each", "risky", "auto"] = "each"
    source_path: str | None = None

    @model_validator(mode="after")
    def _env_names(self) -> Case:
        # An environment name is a shell word (NAME=value before the command); anything else would
        # break the launch over SSH and the FINDINGS entry's command line.
        for where, env in (("host.env", self.host.env), ("baseline.env", self.baseline.env)):
            for name in env:
                if not _ENV_NAME.match(name):
                    raise ValueError(f"{where}: {name!r} is not a variable name (expected e.g. NCCL_P2P_DISABLE)")
        return self

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline(cls, v: Any) -> Any:
        if isinstance(v, dict) and isinstance(v.get("flags"), dict):
            flags: dict[str, FlagValue] = {}
            for name, value in v["flags"].items():
                key = name if name.startswith("-") else f"--{name}"
                if isinstance(value, bool):
                    flags[key] = True if value else None
                elif isinstance(value, int | float | str):
                    flags[key] = str(value)
                else:
                    hint = (
                        "; a JSON value is written as a TOML string, e.g. "
                        f"\"{key}\" = '{{\"key\": \"value\"}}'"
                        if isinstance(value, dict | list)
                        else ""
                    )
                    raise ValueError(
                        f"flag {key}: expected a string, number or true, got {type(value).__name__}{hint}"
                    )
            v = {**v, "flags": {k: f for k, f in flags.items() if f is not None}}
        return v

    def paths_outside_folder(self) -> list[tuple[str, str, Path]]:
        """``(field, as written, resolved path)`` of each knowledge file and the observed log that lies
        outside the case file's folder (symbolic links followed). Empty without a case file."""
        if not self.source_path:
            return []
        folder = Path(self.source_path).resolve().parent
        named = [(f"knowledge.{i}", k) for i, k in enumerate(self.knowledge)]
        if self.observed_log:
            named.append(("observed_log", self.observed_log))
        out = []
        for field, raw in named:
            resolved = self.resolve_path(raw).resolve()
            if not resolved.is_relative_to(folder):
                out.append((field, raw, resolved))
        return out

    def resolve_path(self, p: str) -> Path:
        """A path from the case file, relative to the case file's folder."""
        base = Path(self.source_path).parent if self.source_path else Path.cwd()
        path = Path(p).expanduser()
        return path if path.is_absolute() else base / path


def lab_worlds_dir() -> Path | None:
    """The folder of lab worlds, found on disk without importing the lab package (``None`` if absent)."""
    spec = importlib.util.find_spec("lab")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "worlds"


def resolve_case_path(ref: str) -> Path:
    """Turn ``lab:WORLD`` or a path into a case-file path; raises CaseError if there is none."""
    if ref.startswith("lab:"):
        world = ref[4:]
        worlds = lab_worlds_dir()
        if worlds is None:
            raise CaseError(f"{ref}: the lab is not installed (pip install -e . from the repository)")
        path = worlds / world / "case.toml"
        if not path.is_file():
            known = sorted(p.parent.name for p in worlds.glob("*/case.toml"))
            raise CaseError(f"{ref}: no such lab world; known worlds: {', '.join(known) or 'none'}")
        return path
    path = Path(ref).expanduser()
    if not path.is_file():
        raise CaseError(f"{ref}: case file not found")
    return path


def load_case(ref: str, *, host_target: str | None = None) -> Case:
    """Load and validate a case file (``lab:WORLD`` or a TOML path); ``host_target`` (the command line's
    ``--host``) replaces the file's ``host.target`` before validation.

    Raises CaseError with one line: the file, and the TOML line or the field and what was expected.
    """
    path = resolve_case_path(ref)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"{path}: TOML error: {exc}") from None
    except OSError as exc:
        raise CaseError(f"{path}: cannot read: {exc.strerror}") from None
    data["source_path"] = str(path)
    if host_target is not None:
        if isinstance(data.get("host"), dict):
            data["host"]["target"] = host_target
        else:
            data["host"] = {"target": host_target}
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        where = f"field '{field}': " if err["loc"] else ""  # a check across fields names them itself
        raise CaseError(f"{path}: {where}{msg}{more}") from None
    for i, k in enumerate(case.knowledge):
        if not case.resolve_path(k).is_file():
            raise CaseError(f"{path}: field 'knowledge.{i}': {k}: file not found")
    if case.observed_log and not case.resolve_path(case.observed_log).is_file():
        raise CaseError(f"{path}: field 'observed_log': {case.observed_log}: file not found")
    for field, raw, resolved in case.paths_outside_folder():
        # Named explicitly = written as an absolute or ~ path: then it is meant, and only warned about.
        # A relative path that climbs out (../) or a link inside the folder that points out is refused:
        # a case file copied from elsewhere must not read files its author did not name.
        if not explicit_path(raw):
            raise CaseError(
                f"{path}: field '{field}': {raw} resolves to {resolved}, outside the case's folder; write it "
                "as an absolute path (or ~/...) to use a file from elsewhere"
            )
    return case


def explicit_path(raw: str) -> bool:
    """Whether a path in a case file names its location explicitly (absolute, or from ``~``)."""
    return raw.startswith(("/", "~"))


def outside_warnings(case: Case) -> list[str]:
    """One line per explicitly named file outside the case's folder (they are used, and said so)."""
    return [
        f"{case.source_path}: {field} = {raw} is outside the case's folder ({resolved}); using it as named"
        for field, raw, resolved in case.paths_outside_folder()
    ]
