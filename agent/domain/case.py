"""Case files: what to debug, where, from which baseline, within which budget.

A case is a TOML file (format in README.md, "Case file"). ``lab:WORLD`` names the case shipped with a lab
world; it is located on disk (``lab/worlds/WORLD/case.toml``) without importing the lab.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agent.domain.models import Baseline, FlagValue
from tools.engines import Engine, get_engine, launcher_python, model_flags, port_flags
from tools.engines import detect as detect_engine
from tools.flags.values import is_number
from tools.host import HostError
from tools.installed import import_names_argv
from tools.knowledge_files import item_path
from tools.load_shapes import LoadShape
from tools.log_records import looks_like_log
from tools.logtext import NotText, decode_log
from tools.probes import DEFAULT_PROBES, Probe
from tools.slurm import SlurmOptions, is_slurm_target, parse_slurm_target
from tools.ssh import parse_target


def _no_bool_for_number(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """``value`` unchanged, unless it is ``true``/``false`` or a string for a number field: pydantic would
    take ``true`` as 1 (``concurrency = true`` ran with one request) and ``"8"`` as 8, so a number in
    quotes passed unseen; each is the error a wrong type is (TOML integers and floats pass)."""
    field = model.model_fields.get(info.field_name or "")
    if not isinstance(value, bool | str) or field is None:
        return value
    kinds = {field.annotation, *typing.get_args(field.annotation)}
    if bool in kinds or str in kinds or not kinds & {int, float}:
        return value
    kind = "int_type" if int in kinds else "float_type"
    raise PydanticCustomError(kind, "expected a number, got {value}", {"value": value})


class _Strict(BaseModel):
    """Case-file sections refuse unknown keys, so a typo (``knowlege``, ``[budjet]``) is an error, and
    ``true``/``false`` where a number belongs."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # inf or nan: a one-line error

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        return _no_bool_for_number(cls, value, info)


class CaseError(ValueError):
    """A case file that cannot be used; the message is one line naming the file and field."""


class HostSpec(_Strict):
    """Where the server runs: ``local``, ``ssh://[USER@]HOST[:PORT]``, ``slurm://PARTITION`` or
    ``slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION``; ``env`` is the host environment; ``slurm`` the
    resources each experiment's job asks for (`tools.slurm.SlurmOptions`).

    SSH hosts only: ``ssh_key`` and ``known_hosts`` are paths (relative to the case file),
    ``insecure_accept_host_key`` skips the host-key check, ``remote_python`` is what ``{python}`` means
    there (default ``python3``), ``remote_workdir`` where per-run directories go there,
    ``reconnect_timeout_s`` how long a dropped connection is retried.
    """

    target: str = "local"
    env: dict[str, str] = Field(default_factory=dict)
    #: What each experiment's job asks a Slurm cluster for (``slurm://`` and ``slurm+ssh://`` targets).
    slurm: SlurmOptions | None = None
    ssh_key: str | None = None
    known_hosts: str | None = None
    insecure_accept_host_key: bool = False
    remote_python: str | None = None
    remote_workdir: str = "~/.hypoloop/runs"
    reconnect_timeout_s: float = Field(default=60.0, ge=0)

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        if v != "local" and not v.startswith("ssh://") and not is_slurm_target(v):
            raise ValueError(
                "expected 'local', 'ssh://[USER@]HOST[:PORT]', 'slurm://PARTITION' or "
                "'slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION'" + ("" if "@" in v or ":" in v else f", got {v!r}")
            )
        try:
            if v.startswith("ssh://"):
                parse_target(v)
            elif is_slurm_target(v):
                parse_slurm_target(v)
        except HostError as exc:
            raise ValueError(str(exc)) from None
        return v


