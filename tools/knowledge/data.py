"""The findings reader's data, read from the knowledge folder in force: the GPUs notes name and their
architectures (``hardware.toml``), model families and the words that name a model feature
(``model_families.toml``), and the effective-config facts quoted in notes (``config_facts.toml``).

The folder in force is ``$HYPOLOOP_KNOWLEDGE`` (which ``--knowledge DIR`` sets for a run,
``agent.domain.knowledge_dir``), else the repository's ``knowledge/``; a file the folder lacks is the
repository's. Each file is read once per version on disk (path, size and modification time). A file that
cannot be read or does not have the expected fields raises ``KnowledgeError``: one line naming the file
and the field. The comment at the top of each file describes its fields; every entry carries its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.knowledge.models import KnowledgeError
from tools.knowledge_files import KnowledgeFile, field_error, read_toml

__all__ = [
    "ConfigFacts",
    "Hardware",
    "ModelFamilies",
    "check_files",
    "config_facts",
    "hardware",
    "model_families",
]


def check_files() -> None:
    """Read every file of the findings reader from the knowledge folder in force, so a run can refuse a
    broken one before it starts; raises KnowledgeError (one line naming the file and the field)."""
    hardware()
    model_families()
    config_facts()


# --- file formats --------------------------------------------------------------------------------------

_Text = Field(min_length=1)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Gpu(_Entry):
    name: str = _Text
    pattern: str = _Text
    arch: str = _Text
    source: str = _Text


class _GeforceRtx(_Entry):
    series: str = Field(pattern=r"^[0-9]$")
    arch: str = _Text
    source: str = _Text


class _HardwareFile(_Entry):
    gpu: list[_Gpu] = Field(default_factory=list)
    geforce_rtx: list[_GeforceRtx] = Field(default_factory=list)


class _Family(_Entry):
    pattern: str = _Text
    features: list[str] = Field(min_length=1)
    source: str = _Text


class _Word(_Entry):
    feature: str = _Text
    pattern: str = _Text
    ignore_case: bool = False
    source: str = _Text


class _Names(_Entry):
    prefixes: list[str] = Field(default_factory=list)
    source: str = _Text


class _ModelFamiliesFile(_Entry):
    family: list[_Family] = Field(default_factory=list)
    word: list[_Word] = Field(default_factory=list)
    names: _Names | None = None


class _Alias(_Entry):
    name: str = _Text
    fact: str = _Text
    source: str = _Text


class _Line(_Entry):
    pattern: str = _Text
    ignore_case: bool = False
    source: str = _Text


class _ConfigFactsFile(_Entry):
    keys: list[str] = Field(default_factory=list)
    source: str = _Text
    alias: list[_Alias] = Field(default_factory=list)
    line: list[_Line] = Field(default_factory=list)


_File = TypeVar("_File", bound=BaseModel)


def _read(path: Path, model: type[_File]) -> _File:
    """``path`` parsed as TOML into ``model``; KnowledgeError (one line: file, field, what was expected)."""
    raw = read_toml(path, KnowledgeError)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        where, msg = field_error(exc)
        raise KnowledgeError(f"{path}: {where or 'file'}: {msg}") from None


def _compile(path: Path, where: str, pattern: str, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise KnowledgeError(f"{path}: {where}: not a regular expression ({exc})") from None


# --- hardware.toml -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hardware:
    """``hardware.toml`` ready to match: ``gpus`` as (canonical name, pattern, architecture) in file
    order; ``gpu_re`` finds any of them with an optional count (group 1) and the name (group 2);
    ``rtx_re`` a GeForce RTX model number (group 1) and "Ti" (group 2); ``rtx_arch`` series digit ->
    architecture. The regular expressions are None when the file lists no such GPU."""

    gpus: tuple[tuple[str, re.Pattern[str], str], ...]
    gpu_re: re.Pattern[str] | None
    rtx_re: re.Pattern[str] | None
    rtx_arch: dict[str, str]


def hardware() -> Hardware:
    """``hardware.toml`` of the knowledge folder in force; raises KnowledgeError naming file and field."""
    return _HARDWARE()


def _hardware(path: Path) -> Hardware:
    data = _read(path, _HardwareFile)
    gpus = tuple(
        (g.name, _compile(path, f"gpu #{i + 1}.pattern", g.pattern, re.IGNORECASE), g.arch)
        for i, g in enumerate(data.gpu)
    )
    gpu_re = None
    if gpus:
        names = "|".join(f"(?:{g.pattern})" for g in data.gpu)
        gpu_re = re.compile(
            r"(?:(?<![\w.])(\d{1,3})\s*(?:x|×|\*)\s*)?(?:NVIDIA\s+)?\b(" + names + r")\b", re.IGNORECASE
        )
    rtx_re = None
    if data.geforce_rtx:
        # The model numbers notes write: RTX 5060 .. RTX 5090 of series 5, with or without "Ti".
        numbers = "|".join(f"{r.series}0[6-9]0" for r in data.geforce_rtx)
        rtx_re = re.compile(r"\bRTX\s*(" + numbers + r")(\s*Ti)?\b", re.IGNORECASE)
    return Hardware(gpus, gpu_re, rtx_re, {r.series: r.arch for r in data.geforce_rtx})


# --- model_families.toml -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFamilies:
    """``model_families.toml`` ready to match: ``families`` (pattern over lower-cased text, features),
    ``words`` (feature, pattern) in file order, ``model_re`` a model name in notes (group 1; None when
    the file lists no name prefixes)."""

    families: tuple[tuple[re.Pattern[str], frozenset[str]], ...]
    words: tuple[tuple[str, re.Pattern[str]], ...]
    model_re: re.Pattern[str] | None


def model_families() -> ModelFamilies:
    """``model_families.toml`` of the knowledge folder in force; raises KnowledgeError naming file and field."""
    return _MODEL_FAMILIES()


def _model_families(path: Path) -> ModelFamilies:
    data = _read(path, _ModelFamiliesFile)
    families = tuple(
        (_compile(path, f"family #{i + 1}.pattern", f.pattern), frozenset(f.features))
        for i, f in enumerate(data.family)
    )
    words = tuple(
        (w.feature, _compile(path, f"word #{i + 1}.pattern", w.pattern, re.IGNORECASE if w.ignore_case else 0))
        for i, w in enumerate(data.word)
    )
    prefixes = [p for p in (data.names.prefixes if data.names else []) if p]
    model_re = None
    if prefixes:
        alternatives = "|".join(re.escape(p) for p in prefixes)
        model_re = re.compile(r"\b((?:[\w.-]+/)?(?:" + alternatives + r")[\w.\-]*)", re.IGNORECASE)
    return ModelFamilies(families, words, model_re)


# --- config_facts.toml ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigFacts:
    """``config_facts.toml`` ready to match: ``aliases`` spelling -> fact; ``kv_re`` finds ``key = value``
    / ``"key": "value"`` (groups ``key``, ``value``); ``prose_re`` ``key was set to value``. The regular
    expressions are None when the file names no fact. ``lines``: the ``[[line]]`` sentences (the
    engine's log wording, how notes say it), each named group a fact."""

    keys: tuple[str, ...]
    aliases: dict[str, str]
    kv_re: re.Pattern[str] | None
    prose_re: re.Pattern[str] | None
    lines: tuple[re.Pattern[str], ...] = ()


def config_facts() -> ConfigFacts:
    """``config_facts.toml`` of the knowledge folder in force; raises KnowledgeError naming file and field."""
    return _CONFIG_FACTS()


def _config_facts(path: Path) -> ConfigFacts:
    data = _read(path, _ConfigFactsFile)
    aliases = {a.name: a.fact for a in data.alias}
    lines = tuple(
        _compile(path, f"line #{i + 1}.pattern", ln.pattern, re.IGNORECASE if ln.ignore_case else 0)
        for i, ln in enumerate(data.line)
    )
    for i, rx in enumerate(lines):
        unknown = [g for g in rx.groupindex if g not in data.keys]
        if unknown or not rx.groupindex:
            raise KnowledgeError(
                f"{path}: line #{i + 1}.pattern: expected named groups that are facts of keys, "
                f"got {', '.join(unknown) or 'none'}"
            )
    spellings = [*data.keys, *aliases]
    if not spellings:
        return ConfigFacts((), {}, None, None, lines)
    alt = "|".join(re.escape(k) for k in spellings)
    kv_re = re.compile(
        r"[\"']?\b(?P<key>" + alt + r")\b[\"']?\s*(?:=|:)\s*[\"']?(?P<value>[A-Za-z0-9_.\-]+)"
    )
    prose_re = re.compile(
        r"\b(?P<key>" + alt + r")`?\s+(?:resolved|was set|is set|defaulted|fell back|was|is|=)\s+to\s+"
        r"`?(?P<value>[A-Za-z0-9_.\-]+)"
    )
    return ConfigFacts(tuple(data.keys), aliases, kv_re, prose_re, lines)


_HARDWARE = KnowledgeFile("hardware.toml", _hardware)
_MODEL_FAMILIES = KnowledgeFile("model_families.toml", _model_families)
_CONFIG_FACTS = KnowledgeFile("config_facts.toml", _config_facts)
