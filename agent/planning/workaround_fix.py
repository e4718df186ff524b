"""Whether a run's confirmed fix is the fix or a workaround (issue 20, points 3 and 5), for the ending
(``agent.planning.conclusion``, which also checks the changes of what is served): the changes adopted
past blockers on the way to it, a change the ledger calls a workaround, and a broad switch-off
(knowledge/switches.toml ``[[broad]]``) in the fix or in a blocker it needed."""

from __future__ import annotations

from typing import Any

from agent.domain.models import Baseline, Change, Experiment, Hypothesis, Outcome, value_key
from agent.planning.in_play import Subsystem, load_subsystems, subsystems_of_frame
from agent.planning.switches import broad_switch

__all__ = ["blockers", "drop_beside_implicated", "is_workaround"]

_OFF = frozenset({"false", "none", "0", "off", ""})


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


def drop_beside_implicated(fix_exp: Experiment, original: Baseline, experiments: dict[str, Experiment],
                           outcomes: dict[str, Outcome]) -> str | None:
    """The user's own setting the failure implicated while the fix dropped another feature, as
    ``--flag value (the failure ran in module.function, code of SUBSYSTEM it configures)``; else None.

    The fix turns off a feature the case turned on (it removes the flag that puts a subsystem in play,
    ``in_play_any`` ``{ setting = F }`` of knowledge/subsystems.toml), yet the failure it avoided never ran
    in that feature's code (no SGLang frame of its tracebacks is in the subsystem's ``modules``) and did
    run in the code of another subsystem a setting of the case configures (``--pp-size 2`` and the
    pipeline-parallel event loop). The evidence then points at the two together: dropping the feature
    avoids the failure without touching what the frames name, a workaround (issue 20, point 5), not the
    fix. Unknown code (a subsystem without ``modules``, a failure without SGLang frames) says nothing.
    """
    change = fix_exp.change
    if change is None or change.kind != "flag" or value_key(change.after) not in (value_key(None), value_key(False)):
        return None
    if str(original.flags.get(change.name, "")).lower() in _OFF:
        return None
    know = load_subsystems()
    dropped = next((s for s in know.subsystems if s.modules is not None and any(
        c.get("setting") == change.name and len(c) == 1 for c in s.in_play_any)), None)
    if dropped is None:
        return None
    failed = [outcomes[e.id] for e in experiments.values() if e.id in outcomes and e.config() == fix_exp.baseline
              and outcomes[e.id].stage not in ("ok", "infra_error")]
    if not failed:
        return None
    frames = [f"{fr.module}.{fr.function}" for tb in failed[-1].tracebacks for fr in tb.frames
              if fr.module and fr.package == "sglang"]
    if not frames or any(dropped.modules is not None and dropped.modules.search(w) for w in frames):
        return None
    for where in frames:
        for sub in subsystems_of_frame(where, know):
            if sub.id != dropped.id and (own := _own_setting(sub, original, change.name)) is not None:
                return f"{own} (the failure ran in {where}, code of {sub.id} it configures)"
    return None


def _own_setting(sub: Subsystem, original: Baseline, dropped: str) -> str | None:
    """A flag of ``sub`` the case sets on (``--pp-size 2``), other than the dropped one; else None."""
    for name, value in sorted(original.flags.items()):
        if name != dropped and sub.flags is not None and sub.flags.search(name) and str(value).lower() not in _OFF:
            return name if value is True else f"{name} {value}"
    return None
