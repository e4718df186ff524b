"""The one list of candidate generators the planners use (``agent.generators.CandidateGenerator``).

Adding a way of finding causes is adding a module under ``agent/generators/`` and one line here.
"""

from __future__ import annotations

from agent.generators import CandidateGenerator

#: Generator classes, instantiated without arguments, in the order their candidates are listed.
REGISTRY: list[type[CandidateGenerator]] = []


def default_generators() -> list[CandidateGenerator]:
    """One instance of every registered generator."""
    return [cls() for cls in REGISTRY]
