"""Whether a run's confirmed fix is the fix or a workaround (issue 20, points 3 and 5), for the ending
(``agent.planning.conclusion``, which also checks the changes of what is served): the changes adopted
past blockers on the way to it, a change the ledger calls a workaround, and a broad switch-off
(knowledge/switches.toml ``[[broad]]``) in the fix or in a blocker it needed."""

from __future__ import annotations

from typing import Any

from agent.domain.models import Baseline, Change, Experiment, Hypothesis, value_key
from agent.planning.switches import broad_switch

__all__ = ["blockers", "is_workaround"]


def blockers(original: Baseline, fix_exp: Experiment) -> list[dict[str, Any]]:
    """The changes the fix was tested on top of: where the fixing experiment's baseline differs from the
    case's, the planner adopted a change that moved the failure past a blocker. Each is needed with the
    fix (a chain); one dict per variable: kind, name, before (the case's), after (None: removed)."""
    out: list[dict[str, Any]] = []
    for kind, mine, theirs in (("flag", original.flags, fix_exp.baseline.flags),
                               ("env", original.env, fix_exp.baseline.env)):
        for name in sorted(set(mine) | set(theirs)):
            if fix_exp.change and fix_exp.change.kind == kind and fix_exp.change.name == name:
                continue
            before, after = mine.get(name), theirs.get(name)
            if value_key(before) != value_key(after):
                change = Change(kind=kind, name=name, before=before, after=after)  # type: ignore[arg-type]
                out.append({**change.model_dump(mode="json"), "change": change.describe()})
    return out

def is_workaround(fix_exp: Experiment, original: Baseline, hyps: list[Hypothesis]) -> bool:
    """Whether the fix is a workaround: the ledger calls it one (an intervention making it says so, as
    the planner ranks fixes, ``agent.planning.confirm.FixKeeper._fix_kind``), or it or a blocker adopted
    on the way to it is a broad switch-off (knowledge/switches.toml ``[[broad]]``: a whole subsystem or
    kernel library off avoids the blocker without naming it, issue 20 points 3 and 5)."""
    change = fix_exp.change
    assert change is not None
    adopted = [Change.model_validate({k: v for k, v in b.items() if k != "change"}) for b in blockers(original, fix_exp)]
    if any(broad_switch(ch) is not None for ch in [change, *adopted]):
        return True
    key = value_key(change.after)
    for h in hyps:
        for iv in h.interventions:
            if iv.kind != change.kind or change.name not in iv.names or not iv.workaround:
                continue
            if iv.derive or any(value_key(v) == key for v in iv.values):
                return True
    return False
