"""conclude: the run's ending: root cause and minimal fix when a confirmed fix exists, else what was
ruled out and what is left; the ready-to-append FINDINGS.md entry of an isolated run.

Side effects: stops every server this run still has running (``Runtime.stop_sessions``, which writes
``server.stopped``), so nothing outlives the run and the stop is recorded before its end; reads the
run's transcript back to build the FINDINGS.md entry; transcript ``conclusion`` and ``run.ended``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.case import Case
from agent.findings import FindingsWriteError, entry_for
from agent.llm_planner import usage_summary
from agent.models import Change, Conclusion, Experiment, Hypothesis, Intervention, Outcome, Rejection
from agent.planner import COST_ORDER
from agent.recorded import RecordedRun
from agent.runtime import Runtime
from agent.state import RunState, hypotheses_of
from agent.transcript import TranscriptError
from agent.values import ValueEvidence, derive
from agent.wire import to_payload


def conclude(state: RunState, rt: Runtime) -> dict[str, Any]:
    """The conclude node: see the module docstring."""
    rt.stop_sessions()  # nothing outlives its run, and the stop is recorded before the run's end
    c = build_conclusion(state)
    rt.transcript.emit("conclusion", to_payload("conclusion", c), node="conclude")
    rt.transcript.emit(
        "run.ended",
        {"status": c.status, "launches": c.launches, "host_seconds": c.host_seconds, "reason": c.reason},
        node="conclude",
    )
    return {"conclusion": c.model_dump(mode="json"), "status": c.status}


def build_conclusion(state: RunState) -> Conclusion:
    """The run's ending: root cause and fix when a confirmed fix exists, else what was ruled out."""
    hyps = hypotheses_of(state)
    experiments = {e["id"]: Experiment.model_validate(e) for e in state.get("experiments", [])}
    outcomes = {o["experiment_id"]: Outcome.model_validate(o) for o in state.get("outcomes", [])}
    rejections = [Rejection.model_validate(r) for r in state.get("rejections", [])]
    base = Conclusion(
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
        host_seconds=round(state.get("host_seconds", 0.0), 1),
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
    if state.get("status") == "error":
        return base.model_copy(update={"status": "error", "reason": state.get("error") or "error"})
    reason = state.get("conclude_reason") or ""
    passed = [e for e in experiments.values() if outcomes.get(e.id) and outcomes[e.id].stage == "ok"]
    confirm = next((e for e in passed if e.purpose == "confirm"), None)
    fix_exp = next((e for e in reversed(passed) if e.purpose == "test" and e.change), None)
    untested = [
        {"id": h.id, "statement": h.statement, "posterior": h.posterior, "why": _why_open(h, rejections, confirm)}
        for h in sorted(hyps, key=lambda h: -h.posterior)
        if h.status == "open"
    ]
    if fix_exp and fix_exp.change and not confirm:  # a working change the run did not get to confirm
        unconfirmed = (
            f"{fix_exp.change.describe()} served correctly in {fix_exp.id} but was not confirmed by a re-run"
        )
        reason = f"{reason}; {unconfirmed}" if reason else unconfirmed
    if state.get("status") == "stopped":
        return base.model_copy(update={"status": "stopped", "reason": reason, "untested": untested})
    if not (confirm and fix_exp and fix_exp.change):
        return base.model_copy(update={"reason": reason or "no fix found", "untested": untested})
    cause = max((h for h in hyps if h.status == "confirmed"), key=lambda h: h.posterior, default=None)
    original = Case.model_validate(state["case"]).baseline
    fix = fix_exp.change.model_copy(update={"before": original.value(fix_exp.change.kind, fix_exp.change.name)})
    c = base.model_copy(
        update={
            "status": "isolated",
            "root_cause": {
                "component": cause.component if cause else "unknown",
                "statement": cause.statement if cause else f"the failure goes away with {fix.describe()}",
                "hypothesis_id": cause.id if cause else None,
            },
            "fix": fix,
            "fix_experiment_id": fix_exp.id,
            "confirmation_experiment_id": confirm.id,
            "reason": reason,
            "untested": untested,
            "alternatives": _alternatives(cause, fix_exp, hyps, experiments, outcomes, state.get("fingerprint")),
        }
    )
    c.findings_entry = findings_entry(state, c)
    return c


def _why_open(h: Hypothesis, rejections: list[Rejection], confirm: Experiment | None) -> str:
    """Why a hypothesis is still open at the end: its test was rejected, confounded, inconclusive, or
    never run (deprioritised by a confirmed fix, or not reached)."""
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
    out: list[dict[str, Any]] = []
    for e in experiments.values():
        ran = outcomes.get(e.id)
        if e.purpose != "test" or not e.change or e.id == fix_exp.id or not ran or ran.stage != "ok":
            continue
        if e.baseline != fix_exp.baseline:  # fixed a different configuration: not a like-for-like alternative
            continue
        if (e.change.kind, e.change.name) in seen:
            continue
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


def findings_entry(state: RunState, c: Conclusion) -> str:
    """The FINDINGS.md entry of an isolated run: the one ``hypoloop findings add`` appends
    (``agent.findings.entry_for``), built from the run's transcript with this conclusion. ``""`` when the
    transcript cannot be read (e.g. a state assembled without one)."""
    path = state.get("transcript")
    if not path:
        return ""
    try:
        run = RecordedRun.load(Path(path))
        run.conclusion = c.model_dump(mode="json")
        return entry_for(run)
    except (OSError, TranscriptError, FindingsWriteError):
        return ""
