"""Implementation switches (issue 20, point 5: root fix before workaround): environment variables that choose
which implementation of a subsystem runs where ``--help`` has no flag for the choice
(``knowledge/switches.toml``, with the code that reads each one).

Once a change that takes the whole subsystem out has served (``turned_off_by``, a workaround), the other
implementation is the narrower change an engineer tries before concluding that the subsystem must stay
off (``agent.planning.generators.switches``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tools.knowledge_files import KnowledgeFile, load_model

__all__ = ["Switch", "SwitchesError", "load_switches"]


class SwitchesError(ValueError):
    """knowledge/switches.toml cannot be used (one line naming the file and the field)."""


class Switch(BaseModel):
    """One ``[[switch]]`` of knowledge/switches.toml (see its header for the fields)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    subsystem: str
    platforms: list[str] = Field(min_length=1)
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    default: str
    other: str
    implementation: str
    alternative: str
    turned_off_by: list[str] = Field(min_length=1)
    source: str


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    switch: list[Switch] = Field(default_factory=list)


def _load(path: Path) -> list[Switch]:
    return load_model(path, _File, SwitchesError).switch


#: switches.toml of the knowledge folder in force (none at all: no switches).
_SWITCHES: KnowledgeFile[list[Switch]] = KnowledgeFile("switches.toml", _load, absent=list)


def load_switches() -> list[Switch]:
    """The switches of the knowledge folder in force, read once per file version. Raises SwitchesError
    (one line naming the file and the field)."""
    return _SWITCHES()