class LauncherSpec(_Strict):
    """Commands on the host: the server launcher, its version query and the GPU query (argv lists).

    ``engine`` is ``sglang`` or ``vllm`` (`tools.engines`); unset, it is detected from ``argv``
    (``sglang.launch_server``, ``vllm serve``, ``vllm.entrypoints.openai.api_server``), else SGLang.
    ``argv`` and ``version_argv`` default to the engine's (``knowledge/engines.toml``).
    """

    engine: Literal["sglang", "vllm"] | None = None
    argv: list[str] = Field(default_factory=list)
    version_argv: list[str] = Field(default_factory=list)
    gpu_query_argv: list[str] = Field(default_factory=lambda: ["nvidia-smi"])
    #: What prints the host's logical CPU count (POSIX ``getconf _NPROCESSORS_ONLN``; the CPU lists a rank
    #: binding is split into are sized by it). Its failure leaves the count unknown, never an error.
    cpu_query_argv: list[str] = Field(default_factory=lambda: ["getconf", "_NPROCESSORS_ONLN"])
    #: `python -m sglang.check_env` on the host (evidence; its failure is only a note). None: derived
    #: from `argv` by the engine (a `<package>.launch_server` module); [] turns it off.
    check_env_argv: list[str] | None = None
    #: What asks the host's Python which distribution provides each import name (evidence for naming a
    #: package; its failure is only a note). None: the launcher's interpreter runs
    #: ``tools.installed.IMPORT_NAMES_CODE``; [] turns it off.
    import_names_argv: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        v = dict(v)
        argv = v.get("argv")
        if argv is not None and not argv:
            raise ValueError("field 'launcher.argv': expected a non-empty list of strings")
        if v.get("engine") is None:
            v["engine"] = (detect_engine(argv) if isinstance(argv, list) else None) or get_engine().name
        if v["engine"] in ("sglang", "vllm"):
            eng = get_engine(v["engine"])
            if not v.get("argv"):
                v["argv"] = list(eng.data.default_argv)
            if not v.get("version_argv"):
                v["version_argv"] = eng.version_argv(v["argv"])
        return v

    def engine_impl(self) -> Engine:
        """The `tools.engines.Engine` this launcher runs."""
        return get_engine(self.engine)

    def check_env(self) -> list[str]:
        """The check_env command for this launcher (`-m X.launch_server` -> `-m X.check_env`), or []."""
        if self.check_env_argv is not None:
            return list(self.check_env_argv)
        return self.engine_impl().check_env_argv(self.argv)

    def import_names(self) -> list[str]:
        """The command that maps import names to distributions on the host (``import_names_argv``, else
        ``tools.installed.import_names_argv`` run by the launcher's interpreter), or [] when turned off."""
        if self.import_names_argv is not None:
            return list(self.import_names_argv)
        return import_names_argv(launcher_python(self.argv))

class ModelSpec(_Strict):
    """The model under test; ``features`` are optional hints such as moe, dsa, mla, nvfp4, fp8."""

    path: str = Field(min_length=1)
    features: list[str] = Field(default_factory=list)


class BudgetSpec(_Strict):
    """Limits of a run: experiments (launches, confirmation included; at most 10,000, a bound a run never
    nears and the checkpoint store can hold) and modelled host-seconds."""

    experiments: int = Field(default=8, ge=1, le=10_000)
    host_seconds: float = Field(default=4 * 3600, gt=0)
    ready_timeout_s: float = Field(default=3600, gt=0)
    stall_timeout_s: float | None = Field(default=None, gt=0)


