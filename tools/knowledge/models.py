"""What the findings reader produces: a Finding per section of notes, the launch commands in it, and
the flags that differ between a failing baseline and a known-good finding."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Outcome = Literal["works", "fails", "unknown"]


class KnowledgeError(Exception):
    """A knowledge file cannot be read; the message is one line and names the file."""


class LaunchCommand(BaseModel):
    """One launch command found in notes.

    ``argv`` starts at the launcher (``python -m sglang.launch_server`` / ``sglang serve``) and stops
    before any pipe or redirection. ``flags`` maps each flag *as written* (may be an alias or
    abbreviation; resolve with ``FlagCatalog``) to its value, ``True`` for a bare flag; model path,
    host and port are left out of ``flags``. ``env`` holds ``VAR=value`` prefixes, preceding
    ``export`` lines of the same block and ``docker -e`` settings. ``comment`` is the ``#`` comment
    line right above the command, if any.
    """

    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    model_path: str | None = None
    flags: dict[str, str | bool] = Field(default_factory=dict)
    comment: str | None = None


class Finding(BaseModel):
    """One section of a findings file.

    ``date`` is ISO (``2026-01-12``, or ``2026-01`` when only a month is given). ``hardware`` is the
    GPUs named, e.g. ``8x RTX PRO 6000``; ``gpus`` the canonical GPU names (``gpu_names``), first the
    section's own, else inherited from the file's context. ``flags``/``env`` are those of the working
    command (see module docstring). ``facts`` are effective-config values quoted in the text
    (keys in FACT_KEYS). ``features`` come from ``infer_features`` over the title, text and model.
    ``packages``: the package versions the note records on a ``packages:`` line (``tools.knowledge.packages``),
    ``{distribution: version}``. ``text`` is the section body as written.
    """

    source: str
    title: str
    date: str | None = None
    model: str | None = None
    hardware: str | None = None
    outcome: Outcome = "unknown"
    commands: list[LaunchCommand] = Field(default_factory=list)
    flags: dict[str, str | bool] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    facts: dict[str, str] = Field(default_factory=dict)
    text: str = ""
    gpus: list[str] = Field(default_factory=list)
    features: list[str] = Field(default_factory=list)
    packages: dict[str, str] = Field(default_factory=dict)


class FlagDifference(BaseModel):
    """One flag that differs between a failing baseline and a known-good finding.

    ``before`` is the baseline's value, ``after`` the finding's; ``None`` means "not set".
    """

    name: str
    before: str | bool | None
    after: str | bool | None
