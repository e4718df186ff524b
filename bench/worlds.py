"""The bench's view of lab worlds: the world file (with its truth), its case, and scoring against truth.

The bench may read a world's ``[truth]`` (the agent never does): it is used here only to score whether
a method's fix is the root-cause fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.case import Case, load_case
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
        """How a good run ends: isolated, or not_isolated when no single change fixes the world."""
        return self.world.truth.expect if self.world.truth else "isolated"


def discover(names: list[str] | None = None) -> list[BenchWorld]:
    """Worlds with a world.toml and a case.toml under lab/worlds (all, sorted, or the given names).

    A name may also be a path to a world directory holding both files. Raises ValueError for an
    unknown name.
    """
    if not names:
        names = sorted(
            p.parent.name for p in WORLDS_DIR.glob("*/case.toml") if (p.parent / "world.toml").is_file()
        )
        names = _field_order(names)
    out = []
    for name in names:
        folder = Path(name) if ("/" in name or Path(name).is_dir()) else WORLDS_DIR / name
        case_path, world_path = folder / "case.toml", folder / "world.toml"
        if not case_path.is_file() or not world_path.is_file():
            known = ", ".join(sorted(p.parent.name for p in WORLDS_DIR.glob("*/case.toml")))
            raise ValueError(f"unknown world {name!r} (known: {known})")
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


def matching_fix(world: BenchWorld, kind: str, name: str, value: Any) -> dict[str, Any] | None:
    """The truth fix a change corresponds to (same variable; same value, or any value for a numeric
    flag, whose working value the method's own launches established), else None."""
    truth = world.world.truth
    if truth is None:
        return None
    for fix in truth.fixes:
        if fix.get("kind") != kind or fix.get("name") != name:
            continue
        want = fix.get("value", True)
        if _number(want) is not None and _number(value) is not None and not isinstance(want, bool):
            return fix
        if _norm(want) == _norm(value):
            return fix
    return None


def is_root_fix(world: BenchWorld, kind: str, name: str, value: Any) -> bool:
    """Whether a change is a root-cause fix of the world (not a workaround)."""
    fix = matching_fix(world, kind, name, value)
    return bool(fix and fix.get("root", True))