class ReproduceSpec(LoadShape):
    """How the reported failure is reproduced: ``concurrency`` = how many requests at once show it (1: one
    at a time; above 1 the baseline's first launch sends that burst besides the single probes, for
    failures that appear only under concurrent load); ``intermittent`` = it does not show on every
    launch (a fix then needs two passing confirmations); ``accuracy`` = the share of hypoloop's probe set
    (``knowledge/probe_set.toml``) the deployment known to be good answers right: each ready launch then
    answers the set, and an accuracy below it with 95% confidence is wrong output
    (``agent.domain.accuracy``); below 1, since with 1 a single wrong answer would be a drop. The rest
    says what the reporter's traffic looked like (``tools.load_shapes.LoadShape``): ``prompt_tokens``,
    ``output_tokens`` (with ``output_tokens_min``: lengths spread over the concurrent requests),
    ``shared_prefix_tokens``, ``features`` (``tools``, ``json_schema``, ``regex``, ``image``,
    ``logprobs``) and ``duration_s`` of traffic; every launch (reproduction, test, confirmation) then
    sends that load."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    concurrency: int = Field(default=1, ge=1, le=256)
    intermittent: bool = False
    accuracy: float | None = Field(default=None, gt=0.0, lt=1.0)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        return _no_bool_for_number(cls, value, info)

    def load(self) -> LoadShape | None:
        """The traffic shape the case reports, or None when it reports none beyond concurrency."""
        shape = LoadShape.model_validate(self.model_dump(exclude={"concurrency", "intermittent", "accuracy"}))
        return shape if shape.shaped() else None


class IntentSpec(_Strict):
    """What the user needs kept: ``keep`` lists settings (``--context-length``, ``--kv-cache-dtype``, an
    environment variable) that a fix must not change; a change to one is at most a workaround that
    changes the deployment."""

    keep: list[str] = Field(default_factory=list)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: In ``host.env`` values, the folder of the case file (so a case can name files beside it).
CASE_DIR = "{case_dir}"


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
    reproduce: ReproduceSpec = Field(default_factory=ReproduceSpec)
    intent: IntentSpec = Field(default_factory=IntentSpec)
    approval: Literal["each", "risky", "auto"] = "each"
    source_path: str | None = None
    #: The baseline flags the case file wrote as a TOML list (``"--cuda-graph-bs" = [1, 2, 4]``), set by
    #: ``load_case`` like ``source_path``: the host's catalog takes a list only for a flag that takes
    #: several values (``agent.run.nodes.intake``).
    list_flags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _case_dir(self) -> Case:
        # "{case_dir}/world.toml" names a file beside the case file, wherever the case is run from.
        base = str(Path(self.source_path).resolve().parent) if self.source_path else str(Path.cwd())
        self.host.env = {k: v.replace(CASE_DIR, base) for k, v in self.host.env.items()}
        return self

    @model_validator(mode="after")
    def _env_names(self) -> Case:
        # An environment name is a shell word (NAME=value before the command); anything else would
        # break the launch over SSH and the FINDINGS entry's command line.
        for where, env in (("host.env", self.host.env), ("baseline.env", self.baseline.env)):
            for name in env:
                if not _ENV_NAME.match(name):
                    raise ValueError(f"{where}: {name!r} is not a variable name (expected e.g. NCCL_P2P_DISABLE)")
        return self

    @model_validator(mode="after")
    def _deployment_flags(self) -> Case:
        # hypoloop passes the model and where the server listens itself: a model flag naming another model
        # would be dropped at launch yet pasted into the working command; a port no socket can take is no port
        for name in sorted(model_flags() & set(self.baseline.flags)):
            value = self.baseline.flags[name]
            if value is not None and str(value) != self.model.path:
                raise ValueError(f"baseline.flags: {name} {value!r} is not model.path {self.model.path!r}; the model "
                                 f"served is model.path: remove {name} or give the same model")
        for name in sorted(port_flags() & set(self.baseline.flags)):
            value = self.baseline.flags[name]
            if value is not None and not (str(value).isdigit() and 1 <= int(str(value)) <= 65535):
                raise ValueError(f"baseline.flags: {name} {value!r} is not a TCP port (expected 1-65535)")
        return self

    @model_validator(mode="after")
    def _probe_ids(self) -> Case:
        # An outcome names each probe by its id ("probes: p=ok, p=wrong_answer" could not be told apart).
        seen: dict[str, int] = {}
        for i, probe in enumerate(self.probes, 1):
            if probe.id in seen:
                raise ValueError(f"probes #{i}.id: {probe.id!r} is already the id of probes #{seen[probe.id]}; "
                                 "expected an id of its own")
            seen[probe.id] = i
        return self

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline(cls, v: Any) -> Any:
        if isinstance(v, dict) and isinstance(v.get("flags"), dict):
            flags: dict[str, FlagValue] = {}
            written: dict[str, str] = {}
            for name, value in v["flags"].items():
                key = name if name.startswith("-") else f"--{name}"
                if key in written:  # "tp-size" and "--tp-size": one flag twice, one value would be lost
                    raise ValueError(f"baseline.flags: {written[key]} and {name} are one flag ({key}); give it once")
                written[key] = name
                if isinstance(value, bool):
                    flags[key] = True if value else None
                elif isinstance(value, int | float | str):
                    flags[key] = str(value)
                elif (
                    isinstance(value, list)
                    and value
                    and all(isinstance(x, int | float | str) and not isinstance(x, bool) for x in value)
                ):
                    # a list-valued flag (nargs '+': "--cuda-graph-bs" = [1, 2, 4, 8]): its words, space-separated
                    flags[key] = " ".join(str(x) for x in value)
                else:
                    hint = (
                        "; a JSON value is written as a TOML string, e.g. "
                        f"\"{key}\" = '{{\"key\": \"value\"}}'"
                        if isinstance(value, dict)
                        else ""
                    )
                    raise ValueError(
                        f"flag {key}: expected a string, number, true or a non-empty list of numbers/strings "
                        f"(a list-valued flag), got {type(value).__name__}{hint}"
                    )
            v = {**v, "flags": {k: f for k, f in flags.items() if f is not None}}
        return v

    def paths_outside_folder(self) -> list[tuple[str, str, Path]]:
        """``(field, as written, resolved path)`` of each knowledge file and the observed log that lies
        outside the case file's folder (symbolic links followed). Empty without a case file."""
        if not self.source_path:
            return []
        folder = Path(self.source_path).resolve().parent
        named = [(item_path(["knowledge", i]), k) for i, k in enumerate(self.knowledge)]
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
    """Turn ``lab:WORLD``, a case file's path or the folder holding its ``case.toml`` into a case-file
    path; raises CaseError if there is none."""
    if ref.startswith("lab:"):
        world = ref[4:]
        worlds = lab_worlds_dir()
        if worlds is None:
            raise CaseError(f"{ref}: the lab is not installed (pip install -e . from the repository)")
        path = worlds / world / "case.toml"
        if not path.is_file():
            known = sorted(p.parent.name for p in worlds.glob("*/case.toml"))
            near = difflib.get_close_matches(world, known, n=1)
            hint = f"did you mean lab:{near[0]}? " if near else ""
            raise CaseError(f"{ref}: no such lab world; {hint}`hypoloop lab list` lists the {len(known)} known worlds")
        return path
    if not ref.strip():
        raise CaseError("the case is empty: expected a case file, a case's folder or lab:WORLD")
    path = Path(ref).expanduser()
    if path.is_dir():  # a case's folder stands for the case.toml in it
        if (path / "case.toml").is_file():
            return path / "case.toml"
        raise CaseError(f"{ref}: is a directory with no case.toml in it (expected a case file)")
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
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a BOM (Windows editors) is no TOML error
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"{path}: TOML error: {exc}") from None
    except UnicodeDecodeError:
        raise CaseError(f"{path}: not a text file (expected a TOML case file in UTF-8)") from None
    except OSError as exc:
        raise CaseError(f"{path}: cannot read: {exc.strerror}") from None
    if not data:
        raise CaseError(f"{path}: the case file is empty (expected at least name, [model] path and [baseline])")
    data["source_path"] = str(path)
    data["list_flags"] = _list_flags(data.get("baseline"))
    if host_target is not None:
        if isinstance(data.get("host"), dict):
            data["host"]["target"] = host_target
        else:
            data["host"] = {"target": host_target}
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        raise CaseError(f"{path}: {case_error_text(exc)}") from None
    for i, k in enumerate(case.knowledge):
        where = case.resolve_path(k)
        if not where.is_file():
            why = "a folder, not a file" if where.is_dir() else "file not found"
            raise CaseError(f"{path}: field '{item_path(['knowledge', i])}': {k}: {why}")
    if case.observed_log:
        _check_observed_log(path, case.observed_log, case.resolve_path(case.observed_log))
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


