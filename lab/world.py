"""World and version files of the lab: loading, validation, and the data they hold.

A *world* (`lab/worlds/<name>/world.toml`) describes one simulated host: hardware, model, the SGLang
version it imitates, timing, memory, auto-resolution rules, fault rules and the ground truth. A
*version* file (`lab/versions/<version>.toml`) holds the command-line flags of one imitated SGLang
release plus version-wide default rules, so worlds share them. The format is documented in
`lab/README.md`; this module turns the TOML into frozen dataclasses and rejects mistakes with a
one-line `WorldError` that names the file and the field.

Standard library only: the lab is also installed on remote hosts.
The data lives in `lab.world_types`, the table parsers in `lab.world_tables` (plain tables) and
`lab.world_faults` (resolve and fault rules); the names of `lab.world_types` are importable from here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from lab.release import parse_release
from lab.world_faults import KeyCheck, parse_fault, parse_resolve
from lab.world_tables import (
    FileContext,
    nth,
    parse_dataclass,
    parse_flag,
    parse_hardware,
    parse_memory,
    parse_model,
    parse_packages,
    parse_truth,
    read_toml,
)
from lab.world_types import (
    Condition,
    Fault,
    FlagDef,
    Timing,
    Truth,
    VersionDef,
    World,
    WorldError,
    package_key,
)

#: What callers outside the lab's loaders import from here (the rest of the data: `lab.world_types`).
__all__ = [
    "ENV_SEED", "ENV_STATE", "ENV_TIME_SCALE", "ENV_WORLD", "LAB_DIR", "SITE_DIR", "VERSIONS_DIR", "WORLDS_DIR",
    "Condition", "Fault", "Truth", "World", "WorldError", "known_versions", "load_version", "load_world",
    "load_world_from_env", "package_key", "time_scale_from_env", "version_path", "world_path",
]

LAB_DIR = Path(__file__).resolve().parent
WORLDS_DIR = LAB_DIR / "worlds"
VERSIONS_DIR = LAB_DIR / "versions"

ENV_WORLD = "HYPOLOOP_LAB_WORLD"
ENV_TIME_SCALE = "HYPOLOOP_LAB_TIME_SCALE"
ENV_SEED = "HYPOLOOP_LAB_SEED"
ENV_STATE = "HYPOLOOP_LAB_STATE"
#: The simulated installed-source tree (lab/site/README.md): the value of the `site` template key, so a
#: world's traceback can point into files that exist on the host running the lab.
SITE_DIR = str(Path(__file__).resolve().parent / "site")

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
    data = read_toml(path, "world file")
    ctx = FileContext(path)
    version_name = (
        ctx.req_str(data, "sglang", "version") if "sglang" in data else ctx.req_str(data, "", "version")
    )
    version = load_version(version_name, path.parent)
    hardware = parse_hardware(ctx, data.get("hardware"))
    model = parse_model(ctx, data.get("model"))
    timing = parse_dataclass(ctx, data.get("timing", {}), Timing, "timing")
    memory = parse_memory(ctx, data.get("memory", {}))
    keys = KeyCheck(version, model)
    resolve = tuple(
        parse_resolve(ctx, keys, item, nth("resolve", i)) for i, item in enumerate(ctx.list(data, "resolve"))
    )
    faults = tuple(
        parse_fault(ctx, keys, item, nth("fault", i)) for i, item in enumerate(ctx.list(data, "fault"))
    )
    seen: set[str] = set()
    for fault in faults:
        if fault.id in seen:
            raise WorldError(f"{path}: fault id {fault.id!r} is used twice")
        seen.add(fault.id)
    truth = parse_truth(ctx, data.get("truth"))
    packages, changes = parse_packages(ctx, data, version)
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
    data = read_toml(path, f"flag definitions for SGLang {version}")
    ctx = FileContext(path)
    flags: list[FlagDef] = []
    seen: set[str] = set()
    for i, item in enumerate(ctx.list(data, "flag")):
        flag = parse_flag(ctx, item, nth("flag", i))
        for opt in flag.option_strings():
            if opt in seen:
                raise WorldError(f"{path}: {nth('flag', i)}: option {opt} is defined twice")
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
    keys = KeyCheck(partial, None)
    rules = tuple(
        parse_resolve(ctx, keys, item, nth("resolve", i)) for i, item in enumerate(ctx.list(data, "resolve"))
    )
    return dataclasses.replace(partial, resolve=rules)


