"""Whether a run's confirmed fix is the fix or a workaround (issue 20, points 3 and 5), for the ending
(``agent.planning.conclusion``, which also checks the changes of what is served): the changes adopted
past blockers on the way to it, a change the ledger calls a workaround, and a broad switch-off
(knowledge/switches.toml ``[[broad]]``) in the fix or in a blocker it needed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.domain.models import Baseline, Change, Conclusion, Experiment, Hypothesis, Outcome, value_key
from agent.planning.in_play import Subsystem, load_subsystems, subsystems_of_frame
from agent.planning.required import required_by_error
from agent.planning.switches import Broad, broad_switch, load_switches

__all__ = ["blockers", "drop_beside_implicated", "exhausted", "is_workaround", "narrowest_words",
           "workaround_only", "workaround_verdict"]

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


def blocker_changes(original: Baseline, fix_exp: Experiment) -> list[Change]:
    """The changes ``blockers`` lists, as changes (its ``change`` text left out)."""
    return [Change.model_validate({k: v for k, v in b.items() if k != "change"}) for b in blockers(original, fix_exp)]


def broad_blocker(original: Baseline, fix_exp: Experiment, outcomes: Iterable[Outcome] = ()) -> bool:
    """Whether a change adopted past a blocker on the way to the fix (``blockers``) is a broad switch-off
    (knowledge/switches.toml ``[[broad]]``) that no failed launch among ``outcomes`` stated as required
    (``required_by_error``): the fix then stands on a workaround, whatever it is itself."""
    seen = list(outcomes)
    return any(broad_switch(ch) is not None and not required_by_error(ch, seen)
               for ch in blocker_changes(original, fix_exp))


def exhausted(broad: Broad, fix_exp: Experiment, experiments: Mapping[str, Experiment],
              outcomes: Mapping[str, Outcome], platform: str | None) -> list[Experiment]:
    """The failed tests that leave nothing narrower inside ``broad`` (a ``closed`` broad switch-off,
    knowledge/switches.toml): for each ``[[switch]]`` of ``platform`` that ``broad`` turns off, a test
    from the configuration the switch-off fixed (``fix_exp.baseline``, where the implementation in force
    failed) that selected the switch's other implementation and failed too. Every implementation the
    switch-off takes out failed on this deployment, so the switch-off is the narrowest change that serves:
    the fix (issue 20, point 5). ``[]`` when ``broad`` is not closed, the platform is unknown, no switch of
    it is read on the platform, or one alternative was not tested or served."""
    switches = [s for s in load_switches() if platform in s.platforms and set(s.turned_off_by) & set(broad.names)]
    if not broad.closed or platform is None or not switches:
        return []
    base = fix_exp.baseline
    failed: list[Experiment] = []
    for sw in switches:
        in_force = base.value(sw.kind, sw.name)
        other = sw.other if in_force is None or str(in_force).lower() == sw.default.lower() else sw.default
        test = next((e for e in experiments.values()
                     if e.purpose == "test" and e.baseline == base and e.change is not None
                     and (e.change.kind, e.change.name) == (sw.kind, sw.name)
                     and str(e.change.after).lower() == other.lower()
                     and (o := outcomes.get(e.id)) is not None and o.stage not in ("ok", "infra_error")), None)
        if test is None:
            return []
        failed.append(test)
    return failed


def narrowest_words(broad: Broad, failed: list[Experiment]) -> str:
    """The ending's sentence on a broad switch-off that is the fix (``exhausted``): which implementations
    failed where, so a reader sees why nothing narrower is left."""
    tried = ", ".join(f"{e.change.describe()} in {e.id}" for e in failed if e.change is not None)
    return (f"{broad.names[0]} is the fix, not a workaround: it turns off {broad.what}, and every implementation "
            f"of it on this platform failed (the one in force in the failing run, the other with {tried}), so "
            "no narrower change inside it is left")


def is_workaround(fix_exp: Experiment, original: Baseline, hyps: list[Hypothesis],
                  narrowest: bool = False, outcomes: Iterable[Outcome] = ()) -> bool:
    """Whether the fix is a workaround: the ledger calls it one (an intervention making it says so, as
    the planner ranks fixes, ``agent.planning.confirm.FixKeeper._fix_kind``), or it or a blocker adopted
    on the way to it is a broad switch-off (knowledge/switches.toml ``[[broad]]``: a whole subsystem or
    kernel library off avoids the blocker without naming it, issue 20 points 3 and 5). ``narrowest``: the
    fix is a broad switch-off every implementation inside which failed (``exhausted``): the fix itself is
    then no workaround, whatever an intervention says of the switch-off (a blocker adopted on the way
    still is). A switch-off a failed launch among ``outcomes`` stated as required (``required_by_error``)
    is no workaround, as fix or as blocker."""
    change = fix_exp.change
    assert change is not None
    outcomes = list(outcomes)  # read twice below
    if broad_blocker(original, fix_exp, outcomes):
        return True
    if required_by_error(change, outcomes):
        return False  # what the engine's refusal asks for, whatever a remedy's reading called it
    if broad_switch(change) is not None:
        return not narrowest  # what made it a workaround (a narrower change may exist) is settled either way
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


def workaround_verdict(
    fix_exp: Experiment,
    original: Baseline,
    hyps: list[Hypothesis],
    history: tuple[dict[str, Experiment], dict[str, Outcome]],
    platform: str | None,
    tuned: tuple[bool, str] | None = None,
) -> tuple[bool, str]:
    """Whether a confirmed fix that keeps the deployment is only a workaround, and the words the ending's
    reason gains ("" for none): a feature dropped beside the user's implicated setting
    (``drop_beside_implicated``) is a workaround; a broad switch-off is the fix only when nothing narrower
    is left (``exhausted``), else ``is_workaround`` decides. ``history``: the run's experiments and
    outcomes by id; ``platform``: the run's platform id (``served.run_platform``). A switch of the
    implementation the user chose and tuned is a workaround until that tuning was tested and failed, and
    then the fix: ``tuned`` is that verdict (``agent.planning.own_tuning.tuning_verdict``), None when the
    user tuned nothing of the implementation the fix left."""
    experiments, outcomes = history
    beside = drop_beside_implicated(fix_exp, original, experiments, outcomes)
    if beside is not None:
        return True, (f"the failure it avoided implicates the user's {beside}: the two together fail, and "
                      "dropping the feature avoids that without a fix of it")
    if tuned is not None and not broad_blocker(original, fix_exp, outcomes.values()):
        return tuned
    broad = broad_switch(fix_exp.change) if fix_exp.change else None
    narrowed = exhausted(broad, fix_exp, experiments, outcomes, platform) if broad else []
    if is_workaround(fix_exp, original, hyps, narrowest=bool(narrowed), outcomes=list(outcomes.values())):
        return True, ""
    return False, narrowest_words(broad, narrowed) if broad is not None and narrowed else ""


def workaround_only(
    base: Conclusion,
    reason: str,
    untested: list[dict[str, Any]],
    fixed: tuple[Experiment, Experiment],
    tested: tuple[dict[str, Experiment], dict[str, Outcome]],
    original: Baseline,
    implicated: dict[str, Any] | None,
    changes_deployment: str | None = None,
) -> Conclusion:
    """The ending when only a workaround held: it avoids the broken part without naming the cause, so the
    root cause is not isolated (the workaround is reported as an alternative that fixed it).
    ``changes_deployment``: the setting it changed defines what is served or the user needs it
    (knowledge/served.toml, the case's intent), so it is a workaround that changes the deployment.
    ``fixed``: the experiment of the workaround and its confirmation; ``tested``: the run's experiments and
    outcomes by id; ``original``: the case's baseline (the blockers
    passed on the way to the workaround are named with it); ``implicated``: what the last failure blames
    (``agent.planning.blame.implicated_of``)."""
    (fix_exp, confirm), (experiments, outcomes) = fixed, tested
    assert fix_exp.change is not None
    broad = broad_switch(fix_exp.change)
    what = (f"only a change of what is served avoided the failure ({changes_deployment} changed: a workaround "
            "that changes the deployment; " if changes_deployment else
            f"only a workaround avoided the failure (a broad switch-off: it turns off {broad.what}, a workaround "
            "until a narrower change inside it is found, and none served; " if broad else "only a workaround avoided the failure (")
    reverted = [f"{e.change.describe()} in {e.id}" for e in experiments.values()
                if e.purpose == "test" and e.change is not None and e.change.after is None
                and e.baseline == fix_exp.baseline and e.id in outcomes and outcomes[e.id].stage != "ok"]
    tried = f" (reverting the user's own settings did not serve: {', '.join(reverted)})" if reverted else ""
    passed = blockers(original, fix_exp)
    past = f" past {', '.join(b['change'] for b in passed)} (a blocker passed first)" if passed else ""
    reason = "" if reason == "fix found and confirmed" else reason  # the workaround's own confirmation, said above
    return base.model_copy(
        update={
            "reason": f"{what}{fix_exp.change.describe()}{past}, confirmed by "
            f"{confirm.id}); the root cause is not isolated, no root fix found{tried}"
            + (f"; {reason}" if reason else ""),
            "blockers": passed,
            "untested": untested,
            "implicated": implicated,
            "alternatives": [
                {"change": fix_exp.change.describe(), "kind": fix_exp.change.kind, "name": fix_exp.change.name,
                 "workaround": True, "cost": "high" if changes_deployment else "medium",
                 "note": "changes what is served (the deployment the user asked for)" if changes_deployment else "",
                 "decisive": True, "experiment_id": fix_exp.id, "result": "fixed"}
            ],
        }
    )
