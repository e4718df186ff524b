"""What the generators know about implementations, as data: ``implementations.toml`` of the knowledge
folder in force (``agent.domain.knowledge_dir``: ``--knowledge DIR``, ``$HYPOLOOP_KNOWLEDGE``, else the
repository's ``knowledge/``).

Portable backend choices (tried first), choices for other vendors' hardware, framework packages that
implicate no kernel, and the flags that shape a batch; each list cites its public source in the file.
Read once per file version; a bad file raises ``ImplementationsError`` with one line naming the file
and the field.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator

from tools.knowledge_files import KnowledgeFile, load_model

__all__ = ["FILE", "Implementations", "ImplementationsError", "implementations", "load_implementations"]

FILE = "implementations.toml"


class ImplementationsError(ValueError):
    """``implementations.toml`` cannot be used (one line naming the file and the field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    return value


class Choices(_Strict):
    """``portable``: choice names tried first, in order; ``other_vendor``: a regular expression naming
    choices for other vendors' hardware (searched, case-insensitive)."""

    portable: tuple[str, ...]
    portable_source: str
    other_vendor: str
    other_vendor_source: str

    _check = field_validator("other_vendor")(_pattern)


class Packages(_Strict):
    """``framework``: top-level Python packages that are the framework or the language."""

    framework: frozenset[str]
    framework_source: str


class Load(_Strict):
    """``batch_caps``: flags that cap the batch; ``batch_features``: a regular expression matched at the
    start of switch names whose features act on batches of several requests (case-insensitive);
    ``prompt_bounds``: flags that bound the prompt tokens one forward takes."""

    batch_caps: tuple[str, ...]
    batch_caps_source: str
    batch_features: str
    batch_features_source: str
    #: opt-in switches (``--enable-X``, off by default) whose features act only on batches of several requests
    batch_opt_ins: str = "(?!)"
    batch_opt_ins_source: str = ""
    #: flags that bound how many prompt tokens one forward takes (a prompt longer goes in chunks)
    prompt_bounds: tuple[str, ...] = ()
    prompt_bounds_source: str = ""

    _check = field_validator("batch_features", "batch_opt_ins")(_pattern)


class Implementations(_Strict):
    """All of ``implementations.toml``, with the compiled patterns."""

    choices: Choices
    packages: Packages
    load: Load

    @functools.cached_property
    def other_vendor(self) -> re.Pattern[str]:
        """``choices.other_vendor`` compiled (case-insensitive)."""
        return re.compile(self.choices.other_vendor, re.IGNORECASE)

    @functools.cached_property
    def batch_features(self) -> re.Pattern[str]:
        """``load.batch_features`` compiled (case-insensitive)."""
        return re.compile(self.load.batch_features, re.IGNORECASE)

    @functools.cached_property
    def batch_opt_ins(self) -> re.Pattern[str]:
        """``load.batch_opt_ins`` compiled (case-insensitive)."""
        return re.compile(self.load.batch_opt_ins, re.IGNORECASE)


def load_implementations(path: Path) -> Implementations:
    """Read and check ``path``. Raises ImplementationsError (one line naming the file and the field)."""
    return load_model(path, Implementations, ImplementationsError)


_FILE: KnowledgeFile[Implementations] = KnowledgeFile(FILE, load_implementations)


def implementations() -> Implementations:
    """``implementations.toml`` of the knowledge folder in force (else the repository's), read once per
    file version. Raises ImplementationsError."""
    return _FILE()
