"""Root fix before workaround, the user's intent kept (issue 20, point 5): after a workaround served, the
changes still worth a launch however unlikely the ledger now makes them, up to ``INTENT_LAUNCHES`` launches
each (``agent.planning.chooser.Chooser._alternative`` ranks them first).

Two kinds: reverting the user's own settings the failure implicates (``intent_reverts`` in the chooser:
the workaround silences a check, the user's deliberate setting in that subsystem may be what it caught);
and, when the workaround dropped a value the user chose for the deployment (knowledge/served.toml role
``intent``: an FP8 KV cache), the other implementations of the subsystem that reads that value
(``intent_alternatives``: ``read_by``, the attention backends that read the KV cache): keeping the
user's value with an implementation that handles it is the root fix, dropping it only avoids the broken
path. ``keeping_intent`` ranks a change of such a value as the workaround it is before it is launched.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

from agent.domain.models import Baseline, Change, Hypothesis, Intervention
from agent.planning.in_play import load_subsystems
from agent.planning.matching import same_value
from agent.planning.served import (
    canonical_flag,
    lists_choices,
    localising_intent,
    served_settings,
    user_keeps,
)
from agent.planning.switches import Broad, broad_switch
from agent.planning.view import HistoryState, PlannerView
from tools.flags import FlagCatalog

__all__ = ["INTENT_LAUNCHES", "dropped_feature", "drops_feature", "feature_suspects", "feature_reverts", "inside_broad", "intent_alternatives",
           "as_narrower", "keeping_intent", "narrower_keys", "ranked", "remedy_before_drops",
           "spent_after_fix", "switches_off"]

#: Launches spent, after a workaround served, on each kind of change of this module.
INTENT_LAUNCHES = 2


def spent_after_fix(view: PlannerView, state: HistoryState, counts: Callable[[Change], bool]) -> int:
    """Test launches after the best fix, on the failing baseline it fixed, whose change ``counts``."""
    best, base = state.best_fix, state.failing_baseline
    after_fix, spent = False, 0
    for e in view.experiments:
        if best is not None and e.id == best.experiment_id:
            after_fix = True
        elif after_fix and e.purpose == "test" and e.change is not None and e.baseline == base \
                and counts(e.change):
            spent += 1
    return spent


def intent_alternatives(view: PlannerView, state: HistoryState, changes: Iterable[Change],
                        flags: FlagCatalog | None) -> set[str]:
    """Keys of ``changes`` that pick another implementation of the subsystem that reads the value the
    workaround dropped: the best fix is a workaround that changed a setting the case chose for the
    deployment (knowledge/served.toml role ``intent``, ``Served.chosen``), and the change sets a flag of
    that setting's ``read_by`` subsystem (knowledge/subsystems.toml ``flags``) to a value, keeping the
    user's; while fewer than ``INTENT_LAUNCHES`` such launches were spent after the best fix. Empty
    otherwise."""
    best = state.best_fix
    if best is None or not best.workaround or best.change.kind != "flag":
        return set()
    served = served_settings()
    name = best.change.name
    if not served.chosen(name, view.case.baseline.value("flag", name), flags):
        return set()
    reader = served.read_by(name, flags)
    pattern = next((s.flags for s in load_subsystems().subsystems if s.id == reader), None)
    if pattern is None:
        return set()

    def picks(ch: Change) -> bool:  # a value of one of that subsystem's implementation choices
        return ch.kind == "flag" and ch.after is not None and pattern.search(ch.name) is not None \
            and lists_choices(flags, ch.name) is not False  # an unknown catalog: any flag may choose

    if spent_after_fix(view, state, picks) >= INTENT_LAUNCHES:
        return set()
    return {ch.key() for ch in changes if picks(ch)}


def keeping_intent(
    view: PlannerView, out: dict[str, tuple[Change, Intervention, str]], flags: FlagCatalog | None,
    implicated: Collection[str] = frozenset(),
) -> dict[str, tuple[Change, Intervention, str]]:
    """``out`` (candidate changes by key) with each change of a setting the user needs kept
    (``user_keeps``: the case's intent, a value the case chose for the deployment) ranked as the costly
    workaround ``FixKeeper._fix_kind`` and the conclusion will call it, whichever hypothesis proposed it.
    ``flags``: the host's flag catalog (other spellings of a flag). ``implicated``: ids of the reverts the
    failing launch implicates as the user's own setting (the failing frames ran the path its value
    selects): such a revert is the localising test and ranks as the ordinary candidate its generator made
    it; served, it is still the workaround it is."""
    keeps = user_keeps(view.case, flags, view.outcomes) - localising_intent(view.case, flags)
    for key, (change, iv, how) in out.items():
        if f"revert:{change.name}" in implicated and change.after is None:
            continue
        if change.kind == "flag" and change.name in keeps:
            out[key] = (change, iv.model_copy(update={"workaround": True, "cost": "high"}), how)
    return out




def inside_broad(broad: Broad, change: Change) -> bool:
    """Whether ``change`` is a narrower change inside the subsystems ``broad`` takes out: it sets one of
    their settings (knowledge/subsystems.toml ``flags``/``env``) and is no broad switch itself."""
    if broad_switch(change) is not None:
        return False
    subs = [s for s in load_subsystems().subsystems if s.id in broad.subsystems]
    return any((p := (s.flags if change.kind == "flag" else s.env)) is not None and p.search(change.name)
               for s in subs)


def as_narrower(iv: Intervention) -> Intervention:
    """``iv`` as a change inside what a broad switch-off took out: next to the switch-off no choice there is
    a workaround or costly, so narrower changes are ranked by how likely each is to fix, not halved for
    avoiding the implementation the error named."""
    return iv.model_copy(update={"workaround": False, "cost": "low"})


def narrower_keys(view: PlannerView, state: HistoryState, changes: Iterable[Change]) -> set[str]:
    """Keys of ``changes`` that are narrower than the broad switch-off that is the best fix so far (inside
    the subsystems it takes out, ``inside_broad``), while fewer than ``INTENT_LAUNCHES`` of them were
    launched after it; else empty. An engineer tries another backend or implementation before concluding
    that a whole subsystem must stay off (issue 20, points 3 and 5)."""
    best = state.best_fix
    broad = broad_switch(best.change) if best is not None else None
    if broad is None or spent_after_fix(view, state, lambda ch: inside_broad(broad, ch)) >= INTENT_LAUNCHES:
        return set()
    return {ch.key() for ch in changes if inside_broad(broad, ch)}


def dropped_feature(view: PlannerView, state: HistoryState, flags: FlagCatalog | None) -> str | None:
    """The subsystem the best fix switched off as a whole, when that fix removes a flag the case itself set
    that turns the subsystem on (knowledge/subsystems.toml ``in_play_any`` ``{ setting = FLAG }``: the
    feature's selector, ``--speculative-algorithm``); else None. Dropping a feature the user turned on
    avoids whatever inside it fails; the user's own settings inside it are tried first
    (``feature_reverts``)."""
    best = state.best_fix
    return drops_feature(view.case.baseline, best.change, flags) if best is not None else None


def drops_feature(case_baseline: Baseline, change: Change, flags: FlagCatalog | None) -> str | None:
    """The subsystem ``change`` switches off as a whole: it removes a flag the case's own baseline sets
    that turns the subsystem on (knowledge/subsystems.toml ``in_play_any`` ``{ setting = FLAG }``); else
    None. Such a drop costs the user what the feature gave (a costly fix, ``FixKeeper._fix_kind``)."""
    if change.kind != "flag" or change.after is not None:
        return None
    name = canonical_flag(flags, change.name)
    if same_value(case_baseline.value("flag", change.name), None):
        return None
    for s in load_subsystems().subsystems:
        if any(canonical_flag(flags, str(c.get("setting", ""))) == name and "above" not in c for c in s.in_play_any):
            return s.id
    return None


def feature_reverts(view: PlannerView, state: HistoryState, flags: FlagCatalog | None,
                    implicated: Callable[[Hypothesis], bool]) -> list[str]:
    """Keys of the reverts of the case's own settings inside the feature the best fix dropped
    (``dropped_feature``, ``feature_suspects``), most implicated first, while fewer than
    ``INTENT_LAUNCHES`` reverts were launched after it; else empty. An engineer reverts the user's own
    deviations inside the feature before reporting that the feature must be dropped (issue 20, point 5);
    when the user set nothing inside it that the failure implicates, dropping it stays the answer. Not on
    a flaky or intermittent failure: there one launch that serves is no evidence of a fix, and the drop's
    own confirmations need the budget."""
    best, base = state.best_fix, state.failing_baseline
    if best is None or base is None or spent_after_fix(view, state, lambda ch: ch.after is None) >= INTENT_LAUNCHES:
        return []
    if state.flaky or state.intermittent:
        return []  # the same configuration both served and failed: one passing revert would tell nothing
    return feature_suspects(view.case.baseline, base, best.change, state.hypotheses, flags, implicated)


def feature_suspects(case_baseline: Baseline, base: Baseline, drop: Change, hypotheses: Iterable[Hypothesis],
                     flags: FlagCatalog | None, implicated: Callable[[Hypothesis], bool]) -> list[str]:
    """Keys of the reverts (open ``revert:`` hypotheses) of the case's own settings, as the failing
    ``base`` still sets them, inside the feature ``drop`` switches off (``drops_feature``), most implicated
    first; empty unless the failure implicates one of them (``implicated``: the failing frames' names spell
    it, the error quotes its value), as direct evidence that the user's deviation, not the feature, fails.
    Inside: a setting of that subsystem (knowledge/subsystems.toml ``flags``/``env``), a flag sharing the
    selector's option-name prefix on the host's ``--help`` (``--speculative-``), or an implicated one.
    Most implicated: the failure implicates it, then the ledger's weight."""
    sub_id = drops_feature(case_baseline, drop, flags)
    if sub_id is None:
        return []
    sub = next(s for s in load_subsystems().subsystems if s.id == sub_id)
    selector = canonical_flag(flags, drop.name)
    prefix = selector[: selector.index("-", 2) + 1] if "-" in selector[2:] else selector + "-"
    ranked: list[tuple[bool, float, str]] = []
    for h in hypotheses:
        if h.status not in ("open", "supported") or not h.id.startswith("revert:"):
            continue
        for iv in h.interventions:
            for name in iv.names:
                users = case_baseline.value(iv.kind, name)
                if iv.workaround or same_value(users, None) or not same_value(users, base.value(iv.kind, name)):
                    continue  # not the user's own setting (a blocker's change), or it changes what is served
                canonical = canonical_flag(flags, name) if iv.kind == "flag" else name
                pattern = sub.flags if iv.kind == "flag" else sub.env
                if canonical != selector and ((pattern is not None and pattern.search(canonical))
                                              or canonical.startswith(prefix) or implicated(h)):
                    key = Change(kind=iv.kind, name=name, before=base.value(iv.kind, name), after=None).key()
                    ranked.append((implicated(h), h.weight, key))
    if not any(imp for imp, _, _ in ranked):
        return []
    ranked.sort(key=lambda t: (t[0], t[1]), reverse=True)
    return list(dict.fromkeys(k for _, _, k in ranked))


def remedy_before_drops(view: PlannerView, scored: list[tuple[Any, ...]], hypotheses: list[Hypothesis],
                        flags: FlagCatalog | None) -> list[tuple[Any, ...]]:
    """``scored`` (``(score, -order, change, ...)`` tuples, the chooser's) without the changes that drop a
    feature the case turned on (``agent.planning.intent.drops_feature``) while another of them is a remedy
    the failing log names (an open ``remedy:`` hypothesis's change): that remedy keeps the feature, and the
    engine printed it for this very error, so it is tried first; the drops come back once it is refuted."""
    advised = {(iv.kind, n) for h in hypotheses if h.status == "open" and h.id.startswith("remedy:")
               for iv in h.interventions for n in iv.names}
    if not any((t[2].kind, t[2].name) in advised for t in scored):
        return scored
    kept = [t for t in scored if drops_feature(view.case.baseline, t[2], flags) is None
            and not switches_off(view.case.baseline, t[2], flags)]
    return kept or scored


def ranked(scored: list[tuple[Any, ...]], hypotheses: Iterable[Hypothesis]) -> list[tuple[Any, ...]]:
    """``scored`` (the chooser's ``(score, -order, change, p_fix, how)`` tuples) best first: by score; at
    equal score, a change to a value an open ``remedy:`` hypothesis proposes (the failing log names it, "use
    --speculative-eagle-topk 1") before another (a revert of the same setting to the engine's default),
    then a value derived from the evidence before a literal or fallback one, then the earlier candidate."""
    named = {Change(kind=iv.kind, name=n, before=None, after=v).key()
             for h in hypotheses if h.status == "open" and h.id.startswith("remedy:")
             for iv in h.interventions for n in iv.names for v in iv.values if v is not None}
    return sorted(scored, key=lambda t: (t[0], t[2].key() in named,
                                         bool(t[4]) and not str(t[4]).startswith("fallback"), t[1]), reverse=True)


def switches_off(case_baseline: Baseline, change: Change, flags: FlagCatalog | None) -> bool:
    """Whether ``change`` turns off a feature the case's own baseline switched on with a boolean
    ``--enable-X`` (set to true; removed or set false by ``change``), a switch the host's ``--help`` does
    not call deprecated. SGLang's ``server_args.py`` names its opt-in features so (``--enable-hisparse``,
    ``--enable-dp-attention``): the user turned the feature on for what it gives, so dropping it gives
    that up, whatever knowledge/subsystems.toml knows of the feature."""
    if change.kind != "flag" or not (same_value(change.after, None) or same_value(change.after, False)):
        return False
    if case_baseline.value("flag", change.name) is not True:
        return False
    spec = flags.lookup(change.name) if flags is not None else None
    if spec is not None and (spec.deprecated or spec.takes_value):
        return False
    return any(o.startswith("--enable-") for o in (spec.option_strings if spec is not None else [change.name]))
