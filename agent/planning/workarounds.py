"""The root fix apart from the workarounds in a run's ending (issue 20, point 5): a change that served by
silencing a check, turning a part off or changing what is served (knowledge/served.toml, the case's
intent) is reported as a workaround, never as the fix or as another root fix
(``agent.planning.conclusion``). A broad switch-off (knowledge/switches.toml ``[[broad]]``: every CUDA
graph, every custom all-reduce, a whole kernel library off) is one too: after it served, the narrower
changes inside the subsystems it took out are tried first (``narrower_keys``, up to ``INTENT_LAUNCHES``
launches), and if none served the run ends not_isolated naming it (points 3 and 5)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agent.domain.models import Change, Experiment
from agent.planning.in_play import load_subsystems
from agent.planning.intent import INTENT_LAUNCHES, spent_after_fix
from agent.planning.switches import Broad, broad_switch
from agent.planning.view import HistoryState, PlannerView

__all__ = ["inside_broad", "mark_deployment_changes", "narrower_keys", "root_and_workarounds"]


def inside_broad(broad: Broad, change: Change) -> bool:
    """Whether ``change`` is a narrower change inside the subsystems ``broad`` takes out: it sets one of
    their settings (knowledge/subsystems.toml ``flags``/``env``) and is no broad switch itself."""
    if broad_switch(change) is not None:
        return False
    subs = [s for s in load_subsystems().subsystems if s.id in broad.subsystems]
    return any((p := (s.flags if change.kind == "flag" else s.env)) is not None and p.search(change.name)
               for s in subs)


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


def root_and_workarounds(fix: Change, alternatives: list[dict[str, Any]]) -> str:
    """The root fix named apart from the workarounds that also served in this run (a check silenced, a
    part turned off, what is served changed): ``root fix X; workaround Y also served, not the fix``."""
    served = [a for a in alternatives if a.get("workaround") and a.get("result") == "fixed"]
    if not served:
        return ""
    names = "; ".join(f"{a['change']} (in {a['experiment_id']})" for a in served)
    return (f"root fix: {fix.describe()}; apart from it, {'workarounds' if len(served) > 1 else 'a workaround'} "
            f"also served, not the fix (it avoids the cause instead of repairing it): {names}")


def mark_deployment_changes(
    alternatives: list[dict[str, Any]], experiments: dict[str, Experiment], changes_deployment: Callable[[Change], bool]
) -> None:
    """A tested alternative that changed what is served (``changes_deployment``: knowledge/served.toml, the
    case's intent) is a workaround whatever generator proposed it: it is never reported as another root
    fix (the caller sorts them again)."""
    for a in alternatives:
        e = experiments.get(a.get("experiment_id") or "")
        ch = e.change if e is not None else None
        if ch is not None and changes_deployment(ch):
            a["workaround"], a["cost"] = True, "high"
            a["note"] = a.get("note") or "changes what is served (the deployment the user asked for)"
