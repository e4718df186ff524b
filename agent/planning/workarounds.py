"""The root fix apart from the workarounds in a run's ending (issue 20, point 5): a change that served by
silencing a check, turning a part off or changing what is served (knowledge/served.toml, the case's
intent) is reported as a workaround, never as the fix or as another root fix
(``agent.planning.conclusion``)."""

from __future__ import annotations

from typing import Any

from agent.domain.case import Case
from agent.domain.models import Change, Experiment
from agent.planning.served import description_keeps, served_settings
from agent.planning.view import COST_ORDER

__all__ = ["mark_deployment_changes", "root_and_workarounds"]


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
    alternatives: list[dict[str, Any]], experiments: dict[str, Experiment], case: Case, checkpoint: dict[str, str]
) -> None:
    """A tested alternative that changed what is served (knowledge/served.toml, the case's intent) is a
    workaround whatever generator proposed it: it is never reported as another root fix."""
    served, keeps = served_settings(), description_keeps(case)
    for a in alternatives:
        e = experiments.get(a.get("experiment_id") or "")
        ch = e.change if e is not None else None
        if ch is not None and served.changes_deployment(ch.kind, ch.name, ch.after, keeps=keeps,
                                                        checkpoint=checkpoint, before=ch.before):
            a["workaround"], a["cost"] = True, "high"
            a["note"] = a.get("note") or "changes what is served (the deployment the user asked for)"
    alternatives.sort(key=lambda a: (a["workaround"], COST_ORDER.get(a["cost"], 1)))
