"""A run's conclusion, decided from its state: root cause and minimal fix when a confirmed fix exists
(isolated, or only a workaround when the fix changes what is served or is a workaround), else what was
ruled out and what is left (not isolated, stopped, error), with the alternatives and their cost.

The conclude node (``agent.run.nodes.conclude``) writes it and adds the FINDINGS.md entry; re-deciding a
recorded run (``agent.review.redecide``) compares it with the recorded one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.domain.case import Case
from agent.domain.models import (
    Change,
    Conclusion,
    Experiment,
    Hypothesis,
    Intervention,
    Outcome,
    Rejection,
)
from agent.planning.blame import blamed, implicated_of, missing_words
from agent.planning.budgets import removes_budget_on_purpose
from agent.planning.foreign import ruled_out_by_platform
from agent.planning.graded import judged_against_failure
from agent.planning.llm_spec import usage_summary
from agent.planning.misspelt import spelt_right
from agent.planning.observations import (
    import_time_failure,
    load_level,
    load_probe_for,
    seen_flaky,
    sibling_confirmations,
    timeout_control,
)
from agent.planning.own_tuning import tuning_verdict
from agent.planning.required import required_by_error
from agent.planning.served import OnHost, host_refusals, run_platform, served_settings, user_keeps
from agent.planning.values import ValueEvidence, derive, ran_out_of_memory
from agent.planning.view import COST_ORDER
from agent.planning.workaround_fix import blocker_changes, blockers, workaround_only, workaround_verdict
from agent.planning.workarounds import mark_deployment_changes, mark_own_alternatives, root_and_workarounds
from tools.flags import FlagCatalog

if TYPE_CHECKING:
    from agent.run.state import RunState


def conclusion_of(state: RunState, flags: FlagCatalog | None = None) -> Conclusion:
    """The run's ending from its state: root cause and fix when a confirmed fix exists, else what was
    ruled out (an isolated one gets its FINDINGS.md entry from the conclude node,
    ``agent.run.nodes.conclude.build_conclusion``). ``flags``: the host's flag catalog when it was read
    (an intent value the engine refused where no setting offers another way is not kept,
    ``agent.planning.served.user_keeps``)."""
    hyps = [Hypothesis.model_validate(h) for h in state.get("hypotheses", [])]
    experiments = {e["id"]: Experiment.model_validate(e) for e in state.get("experiments", [])}
    outcomes = {o.experiment_id: o for o in judged_against_failure(Outcome.model_validate(o) for o in state.get("outcomes", []))}
    rejections = [Rejection.model_validate(r) for r in state.get("rejections", [])]
    base = _base_conclusion(state, hyps, rejections)
    if state.get("status") == "error":
        return base.model_copy(update={"status": "error", "reason": state.get("error") or "error"})
    fix_exp = _fix_experiment(experiments, outcomes)
    confirm, refuted_by = _confirmation(state, fix_exp, experiments, outcomes)
    reason = _fix_reason(state.get("conclude_reason") or "", fix_exp, confirm, refuted_by)
    untested = [
        {"id": h.id, "statement": h.statement, "posterior": h.posterior,
         "why": _why_open(h, rejections, confirm, fix_exp.change if confirm and fix_exp else None)}
        for h in sorted(hyps, key=lambda h: -h.posterior)
        if h.status == "open"
    ]
    if state.get("status") == "stopped":
        return base.model_copy(update={"status": "stopped", "reason": reason, "untested": untested})
    if not (confirm and fix_exp and fix_exp.change):
        base, untested = _ruled_out_by_import(base, untested, hyps, experiments, outcomes)
        base, untested = ruled_out_by_platform(base, untested, hyps, experiments, outcomes, state)
        return blamed(_not_isolated(base, reason, untested, experiments, outcomes), state)
    case = Case.model_validate(state["case"])
    keeps = user_keeps(case, flags, outcomes.values())
    deployment = _changes_deployment(fix_exp, case, (state.get("fingerprint") or {}).get("checkpoint") or {},
                                     OnHost(run_platform(state.get("fingerprint"), fix_exp.config()),
                                            host_refusals(outcomes.values())), keeps, flags, outcomes.values())
    if deployment:
        return blamed(workaround_only(base, reason, untested, (fix_exp, confirm), (experiments, outcomes),
                                      case.baseline, implicated_of(experiments, outcomes),
                                      changes_deployment=deployment), state)
    platform = run_platform(state.get("fingerprint"), fix_exp.config())
    around, why = workaround_verdict(fix_exp, Case.model_validate(state["case"]).baseline, hyps,
                                     (experiments, outcomes), platform,
                                     tuning_verdict(fix_exp, case.baseline, experiments, outcomes, flags))
    reason = joined(reason, why) if why else reason
    if around:
        return blamed(workaround_only(base, reason, untested, (fix_exp, confirm), (experiments, outcomes),
                                      case.baseline, implicated_of(experiments, outcomes)), state)
    return _isolated(state, base, reason, untested, _Tested(hyps, experiments, outcomes), fix_exp, confirm, keeps)


def _fix_experiment(experiments: dict[str, Experiment], outcomes: dict[str, Outcome]) -> Experiment | None:
    """The last test whose configuration served (in the test itself, or in a later launch of it unchanged:
    a request that timed out in the test answered on the re-run, ``HistoryReader._rerun``) and that no re-run
    of it refuted; else the last that served, whose refuting re-run the ending then names. A root-cause
    alternative that served by luck after a workaround, and failed its re-run, does not hide the workaround
    the run went on to confirm (the planner's ``FixKeeper`` keeps the earlier fix the same way)."""
    served = [e.config() for e in experiments.values() if outcomes.get(e.id) and outcomes[e.id].stage == "ok"]
    tests = [e for e in experiments.values() if e.purpose == "test" and e.change and e.id in outcomes]
    fixes = [e for e in reversed(tests) if any(e.config() == c for c in served)]
    refuted = [e.baseline for e in experiments.values() if e.purpose == "confirm" and e.id in outcomes
               and outcomes[e.id].stage not in ("ok", "infra_error")]
    return next((e for e in fixes if e.config() not in refuted), fixes[0] if fixes else None)


@dataclass(frozen=True)
class _Tested:
    """What the run tested: the ledger, and the experiments and outcomes by experiment id."""

    hyps: list[Hypothesis]
    experiments: dict[str, Experiment]
    outcomes: dict[str, Outcome]


def joined(reason: str, extra: str) -> str:
    """``reason`` with ``extra`` appended after a semicolon (just ``extra`` when reason is empty)."""
    if not extra:
        return reason
    return f"{reason}; {extra}" if reason else extra


def _base_conclusion(state: RunState, hyps: list[Hypothesis], rejections: list[Rejection]) -> Conclusion:
    """The not-isolated conclusion every ending starts from: what was refuted, rejected, edited and spent."""
    return Conclusion(
        status="not_isolated",
        refuted=[
            {
                "id": h.id,
                "statement": h.statement,
                "component": h.component,
                "evidence": [e.model_dump(mode="json") for e in h.evidence if e.effect == "refutes"],
            }
            for h in hyps
            if h.status == "refuted"
        ],
        launches=state.get("launches", 0),
        # the run's own figure (kept to the ms), so the conclusion's whole host-seconds are the run's: rounding
        # a figure already rounded to 0.1 could show 1314 where the run's total shows 1315
        host_seconds=round(state.get("host_seconds", 0.0), 3),
        rejected=[
            {
                "experiment_id": r.experiment_id,
                "change": r.change.describe() if r.change else None,
                "reason": r.reason,
            }
            for r in rejections
        ],
        edited=list(state.get("edits", [])),
        llm_usage=usage_summary(state.get("planner")),
    )


def _fix_reason(
    reason: str, fix_exp: Experiment | None, confirm: Experiment | None, refuted_by: str | None
) -> str:
    """The conclude reason extended with why a served fix is not the fix (re-run failed) or unconfirmed."""
    if refuted_by is not None and fix_exp is not None and fix_exp.change is not None:
        reason = joined(
            reason,
            f"{fix_exp.change.describe()} served in {fix_exp.id} but {refuted_by} did not hold, so "
            "it is not the fix",
        )
    if fix_exp and fix_exp.change and not confirm and refuted_by is None:  # not (fully) confirmed
        reason = joined(
            reason, f"{fix_exp.change.describe()} served correctly in {fix_exp.id} but was not confirmed by a re-run"
        )
    return reason


def _not_isolated(
    base: Conclusion,
    reason: str,
    untested: list[dict[str, Any]],
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
) -> Conclusion:
    """The ending without a confirmed fix, naming a missing import no flag avoids when that is the failure."""
    implicated = implicated_of(experiments, outcomes)
    if implicated:
        reason = joined(reason, missing_words(implicated))
    return base.model_copy(update={"reason": reason or "no fix found", "untested": untested, "implicated": implicated})


def _ruled_out_by_import(
    base: Conclusion,
    untested: list[dict[str, Any]],
    hyps: list[Hypothesis],
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
) -> tuple[Conclusion, list[dict[str, Any]]]:
    """When the last failure is an import in a chain of module-level imports every launch runs (no
    argument decides whether it runs, ``agent.planning.observations.import_time_failure``), the open hypotheses that only a launch flag would test are
    ruled out by that, not left "not tested": no flag reaches the failing code. Those with an
    environment-variable test stay open (a variable can change what is imported)."""
    failing = [outcomes[e.id] for e in experiments.values()
               if e.id in outcomes and outcomes[e.id].stage not in ("ok", "infra_error")]
    importing = import_time_failure(failing[-1]) if failing else None
    if importing is None:
        return base, untested
    by_id = {h.id: h for h in hyps}
    flag_only = {
        u["id"] for u in untested
        if (h := by_id.get(u["id"])) is not None and h.interventions and all(iv.kind == "flag" for iv in h.interventions)
    }
    if not flag_only:
        return base, untested
    detail = (
        f"the failure happens while Python imports {importing}, in module-level imports every launch runs "
        f"({failing[-1].experiment_id}): no flag reaches the failing code"
    )
    ruled = [
        {
            "id": h.id,
            "statement": h.statement,
            "component": h.component,
            "evidence": [{"kind": "fact", "detail": detail, "experiment_id": failing[-1].experiment_id,
                          "lines": [], "effect": "refutes"}],
        }
        for h in sorted((by_id[i] for i in flag_only), key=lambda h: (-h.posterior, h.id))
    ]
    rest = [u for u in untested if u["id"] not in flag_only]
    return base.model_copy(update={"refuted": [*base.refuted, *ruled]}), rest


def _isolated(
    state: RunState,
    base: Conclusion,
    reason: str,
    untested: list[dict[str, Any]],
    tested: _Tested,
    fix_exp: Experiment,
    confirm: Experiment,
    keeps: set[str],
) -> Conclusion:
    """The isolated ending: the confirmed cause (or the fix itself), the fix with its original value, and
    the alternatives (``keeps``: the settings the user keeps, ``user_keeps``)."""
    assert fix_exp.change is not None
    hyps, experiments, outcomes = tested.hyps, tested.experiments, tested.outcomes
    cause = max((h for h in hyps if h.status == "confirmed"), key=lambda h: h.posterior, default=None)
    case = Case.model_validate(state["case"])
    original = case.baseline
    fix = fix_exp.change.model_copy(update={"before": original.value(fix_exp.change.kind, fix_exp.change.name)})
    fingerprint = state.get("fingerprint")
    alternatives = _alternatives(cause, fix_exp, hyps, experiments, outcomes, fingerprint)
    served = served_settings()
    checkpoint = (fingerprint or {}).get("checkpoint") or {}
    platform = run_platform(fingerprint, fix_exp.config())
    mark_deployment_changes(alternatives, experiments, lambda ch: served.changes_deployment(
        ch.kind, ch.name, ch.after, keeps=keeps, checkpoint=checkpoint, before=ch.before,
        platform=OnHost(platform, host_refusals(outcomes.values())))
        or removes_budget_on_purpose(case, ch.kind, ch.name, ch.after) is not None)
    mark_own_alternatives(alternatives, fix)
    alternatives.sort(key=lambda a: (a["workaround"], COST_ORDER.get(a["cost"], 1)))
    return base.model_copy(
        update={
            "status": "isolated",
            "root_cause": {
                "component": cause.component if cause else "unknown",
                "statement": cause.statement if cause else f"the failure goes away with {fix.describe()}",
                "hypothesis_id": cause.id if cause else None,
            },
            "fix": fix,
            "blockers": blockers(original, fix_exp),
            "fix_experiment_id": fix_exp.id,
            "confirmation_experiment_id": confirm.id,
            "reason": joined(reason, root_and_workarounds(fix, alternatives)),
            "untested": untested,
            "alternatives": alternatives,
        }
    )


def _changes_deployment(fix_exp: Experiment, case: Case, checkpoint: dict[str, str],
                        platform: str | OnHost | None, keeps: set[str], flags: FlagCatalog | None = None,
                        refused: Iterable[Outcome] = ()) -> str | None:
    """The setting the fix (or a blocker adopted on the way to it) changed that defines what is served
    (knowledge/served.toml) or that the user needs (``keeps``: the case's intent, ``user_keeps``), as
    ``NAME before → after``; else None. A change a failed launch among ``refused`` states as required
    (``agent.planning.required``) is what the engine asks for, not counted."""
    refused = list(refused)
    served = served_settings()
    original = case.baseline
    changes = [fix_exp.change] if fix_exp.change else []
    changes += blocker_changes(original, fix_exp)
    for ch in changes:
        if ch is None or spelt_right(original, ch, flags):
            continue  # the flag a misspelt one of the user's meant, at the user's value: what they asked for
        if required_by_error(ch, refused):
            continue  # the engine refused the user's combination without it: what the engine asks for
        if served.changes_deployment(ch.kind, ch.name, ch.after, keeps=keeps, checkpoint=checkpoint,
                                     before=ch.before, platform=platform) or removes_budget_on_purpose(case, ch.kind, ch.name, ch.after):
            return ch.name
    return None


def _confirmation(
    state: RunState,
    fix_exp: Experiment | None,
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
) -> tuple[Experiment | None, str | None]:
    """(the confirmation that completes the fix, the re-run that refuted it).

    A fix is confirmed by passing re-runs of its configuration: two when the case says the failure is
    intermittent or the run has seen the same configuration both pass and fail, else one. A re-run that
    failed refutes it: a fix a later confirmation refuted is never reported as isolated (issue 10).
    """
    if fix_exp is None:
        return None, None
    config = fix_exp.config()
    case = Case.model_validate(state["case"])
    # a confirmation counts only with the case's full [reproduce] load on it (issue 20, point 6)
    level = load_level(case)
    load_id = load_probe_for(case, level).id if level is not None and case.probes else None
    reruns = [(e, outcomes[e.id]) for e in experiments.values()
              if e.purpose == "confirm" and e.baseline == config and e.id in outcomes
              and (load_id is None or any(p.id == load_id for p in e.probes))]
    failed = next((e.id for e, o in reruns if o.stage not in ("ok", "infra_error")), None)
    if failed is not None:
        return None, f"its re-run {failed}"
    weak, served_without, control_failed = timeout_control(fix_exp, list(experiments.values()), outcomes)
    if served_without is not None:
        return None, f"the control {served_without} (the configuration without it served too)"
    ids = {e.id for e, o in reruns if o.stage == "ok"}
    ids |= {e.id for e in sibling_confirmations(fix_exp, experiments, outcomes, load_id)}
    passing = [e for e in experiments.values() if e.id in ids]  # in the order they ran
    flaky = seen_flaky(experiments, outcomes)
    from agent.planning.observations import confirmations_required, speaks_of_flakiness

    needed = 1
    # a fix of a request timeout (weak evidence: host load) is confirmed as on a flaky failure, and
    # against the timeout: its configuration without the change still fails
    said = case.reproduce.intermittent or speaks_of_flakiness(case)
    if said or flaky or weak:
        needed = confirmations_required([e for e in experiments.values() if e.id in outcomes], outcomes,
                                        said_intermittent=said)
    return (passing[-1] if len(passing) >= needed and (control_failed or not weak) else None), None


def _why_open(
    h: Hypothesis, rejections: list[Rejection], confirm: Experiment | None, fix: Change | None = None
) -> str:
    """Why a hypothesis is still open at the end: its test was rejected, confounded, inconclusive, or
    never run (deprioritised by a confirmed fix, or not reached); or the confirmed fix changed its own
    variable another way (``fix``), which neither confirms nor refutes it."""
    if fix is not None and any(iv.kind == fix.kind and fix.name in iv.names for iv in h.interventions):
        return (f"the fix ({fix.describe()}) changed this hypothesis's own variable another way than it "
                "proposed, so it is neither confirmed nor ruled out")
    for r in rejections:
        if r.change is not None and any(
            r.change.kind == iv.kind and r.change.name in iv.names for iv in h.interventions
        ):
            return f"its test ({r.change.describe()}) was rejected: {r.reason}"
    tried = [e for e in h.evidence if e.kind == "experiment" and e.experiment_id]
    if tried and tried[-1].detail.startswith("confounded: "):
        return f"not separated from the fix ({tried[-1].experiment_id}): {tried[-1].detail[12:]}"
    if tried and tried[-1].effect == "weakens":
        return f"deprioritised: {tried[-1].detail} ({tried[-1].experiment_id})"
    if tried:
        return f"tested without a verdict ({tried[-1].experiment_id}: {tried[-1].detail})"
    return "deprioritised: a confirmed fix explains the failure" if confirm else "not tested"


def _alternatives(
    cause: Hypothesis | None,
    fix_exp: Experiment,
    hyps: list[Hypothesis],
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
    fingerprint: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Other changes that avoid the failure, for the conclusion (see ``Conclusion.alternatives``).

    From the root cause's catalog interventions other than the fix (with what this run saw of them; an
    untested one's value derived from the failing run's evidence, as the planner would choose it) and
    from other tested changes that also fixed the failure. ``decisive`` False marks a change the catalog
    says may help, not must. Sorted root fix first, then by performance cost.
    """
    assert fix_exp.change is not None
    seen: set[tuple[str, str]] = {(fix_exp.change.kind, fix_exp.change.name)}
    out = _catalog_alternatives(cause, fix_exp, experiments, outcomes, fingerprint, seen)
    out += _tested_alternatives(cause, fix_exp, hyps, experiments, outcomes, seen)
    out.sort(key=lambda a: (a["workaround"], COST_ORDER.get(a["cost"], 1)))
    return out


def _catalog_alternatives(
    cause: Hypothesis | None,
    fix_exp: Experiment,
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
    fingerprint: dict[str, Any] | None,
    seen: set[tuple[str, str]],
) -> list[dict[str, Any]]:
    """The root cause's other interventions, each with what this run saw of it (adds to ``seen``)."""
    # The failing run of the fix's baseline: the evidence a derived value is computed from.
    failing = next(
        (
            outcomes[e.id]
            for e in experiments.values()
            if e.baseline == fix_exp.baseline and e.id in outcomes and outcomes[e.id].stage != "ok"
        ),
        None,
    )
    mib = (fingerprint or {}).get("memory_total_mib")
    evidence = ValueEvidence(
        facts=dict(failing.facts) if failing else {},
        total_gib=float(mib) / 1024 if mib else None,
        flags=dict(fix_exp.baseline.flags),
        cpu_count=(fingerprint or {}).get("cpu_count"),
        out_of_memory=failing is not None and ran_out_of_memory(failing),
    )
    roles = (fingerprint or {}).get("flag_roles") or {}

    def spelled(iv: Intervention) -> str:
        """The host's spelling of the intervention's flag (its role's, when it names a role)."""
        return str(roles.get(iv.role) or iv.names[0]) if iv.role else iv.names[0]

    out: list[dict[str, Any]] = []
    for iv in cause.interventions if cause else []:
        if any((iv.kind, n) in seen for n in iv.names):
            continue
        seen.update((iv.kind, n) for n in iv.names)
        hit = _tried_from_fix_baseline(iv.kind, iv.names, fix_exp, experiments, outcomes)
        if hit:
            e, o = hit
            assert e.change is not None
            change, result, eid = e.change.describe(), ("fixed" if o.stage == "ok" else "did not fix"), e.id
        else:
            before = fix_exp.baseline.value(iv.kind, spelled(iv))
            after = iv.values[0] if iv.values else True
            if iv.derive:
                derived, _ = derive(iv.derive, evidence)
                after = derived if derived is not None else after
            change = Change(kind=iv.kind, name=spelled(iv), before=before, after=after).describe()
            result, eid = "not tested", None
        if result == "did not fix":
            continue  # a change that left the failure in place is no alternative
        name = e.change.name if hit and e.change else spelled(iv)  # the host's spelling
        out.append(_alternative(change, iv.kind, name, iv, decisive=iv.decisive, eid=eid, result=result))
    return out


def _tested_alternatives(
    cause: Hypothesis | None,
    fix_exp: Experiment,
    hyps: list[Hypothesis],
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
    seen: set[tuple[str, str]],
) -> list[dict[str, Any]]:
    """Other tests from the fix's baseline that also fixed the failure (adds to ``seen``)."""
    assert fix_exp.change is not None
    out: list[dict[str, Any]] = []
    for e in experiments.values():
        ran = outcomes.get(e.id)
        if e.purpose != "test" or not e.change or e.id == fix_exp.id or not ran or ran.stage != "ok":
            continue
        if e.baseline != fix_exp.baseline:  # fixed a different configuration: not a like-for-like alternative
            continue
        if (e.change.kind, e.change.name) in seen and (e.change.kind, e.change.name) != (fix_exp.change.kind, fix_exp.change.name):
            continue  # another value of the fix's own setting is kept: the user's choice changed, not removed
        seen.add((e.change.kind, e.change.name))
        known = _intervention_of(e.change.kind, e.change.name, cause, hyps)
        # decisive: it did fix it here
        out.append(_alternative(e.change.describe(), e.change.kind, e.change.name, known, decisive=True, eid=e.id))
    return out


def _alternative(
    change: str,
    kind: str,
    name: str,
    iv: Intervention | None,
    *,
    decisive: bool,
    eid: str | None,
    result: str = "fixed",
) -> dict[str, Any]:
    """One entry of ``Conclusion.alternatives`` (a change without a catalog intervention: low cost)."""
    return {
        "change": change,
        "kind": kind,
        "name": name,
        "workaround": bool(iv and iv.workaround),
        "cost": iv.cost if iv else "low",
        "note": iv.note if iv else "",
        "decisive": decisive,
        "experiment_id": eid,
        "result": result,
    }


def _intervention_of(kind: str, name: str, cause: Hypothesis | None, hyps: list[Hypothesis]) -> Intervention | None:
    """The catalog intervention that changes this variable (the root cause's first)."""
    for h in ([cause] if cause else []) + hyps:
        for iv in h.interventions:
            if iv.kind == kind and name in iv.names:
                return iv
    return None


def _tried_from_fix_baseline(
    kind: str,
    names: list[str],
    fix_exp: Experiment,
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
) -> tuple[Experiment, Outcome] | None:
    """The last test of this variable from the same baseline as the fix (comparable), with its outcome."""
    found = None
    for e in experiments.values():
        o = outcomes.get(e.id)
        if e.purpose == "test" and e.change and e.change.kind == kind and e.change.name in names and o:
            if e.baseline == fix_exp.baseline:
                found = (e, o)
    return found
