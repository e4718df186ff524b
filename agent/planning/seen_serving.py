"""A change whose configuration was already seen serving: the run's own earlier launches as evidence.

After a blocker is passed, the failure the run moves on to is tested from a new baseline. An earlier launch
may already have run what a candidate change would give there: a feature dropped from the first baseline
served under the case's load, and the new baseline differs from that launch only in settings of the dropped
feature, which configure nothing once it is off. An engineer reads that launch first ("with the feature off
the load already served") and tries that change before generic ones. ``served_before`` finds such a launch:
the two configurations differ only in settings that are not in play in the candidate's configuration
(``agent.planning.in_play``: ``--hicache-size`` without ``--enable-hierarchical-cache``), and the launch
answered every probe the current test would send.

Not when the change drops a feature the case turned on while the new failure's own log names a remedy
(``remedy:`` hypotheses, ``agent.planning.generators.remedies``) that keeps the feature: the earlier launch
shows the feature's drop serves, which the run already knows; the remedy the engine prints is what an
engineer tries first on the new error (``agent.planning.intent.remedy_before_drops``).
"""

from __future__ import annotations

from typing import Any, Literal

from agent.domain.models import Baseline, Change, Experiment, FlagValue, Outcome
from agent.planning.in_play import InPlay
from agent.planning.view import PlannerView
from tools.flags import FlagCatalog
from tools.probes import Probe


def seen_first(view: PlannerView, launches: list[Experiment], baseline: Baseline, scored: list[tuple[Any, ...]],
               flags: FlagCatalog | None) -> tuple[tuple[Any, ...], str] | None:
    """The best of ``scored`` (``(score, -order, change, ...)`` tuples, the chooser's) whose configuration one
    of ``launches`` already ran (``served_before``), with the sentence saying so; None when there is none."""
    for t in sorted(scored, key=lambda t: (t[0], t[1]), reverse=True):
        if (seen := served_before(view, launches, baseline, t[2], flags)) is not None:
            e, diff = seen
            inert = f" but for {', '.join(diff)}, which configure nothing there" if diff else ""
            return t, (f"the configuration it gives already served in {e.id}{inert}, under the same load: the "
                       "run's own launch is the strongest evidence it has")
    return None


def served_before(view: PlannerView, launches: list[Experiment], baseline: Baseline, change: Change,
                  flags: FlagCatalog | None) -> tuple[Experiment, list[str]] | None:
    """The earliest of ``launches`` (``serving_launches``: served under the case's load) whose configuration is
    equivalent to ``baseline`` with ``change``, with the settings in which the two differ (``_inert_differences``);
    None when there is none. The launch of exactly this change from this baseline is not one (it would be a
    repeat, never proposed)."""
    target = baseline.apply(change)
    for e in launches:
        if e.baseline == baseline and e.change == change:
            continue
        diff = _inert_differences(target, e.config(), view, flags)
        if diff is not None:
            return e, diff
    return None


def serving_launches(view: PlannerView, probes: list[Probe]) -> list[Experiment]:
    """The run's launches that served, in order, each with every probe in ``probes`` among its own."""
    wanted = {p.id for p in probes}
    out = []
    for e in view.experiments:
        o: Outcome | None = view.outcome_of(e.id)
        if e.status == "done" and o is not None and o.stage == "ok" and wanted <= {p.id for p in e.probes}:
            out.append(e)
    return out


def _inert_differences(target: Baseline, other: Baseline, view: PlannerView,
                       flags: FlagCatalog | None) -> list[str] | None:
    """The settings in which ``other`` differs from ``target`` when each of them configures a subsystem that
    is out of play in both configurations as they are (``--hicache-size`` where the hierarchical cache is off in
    both); None when one of them is in play in either. A feature's own switch is in play wherever it is on
    (``--pp-size 2`` against no ``--pp-size``), so it never counts as inert."""
    out = []
    kinds: tuple[tuple[Literal["flag", "env"], dict[str, FlagValue], dict[str, FlagValue]], ...] = (
        ("flag", target.flags, other.flags), ("env", dict(target.env), dict(other.env)))
    checks = [InPlay(view.fingerprint, config, {}, flags) for config in (target, other)]
    for kind, mine, theirs in kinds:
        for name in sorted(set(mine) | set(theirs)):
            a, b = mine.get(name), theirs.get(name)
            if a == b:
                continue
            values = [v for v in (a, b) if v is not None and v is not False]
            if not values:
                continue  # unset and off: the same
            if any(c.why_not(Change(kind=kind, name=name, before=None, after=v)) is None
                   for c in checks for v in values):
                return None
            out.append(name)
    return out
