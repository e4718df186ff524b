"""Localising experiments (issue 20, point 3): launches that fix nothing but make a failure's report true.

For an asynchronous device fault the frame where the error surfaced is where it was noticed, not where
the kernel failed. ``knowledge/localisers.toml`` lists the settings that make the report synchronous
(``CUDA_LAUNCH_BLOCKING=1``), each with the symptom classes and the signature (PyTorch's "the stacktrace
below might be incorrect") that call for it. The rule planner launches the failing configuration once with
such a setting before guessing (``agent.planning.chooser``), reads that launch's frames as evidence about
subsystems (``agent.planning.history``), and never takes the setting for the fix: its intervention is a
costly workaround at best (``agent.planning.generators.localisers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.domain.models import Baseline, Change, Outcome
from agent.planning.in_play import load_subsystems, platform_of
from tools.fingerprint import HostFingerprint
from tools.knowledge_files import KnowledgeFile, load_model

__all__ = ["Localiser", "LocalisersError", "applies", "load_localisers", "localiser_of"]


class LocalisersError(ValueError):
    """knowledge/localisers.toml cannot be used (one line naming the file and the field)."""


class Localiser(BaseModel):
    """One localising experiment of knowledge/localisers.toml (see its header for the fields)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: Literal["localiser"]
    statement: str
    symptoms: list[str] = Field(min_length=1)
    unless_symptoms: list[str] = Field(default_factory=list)
    signature: str
    platforms: list[str] = Field(default_factory=list)
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str
    source: str


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    localiser: list[Localiser] = Field(default_factory=list)


def _load(path: Path) -> list[Localiser]:
    return load_model(path, _File, LocalisersError).localiser


#: localisers.toml of the knowledge folder in force (none at all: no localisers).
_LOCALISERS: KnowledgeFile[list[Localiser]] = KnowledgeFile("localisers.toml", _load, absent=list)


def load_localisers() -> list[Localiser]:
    """The localisers of the knowledge folder in force, read once per file version. Raises
    LocalisersError (one line naming the file and the field)."""
    return _LOCALISERS()


def localiser_of(change: Change | None) -> Localiser | None:
    """The localiser ``change`` is (it sets a localiser's variable to its value), or None."""
    if change is None or change.kind != "env":
        return None
    return next((loc for loc in load_localisers()
                 if loc.env == change.name and str(change.after) == loc.value), None)


def applies(loc: Localiser, failing: Outcome, baseline: Baseline, fingerprint: HostFingerprint | None) -> bool:
    """Whether ``loc`` is worth a launch for the failing run ``failing`` of ``baseline``: the failure shows
    one of its symptom classes and its signature (the report says it may be wrong), the host's platform is
    one it works on (an unknown platform counts), and its setting is not already in force (then the stack
    in hand is already the true one); not when it also shows one of the ``unless_symptoms``."""
    shown = set(failing.symptoms)
    if not set(loc.symptoms) & shown or set(loc.unless_symptoms) & shown:
        return False
    if loc.signature not in failing.signature_ids():
        return False
    if str(baseline.env.get(loc.env, "")) == loc.value:
        return False
    device = baseline.flags.get("--device")
    platform = platform_of(fingerprint, str(device) if device not in (None, True) else None, load_subsystems())
    return platform is None or not loc.platforms or platform in loc.platforms
