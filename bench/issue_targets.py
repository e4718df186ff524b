"""The aggregate targets of issue 20 ("reason like an SGLang engineer"), per world set.

Done when ``python -m bench`` (all worlds, catalog and ablation) prints: correct on >= 90% of the
development worlds and >= 80% of the sealed half, 0 wrong ``isolated`` anywhere (``run._catalog_targets``
prints that one), a root fix wherever the truth has one on >= 80%, and launches <= chain length + 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

#: Share of worlds a method must get right, per world set (issue 20, "Done when").
CORRECT_SHARE = {"dev": 0.9, "sealed": 0.8}
#: Share of the worlds whose truth has a fix on which the run must end on a root fix.
ROOT_FIX_SHARE = 0.8
#: Launches a run may take beyond its chain length (1 for a single-link world).
SPARE_LAUNCHES = 3
AGENT_METHODS = ("agent", "agent-empty")


class _Result(Protocol):
    correct: bool
    launches: float


class _World(Protocol):
    world: str
    expect: str
    world_set: str
    chain_links: int
    methods: dict[str, Any]


@dataclass
class Row:
    """One target row: what it says, the measured figure, whether it was met."""

    name: str
    measured: str
    met: bool


def _share(n: int, total: int) -> str:
    return f"{n}/{total} ({n / total:.0%})"


def launch_bound(chain_links: int) -> int:
    """The most launches a good run may take on a world with ``chain_links`` links (0: a single fault)."""
    return max(1, chain_links) + SPARE_LAUNCHES


def issue20_rows(results: list[_World]) -> list[Row]:
    """Issue 20's targets for each world set present in ``results`` and each agent method that ran:
    the share correct, the share ending on a root fix among the worlds whose truth expects one, and
    every run within ``launch_bound`` launches (the runs over it are named)."""
    out: list[Row] = []
    for world_set, want in CORRECT_SHARE.items():
        worlds = [w for w in results if w.world_set == world_set]
        label = "development" if world_set == "dev" else "sealed"
        for method in AGENT_METHODS:
            runs = [(w, w.methods[method]) for w in worlds if method in w.methods]
            if not runs:
                continue
            n = sum(r.correct for _, r in runs)
            out.append(Row(f"{method} correct on >= {want:.0%} of the {label} worlds", _share(n, len(runs)),
                           n >= want * len(runs)))
            fixable = [(w, r) for w, r in runs if w.expect == "isolated"]
            if fixable:
                n = sum(r.correct for _, r in fixable)
                out.append(Row(f"{method} ends on a root fix on >= {ROOT_FIX_SHARE:.0%} of the {label} worlds "
                               "whose truth has one", _share(n, len(fixable)), n >= ROOT_FIX_SHARE * len(fixable)))
            over = [f"{w.world} ({r.launches:g} > {launch_bound(w.chain_links)})" for w, r in runs
                    if r.launches > launch_bound(w.chain_links)]
            out.append(Row(f"{method} launches <= chain length + {SPARE_LAUNCHES} on every {label} world",
                           ", ".join(over) or f"all {len(runs)}", not over))
    return out
