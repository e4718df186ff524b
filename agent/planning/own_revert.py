"""The user's own deviation reverted before another value of it, or a drop of the feature it configures, is
called the fix (issue 20, point 5: root fix before workaround, the user's intent kept).

When the change that made the failing configuration serve is

- another value of a choice the user set explicitly (``--X aiter`` -> ``--X triton``: a flag whose
  ``--help`` lists its choices; a number tuned, a fraction lowered, keeps the user's intent closer than
  the default), or
- the removal of a flag the user set that turns a whole feature on (knowledge/subsystems.toml
  ``in_play_any`` ``{ setting = FLAG }``), while the user also set something of their own inside that
  feature (a setting of its ``flags``/``env``, or an option sharing the selector's name prefix),

an engineer first asks whether the user's own setting is what breaks: the setting unset, back to the
default the engine picks, is the smallest change from the user's command. It is launched (up to
``agent.planning.intent.INTENT_LAUNCHES`` reverts after the fix) before the run concludes; if it serves too, it is the
root fix (``Fix.around_own`` ranks the alternative below it), and the alternative stays what it is, a
change of the user's choice. Not on a failure that comes and goes: one launch of the revert that serves
says nothing there, and the fix already found needs its confirmation runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.domain.models import Baseline, Change, Hypothesis
from agent.planning.in_play import load_subsystems
from agent.planning.matching import same_value
from agent.planning.own_tuning import tuning_keys
from agent.planning.served import canonical_flag, lists_choices
from agent.planning.view import HistoryState, PlannerView
from tools.flags import FlagCatalog

__all__ = ["own_first", "own_reason", "own_reverts_for"]


def own_reverts_for(case_baseline: Baseline, base: Baseline, change: Change, hypotheses: Iterable[Hypothesis],
                    flags: FlagCatalog | None, feature: str | None) -> list[Change]:
    """The reverts of the user's own settings that ``change`` (a change that fixed the failing ``base``)
    goes around: the same setting unset when ``change`` gives another value to a setting the case itself
    sets; the case's own settings inside the feature when ``change`` removes the flag that turns it on
    (``feature``: that subsystem's id, ``agent.planning.intent.drops_feature``, else None). Only settings
    the failing ``base`` still holds as the case sets them, with an
    open or supported ``revert:`` hypothesis that changes nothing the user needs kept (its intervention is
    no workaround: the parallel layout, the model, what the description asks for stay). Empty otherwise."""
    revertible = _revertible(hypotheses)
    if change.after is not None:
        if change.kind != "flag" or not lists_choices(flags, change.name):
            return []  # a number tuned (a fraction lowered) keeps the user's intent closer than the default
        users = case_baseline.value(change.kind, change.name)
        if same_value(users, None) or same_value(users, change.after) \
                or not same_value(users, base.value(change.kind, change.name)):
            return []
        own = Change(kind=change.kind, name=change.name, before=users, after=None)
        return [own] if (change.kind, change.name) in revertible else []
    sub = next((s for s in load_subsystems().subsystems if s.id == feature), None)
    if sub is None:
        return []
    selector = canonical_flag(flags, change.name)
    prefix = selector[: selector.index("-", 2) + 1] if "-" in selector[2:] else selector + "-"
    out = []
    for kind, name in revertible:
        users = case_baseline.value(kind, name)
        if same_value(users, None) or not same_value(users, base.value(kind, name)):
            continue  # not the user's own setting: a blocker's change this run adopted
        canonical = canonical_flag(flags, name) if kind == "flag" else name
        pattern = sub.flags if kind == "flag" else sub.env
        inside = (pattern is not None and pattern.search(canonical) is not None) or \
            (kind == "flag" and canonical.startswith(prefix))
        if inside and canonical != selector:
            out.append(Change(kind=kind, name=name, before=users, after=None))  # type: ignore[arg-type]
    return out


def _revertible(hypotheses: Iterable[Hypothesis]) -> list[tuple[str, str]]:
    """(kind, name) of the settings an open or supported ``revert:`` hypothesis unsets without a workaround,
    in the ledger's order (heaviest first)."""
    out: list[tuple[str, str]] = []
    for h in sorted(hypotheses, key=lambda h: -h.weight):
        if h.status not in ("open", "supported") or not h.id.startswith("revert:"):
            continue
        for iv in h.interventions:
            if not iv.workaround and all(v is None for v in iv.values):
                out.extend((iv.kind, n) for n in iv.names if (iv.kind, n) not in out)
    return out


def own_first(view: PlannerView, state: HistoryState, flags: FlagCatalog | None, featured: list[str],
              may_spend: bool, feature: str | None) -> list[str]:
    """Keys of the reverts to launch, most wanted first, before the best fix so far is confirmed: the
    user's own implicated settings inside a feature it dropped (``featured``:
    ``agent.planning.intent.feature_reverts``), then the user's own settings it goes around
    (``own_reverts_for``; ``feature``: the subsystem it drops, or None) while ``may_spend`` (fewer than
    ``agent.planning.intent.INTENT_LAUNCHES`` reverts were launched after it), then the user's own tuning
    of the implementation a switch of implementation left (``agent.planning.own_tuning.tuning_keys``: a
    few settings, each reverted and flipped at most once, and the fix is no fix until they are); never on
    a failure seen flaky or said intermittent (there a revert that serves once is no evidence, and the
    fix's own confirmations need the budget). Empty when there is none."""
    best, base = state.best_fix, state.failing_baseline
    if best is None or base is None or state.confirmations > 0 or state.flaky or state.intermittent:
        return featured
    own = [c.key() for c in own_reverts_for(view.case.baseline, base, best.change, state.hypotheses, flags, feature)
           ] if may_spend else []
    tuning = tuning_keys(view.case.baseline, base, best.change, flags, state.hypotheses)
    return list(dict.fromkeys([*featured, *own, *tuning]))


def own_reason(fix: Change, chosen: Change | None = None) -> str:
    """Why the user's own setting (``chosen``, when known) is launched after ``fix`` served (the step's
    rationale)."""
    if fix.after is not None and chosen is not None and chosen.name != fix.name:
        return (f"{fix.describe()} fixed the failure by switching away from the implementation the user chose "
                "and tuned: the user's own tuning of it is tested first (reverted, a switch also flipped), "
                "before switching implementations is reported as the fix (agent.planning.own_tuning)")
    if fix.after is not None:
        return (f"{fix.describe()} fixed the failure by giving another value to a setting the user chose: the "
                "user's own setting is reverted first (unset, the engine's default), the smallest change from "
                "the user's command, before another value of it is reported as the fix")
    return (f"{fix.describe()} fixed the failure by switching off a feature the case turned on and configured: "
            "the user's own setting inside it is reverted first, before dropping the whole feature is reported")
