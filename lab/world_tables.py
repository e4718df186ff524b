"""Parsing the plain tables of world and version files: `[[flag]]`, `[hardware]`, `[model]`, `[timing]`,
`[memory]`, `[truth]`, `[packages]` / `[[package_change]]`; each mistake is a one-line `WorldError`
naming the file and the field.

Standard library only: the lab is also installed on remote hosts.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from lab.world_types import (
    FIX_COSTS,
    TRUTH_EXPECT,
    FlagDef,
    Hardware,
    Memory,
    Model,
    PackageChange,
    Truth,
    VersionDef,
    WorldError,
    package_key,
)


def nth(where: str, i: int) -> str:
    """Item ``i`` (0-based) of the array at ``where`` as a person counts it, from 1: ``fault #1``, then
    ``fault #1.when #2`` (the form of every error message of hypoloop that names an array item,
    ``tools.knowledge_files.item_path``; the lab imports only the standard library, so it has its own)."""
    return f"{where} #{i + 1}"


class FileContext:
    """Error-reporting helper bound to one file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, msg: str) -> WorldError:
        """The one-line error for field `where` of this file."""
        return WorldError(f"{self.path}: {where}: {msg}")

    def table(self, value: Any, where: str) -> dict[str, Any]:
        """`value` if it is a table, else raises the error for `where`."""
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {type(value).__name__}")
        return value

    def list(self, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
        """`data[key]` as an array of tables (empty when absent); raises WorldError otherwise."""
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(key, f"expected an array of tables ([[{key}]])")
        return value

    def req_str(self, data: dict[str, Any], section: str, key: str) -> str:
        """The non-empty string `section.key` (`key` at the top level when `section` is empty)."""
        table = data.get(section, {}) if section else data
        where = f"{section}.{key}" if section else key
        value = table.get(key) if isinstance(table, dict) else None
        if not isinstance(value, str) or not value:
            raise self.fail(where, "expected a non-empty string")
        return value



def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The TOML of `path` (`what` names it in the error). Raises WorldError: missing or invalid TOML."""
    if not path.is_file():
        raise WorldError(f"{what} not found: {path}")
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise WorldError(f"{path}: invalid TOML: {exc}") from None



_FLAG_ACTIONS = ("store", "store_true", "store_false", "boolean_optional", "store_const", "warn")
_FLAG_KEYS = frozenset(
    "name aliases type action choices default help nargs required metavar dest deprecated removed const".split()
)


def parse_flag(ctx: FileContext, item: dict[str, Any], where: str) -> FlagDef:
    """One `[[flag]]` of a version file (argparse semantics). Raises WorldError naming the field."""
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


def parse_hardware(ctx: FileContext, raw: Any) -> Hardware:
    """The `[hardware]` table. Raises WorldError for a missing or bad field."""
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
            cpu_count=int(data.get("cpu_count", 0)),
        )
    except KeyError as exc:
        raise ctx.fail("hardware", f"missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ctx.fail("hardware", f"bad value: {exc}") from None
    if not re.fullmatch(r"\d+\.\d+", hw.compute_capability):
        raise ctx.fail("hardware.compute_capability", "expected a string like '12.0'")
    if hw.cpu_count < 0:
        raise ctx.fail("hardware.cpu_count", "expected the host's logical CPU count (a positive integer)")
    if hw.vendor not in ("nvidia", "amd", "cpu"):
        raise ctx.fail("hardware.vendor", "expected 'nvidia', 'amd' or 'cpu'")
    return hw


def parse_model(ctx: FileContext, raw: Any) -> Model:
    """The `[model]` table (every field kept in `fields` for `model.*` keys). Raises WorldError."""
    data = ctx.table(raw, "model")
    for key in ("path", "architecture"):
        if not isinstance(data.get(key), str):
            raise ctx.fail(f"model.{key}", "expected a string")
    features = data.get("features", [])
    if not isinstance(features, list):
        raise ctx.fail("model.features", "expected a list of strings")
    accuracy = data.get("accuracy", 1.0)  # the healthy model's share of graded questions answered right
    if isinstance(accuracy, bool) or not isinstance(accuracy, int | float) or not 0.0 <= accuracy <= 1.0:
        raise ctx.fail("model.accuracy", "expected a number between 0 and 1 (the healthy model's share of right answers)")
    _check_answers(ctx, data.get("answers", []))
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


def _check_answers(ctx: FileContext, answers: Any) -> None:
    """`[[model.answers]]`: the healthy model's own replies, each `{ prompt, answer }` (strings). Raises WorldError."""
    if not isinstance(answers, list):
        raise ctx.fail("model.answers", "expected a list of { prompt, answer } tables")
    for i, item in enumerate(answers):
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not isinstance(item.get("answer"), str):
            raise ctx.fail(nth("model.answers", i), "expected a table with string fields prompt and answer")


def parse_dataclass(ctx: FileContext, raw: Any, cls: type, where: str) -> Any:
    """A table of numbers into dataclass `cls` (e.g. `[timing]`). Raises WorldError naming the field."""
    data = ctx.table(raw, where)
    allowed = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in allowed:
            raise ctx.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    try:
        return cls(**{k: float(v) for k, v in data.items()})
    except (TypeError, ValueError) as exc:
        raise ctx.fail(where, f"bad value: {exc}") from None


def parse_memory(ctx: FileContext, raw: Any) -> Memory:
    """The `[memory]` table; `kv_bytes_per_token` is an integer or a table of dtype = bytes. Raises
    WorldError."""
    data = dict(ctx.table(raw, "memory"))
    kv = data.pop("kv_bytes_per_token", None)
    enforce = data.pop("enforce", True)
    base = parse_dataclass(ctx, {k: v for k, v in data.items()}, Memory, "memory")
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


def parse_truth(ctx: FileContext, raw: Any) -> Truth | None:
    """The `[truth]` table (the ground truth the bench scores against), None when absent. Raises
    WorldError."""
    if raw is None:
        return None
    data = ctx.table(raw, "truth")
    fixes = data.get("fixes", [])
    if not isinstance(fixes, list) or not all(isinstance(f, dict) for f in fixes):
        raise ctx.fail("truth.fixes", "expected an array of tables {kind, name, value}")
    for i, fix in enumerate(fixes):
        check_fix(ctx, fix, nth("truth.fixes", i))
    raw_chain = data.get("chain", [])
    if not isinstance(raw_chain, list):
        raise ctx.fail("truth.chain", "expected an array of links (a fix table, or an array of alternatives)")
    chain: list[tuple[dict[str, Any], ...]] = []
    for i, link in enumerate(raw_chain):
        alternatives = link if isinstance(link, list) else [link]
        if not alternatives or not all(isinstance(a, dict) for a in alternatives):
            raise ctx.fail(nth("truth.chain", i), "expected a fix table or a non-empty array of fix tables")
        for j, fix in enumerate(alternatives):
            check_fix(ctx, fix, nth(nth("truth.chain", i), j))
        chain.append(tuple(alternatives))
    expect = str(data.get("expect", "isolated"))
    if expect not in TRUTH_EXPECT:
        raise ctx.fail("truth.expect", f"expected one of {', '.join(TRUTH_EXPECT)}")
    package = data.get("package")
    if package is not None and (not isinstance(package, str) or not package):
        raise ctx.fail("truth.package", "expected the name of the implicated package")
    names = data.get("names")
    if names is not None and (not isinstance(names, str) or not names):
        raise ctx.fail("truth.names", "expected the text a not_isolated ending must name")
    if expect == "not_isolated" and "chain" in data:
        raise ctx.fail("truth.chain", "a not_isolated world has no chain of fixes")
    return Truth(
        root_cause=str(data.get("root_cause", "")),
        component=str(data.get("component", "")),
        fixes=tuple(fixes),
        expect=expect,
        chain=tuple(chain),
        package=package,
        names=names,
    )


def check_fix(ctx: FileContext, fix: dict[str, Any], where: str) -> None:
    """Check one fix table {kind, name, value, root?, cost?}. Raises WorldError naming the field."""
    if fix.get("kind") not in ("flag", "env") or not isinstance(fix.get("name"), str):
        raise ctx.fail(where, "expected kind = 'flag'|'env' and a name")
    if "root" in fix and not isinstance(fix["root"], bool):
        raise ctx.fail(f"{where}.root", "expected true or false")
    if "cost" in fix and fix["cost"] not in FIX_COSTS:
        raise ctx.fail(f"{where}.cost", f"expected one of {', '.join(FIX_COSTS)}")



def parse_packages(ctx: FileContext, data: dict[str, Any], version: VersionDef) -> tuple[dict[str, str], tuple[PackageChange, ...]]:
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
        where = nth("package_change", i)
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
                f"{nth('package_change', i)}.after",
                f"{change.after or 'not installed'!r} is not what [packages] says is installed now ({now!r})",
            )
    return packages, tuple(changes)
