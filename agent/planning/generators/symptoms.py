"""Symptom classes: hypotheses that trigger on a class of failure, not on one exact log line.

The rules are data (``symptoms.toml`` of the knowledge folder, the catalog's format with ``symptom =
CLASS`` conditions; see ``agent.domain.knowledge_dir``), general to every deployment: NaN/Inf and garbage text
are weighed alike, a multi-GPU hang at start-up points at the GPU-to-GPU path, out-of-memory at capture
at the memory left outside the static pool, and so on. The classes are computed from the evidence in
``agent.planning.generators.evidence.symptom_classes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.planning.catalog import CatalogEntry, load_catalog
from agent.planning.generators.catalog import entries_to_candidates
from tools.knowledge_files import KnowledgeFile

if TYPE_CHECKING:
    from agent.planning.generators import Candidate, GeneratorInput

__all__ = ["SymptomClassGenerator", "symptom_rules"]


#: ``symptoms.toml`` of the knowledge folder in force (the catalog's format); none at all: no rules.
_RULES: KnowledgeFile[list[CatalogEntry]] = KnowledgeFile("symptoms.toml", load_catalog, absent=list)


def symptom_rules() -> list[CatalogEntry]:
    """The symptom-class rules of the knowledge folder in force (``[]`` when there is no file), read once
    per file version. Raises CatalogError (one line naming the file, the entry and the field)."""
    return _RULES()


class SymptomClassGenerator:
    """Rules of ``symptoms.toml`` whose symptom classes (and other conditions) the failure meets."""

    name = "symptom_class"

    def __init__(self, rules: list[CatalogEntry] | None = None) -> None:
        self._rules = rules

    def generate(self, inp: GeneratorInput) -> list[Candidate]:
        """Triggered rules, ids prefixed ``symptom:``."""
        rules = self._rules if self._rules is not None else symptom_rules()
        return entries_to_candidates(rules, inp, self.name, id_prefix="symptom:")
