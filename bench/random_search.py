"""The random baseline: uniform one-change search without replacement over every change the flag catalog
and the knowledge make plausible, with its exact expectation on a deterministic world.
"""

from __future__ import annotations

import random
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.domain.models import Baseline, Change
from agent.planning.catalog import CatalogEntry
from agent.planning.served import served_settings  # the agent's own notion of what a deployment is
from agent.review.wording import count
from bench.launcher import LaunchRecord
from bench.method_result import LaunchCache, MethodResult, summarize
from bench.worlds import BenchWorld, score_run
from tools.flags import FlagCatalog, FlagError
from tools.knowledge import Finding

#: Choices named for other vendors' hardware are not plausible on an NVIDIA host.
_OTHER_VENDORS = re.compile(r"aiter|wave|ascend|intel|xpu|npu|hip|rocm|amx|^cpu$")


def plausible_changes(
    baseline: Baseline, catalog: list[CatalogEntry], flags: FlagCatalog, findings: list[Finding]
) -> list[Change]:
    """Every one-variable change the flag catalog and the knowledge make plausible, without ranking.

    The values every hypothesis-catalog intervention names (literal values; derived values are
    computed from evidence only by the agent), every choice of the flags those interventions touch
    (choices named for other vendors' hardware left out), each of the baseline's explicit settings
    removed and every other choice of those with choices, and every difference to a known-good
    finding. Changes that leave the baseline as it is are dropped.
    """
    out: dict[str, Change] = {}

    def add(kind: str, name: str, value: Any) -> None:
        if kind == "flag":
            try:
                canon, legal = flags.validate(name, value)
            except FlagError:
                return
            spec = flags.resolve(canon)
            current = baseline.flags.get(canon)
            if current is None and spec.default is not None and str(spec.default) == str(legal):
                return
            name, value = canon, legal
        else:
            current = baseline.env.get(name)
        if current is not None and str(current) == str(value):
            return
        change = Change(kind=kind, name=name, before=current, after=value)  # type: ignore[arg-type]
        out.setdefault(change.key(), change)

    _catalog_changes(catalog, flags, add)
    # The baseline's own explicit settings: each removed, and every other choice of a flag with choices
    # (not where it runs and what it loads: knowledge/served.toml's "place" settings; one that defines
    # what is served may be tried, as the agent may, but is never a root fix).
    served = served_settings()
    for name in baseline.flags:
        if flags.has(name) and served.role("flag", flags.resolve(name).name, flags) != "place":
            removal = Change(kind="flag", name=flags.resolve(name).name, before=baseline.flags[name], after=None)
            out.setdefault(removal.key(), removal)
            for choice in flags.resolve(name).choices or ():
                if not _OTHER_VENDORS.search(choice):
                    add("flag", name, choice)
    for name, value in baseline.env.items():
        if served.role("env", name) != "place":
            removal = Change(kind="env", name=name, before=value, after=None)
            out.setdefault(removal.key(), removal)
    for f in findings:
        for name, value in f.flags.items():
            if flags.has(name) and served.role("flag", flags.resolve(name).name, flags) is None:
                add("flag", name, value)
        for name, value in f.env.items():
            if name not in served.env:
                add("env", name, value)
    return sorted(out.values(), key=lambda c: c.key())


def _catalog_changes(catalog: list[CatalogEntry], flags: FlagCatalog, add: Callable[[str, str, Any], None]) -> None:
    """`add` every value the hypothesis catalog's interventions name, and every choice of the flags they
    touch (other vendors' choices left out; a switch: on)."""
    for entry in catalog:
        for iv in entry.intervention:
            if iv.kind == "env":
                for v in iv.values:
                    add("env", iv.names[0], v)
                continue
            name = next((n for n in iv.names if flags.has(n)), None)
            if name is None:
                continue
            for v in iv.values:
                add("flag", name, v)
            spec = flags.resolve(name)
            if spec.choices:
                for choice in spec.choices:
                    if not _OTHER_VENDORS.search(choice):
                        add("flag", name, choice)
            elif not spec.takes_value:
                add("flag", name, True)


#: Launches a random search may spend on one seed (baseline included) before it gives up; None: until a
#: change works or every plausible change was tried.
RANDOM_MAX_LAUNCHES: int | None = None  # no cap by default


