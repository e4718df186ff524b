"""Implementation switches (issue 20, point 5: root fix before workaround): environment variables that choose
which implementation of a subsystem runs where ``--help`` has no flag for the choice, and the few flags
that only choose between two implementations of one part (``--disable-overlap-schedule``: the overlap or
the normal event loop) (``knowledge/switches.toml``, with the code that reads each one).

Once a change that takes the whole subsystem out has served (``turned_off_by``, a workaround), the other
implementation is the narrower change an engineer tries before concluding that the subsystem must stay
off (``agent.planning.generators.switches``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent.domain.models import Change
from tools.knowledge_files import KnowledgeFile, load_model

__all__ = ["Broad", "Switch", "SwitchesError", "broad_switch", "load_broad", "load_switches"]


class SwitchesError(ValueError):
    """knowledge/switches.toml cannot be used (one line naming the file and the field)."""


class Switch(BaseModel):
    """One ``[[switch]]`` of knowledge/switches.toml (see its header for the fields)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    subsystem: str
    platforms: list[str] = Field(min_length=1)
    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    flag: str | None = Field(default=None, pattern=r"^--[a-z0-9][a-z0-9-]*$")
    default: str
    other: str
    implementation: str
    alternative: str
    turned_off_by: list[str] = Field(default_factory=list)
    stall_stages: list[str] = Field(default_factory=list)
    computes: bool = False
    computes_source: str | None = None
    package: str | None = None
    callers: str | None = None
    legacy: list[str] = Field(default_factory=list)
    source: str

    @model_validator(mode="after")
    def _computes_has_source(self) -> Switch:
        """``computes = true`` needs ``computes_source`` (where the engine's code shows it); exactly one of
        ``env`` and ``flag`` names the setting; ``package`` and ``callers`` come together (``callers`` a
        regex); ``legacy`` spellings only for a variable."""
        if self.computes and not self.computes_source:
            raise ValueError("computes = true needs computes_source (where the engine's code shows it)")
        if (self.env is None) == (self.flag is None):
            raise ValueError("exactly one of env and flag names the switch's setting")
        if (self.package is None) != (self.callers is None):
            raise ValueError("package and callers come together (the engine's modules the switch gates)")
        if self.callers is not None:
            re.compile(self.callers)
        if self.legacy and self.env is None:
            raise ValueError("legacy spellings are a variable's (env)")
        return self

    @property
    def kind(self) -> Literal["env", "flag"]:
        """Whether the switch is an environment variable or a launch flag."""
        return "env" if self.env is not None else "flag"

    @property
    def name(self) -> str:
        """The variable or flag that selects the implementation."""
        return self.env or self.flag or ""

    def spelling(self, env: Mapping[str, object]) -> str:
        """The name a change of this switch sets against a baseline whose variables are ``env``: a legacy
        spelling the baseline sets (the engine rewrites it over ``env`` at start-up, so it wins), else
        ``name``."""
        return next((n for n in self.legacy if n in env), self.name)

    def calls_package(self, caller: str | None) -> bool:
        """Whether the engine module ``caller`` (dotted) is one whose calls into ``package`` this switch
        gates."""
        return self.callers is not None and caller is not None and re.search(self.callers, caller) is not None

    def value(self, text: str) -> str | bool:
        """``text`` (``default`` or ``other``) as the setting takes it: a flag's ``true``/``false`` is a
        boolean switch (set or absent), a variable's value its text."""
        if self.kind == "flag" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        return text


class Broad(BaseModel):
    """One ``[[broad]]`` of knowledge/switches.toml: a setting that takes a whole subsystem or kernel
    library out (see the file's header for the fields)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: Literal["flag", "env"]
    names: list[str] = Field(min_length=1)
    values: list[str | bool] = Field(min_length=1)
    subsystems: list[str] = Field(min_length=1)
    what: str
    unset_is_off: bool = False
    closed: bool = False
    source: str

    def takes_out(self, change: Change) -> bool:
        """Whether ``change`` sets this setting to a value that takes its subsystems out, or drops it
        (a revert to unset) where the engine's default already does (``unset_is_off``)."""
        if change.kind != self.kind or change.name not in self.names:
            return False
        if change.after is None:
            return self.unset_is_off and change.before is not None
        return any(str(change.after).lower() == str(v).lower() for v in self.values)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    switch: list[Switch] = Field(default_factory=list)
    broad: list[Broad] = Field(default_factory=list)


def _load(path: Path) -> _File:
    return load_model(path, _File, SwitchesError)


#: switches.toml of the knowledge folder in force (none at all: no switches).
_SWITCHES: KnowledgeFile[_File] = KnowledgeFile("switches.toml", _load, absent=_File)


def load_switches() -> list[Switch]:
    """The switches of the knowledge folder in force, read once per file version. Raises SwitchesError
    (one line naming the file and the field)."""
    return _SWITCHES().switch


def load_broad() -> list[Broad]:
    """The broad switches of the knowledge folder in force (``[[broad]]`` of switches.toml). Raises
    SwitchesError (one line naming the file and the field)."""
    return _SWITCHES().broad


def broad_switch(change: Change | None) -> Broad | None:
    """The broad switch ``change`` is (it takes a whole subsystem or kernel library out: a workaround until
    a narrower change is found, issue 20 points 3 and 5), or None. Raises SwitchesError."""
    if change is None:
        return None
    return next((b for b in load_broad() if b.takes_out(change)), None)