def _list_flags(baseline: Any) -> list[str]:
    """The flags a case file's ``[baseline]`` table gives as TOML lists, spelled as ``Case`` keys them."""
    flags = baseline.get("flags") if isinstance(baseline, dict) else None
    if not isinstance(flags, dict):
        return []
    return [n if n.startswith("-") else f"--{n}" for n, v in flags.items() if isinstance(v, list)]


def explicit_path(raw: str) -> bool:
    """Whether a path in a case file names its location explicitly (absolute, or from ``~``)."""
    return raw.startswith(("/", "~"))


def outside_warnings(case: Case) -> list[str]:
    """One line per explicitly named file outside the case's folder (they are used, and said so)."""
    folder = Path(case.source_path).resolve().parent if case.source_path else None
    return [
        f"{case.source_path}: {field} = {raw}"
        + ("" if str(resolved) == raw else f" (that is {resolved})")
        + f" is outside the case's folder ({folder}); using it as named"
        for field, raw, resolved in case.paths_outside_folder()
    ]


def server_api_key(flags: Mapping[str, Any]) -> str | None:
    """The `--api-key` a launch passes to the server (so probes can authenticate), or None.

    SGLang then requires `Authorization: Bearer <key>` on every endpoint but /health (0.5.9 and 0.5.23
    entrypoints/http_server.py, the API-key middleware). The key is sent by the probes only; everything
    hypoloop writes goes through `agent.record.redact.scrub`, which removes it.
    """
    for name, value in flags.items():
        if name.lstrip("-").replace("_", "-") == "api-key" and isinstance(value, str) and value:
            return value
    return None
# ------------------------------------------------------------------------ errors in the case's words