def run_random(
    world: BenchWorld,
    cache: LaunchCache,
    changes: list[Change],
    *,
    seeds: int,
    max_launches: int | None = RANDOM_MAX_LAUNCHES,
) -> MethodResult:
    """Uniform one-change search without replacement until the probes pass (at most ``max_launches``
    launches per seed, baseline included).

    On a deterministic world without a launch cap the figures are the exact expectation over every
    order (``random_expectation``: every plausible change is launched once, through the cache); the
    ``seeds`` seeded orders are still run and listed. On a flaky world they are the mean over ``seeds``.
    ``extra["success_rate"]`` is the share of orders (or seeds) that found a correct fix,
    ``extra["success_launches"]`` their mean launches (None when none did) and ``extra["estimate"]``
    says which of the two the figures are.
    """
    runs = [_seeded_run(world, cache, changes, s, max_launches) for s in range(seeds)]
    listed = [
        {"seed": i, "launches": r.launches, "found": r.found, "correct": r.correct} for i, r in enumerate(runs)
    ]
    common: dict[str, Any] = {
        "seeds": seeds,
        "plausible_changes": len(changes),
        "seed_mean_launches": round(statistics.fmean(r.launches for r in runs), 2),
        "seed_success_rate": round(sum(r.correct for r in runs) / len(runs), 3),
    }
    if cache.enabled and max_launches is None:
        exp = random_expectation(world, cache, changes)
        rate, launches, host_s, wall_s = exp.rate, exp.launches, exp.host_s, exp.wall_s
        found = f"{exp.working} of {len(changes)} changes work, {exp.correct} of them a root fix"
        success = exp.launches if exp.correct and world.expect == "isolated" else None
        extra = {"estimate": "exact", "working_changes": exp.working, "baseline_served": exp.launches == 1.0}
    else:
        rate, launches, host_s, wall_s, success = _seed_means(world, runs)
        found = f"{sum(r.found is not None for r in runs)} of {seeds} seeds found a working change"
        extra = {"estimate": "seeds"}
    return MethodResult(
        method="random",
        correct=rate > 0.5,
        correct_rate=rate,
        launches=launches,
        host_s=host_s,
        wall_s=wall_s,
        found=found,
        status=f"{len(changes)} plausible changes",
        runs=listed,
        wrong_isolated=sum(r.wrong_isolated for r in runs),
        extra={
            **common,
            **extra,
            "real_launches": cache.real,
            "success_rate": round(rate, 3),
            "success_launches": success,
        },
    )


def _seeded_run(
    world: BenchWorld, cache: LaunchCache, changes: list[Change], seed: int, max_launches: int | None
) -> MethodResult:
    """One seeded order of the random search: the baseline, then each change until one serves."""
    base = world.case.baseline
    rng = random.Random(f"random:{world.name}:{seed}")
    order = list(changes)
    rng.shuffle(order)
    records = [cache.run(base)]
    fix: Change | None = None
    budget = order if max_launches is None else order[: max(max_launches - 1, 0)]
    for change in budget if not records[0].ok else []:  # a baseline that served: nothing to fix
        rec = cache.run(base.apply(change))
        records.append(rec)
        if rec.ok:
            fix = change
            break
    status = "found a working change" if fix else f"no working change in {count(len(records), 'launch')}"
    return summarize("random", world, records, fix, status)


def _seed_means(world: BenchWorld, runs: list[MethodResult]) -> tuple[float, float, float, float, float | None]:
    """Over the seeded runs: the share that ended on a root fix, the mean launches, host and wall seconds,
    and the mean launches of the runs that found a root fix (None when none did)."""
    rate = sum(r.correct for r in runs) / len(runs)
    winners = [r for r in runs if r.correct and world.expect == "isolated"]
    launches = statistics.fmean(r.launches for r in runs)
    host_s = statistics.fmean(r.host_s for r in runs)
    wall_s = statistics.fmean(r.wall_s for r in runs)
    success = statistics.fmean(r.launches for r in winners) if winners else None
    return rate, launches, host_s, wall_s, success


@dataclass
class RandomExpectation:
    """Random one-change search's exact expectation on a deterministic world (see ``random_expectation``)."""

    launches: float  # expected launches, baseline included
    host_s: float
    wall_s: float
    working: int  # plausible changes that make the probes pass
    correct: int  # of those, the ones the world's truth calls a root fix
    rate: float  # P(the first working change found is a root fix)


def random_expectation(world: BenchWorld, cache: LaunchCache, changes: list[Change]) -> RandomExpectation:
    """The exact expectation of uniform one-change search without replacement over ``changes``.

    Every change is launched once (through ``cache``). With N changes of which k work, the search stops
    at the first working one of a uniformly random order: each failing change comes before every
    working one with probability 1/(k+1), so E[launches] = 1 + (N+1)/(k+1) (the baseline is the 1), and
    each working change is the one found with probability 1/k. Which working change is found does not
    depend on where it stands, so the launches of the orders that end on a root fix have the same
    mean. With k = 0 every change is launched: 1 + N. A baseline that serves ends after one launch.
    """
    base = world.case.baseline
    base_rec = cache.run(base)
    if base_rec.ok:
        ok = score_run(world, "not_reproduced", None, base).correct
        return RandomExpectation(1.0, base_rec.host_s, base_rec.wall_s, 0, 0, 1.0 if ok else 0.0)
    recs = [(c, cache.run(base.apply(c))) for c in changes]
    working = [(c, r) for c, r in recs if r.ok]
    failing = [r for _c, r in recs if not r.ok]
    n, k = len(changes), len(working)
    if k == 0:
        return RandomExpectation(
            1.0 + n,
            base_rec.host_s + sum(r.host_s for _c, r in recs),
            base_rec.wall_s + sum(r.wall_s for _c, r in recs),
            0, 0, 1.0 if score_run(world, "not_isolated", None, base).correct else 0.0,
        )
    correct = sum(
        score_run(world, "isolated", (c.kind, c.name, c.after), base.apply(c)).correct
        for c, _r in working
    )

    def expected(cost: Callable[[LaunchRecord], float]) -> float:
        return (
            cost(base_rec)
            + sum(cost(r) for r in failing) / (k + 1)
            + sum(cost(r) for _c, r in working) / k
        )

    return RandomExpectation(
        1.0 + (n + 1) / (k + 1), expected(lambda r: r.host_s), expected(lambda r: r.wall_s), k, correct, correct / k
    )

