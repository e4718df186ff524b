"""The one list of candidate generators the planners use (``agent.generators.CandidateGenerator``).

Adding a way of finding causes is adding a module under ``agent/generators/`` and one line here.
"""

from __future__ import annotations

from agent.generators import CandidateGenerator
from agent.generators.catalog import CatalogGenerator
from agent.generators.component import ImplicatedComponentGenerator
from agent.generators.findings import KnownGoodDiffGenerator
from agent.generators.installed_source import InstalledSourceGenerator
from agent.generators.load import LoadGenerator
from agent.generators.remedies import RemediesGenerator
from agent.generators.settings import SettingsVsDefaultsGenerator
from agent.generators.symptoms import SymptomClassGenerator

__all__ = ["REGISTRY", "default_generators"]

#: Generator classes, instantiated without arguments, in the order their candidates are listed (the
#: order breaks ties between equally scored changes).
REGISTRY: list[type[CandidateGenerator]] = [
    CatalogGenerator,
    RemediesGenerator,
    SymptomClassGenerator,
    ImplicatedComponentGenerator,
    InstalledSourceGenerator,
    LoadGenerator,
    SettingsVsDefaultsGenerator,
    KnownGoodDiffGenerator,
]


def default_generators() -> list[CandidateGenerator]:
    """One instance of every registered generator."""
    return [cls() for cls in REGISTRY]
