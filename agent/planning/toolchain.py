"""External tools a package runs and the variable that picks their copy, read from
``knowledge/toolchain.toml`` (see its header; read by ``agent.planning.generators.toolchain``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tools.knowledge_files import KnowledgeFile, load_model

__all__ = ["Tool", "ToolchainError", "load_tools"]


class ToolchainError(ValueError):
    """knowledge/toolchain.toml cannot be used (one line naming the file and the field)."""


class Tool(BaseModel):
    """One ``[[tool]]`` of knowledge/toolchain.toml (see its header for the fields)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    executable: str = Field(min_length=1)
    package: str
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    platforms: list[str] = Field(min_length=1)
    home_key: str | None = None
    home: str
    path: str
    source: str


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: list[Tool] = Field(default_factory=list)


def _load(path: Path) -> _File:
    return load_model(path, _File, ToolchainError)


_TOOLS: KnowledgeFile[_File] = KnowledgeFile("toolchain.toml", _load, absent=_File)


def load_tools() -> list[Tool]:
    """The tools of the knowledge folder in force, read once per file version. Raises ToolchainError (one
    line naming the file and the field)."""
    return _TOOLS().tool
