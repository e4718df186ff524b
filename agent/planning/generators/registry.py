"""The one list of candidate generators the planners use (``agent.planning.generators.CandidateGenerator``).

Adding a way of finding causes is adding a module under ``agent/planning/generators/`` and one line here.
"""

from __future__ import annotations

from agent.planning.generators import CandidateGenerator
from agent.planning.generators.budgets import BudgetGenerator
from agent.planning.generators.catalog import CatalogGenerator
from agent.planning.generators.changed import ChangedPackageGenerator
from agent.planning.generators.component import ImplicatedComponentGenerator
from agent.planning.generators.findings import KnownGoodDiffGenerator
from agent.planning.generators.host_share import HostShareGenerator
from agent.planning.generators.installed_source import InstalledSourceGenerator
from agent.planning.generators.load import LoadGenerator
from agent.planning.generators.localisers import LocaliserGenerator
from agent.planning.generators.misspelt import MisspeltFlagGenerator
from agent.planning.generators.quoted import QuotedValueGenerator
from agent.planning.generators.ranks import FewerRanksGenerator
from agent.planning.generators.remedies import RemediesGenerator
from agent.planning.generators.resolution import ResolutionGenerator
from agent.planning.generators.settings import SettingsVsDefaultsGenerator
from agent.planning.generators.switches import SwitchGenerator
from agent.planning.generators.symptoms import SymptomClassGenerator
from agent.planning.generators.tables import TableSizeGenerator
from agent.planning.generators.toolchain import ToolchainGenerator

__all__ = ["REGISTRY", "default_generators"]

#: Generator classes, instantiated without arguments, in the order their candidates are listed (the
#: order breaks ties between equally scored changes).
REGISTRY: list[type[CandidateGenerator]] = [
    CatalogGenerator,
    RemediesGenerator,
    MisspeltFlagGenerator,
    QuotedValueGenerator,
    HostShareGenerator,
    FewerRanksGenerator,
    SymptomClassGenerator,
    LocaliserGenerator,
    ImplicatedComponentGenerator,
    InstalledSourceGenerator,
    ResolutionGenerator,
    LoadGenerator,
    BudgetGenerator,
    TableSizeGenerator,
    SettingsVsDefaultsGenerator,
    KnownGoodDiffGenerator,
    ChangedPackageGenerator,
    SwitchGenerator,
    ToolchainGenerator,
]


def default_generators() -> list[CandidateGenerator]:
    """One instance of every registered generator."""
    return [cls() for cls in REGISTRY]
