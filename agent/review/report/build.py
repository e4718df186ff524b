"""``build_report``: the review document of a recorded run (summary, narrative, hypothesis views,
knowledge used, notes, the FINDINGS.md entry)."""

from __future__ import annotations

import time
from typing import Any

from agent.domain.accuracy import PROBE_ID as PROBE_SET
from agent.record.recorded import ExperimentRun, HypothesisRecord, RecordedRun
from agent.review.render import alternative_text, answer_rows, change_text, shown_line
from agent.review.report.model import DesignStep, HypothesisView, Report, _dur, _verdict
from agent.review.report.steps import _design_steps, _evidence, _exp_label, _experiment_rows, _why_dropped
from agent.review.wording import count
from tools.fingerprint import arch_label, engine_label


def _hardware(fp: dict[str, Any]) -> str:
    """The recorded host fingerprint as one line, or a note that none was recorded."""
    if not fp:
        return "unknown (no fingerprint recorded)"
    return (
        f"{fp.get('gpu_count')} × {fp.get('gpu_name')} ({arch_label(fp)}, "
        f"driver {fp.get('driver_version')}), {engine_label(fp)}"
    )


def _symptom(run: RecordedRun, executed: list[ExperimentRun]) -> str:
    """What the baseline run showed: its stage, its telling log line and any failed probes; "—" without one."""
    baseline_run = next((r for r in executed if r.experiment.get("purpose") == "baseline"), None)
    if not (baseline_run and baseline_run.outcome):
        return "—"
    o = baseline_run.outcome
    symptom = f"{o.get('stage')}"
    m = run.telling_match(o)
    if m is not None:
        line = m["line_numbers"][0] if m.get("line_numbers") else "?"
        symptom += (
            f": {shown_line(m.get('first_line', '')).strip()} (log line {line} of {_exp_label(baseline_run)})"
        )
    probes = [p for p in o.get("probes", []) if not p.get("ok")]
    if probes:
        symptom += "; probe " + ", ".join(f"{p['probe_id']}={p['status']}" for p in probes)
        graded = next((p for p in probes if p["probe_id"] == PROBE_SET and p.get("error")), None)
        if graded is not None:  # an accuracy drop: the count, interval and test are the evidence
            symptom += f" ({graded['error']})"
    return symptom


