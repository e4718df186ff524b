"""The bench's view of lab worlds: the world file (with its truth), its case, and scoring against truth.

The bench may read a world's ``[truth]`` (the agent never does): it is used here only to score whether
a method's fix is the root-cause fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.domain.case import Case, load_case
from agent.domain.models import Baseline
from lab.world import WORLDS_DIR, World, load_world


@dataclass
class BenchWorld:
    """One world the bench runs: its name, lab world (truth included) and the agent's case."""

    name: str
    world: World
    case: Case
    case_path: Path

    @property
    def flaky(self) -> bool:
        """True when a fault fires only on some launches (outcomes of one configuration differ)."""
        return any(f.probability < 1.0 for f in self.world.faults)

    @property
    def expect(self) -> str:
        """How a good run ends: isolated; not_isolated when no change within reach fixes the world;
        not_reproduced for a no-fault control."""
        return self.world.truth.expect if self.world.truth else "isolated"

    @property
    def chain(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        """The blockers of a chain world, in order (each a tuple of alternative fixes); () otherwise."""
        return self.world.truth.chain if self.world.truth else ()

    @property
    def world_set(self) -> str:
        """"sealed" for a world of lab/worlds-sealed, else "dev" (a development world or a directory given)."""
        return "sealed" if self.case_path.parent.parent == SEALED_DIR else "dev"

    @property
    def package(self) -> str | None:
        """The package a not_isolated ending must name (None when the truth names none)."""
        return self.world.truth.package if self.world.truth else None


#: Worlds written from public reports and committed with the planner's result before the planner was
#: changed for them (bench/sealed-log.md). They are not part of the default run: ``--sealed`` runs
#: them, ``--all-worlds`` runs them after the development worlds of lab/worlds.
SEALED_DIR = WORLDS_DIR.parent / "worlds-sealed"

#: The world sets ``discover`` knows: the development worlds (the default), the sealed half, or both.
WORLD_SETS = ("dev", "sealed", "all")


def _names_in(folder: Path) -> list[str]:
    """Names of the directories under ``folder`` that hold both a world.toml and a case.toml, sorted."""
    return sorted(p.parent.name for p in folder.glob("*/case.toml") if (p.parent / "world.toml").is_file())


def discover(names: list[str] | None = None, world_set: str = "dev") -> list[BenchWorld]:
    """Worlds with a world.toml and a case.toml: the given names, else every world of ``world_set``.

    ``world_set`` is "dev" (lab/worlds, the default), "sealed" (lab/worlds-sealed) or "all" (both,
    the development worlds first). A name is looked up in lab/worlds, then in lab/worlds-sealed; it
    may also be a path to a world directory holding both files. Raises ValueError for an unknown name
    or world set.
    """
    if world_set not in WORLD_SETS:
        raise ValueError(f"unknown world set {world_set!r} (expected one of: {', '.join(WORLD_SETS)})")
    folders: list[Path] = []
    if not names:
        if world_set in ("dev", "all"):
            folders += [WORLDS_DIR / n for n in _field_order(_names_in(WORLDS_DIR))]
        if world_set in ("sealed", "all"):
            folders += [SEALED_DIR / n for n in _names_in(SEALED_DIR)]
    else:
        for name in names:
            if "/" in name or Path(name).is_dir():
                folders.append(Path(name))
            elif not (WORLDS_DIR / name).is_dir() and (SEALED_DIR / name).is_dir():
                folders.append(SEALED_DIR / name)
            else:
                folders.append(WORLDS_DIR / name)
    out = []
    for folder in folders:
        name = str(folder) if folder.parent not in (WORLDS_DIR, SEALED_DIR) else folder.name
        case_path, world_path = folder / "case.toml", folder / "world.toml"
        if not case_path.is_file() or not world_path.is_file():
            known = ", ".join(_names_in(WORLDS_DIR))
            raise ValueError(f"unknown world {name!r} (known: {known}; the sealed worlds are not listed)")
        out.append(
            BenchWorld(
                name=folder.name,
                world=load_world(str(world_path)),
                case=load_case(str(case_path)),
                case_path=case_path,
            )
        )
    return out


def _field_order(names: list[str]) -> list[str]:
    """The motivating case first, the rest alphabetically (tables read like the field-case list)."""
    first = [n for n in names if n == "glm5-nvfp4-sm120"]
    return first + [n for n in names if n not in first]


_ALIASES = {"bfloat16": "bf16", "true": "true", "1": "1"}


def _norm(value: Any) -> str:
    text = str(value).strip().lower()
    return _ALIASES.get(text, text)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(str(value))
    except ValueError:
        return None


def _same(fix: dict[str, Any], value: Any) -> bool:
    """Whether a value satisfies a truth fix: ``value = false`` means removed (None); a numeric value
    is an example (any number counts); otherwise the same value in any spelling."""
    want = fix.get("value", True)
    if want is False:
        return value is None or value is False
    if value is None:
        return False
    if _number(want) is not None and _number(value) is not None and not isinstance(want, bool):
        return True
    return _norm(want) == _norm(value)


def matching_fix(world: BenchWorld, kind: str, name: str, value: Any) -> dict[str, Any] | None:
    """The truth fix a change corresponds to (same variable; same value, or any value for a numeric
    flag, whose working value the method's own launches established; removal for ``value = false``),
    else None."""
    truth = world.world.truth
    if truth is None:
        return None
    for fix in truth.fixes:
        if fix.get("kind") == kind and fix.get("name") == name and _same(fix, value):
            return fix
    return None


def chain_satisfied(world: BenchWorld, final: Baseline) -> list[bool]:
    """Per link of the world's chain: does the final configuration hold a root alternative of it?

    A link is passed when, against the case's baseline, the final configuration sets the variable to
    the alternative's value (or removed it, for ``value = false``). Workarounds (``root = false``) do
    not pass a link.
    """
    start = world.case.baseline
    out = []
    for link in world.chain:
        ok = False
        for fix in link:
            if not fix.get("root", True):
                continue
            kind, name = fix["kind"], fix["name"]
            now, before = final.value(kind, name), start.value(kind, name)
            if _same(fix, now) and (now != before or fix.get("value") is False and before is not None):
                ok = True
        out.append(ok)
    return out


def is_root_fix(world: BenchWorld, kind: str, name: str, value: Any) -> bool:
    """Whether a change is a root-cause fix of the world (not a workaround)."""
    fix = matching_fix(world, kind, name, value)
    return bool(fix and fix.get("root", True))


@dataclass
class Score:
    """How a run ended against the world's truth: correct or not, and a wrong ``isolated`` (a fix
    claimed that is not the truth's) counted apart, with a short reason for the table."""

    correct: bool
    wrong_isolated: bool
    why: str


def score_run(
    world: BenchWorld,
    status: str,
    fix: tuple[str, str, Any] | None,
    final: Baseline | None,
    named: str = "",
) -> Score:
    """Score one run: ``status`` its ending, ``fix`` its (kind, name, value) or None, ``final`` the
    configuration it ended on (baseline adoptions and the fix applied), ``named`` the text of its
    conclusion where a not_isolated ending names the implicated package.

    isolated worlds: the fix is a root fix of the truth, or, for a chain, the final configuration
    passes every link; not_isolated worlds: the run ends not_isolated and names the package (or the truth's ``names``); the
    no-fault control: nothing is blamed (no fix, not isolated).
    """
    isolated = status == "isolated"
    if world.expect == "not_reproduced":
        ok = not isolated and fix is None and status != "error"
        return Score(ok, isolated, "nothing blamed" if ok else f"ended {status} with a fix")
    if world.expect == "not_isolated":
        truth = getattr(world.world, "truth", None)
        package = world.package or (truth.names if truth else None)
        ok = status == "not_isolated" and (package is None or package.lower() in named.lower())
        if ok:
            why = f"names {package}" if package else "nothing to name"
        else:
            why = f"ended {status}" if status != "not_isolated" else f"{package} not named"
        return Score(ok, isolated, why)
    if world.chain:
        links = chain_satisfied(world, final) if isolated and final is not None else [False] * len(world.chain)
        ok = isolated and all(links)
        return Score(ok, isolated and not ok, f"chain {sum(links)}/{len(links)} links")
    ok = isolated and fix is not None and is_root_fix(world, *fix)
    return Score(ok, isolated and not ok, "root fix" if ok else ("not the root fix" if isolated else f"ended {status}"))
