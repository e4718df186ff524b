"""The root fix apart from the workarounds in a run's ending (issue 20, point 5): a change that served by
silencing a check, turning a part off or changing what is served (knowledge/served.toml, the case's
intent) is reported as a workaround, never as the fix or as another root fix
(``agent.planning.conclusion``). A broad switch-off (knowledge/switches.toml ``[[broad]]``: every CUDA
graph, every custom all-reduce, a whole kernel library off) is one too: after it served, the narrower
changes inside the subsystems it took out are tried first (``agent.planning.intent.narrower_keys``, up
to two launches), and if none served the run ends not_isolated naming it (points 3 and 5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.domain.models import Change, Experiment

__all__ = ["mark_deployment_changes", "mark_own_alternatives", "root_and_workarounds"]




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


def mark_own_alternatives(alternatives: list[dict[str, Any]], fix: Change) -> None:
    """When the fix removes the user's own setting (back to the engine's default), another value of that
    setting that also served is a workaround: it changes the user's choice where removing it is the
    smaller change from the user's command (``agent.planning.own_revert``)."""
    if fix.after is not None:
        return
    for a in alternatives:
        if a.get("kind") == fix.kind and a.get("name") == fix.name and a.get("result") == "fixed":
            a["workaround"] = True
            a["note"] = a.get("note") or ("another value of the user's own choice: removing the user's setting "
                                          "also serves and changes less of the user's command")
