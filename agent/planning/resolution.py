"""Argument resolution (knowledge/resolution.toml): where an engine fills in the settings a user left
unset, the exception texts that say a value it needed was None, and the engine's own fallback values.

An engineer reads a TypeError on None in that code as "a default could not be computed on this host"
(the device's memory, on a device the query does not know, came back None): the code runs only for the
settings the user did not give, so giving one explicitly skips it (sgl-project/sglang#11103). The
generator that turns this into candidates is ``agent.planning.generators.resolution``.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tools.knowledge_files import KnowledgeFile, load_model

__all__ = ["Resolution", "ResolutionError", "load_resolution"]


class ResolutionError(ValueError):
    """knowledge/resolution.toml cannot be used (one line naming the file and the field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResolverCode(_Strict):
    """Where one engine resolves its arguments: ``modules`` on ``module.function`` of an engine frame."""

    engine: str
    modules: str
    source: str


class MissingValue(_Strict):
    """Exception texts that say an operand or argument was None."""

    patterns: list[str] = Field(default_factory=list)
    source: str = ""


class Fallback(_Strict):
    """The value the engine gives ``flag`` when what its default is derived from is unknown."""

    flag: str
    value: str
    source: str


class Resolution(_Strict):
    """The whole file."""

    engine: list[ResolverCode] = Field(default_factory=list)
    missing_value: MissingValue = Field(default_factory=MissingValue)
    fallback: list[Fallback] = Field(default_factory=list)

    @cached_property
    def _missing(self) -> list[re.Pattern[str]]:
        return [re.compile(p) for p in self.missing_value.patterns]

    def says_missing(self, exception_line: str) -> bool:
        """Whether an exception line says a value was None where one was needed."""
        return any(p.search(exception_line) for p in self._missing)

    def resolves(self, engine: str, where: str) -> bool:
        """Whether ``where`` (``module.function`` of the engine's own frame) is code of ``engine`` that
        fills in defaults for unset arguments."""
        return any(e.engine == engine and re.search(e.modules, where) for e in self.engine)

    def fallback_of(self, flag: str) -> Fallback | None:
        """The engine's own fallback value for ``flag`` (canonical name), or None."""
        return next((f for f in self.fallback if f.flag == flag), None)


def _load(path: Path) -> Resolution:
    data = load_model(path, Resolution, ResolutionError)
    for i, pat in enumerate([*data.missing_value.patterns, *(e.modules for e in data.engine)]):
        try:
            re.compile(pat)
        except re.error as exc:
            raise ResolutionError(f"{path}: pattern {i + 1} ({pat!r}) is not a regular expression: {exc}") from None
    return data


_RESOLUTION: KnowledgeFile[Resolution] = KnowledgeFile("resolution.toml", _load, absent=Resolution)


def load_resolution() -> Resolution:
    """knowledge/resolution.toml of the knowledge folder in force. Raises ``ResolutionError`` (one line)
    for a malformed file."""
    return _RESOLUTION()