def _fix_summary(run: RecordedRun, c: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary's root cause, fix, alternative and confirmation rows (those the conclusion has)."""
    out: list[tuple[str, str]] = []
    if c.get("root_cause"):
        rc = c["root_cause"]
        out.append(
            (
                "root cause",
                f"{rc.get('statement')} [{rc.get('component')}; "
                + (
                    f"hypothesis {rc['hypothesis_id']}]"
                    if rc.get("hypothesis_id")
                    else "no hypothesis of the catalog explains it: the fix is known, the mechanism is not]"
                ),
            )
        )
    for b in c.get("blockers", []):
        out.append(("blocker fixed", change_text(b) + " — adopted into the baseline first; the fix was found and confirmed with it in place"))
    if c.get("fix"):
        fix_run = run.run_of(c.get("fix_experiment_id"))
        how = ""
        if fix_run and fix_run.outcome:
            probes = fix_run.outcome.get("probes", [])
            how = (
                f" — experiment #{fix_run.step} served correctly with it "
                f"({sum(1 for p in probes if p.get('ok'))}/{len(probes)} probes ok)"
            )
        out.append(("fix", change_text(c["fix"]) + how))
        for a in c.get("alternatives", []):
            out.append(("alternative", alternative_text(a)))
    if c.get("confirmation_experiment_id"):
        conf = run.run_of(c["confirmation_experiment_id"])
        if conf and conf.outcome:
            probes = conf.outcome.get("probes", [])
            sibling = (" — another value of the fix's own setting that also served, which counts as a pass: if "
                       "the setting did not matter, both would have been luck" if conf.experiment.get("purpose") == "test"
                       else "")
            out.append(
                (
                    "confirmation",
                    f"{_exp_label(conf)}: {conf.outcome.get('stage')}, "
                    f"{sum(1 for p in probes if p.get('ok'))}/{len(probes)} probes ok{sibling}",
                )
            )
    return out


def _summary(run: RecordedRun, c: dict[str, Any], status: str, symptom: str) -> list[tuple[str, str]]:
    """The summary rows in order: status, the fix rows, symptom, why it stopped, the leading
    hypothesis (when no root cause was named) and the cost."""
    summary: list[tuple[str, str]] = []
    summary.append(("status", status if run.finished else f"{status} — {_unended(run)}"))
    summary += _fix_summary(run, c)
    summary.append(("symptom", symptom))
    if c.get("reason") and not c.get("root_cause"):
        summary.append(("why it stopped", str(c["reason"])))
    if not c.get("root_cause"):
        lead = _leading_open(run, c)
        if lead is not None:
            summary.append(("leading hypothesis", lead))
    launches, host_s = (
        (c.get("launches"), c.get("host_seconds")) if c else (run.launches(), run.host_seconds())
    )
    summary.append(
        (
            "cost",
            f"{count(launches, 'launch')}, {count(float(host_s or 0), 'host-second', fmt='.0f')} "
            f"({_dur(float(host_s or 0))})",
        )
    )
    return summary


def _ruled_out(run: RecordedRun, c: dict[str, Any], design: list[DesignStep]) -> list[tuple[str, str]]:
    """Each refuted hypothesis of the conclusion with why: the sentences that refuted it, else its evidence."""
    ruled_out: list[tuple[str, str]] = []
    for r in c.get("refuted", []):
        h = run.hypothesis(r.get("id"))
        why = "; ".join(str(e.get("detail")) for e in r.get("evidence", [])) or "refuted"
        if h is not None:
            refuting = [s for s in _why_dropped(run, h, design) if s.startswith("Refuted")]
            why = " ".join(refuting) or why
        ruled_out.append((f"{r.get('id')}: {r.get('statement')}", why))
    return ruled_out


def _narrative(
    run: RecordedRun, c: dict[str, Any], design: list[DesignStep], executed: list[ExperimentRun]
) -> list[str]:
    """How the run got there, one sentence per design step, then the conclusion (or that it is unfinished)."""
    narrative: list[str] = []
    for step in design:
        # A rejected proposal ran nothing: the next proposal carries the same step (launch) number.
        label = f"Step {step.step}" + (", rejected proposal" if step.decision.startswith("reject") else "")
        why = step.why.rstrip()
        line = f"{label} — {step.chosen}. {why}" + ("" if not why or why[-1] in ".!?" else ".")
        if not step.decision.startswith("approve"):
            line += f" Approval: {step.decision}."
        r = next((x for x in executed if x.proposal and x.proposal.seq == step.proposal_seq), None)
        if r and r.outcome:
            line += f" Outcome: {r.outcome.get('summary') or r.outcome.get('stage')}."
        narrative.append(line)
    if c.get("reason"):
        narrative.append(f"Conclusion: {c.get('reason')}.")
    if not run.finished:
        narrative.append(
            f"The run waits: {_unended(run)}; this report shows what was recorded so far." if run.waiting else
            "The transcript ends without run.ended: the run is still going, waits for an approval, or its "
            "process died; this report shows what was recorded so far."
        )
    return narrative


def _unended(run: RecordedRun) -> str:
    """What the end of an unfinished run's transcript says: the approval it waits on (the status `hypoloop
    runs` gives it, killed at the question or not) and how to continue it, else that run.ended is missing."""
    if not run.waiting:
        return "the transcript has no run.ended"
    exp = str(run.waiting.get("experiment_id"))
    prop = next((p for p in reversed(run.proposals) if p.experiment_id == exp), None)
    change = f" ({change_text(prop.data['change'])})" if prop and prop.data.get("change") else ""
    return (f"experiment {exp}{change} was proposed and its approval is unanswered; answer with: "
            f"hypoloop resume {run.run_id}")


def _hypothesis_views(run: RecordedRun, c: dict[str, Any], design: list[DesignStep]) -> list[HypothesisView]:
    """The hypothesis ledger: confirmed, supported, refuted, then open, each by falling posterior."""
    hypotheses: list[HypothesisView] = []
    why_open = {str(u.get("id")): str(u.get("why") or "") for u in c.get("untested", [])}
    ruled_out = _ruled_out_by_conclusion(c)
    order = {"confirmed": 0, "supported": 1, "refuted": 2, "open": 3}
    root_id = (c.get("root_cause") or {}).get("hypothesis_id")
    confirmed = [h.id for h in run.hypotheses.values() if h.status == "confirmed"]
    if root_id not in confirmed and confirmed:  # no conclusion yet: the likeliest confirmed one leads
        root_id = max(confirmed, key=lambda i: run.hypotheses[i].posterior)

    def status(h: HypothesisRecord) -> str:
        return "refuted" if h.status == "open" and h.id in ruled_out else h.status

    for h in sorted(
        run.hypotheses.values(), key=lambda x: (order.get(status(x), 4), x.id != root_id, -x.posterior)
    ):
        view = HypothesisView(
            id=h.id,
            statement=str(h.added.get("statement", "")),
            component=str(h.added.get("component", "")),
            source=str(h.added.get("source", "")),
            rationale=str(h.added.get("rationale", "")),
            prior=float(next(iter(h.series.values())) if h.series else h.added.get("prior", 0.0)),
            posterior=h.posterior,
            status=h.status,
            evidence=_evidence(run, h.evidence),
            verdict=_verdict(h.status, why_open.get(h.id)),
        )
        if h.status == "confirmed" and h.id != root_id:
            # one root cause per run: another hypothesis the same fix confirmed is not a second one
            view.verdict = "confirmed, not the root cause named"
        if h.status == "refuted":
            view.why_dropped = _why_dropped(run, h, design)
        elif h.id in ruled_out:
            # the ledger left it open, the conclusion ruled it out (e.g. a flag-only idea when the failure
            # is an import before any flag is read): the conclusion's verdict and evidence are what holds
            view.status, view.verdict = "refuted", "ruled out"
            view.why_dropped = [f"Ruled out by the conclusion: {ruled_out[h.id]}"]
        hypotheses.append(view)
    return hypotheses


def _quote_shared_lines_once(hypotheses: list[HypothesisView]) -> None:
    """A log line that is evidence for several hypotheses is quoted once, under the first; the others
    point there (in place). Keyed by experiment and cited line, so [224] and [224, 225] count as shared too."""
    quoted: dict[tuple[str, int], str] = {}
    for hv in hypotheses:
        for item in hv.evidence:
            if item.excerpt is None:
                continue
            keys = [(item.excerpt.experiment, n) for n, _, cited in item.excerpt.lines if cited]
            if keys and all(k in quoted for k in keys):
                item.excerpt, item.quoted_under = None, quoted[keys[0]]
            else:
                for k in keys:
                    quoted.setdefault(k, hv.id)


def _knowledge(run: RecordedRun) -> list[tuple[str, str, float]]:
    """The knowledge files read: (path, finding title with its outcome, relevance)."""
    return [
        (str(k.get("path")), str(f.get("title")) + f" [{f.get('outcome')}]", float(f.get("relevance", 0.0)))
        for k in run.knowledge
        for f in k.get("findings", [])
    ]


def _notes(run: RecordedRun, c: dict[str, Any]) -> list[str]:
    """Rejected proposals, hypotheses still open, and errors, in that order."""
    notes: list[str] = []
    for rj in run.rejections:
        notes.append(
            f"Rejected: {change_text(rj['change']) if rj.get('change') else rj['experiment_id']} — {rj['reason']}"
        )
    for u in c.get("untested", []):
        notes.append(
            f"Still open: {u.get('id')} (p={float(u.get('posterior', 0)):.2f}, {u.get('why')})"
        )
    for e in run.errors:
        notes.append(f"Error at step {e.step}: {e.data.get('message')}")
    return notes


def build_report(run: RecordedRun) -> Report:
    """Assemble the review document of a recorded run."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.first_ts)) if run.first_ts else "?"
    c = run.conclusion or {}
    executed = run.executed()
    design = _design_steps(run)
    status = c.get("status") or run.status
    hypotheses = _hypothesis_views(run, c, design)
    _quote_shared_lines_once(hypotheses)
    return Report(
        title=f"hypoloop run {run.run_id} — {run.started.get('case', '?')}",
        run_id=run.run_id,
        transcript=str(run.path),
        case=str(run.started.get("case", "?")),
        model=run.model_path(),
        hardware=_hardware(run.fingerprint),
        started=started,
        status=status,
        finished=run.finished,
        waiting=_unended(run) if run.waiting and not run.finished else "",
        summary=_summary(run, c, status, _symptom(run, executed)),
        narrative=_narrative(run, c, design, executed),
        ruled_out=_ruled_out(run, c, design),
        experiments=_experiment_rows(run),
        hypotheses=hypotheses,
        design=design,
        steps=run.steps(),
        series={h.id: dict(h.series) for h in run.hypotheses.values()},
        knowledge=_knowledge(run),
        notes=_notes(run, c),
        findings_entry=_findings_entry(run, c),
        answer_head=str((c.get("root_cause") or {}).get("statement") or ""),
        answer=answer_rows(c),
        command=_command(run, c),
    )


def _command(run: RecordedRun, c: dict[str, Any]) -> str:
    """The copy-paste launch command of the confirmed working configuration, "" when there is none."""
    from agent.review.findings import FindingsWriteError, working_command

    if not c.get("fix"):
        return ""
    try:
        return working_command(run, host_env=True)
    except FindingsWriteError:
        return ""


def _ruled_out_by_conclusion(c: dict[str, Any]) -> dict[str, str]:
    """The hypotheses the conclusion ruled out (its ``refuted`` list, which may name ones the ledger left
    open), each with the evidence that did, joined into one sentence."""
    return {
        str(r.get("id")): "; ".join(str(e.get("detail")) for e in r.get("evidence", [])) or "ruled out"
        for r in c.get("refuted", [])
    }


def _leading_open(run: RecordedRun, c: dict[str, Any]) -> str | None:
    """The likeliest hypothesis not settled (supported by the evidence but not confirmed, or open), as
    one line (id, probability, component, statement, and why it is still open), for a run that named no
    root cause; None when none is left. One the conclusion ruled out is not left, whatever the ledger
    says."""
    ruled_out = _ruled_out_by_conclusion(c)
    live = [h for h in run.hypotheses.values() if h.status in ("open", "supported") and h.id not in ruled_out]
    if not live:
        return None
    h = max(live, key=lambda x: x.posterior)
    why = next((str(u.get("why")) for u in c.get("untested", []) if u.get("id") == h.id and u.get("why")), "")
    if not why and h.status == "supported":
        why = "supported by the evidence, not confirmed"
    text = f"{h.id} (p={h.posterior:.2f}, {h.added.get('component', '?')}): {h.added.get('statement', '')}"
    return text + (f" — {why}" if why else "")


def _findings_entry(run: RecordedRun, c: dict[str, Any]) -> str:
    """The entry ``hypoloop findings add`` would append (the same text), for an isolated run."""
    from agent.review.findings import FindingsWriteError, entry_for

    try:
        return entry_for(run)
    except FindingsWriteError:
        return str(c.get("findings_entry") or "")