#: What a pydantic error type means for a value written in a case file (TOML words, not Python's).
_EXPECTED = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string in quotes",
    "dict_type": "a table (a [section] or { key = value })",
    "model_type": "a table (a [section] or { key = value })",
    "model_attributes_type": "a table (a [section] or { key = value })",
    "list_type": "a list, e.g. [\"a\", \"b\"]",
}


def _section_model(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The case-file model that holds the key at ``loc`` (``Case`` for a top-level key), or None."""
    model: type[BaseModel] = Case
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        ann: Any = field.annotation
        found = None
        for cand in (ann, *typing.get_args(ann)):
            for inner in (cand, *typing.get_args(cand)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    found = inner
        if found is None:
            return None
        model = found
    return model


def _where(loc: tuple[Any, ...]) -> str:
    """``[budget]`` / ``[[probes]] #2`` / ``the top level`` for the table holding the key at ``loc``."""
    parts = list(loc[:-1])
    if not parts:
        return "the top level"
    if len(parts) == 2 and isinstance(parts[1], int):  # an array of tables
        return f"[[{parts[0]}]] #{parts[1] + 1}"
    return "[" + ".".join(str(p) for p in parts) + "]"


def case_error_text(exc: ValidationError) -> str:
    """One line in the case file's own words for the first problem pydantic found: an unknown key with
    the nearest known key ("did you mean"), a missing required key, or the value's expected kind with
    what was written. Adds "(and N more)" when there are more problems."""
    errs = exc.errors()
    # A typo'd key also makes the key it was meant to be "missing": report the typo, which explains both.
    errs = sorted(errs, key=lambda e: e["type"] != "extra_forbidden")
    err = errs[0]
    loc = tuple(err["loc"])
    field = item_path(loc)
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    kind = err["type"]
    if kind == "extra_forbidden" and loc:
        model = _section_model(loc)
        known = sorted(k for k in (model.model_fields if model else {}) if k not in ("source_path", "list_flags"))
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
        listed = f" (known keys: {', '.join(known)})" if known else ""
        return f"unknown key '{loc[-1]}' in {_where(loc)}{suggestion}{listed}{more}"
    if kind == "missing" and loc:
        return f"required key '{loc[-1]}' is missing in {_where(loc)}{more}"
    if not loc:  # a check across fields names them itself
        return err["msg"].removeprefix("Value error, ") + more
    got = err.get("input")
    shown = f", got {str(got).lower()}" if isinstance(got, bool) else f", got {got!r}" if isinstance(
        got, str | int | float
    ) else (
        f", got a {'table' if isinstance(got, dict) else 'list' if isinstance(got, list) else type(got).__name__}"
    )
    if kind in _EXPECTED:
        unquote = " (a number is written without quotes)" if kind in ("int_type", "float_type") and isinstance(
            got, str) and is_number(got) else ""
        return f"field '{field}': expected {_EXPECTED[kind]}{shown}{unquote}{more}"
    if kind == "literal_error":
        choices = (err.get("ctx") or {}).get("expected", "")
        return f"field '{field}': expected one of {choices}{shown}{more}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "string_too_short",
                "finite_number"):
        return f"field '{field}': {err['msg'].lower()}{shown}{more}"
    said = err["msg"].removeprefix("Value error, ")
    if said.startswith("field '"):  # a validator that names its own field (a nested one): not twice
        return f"{said}{more}"
    return f"field '{field}': {said}{more}"


def _check_observed_log(case_path: Path, raw: str, log: Path) -> None:
    """A case's ``observed_log`` must be a server log: an existing, non-empty file of text (a few stray
    NUL or invalid bytes allowed, ``tools.logtext``). Raises CaseError
    (one line naming the field) otherwise: an empty or binary file read as the baseline's log would be
    taken for a failure at load and send the run after a cause that is not there."""
    where = f"{case_path}: field 'observed_log': {raw}"
    if log.is_dir():
        raise CaseError(f"{where}: is a directory (expected the server's log file)")
    if not log.is_file():
        raise CaseError(f"{where}: file not found")
    try:
        with log.open("rb") as f:
            head = f.read(65536)
    except OSError as exc:
        raise CaseError(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        decode_log(head)
    except NotText as exc:
        raise CaseError(f"{where}: not a text file: {exc} (expected the server's log)") from None
    if not head.strip():
        raise CaseError(f"{where}: the log is empty (expected the lines the server printed)")
    if not looks_like_log(decode_log(head).text):  # notes that quote a server's errors are no log of it
        raise CaseError(f"{where}: does not look like a server log: none of its first lines is a log record, a "
                        "Python traceback or error, or a command-line error (expected the lines the server printed)")
