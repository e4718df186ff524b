"""Re-deciding a recorded run: its recorded history fed to a planner (the rule planner, or the LLM planner
answering from the run's recorded model responses), each decision (hypothesis verdicts, the next experiment,
the conclusion) compared with the recorded one, stopping at the first divergence: later observations were
made under the recorded decision and no longer apply.

The planner is given (built by the ``make_planner`` the CLI passes in); the planner machinery this module
uses itself is imported when it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from agent.record.transcript import read_transcript, skip_bad
from agent.review.text import change_text
from agent.review.wording import count

if TYPE_CHECKING:
    from agent.domain.case import Case
    from agent.planning.view import Planner, PlannerFactory, PlannerView
    from agent.record.recorded import DesignPoint, RecordedRun
    from tools.flags import FlagCatalog


class RedecideError(ValueError):
    """A transcript or planner choice that cannot be re-decided; the message says why, in one line."""


@dataclass
class Decision:
    """One compared decision: ``what`` is verdicts, proposal or conclusion."""

    seq: int
    step: int
    what: str
    recorded: str
    decided: str
    match: bool
    notes: list[str] = field(default_factory=list)


@dataclass
class RedecideResult:
    """The comparison, in transcript order; ``stopped_at`` is the seq of the first divergence."""

    planner: str
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stopped_at: int | None = None
    unfinished: bool = False

    @property
    def matched(self) -> bool:
        return all(d.match for d in self.decisions)


PLANNERS = ("rules", "llm")


def redecide_planner(
    name: str, run: RecordedRun, make_planner: PlannerFactory
) -> tuple[Planner, FlagCatalog | None, list[str]]:
    """The planner to re-decide with, built by ``make_planner`` (``agent.planning.planner.make_planner``),
    the host's flag catalog as recorded, and warnings.

    ``rules``: the current rule planner with the current hypothesis catalog (knowledge/hypotheses.toml).
    ``llm``: the LLM planner answering from the transcript's recorded model responses, in order
    (``RecordedChatClient``; no network) with the options of its first ``llm.request``; once they are
    used up it falls back to the rules. Raises RedecideError.
    """
    from agent.planning.catalog import CatalogError, load_catalog
    from agent.planning.llm_client import RecordedChatClient
    from agent.record.wire import field_of
    from tools.flags import FlagCatalog

    warnings: list[str] = []
    flags: FlagCatalog | None = None
    if run.catalog:
        flags = field_of("tool.result", "catalog", run.catalog, FlagCatalog)
    else:
        warnings.append(
            "the transcript does not hold the host's flag catalog (an older format): flag names and values "
            "are not normalised, so proposals may differ in spelling"
        )
    if name == "rules":
        try:
            return make_planner(None, load_catalog(), flags), flags, warnings
        except CatalogError as exc:
            raise RedecideError(str(exc)) from None
    if name == "llm":
        # damaged lines were told when the run was loaded (``agent.cli.common.load_recorded``)
        events = [ev.model_dump() for ev in read_transcript(run.path, on_bad=skip_bad)]
        first = next((e["data"] for e in events if e["type"] == "llm.request"), None)
        if first is None:
            raise RedecideError(
                f"--planner llm: {run.path} holds no llm.request events (the run was decided by "
                "another planner), so there are no model answers to replay; use --planner rules"
            )
        if "config" not in first:
            raise RedecideError("--planner llm: the transcript holds no llm.request event with the planner's config")
        spec = {"kind": "llm", "llm": first["config"]}
        try:
            llm = make_planner(spec, load_catalog(), flags, client=RecordedChatClient.from_events(events))
        except (ValueError, CatalogError) as exc:
            raise RedecideError(f"--planner llm: {exc}") from None
        return llm, flags, warnings
    raise RedecideError(f"--planner {name}: expected one of {', '.join(PLANNERS)}")


def recorded_case(run: RecordedRun, flags: FlagCatalog | None, warnings: list[str]) -> Case:
    """The case as the run's intake left it: loaded from ``run.started.case_data`` (or, for an older
    transcript, the case file if it is still there), baseline flags normalised through the recorded
    flag catalog the way intake does. Raises RedecideError."""
    from pydantic import ValidationError

    from agent.domain.case import Case, CaseError, load_case
    from agent.domain.models import Baseline
    from agent.record.wire import field_of
    from tools.flags import FlagError

    data = run.case_dict()
    if data is not None:
        try:
            case = field_of("run.started", "case_data", data, Case)
        except ValidationError as exc:
            raise RedecideError(f"{run.path}: run.started.case_data: {exc.errors()[0]['msg']}") from None
    else:
        case_file = run.started.get("case_file")
        if not case_file or not Path(case_file).is_file():
            raise RedecideError(
                f"{run.path}: run.started holds no case_data (written by an older hypoloop) and the case "
                f"file {case_file!r} is gone; nothing to re-decide from"
            )
        try:
            case = load_case(str(case_file))
        except CaseError as exc:
            raise RedecideError(str(exc)) from None
        warnings.append(f"no case_data in the transcript: using the case file {case_file} as it is now")
    if flags is not None:
        baseline = Baseline(env=dict(case.baseline.env))
        try:
            for name, value in case.baseline.flags.items():
                canon, norm = flags.validate(name, value)
                baseline.flags[canon] = norm
        except FlagError as exc:
            raise RedecideError(f"{run.path}: baseline: {exc}") from None
        case.baseline = baseline
    return case


def view_at(run: RecordedRun, seq: int, case: Case, warnings: list[str] | None = None) -> PlannerView:
    """The PlannerView the design step had just before event ``seq``: case, host, findings, the
    experiments whose outcome was known, their outcomes, the rejections, launches and host-seconds."""
    from agent.domain.models import Change, Experiment, Outcome, Rejection, RelevantFinding
    from agent.planning.view import PlannerView
    from agent.record.wire import field_of, from_payload
    from tools.fingerprint import HostFingerprint
    from tools.knowledge import Finding

    done = [r for r in run.runs if r.outcome_seq is not None and r.outcome_seq < seq]
    findings = []
    missing = 0
    for k in run.knowledge:
        for f in k.get("findings", []):
            if f.get("finding") is None:
                missing += 1
                continue
            rel = f.get("relevance_exact")
            findings.append(
                RelevantFinding(
                    finding=field_of("knowledge.read", "findings[].finding", f["finding"], Finding),
                    relevance=float(rel if rel is not None else f["relevance"]),
                )
            )
    if missing and warnings is not None and not any("findings" in w for w in warnings):
        warnings.append(
            f"{count(missing, 'finding')} {'was' if missing == 1 else 'were'} recorded by title only (an older format); "
            f"re-deciding without {'it' if missing == 1 else 'them'}"
        )
    rejections = []
    for rj in run.rejections:
        if rj["seq"] >= seq:
            continue
        change = Change.model_validate(rj["change"]) if rj.get("change") else None
        rejections.append(
            Rejection(
                experiment_id=rj["experiment_id"],
                change_key=change.key() if change else None,
                change=change,
                reason=rj["reason"],
            )
        )
    host_s = 0.0
    for r in done:
        host_s = round(host_s + r.host_seconds, 3)
    return PlannerView(
        case=case,
        fingerprint=from_payload("host.fingerprint", run.fingerprint, HostFingerprint) if run.fingerprint else None,
        findings=findings,
        experiments=[
            from_payload("experiment.proposed", {**r.experiment, "status": "done"}, Experiment) for r in done
        ],
        outcomes=[from_payload("outcome", r.outcome or {}, Outcome) for r in done],
        rejections=rejections,
        launches=sum(1 for r in done if r.launched_server),
        host_seconds=host_s,
    )


def _describe(data: dict[str, Any] | None) -> str:
    if not data:
        return "conclude"
    if data.get("change"):
        what = change_text(data["change"])
    else:
        what = {"baseline": "baseline run (no change)", "confirm": "confirmation re-run (no change)"}.get(
            str(data.get("purpose")), str(data.get("purpose"))
        )
    return f"{what}  [{data.get('id')}]"


def _verdict_text(verdicts: dict[str, str]) -> str:
    return ", ".join(f"{hid} {status}" for hid, status in sorted(verdicts.items())) or "none yet"


def redecide(
    run: RecordedRun, planner: Planner, flags: FlagCatalog | None, *, warnings: list[str] | None = None
) -> RedecideResult:
    """Re-decide a recorded run with ``planner`` (see module docstring). Raises RedecideError."""
    from agent.planning.guard import GuardError, check_experiment

    result = RedecideResult(
        planner=getattr(planner, "name", type(planner).__name__), warnings=list(warnings or [])
    )
    case = recorded_case(run, flags, result.warnings)
    result.unfinished = not run.finished
    previous: dict[str, str] = {}
    for dp in run.design_points:
        view = view_at(run, dp.seq, case, result.warnings)
        hist = planner.history(view)
        # Verdicts: the statuses the hypothesize step gave (open is not a verdict).
        recorded_v = {h: s for h, s in dp.verdicts.items() if s != "open"}
        decided_v: dict[str, str] = {h.id: h.status for h in hist.hypotheses if h.status != "open"}
        if recorded_v != decided_v or recorded_v != previous:
            d = Decision(
                dp.seq,
                dp.step,
                "verdicts",
                _verdict_text(recorded_v),
                _verdict_text(decided_v),
                recorded_v == decided_v,
            )
            if not d.match:
                gone = sorted(set(dp.verdicts) - {h.id for h in hist.hypotheses})
                if gone:
                    d.notes.append(f"no longer in the ledger: {', '.join(gone)}")
            result.decisions.append(d)
            previous = recorded_v
            if not d.match:
                result.stopped_at = dp.seq
                return result
        result.decisions.append(
            _compare_proposal(dp, planner, view, hist, flags, check_experiment, GuardError)
        )
        if not result.decisions[-1].match:
            result.stopped_at = dp.seq
            return result
    if run.conclusion and run.conclusion.get("status") in ("isolated", "not_isolated"):
        result.decisions.append(_compare_conclusion(run, planner, case))
        if not result.decisions[-1].match:
            result.stopped_at = run.conclusion_seq
    return result


def _compare_proposal(
    dp: DesignPoint,
    planner: Planner,
    view: PlannerView,
    hist: Any,
    flags: FlagCatalog | None,
    check: Callable[..., None],
    guard_error: type[Exception],
) -> Decision:
    proposal = planner.propose(view, hist)
    exp = proposal.experiment
    refused = None
    if exp is not None:
        try:
            check(exp, view=view, flags=flags)
        except guard_error as exc:
            refused = str(exc)
    if dp.kind == "proposed":
        recorded = _describe(dp.data)
    elif dp.kind == "none":
        recorded = f"conclude: {dp.data.get('reason')}"
    else:
        recorded = f"proposal refused: {dp.data.get('message')}"
    if exp is None:
        decided = f"conclude: {proposal.conclude_reason}"
        match = dp.kind == "none"
    elif refused is not None:
        decided = f"proposal refused: {refused}"
        match = dp.kind == "refused"
    else:
        decided = _describe(exp.model_dump(mode="json"))
        match = dp.kind == "proposed" and exp.id == dp.data.get("id")
    d = Decision(dp.seq, dp.step, "proposal", recorded, decided, match)
    if match and dp.kind == "none" and proposal.conclude_reason != dp.data.get("reason"):
        d.notes.append(f"same decision, reason now: {proposal.conclude_reason}")
    if match and dp.kind == "proposed" and exp is not None and exp.rationale != dp.data.get("rationale"):
        d.notes.append(f"same experiment, rationale now: {exp.rationale}")
    return d


def _compare_conclusion(run: RecordedRun, planner: Planner, case: Case) -> Decision:
    from agent.planning.conclusion import conclusion_of

    last = max((e.outcome_seq or 0 for e in run.runs), default=0)
    view = view_at(run, last + 1, case)
    hist = planner.history(view)
    none = next((dp for dp in reversed(run.design_points) if dp.kind == "none"), None)
    state: dict[str, Any] = {
        "run_id": run.run_id,
        "case": case.model_dump(mode="json"),
        "fingerprint": run.fingerprint or None,
        "experiments": [e.model_dump(mode="json") for e in view.experiments],
        "outcomes": [o.model_dump(mode="json") for o in view.outcomes],
        "rejections": [r.model_dump(mode="json") for r in view.rejections],
        "hypotheses": [h.model_dump(mode="json") for h in hist.hypotheses],
        "baseline": hist.baseline.model_dump(mode="json"),
        "launches": view.launches,
        "host_seconds": view.host_seconds,
        "conclude_reason": none.data.get("reason") if none else None,
    }
    c = conclusion_of(state, getattr(planner, "flags", None))  # type: ignore[arg-type]
    rec = run.conclusion or {}

    def key(status: Any, root: Any, fix: Any) -> str:
        cause = (root or {}).get("hypothesis_id") or "—"
        fixed = change_text(fix) if fix else "no fix"
        return f"{status}; root cause {cause}; fix {fixed}"

    recorded = key(rec.get("status"), rec.get("root_cause"), rec.get("fix"))
    decided = key(c.status, c.root_cause, c.fix.model_dump(mode="json") if c.fix else None)
    return Decision(
        run.conclusion_seq,
        run.design_points[-1].step if run.design_points else 0,
        "conclusion",
        recorded,
        decided,
        recorded == decided,
    )


def redecide_table(result: RedecideResult, *, verbose: bool = False) -> Table:
    """The comparison as a rich table: step, what, recorded, the planner's decision, match. Notes on
    matching decisions (a reworded rationale) only with ``verbose``."""
    t = Table(title=f"re-decided with the {result.planner} planner", show_lines=False)
    t.add_column("step", justify="right")
    t.add_column("seq", justify="right", style="dim")
    t.add_column("decision")
    t.add_column("recorded", overflow="fold")
    t.add_column(f"{result.planner} planner now", overflow="fold")
    t.add_column("")
    for d in result.decisions:
        mark = "[green]✓ match[/]" if d.match else "[bold red]✗ diverges[/]"
        notes = d.notes if (verbose or not d.match) else []
        decided = escape(d.decided) + "".join(f"\n[dim]{escape(n)}[/]" for n in notes)
        t.add_row(str(d.step), str(d.seq), d.what, escape(d.recorded), decided, mark)
    return t
