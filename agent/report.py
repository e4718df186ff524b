"""A review document of one run, from its transcript: Markdown or a single self-contained HTML file.

Contents: the summary (root cause, fix, confirmation, symptom, what was ruled out and why, cost), how
the run got there step by step (why each experiment was chosen over the alternatives it weighed), the
experiment table (change, outcome, stage reached, time to ready / to crash, host-seconds), a timeline
of the experiments (launch → ready / crash → stop), the hypothesis ledger with each verdict and its
evidence (log excerpts with line numbers), the probabilities of the hypotheses over the steps, the
knowledge used, and the FINDINGS.md entry.

Log excerpts come from the server log named in the outcome when that file still exists (a few lines
around each cited line), else from what the transcript recorded (the lines read as they came and each
signature's first line). The HTML has inline CSS and inline SVG only: no script, no external file, no
web font, so it renders offline. Times are modelled host-seconds (the lab scales its clock; on a real
host they are wall seconds).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.recorded import ExperimentRun, HypothesisRecord, RecordedRun
from agent.redact import run_redactor
from agent.render import _change_text, alternative_text

#: Lines of context on each side of a cited log line, and the most lines one excerpt shows.
_CONTEXT = 1
_MAX_EXCERPT_LINES = 12
_PALETTE = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#7f7f7f",
]  # fmt: skip
_VERDICT_WORD = {
    "confirmed": "confirmed (root cause)",
    "supported": "supported",
    "refuted": "refuted",
    "open": "open",
}
#: An open hypothesis's verdict, from the start of the conclusion's ``untested[].why``
#: (``agent.graph.build_conclusion``): it may have been tested without a verdict, or never.
_OPEN_WORD = (
    ("its test", "open — its test was rejected"),
    ("not separated", "open — not separated from the fix"),
    ("tested without a verdict", "open — tested, no verdict"),
    ("deprioritised", "open — deprioritised"),
    ("not tested", "not tested"),
)


def _verdict(status: str, why_open: str | None) -> str:
    if status == "open" and why_open:
        if why_open.startswith("deprioritised") and " did not fix " in why_open:
            return "open — tested: did not fix it, which it allowed"
        return next((word for start, word in _OPEN_WORD if why_open.startswith(start)), "open")
    return _VERDICT_WORD.get(status, status)


# ---------------------------------------------------------------------------------- model


@dataclass
class Excerpt:
    """Log lines around cited line numbers: ``lines`` are (number, text, cited); ``source`` says where
    the text came from."""

    experiment: str
    source: str
    lines: list[tuple[int, str, bool]]


@dataclass
class EvidenceItem:
    effect: str
    kind: str
    detail: str
    experiment: str | None = None
    line_numbers: list[int] = field(default_factory=list)
    excerpt: Excerpt | None = None
    quoted_under: str | None = None  # the same lines are quoted under this hypothesis already


@dataclass
class HypothesisView:
    id: str
    statement: str
    component: str
    source: str
    rationale: str
    prior: float
    posterior: float
    status: str
    evidence: list[EvidenceItem]
    why_dropped: list[str] = field(default_factory=list)
    #: The verdict as shown: refuted / confirmed ..., and for an open one whether it was tested at all.
    verdict: str = ""


@dataclass
class Alternative:
    change: str
    tests: list[str]
    p_fix: float
    score: float
    chosen: bool


@dataclass
class DesignStep:
    step: int
    experiment_id: str
    chosen: str
    rationale: str
    decision: str
    alternatives: list[Alternative]
    skipped: list[tuple[str, str]]
    why: str
    #: The ``seq`` of its ``experiment.proposed`` event: ids repeat (a proposal made again after an
    #: edit ran something else under the same id), the event does not.
    proposal_seq: int = 0


@dataclass
class ExperimentRow:
    label: str
    number: int
    experiment_id: str
    purpose: str
    change: str
    approval: str
    outcome: str
    stage: str
    to_ready_s: float | None
    to_crash_s: float | None
    host_seconds: float
    ok: bool
    notes: str = ""


@dataclass
class Report:
    """Everything the two renderers show (built by ``build_report``)."""

    title: str
    run_id: str
    transcript: str
    case: str
    model: str
    hardware: str
    started: str
    status: str
    finished: bool
    summary: list[tuple[str, str]]
    narrative: list[str]
    ruled_out: list[tuple[str, str]]
    experiments: list[ExperimentRow]
    hypotheses: list[HypothesisView]
    design: list[DesignStep]
    steps: list[int]
    series: dict[str, dict[int, float]]
    knowledge: list[tuple[str, str, float]]
    notes: list[str]
    findings_entry: str


# ---------------------------------------------------------------------------------- building


def _dur(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _exp_label(r: ExperimentRun) -> str:
    e = r.experiment
    if e.get("change"):
        what = _change_text(e["change"])
    elif r.observed_log:
        what = f"observed log {Path(r.observed_log).name}"
    else:
        what = {"baseline": "baseline (no change)", "confirm": "confirmation re-run"}.get(
            str(e.get("purpose")), str(e.get("purpose"))
        )
    return f"#{r.step} {what}"


def _read_log_lines(path: Path, wanted: set[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    last = max(wanted)
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if n in wanted:
                out[n] = line.rstrip("\n")
            if n >= last:
                break
    return out


def excerpt(r: ExperimentRun, line_numbers: list[int]) -> Excerpt | None:
    """Log lines around ``line_numbers`` of one experiment (see module docstring); None without lines."""
    cited = sorted(set(n for n in line_numbers if n >= 1))[:6]
    if not cited:
        return None
    log = (r.outcome or {}).get("log_path")
    if log and Path(log).is_file():
        wanted: set[int] = set()
        for n in cited:
            wanted.update(range(max(1, n - _CONTEXT), n + _CONTEXT + 1))
        try:
            text = _read_log_lines(Path(log), wanted)
        except OSError:
            text = {}
        if text:
            lines = [(n, text[n], n in cited) for n in sorted(text)][:_MAX_EXCERPT_LINES]
            return Excerpt(r.id, f"server log {log}", lines)
    lines = []
    for n in cited:
        t = r.log_text(n)
        lines.append((n, t if t is not None else "(this line's text is not in the transcript)", True))
    return Excerpt(r.id, "the transcript (the server log is no longer there)", lines)


def _evidence(run: RecordedRun, items: list[dict[str, Any]]) -> list[EvidenceItem]:
    out: list[EvidenceItem] = []
    seen: set[tuple[str, str]] = set()
    for e in items:
        key = (str(e.get("detail")), str(e.get("experiment_id")))
        if key in seen:
            continue
        seen.add(key)
        r = run.run_of(e.get("experiment_id"))
        out.append(
            EvidenceItem(
                effect=str(e.get("effect", "supports")),
                kind=str(e.get("kind", "")),
                detail=str(e.get("detail", "")),
                experiment=_exp_label(r) if r else e.get("experiment_id"),
                line_numbers=list(e.get("lines") or []),
                excerpt=excerpt(r, list(e.get("lines") or [])) if r else None,
            )
        )
    return out


def _considered_tests(run: RecordedRun, change: str) -> list[str]:
    return run.interventions_of(change)


def _design_steps(run: RecordedRun) -> list[DesignStep]:
    steps: list[DesignStep] = []
    for p in run.proposals:
        d = p.data
        chosen = _change_text(d["change"]) if d.get("change") else ""
        label = chosen or {"baseline": "baseline run (no change)", "confirm": "confirmation re-run"}.get(
            str(d.get("purpose")), str(d.get("purpose"))
        )
        alts = [
            Alternative(
                change=str(c["change"]),
                tests=_considered_tests(run, str(c["change"])),
                p_fix=float(c.get("p_fix", 0.0)),
                score=float(c.get("score", 0.0)),
                chosen=bool(chosen) and c["change"] == chosen,
            )
            for c in d.get("considered", [])
            if "change" in c
        ]
        alts.sort(key=lambda a: -a.score)
        skipped = [
            (str(c.get("hypothesis")), str(c["skipped"])) for c in d.get("considered", []) if "skipped" in c
        ]
        dec = p.decision or {}
        decision = str(dec.get("decision") or "waiting for approval")
        if dec.get("by"):
            decision += f" ({dec['by']})"
        if dec.get("reason"):
            decision += f": {dec['reason']}"
        if dec.get("decision") == "edit" and dec.get("change"):
            decision += f"; ran {_change_text(dec['change'])} instead"
        why = _why_chosen(run, d, alts, p.step)
        steps.append(
            DesignStep(
                p.step, p.experiment_id, label, str(d.get("rationale", "")), decision, alts, skipped, why, p.seq
            )
        )
    return steps


def _why_chosen(run: RecordedRun, d: dict[str, Any], alts: list[Alternative], step: int) -> str:
    purpose = d.get("purpose")
    if purpose == "baseline":
        return "First, reproduce the failure on the unchanged baseline to collect its log evidence."
    if purpose == "confirm":
        return "The change fixed the failure; the fixing configuration is run once more to confirm it was not luck."
    chosen = next((a for a in alts if a.chosen), None)
    if chosen is None:
        return str(d.get("rationale", ""))
    text = f"Chosen for the best probability of fixing per host-second, P(fix) {chosen.p_fix:.3f}"
    parts = []
    for hid in chosen.tests:
        h = run.hypotheses.get(hid)
        if h is None:
            continue
        weight = "; ".join(_short(e) for e in _evidence_before(h, step)[:8])
        parts.append(
            f"{hid} (p={_posterior_before(h, step):.2f}) predicts it fixes the failure"
            + (f" — its weight comes from: {weight}" if weight else "")
        )
    if parts:
        text += ": " + " / ".join(parts)
    others = [a for a in alts if not a.chosen]
    if others:
        nxt = others[0]
        text += f". Next best: {nxt.change}, P(fix) {nxt.p_fix:.3f}"
        if nxt.tests:
            text += f" ({', '.join(nxt.tests)})"
    return text + "."


def _short(e: dict[str, Any]) -> str:
    detail = str(e.get("detail", ""))
    if e.get("kind") == "signature" and ":" in detail:
        detail = detail.split(":", 1)[0]  # "signature probability_tensor_nan: <the line>" -> its name
    detail = detail if len(detail) <= 110 else detail[:107] + "..."
    if e.get("lines"):
        detail += f" (log line{'s' if len(e['lines']) > 1 else ''} {', '.join(map(str, e['lines'][:4]))})"
    return detail


def _evidence_before(h: HypothesisRecord, step: int) -> list[dict[str, Any]]:
    """The evidence a hypothesis carried when the design step of ``step`` ran."""
    out = [e for e in h.added.get("evidence", []) if e.get("effect") != "weakens"]
    for ev in h.changes:
        if ev.step < step:
            out.extend(ev.data.get("evidence", []))
    return out


def _posterior_before(h: HypothesisRecord, step: int) -> float:
    """The posterior the design step of ``step`` saw (the last one written before that step)."""
    if not h.series:
        return h.posterior
    earlier = [s for s in h.series if s < step]
    return h.series[max(earlier)] if earlier else next(iter(h.series.values()))


def _why_dropped(run: RecordedRun, h: HypothesisRecord, design: list[DesignStep]) -> list[str]:
    """Sentences on why an idea was set aside: its starting weight, how its tests ranked, what refuted it."""
    out: list[str] = []
    start = next(iter(h.series.values())) if h.series else h.posterior
    ranked = sorted(
        run.hypotheses.values(), key=lambda x: -(next(iter(x.series.values())) if x.series else x.posterior)
    )
    rank = [x.id for x in ranked].index(h.id) + 1
    sentence = f"It started at p={start:.2f} (rank {rank} of {len(ranked)})"
    if h.added.get("rationale"):
        sentence += f"; the catalog's note on it: {h.added['rationale']}"
    out.append(sentence + ".")
    for step in design:
        mine = [a for a in step.alternatives if h.id in a.tests]
        chosen = next((a for a in step.alternatives if a.chosen), None)
        if mine and chosen and not any(a.chosen for a in mine):
            tests = ", ".join(f"{a.change} (P(fix) {a.p_fix:.3f})" for a in mine)
            out.append(
                f"At step {step.step} its tests ranked below the chosen change: {tests}, against "
                f"{chosen.change} (P(fix) {chosen.p_fix:.3f})."
            )
    for ev in h.changes:
        if ev.type != "hypothesis.refuted":
            continue
        for e in ev.data.get("evidence", []):
            r = run.run_of(e.get("experiment_id"))
            where = ""
            if r is not None:
                where = f" — seen in {_exp_label(r)}"
                if e.get("lines"):
                    where += f", log line {', '.join(map(str, e['lines'][:4]))}"
                if r.outcome:
                    where += f"; that run ended {r.outcome.get('stage')}"
            out.append(f"Refuted at step {ev.step}: {e.get('detail')}{where}.")
    return out


def _experiment_rows(run: RecordedRun) -> list[ExperimentRow]:
    rows = []
    for r in run.executed():
        o = r.outcome or {}
        t = o.get("timings") or {}
        stage = str(o.get("stage"))
        ok = stage == "ok"
        fatal = [m for m in o.get("matches", []) if m.get("kind") == "fatal"]
        if ok:
            probes = o.get("probes", [])
            outcome = f"served correctly ({sum(1 for p in probes if p.get('ok'))}/{len(probes)} probes ok)"
        elif fatal:
            m = fatal[0]
            outcome = (
                f"{m['signature_id']} (log line {m['line_numbers'][0] if m.get('line_numbers') else '?'})"
            )
        else:
            outcome = str(o.get("summary") or stage)
        dec = (r.proposal.decision or {}) if r.proposal else {}
        approval = str(dec.get("decision") or ("— (observed log)" if r.observed_log else "—"))
        if dec.get("by"):
            approval += f" ({dec['by']})"
        crash = None if ok or stage == "ready" else t.get("to_end_s")
        notes = []
        for b in run.baseline_changes:
            if (b.data.get("adoption") or {}).get("experiment_id") == r.id:
                notes.append("adopted into the baseline")
        if run.conclusion and run.conclusion.get("confirmation_experiment_id") == r.id:
            notes.append("confirms the fix")
        rows.append(
            ExperimentRow(
                label=_exp_label(r),
                number=r.step,
                experiment_id=r.id,
                purpose=str(r.experiment.get("purpose")),
                change=_change_text(r.experiment["change"]) if r.experiment.get("change") else "—",
                approval=approval,
                outcome=outcome,
                stage=stage,
                to_ready_s=t.get("to_ready_s"),
                to_crash_s=crash,
                host_seconds=r.host_seconds,
                ok=ok,
                notes="; ".join(notes),
            )
        )
    return rows


def build_report(run: RecordedRun) -> Report:
    """Assemble the review document of a recorded run."""
    fp = run.fingerprint
    hardware = (
        f"{fp.get('gpu_count')} × {fp.get('gpu_name')} (compute capability {fp.get('compute_capability')}, "
        f"driver {fp.get('driver_version')}), SGLang {fp.get('sglang_version')}"
        if fp
        else "unknown (no fingerprint recorded)"
    )
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.first_ts)) if run.first_ts else "?"
    c = run.conclusion or {}
    executed = run.executed()
    design = _design_steps(run)

    summary: list[tuple[str, str]] = []
    narrative: list[str] = []
    ruled_out: list[tuple[str, str]] = []
    baseline_run = next((r for r in executed if r.experiment.get("purpose") == "baseline"), None)
    symptom = "—"
    if baseline_run and baseline_run.outcome:
        o = baseline_run.outcome
        symptom = f"{o.get('stage')}"
        m = run.telling_match(o)
        if m is not None:
            line = m["line_numbers"][0] if m.get("line_numbers") else "?"
            symptom += (
                f": {m.get('first_line', '').strip()[:200]} (log line {line} of {_exp_label(baseline_run)})"
            )
        probes = [p for p in o.get("probes", []) if not p.get("ok")]
        if probes:
            symptom += "; probe " + ", ".join(f"{p['probe_id']}={p['status']}" for p in probes)
    status = c.get("status") or run.status
    summary.append(("status", status if run.finished else f"{status} — the transcript has no run.ended"))
    if c.get("root_cause"):
        rc = c["root_cause"]
        summary.append(
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
    if c.get("fix"):
        fix_run = run.run_of(c.get("fix_experiment_id"))
        how = ""
        if fix_run and fix_run.outcome:
            probes = fix_run.outcome.get("probes", [])
            how = (
                f" — experiment #{fix_run.step} served correctly with it "
                f"({sum(1 for p in probes if p.get('ok'))}/{len(probes)} probes ok)"
            )
        summary.append(("fix", _change_text(c["fix"]) + how))
        for a in c.get("alternatives", []):
            summary.append(("alternative", alternative_text(a)))
    if c.get("confirmation_experiment_id"):
        conf = run.run_of(c["confirmation_experiment_id"])
        if conf and conf.outcome:
            probes = conf.outcome.get("probes", [])
            summary.append(
                (
                    "confirmation",
                    f"{_exp_label(conf)}: {conf.outcome.get('stage')}, "
                    f"{sum(1 for p in probes if p.get('ok'))}/{len(probes)} probes ok",
                )
            )
    summary.append(("symptom", symptom))
    for r in c.get("refuted", []):
        h = run.hypothesis(r.get("id"))
        why = "; ".join(str(e.get("detail")) for e in r.get("evidence", [])) or "refuted"
        if h is not None:
            refuting = [s for s in _why_dropped(run, h, design) if s.startswith("Refuted")]
            why = " ".join(refuting) or why
        ruled_out.append((f"{r.get('id')}: {r.get('statement')}", why))
    if c.get("reason") and not c.get("root_cause"):
        summary.append(("why it stopped", str(c["reason"])))
    launches, host_s = (
        (c.get("launches"), c.get("host_seconds")) if c else (run.launches(), run.host_seconds())
    )
    summary.append(
        ("cost", f"{launches} launches, {float(host_s or 0):.0f} host-seconds ({_dur(float(host_s or 0))})")
    )

    # How the run got there, one sentence per step.
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
            "The transcript ends without run.ended: the run is still going, waits for an approval, or its "
            "process died; this report shows what was recorded so far."
        )

    hypotheses: list[HypothesisView] = []
    why_open = {str(u.get("id")): str(u.get("why") or "") for u in c.get("untested", [])}
    order = {"confirmed": 0, "supported": 1, "refuted": 2, "open": 3}
    for h in sorted(run.hypotheses.values(), key=lambda x: (order.get(x.status, 4), -x.posterior)):
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
        if h.status == "refuted":
            view.why_dropped = _why_dropped(run, h, design)
        hypotheses.append(view)

    quoted: dict[tuple[str, tuple[int, ...]], str] = {}
    for hv in hypotheses:
        for item in hv.evidence:
            if item.excerpt is None:
                continue
            key = (item.excerpt.experiment, tuple(item.line_numbers))
            if key in quoted:
                item.excerpt, item.quoted_under = None, quoted[key]
            else:
                quoted[key] = hv.id

    knowledge = [
        (str(k.get("path")), str(f.get("title")) + f" [{f.get('outcome')}]", float(f.get("relevance", 0.0)))
        for k in run.knowledge
        for f in k.get("findings", [])
    ]
    notes: list[str] = []
    for rj in run.rejections:
        notes.append(
            f"Rejected: {_change_text(rj['change']) if rj.get('change') else rj['experiment_id']} — {rj['reason']}"
        )
    for u in c.get("untested", []):
        notes.append(
            f"Still open: {u.get('id')} (p={float(u.get('posterior', 0)):.2f}, {u.get('why')})"
        )
    for e in run.errors:
        notes.append(f"Error at step {e.step}: {e.data.get('message')}")
    return Report(
        title=f"hypoloop run {run.run_id} — {run.started.get('case', '?')}",
        run_id=run.run_id,
        transcript=str(run.path),
        case=str(run.started.get("case", "?")),
        model=run.model_path(),
        hardware=hardware,
        started=started,
        status=status,
        finished=run.finished,
        summary=summary,
        narrative=narrative,
        ruled_out=ruled_out,
        experiments=_experiment_rows(run),
        hypotheses=hypotheses,
        design=design,
        steps=run.steps(),
        series={h.id: dict(h.series) for h in run.hypotheses.values()},
        knowledge=knowledge,
        notes=notes,
        findings_entry=_findings_entry(run, c),
    )


def _findings_entry(run: RecordedRun, c: dict[str, Any]) -> str:
    """The entry ``hypoloop findings add`` would append (the same text), for an isolated run."""
    from agent.findings import FindingsWriteError, entry_for

    try:
        return entry_for(run)
    except FindingsWriteError:
        return str(c.get("findings_entry") or "")


# ---------------------------------------------------------------------------------- Markdown


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(rep: Report) -> str:
    """The report as GitHub-flavoured Markdown (pictures become a text timeline and a table)."""
    out: list[str] = [f"# {rep.title}", ""]
    out.append(
        f"Model **{rep.model}** on {rep.hardware}. Started {rep.started}. Transcript `{rep.transcript}`."
    )
    if not rep.finished:
        out += ["", "> **Unfinished run**: the transcript ends without `run.ended`."]
    out += ["", "## Summary", ""]
    for k, v in rep.summary:
        out.append(f"- **{k}**: {v}")
    if rep.ruled_out:
        out.append("- **ruled out**:")
        for what, why in rep.ruled_out:
            out.append(f"  - {what} — *{why}*")
    out += ["", "## How the run got there", ""]
    out += [f"{i}. {line}" for i, line in enumerate(rep.narrative, start=1)]
    out += ["", "## Experiments", ""]
    out.append(
        "| # | change | approval | outcome | stage reached | ready after | crash after | host time | note |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for e in rep.experiments:
        out.append(
            f"| {e.number} | {_md(e.change if e.change != '—' else e.label.split(' ', 1)[1])} | {_md(e.approval)} | "
            f"{_md(e.outcome)} | {e.stage} | {_dur(e.to_ready_s)} | {_dur(e.to_crash_s)} | "
            f"{e.host_seconds:.0f} s | {_md(e.notes)} |"
        )
    out += ["", "Timeline (host time; `=` loading, `#` serving, `X` crash, `|` stop):", "", "```text"]
    out += _text_timeline(rep)
    out += ["```", "", "## Hypotheses", ""]
    out.append("| hypothesis | component | verdict | p at start | p at end |")
    out.append("|---|---|---|---|---|")
    for h in rep.hypotheses:
        out.append(
            f"| `{h.id}` | {h.component} | {h.verdict} | {h.prior:.2f} | {h.posterior:.2f} |"
        )
    if rep.steps:
        out += ["", "Probability over the steps (after each experiment):", ""]
        out.append("| hypothesis | " + " | ".join(f"after #{s}" for s in rep.steps) + " |")
        out.append("|---|" + "---|" * len(rep.steps))
        for h in rep.hypotheses:
            vals = _carry(rep.series.get(h.id, {}), rep.steps)
            out.append(f"| `{h.id}` | " + " | ".join("" if v is None else f"{v:.2f}" for v in vals) + " |")
    for h in rep.hypotheses:
        out += ["", f"### `{h.id}` — {h.verdict}", ""]
        out.append(f"{h.statement} *({h.component}; from {h.source}; p {h.prior:.2f} → {h.posterior:.2f})*")
        if h.rationale:
            out += ["", f"Why it was considered: {h.rationale}"]
        if h.why_dropped:
            out += ["", "**Why it was dropped:**", ""]
            out += [f"- {s}" for s in h.why_dropped]
        out += ["", "Evidence:", ""]
        for item in h.evidence:
            where = f" — {item.experiment}" if item.experiment else ""
            lines = (
                f", log line{'s' if len(item.line_numbers) > 1 else ''} {', '.join(map(str, item.line_numbers[:6]))}"
                if item.line_numbers
                else ""
            )
            out.append(f"- *{item.effect}* ({item.kind}{where}{lines}): {item.detail}")
            if item.quoted_under:
                out.append(f"  (log lines quoted under `{item.quoted_under}` above)")
            if item.excerpt:
                out.append("")
                out.append("  ```text")
                for n, text, cited in item.excerpt.lines:
                    out.append(f"  {'>' if cited else ' '} {n:>6}  {text[:220]}")
                out.append("  ```")
                out.append(f"  <sub>from {item.excerpt.source}</sub>")
                out.append("")
    out += ["", "## Alternatives weighed at each step", ""]
    for d in rep.design:
        out.append(f"**Step {d.step}: {d.chosen}** — approval: {d.decision}")
        out.append("")
        if d.alternatives:
            out.append("| change | tests | P(fix) | P(fix) per host-s | |")
            out.append("|---|---|---|---|---|")
            for a in d.alternatives:
                out.append(
                    f"| {_md(a.change)} | {_md(', '.join(a.tests) or '—')} | {a.p_fix:.3f} | {a.score:.2e} | "
                    f"{'**chosen**' if a.chosen else ''} |"
                )
            out.append("")
        for hid, why in d.skipped:
            out.append(f"- skipped for `{hid}`: {why}")
        if d.skipped:
            out.append("")
    if rep.knowledge:
        out += ["## Knowledge read", ""]
        out += [f"- {_md(title)} — relevance {rel:.2f} (`{path}`)" for path, title, rel in rep.knowledge]
        out.append("")
    if rep.notes:
        out += ["## Notes", ""]
        out += [f"- {n}" for n in rep.notes]
        out.append("")
    if rep.findings_entry:
        out += ["## FINDINGS.md entry", "", "````markdown", rep.findings_entry.rstrip(), "````", ""]
    return "\n".join(out) + "\n"


def _carry(series: dict[int, float], steps: list[int]) -> list[float | None]:
    vals: list[float | None] = []
    cur: float | None = None
    for s in steps:
        if s in series:
            cur = series[s]
        vals.append(cur)
    return vals


def _text_timeline(rep: Report, width: int = 60) -> list[str]:
    total = sum(e.host_seconds for e in rep.experiments) or 1.0
    label_w = min(44, max((len(e.label) for e in rep.experiments), default=10))
    lines = []
    t0 = 0.0
    for e in rep.experiments:
        start = int(t0 / total * width)
        length = max(1, round(e.host_seconds / total * width))
        ready = e.to_ready_s if e.to_ready_s is not None else (e.to_crash_s or e.host_seconds)
        load = max(0, min(length, round(ready / total * width)))
        bar = "=" * load + "#" * max(0, length - load - 1) + "|"
        if e.to_crash_s is not None:
            pos = min(len(bar) - 1, max(0, round(e.to_crash_s / total * width)))
            bar = bar[:pos] + "X" + bar[pos + 1 :]
        lines.append(f"{e.label[:label_w]:<{label_w}} {' ' * start}{bar}")
        t0 += e.host_seconds
    lines.append(f"{'':<{label_w}} 0{' ' * (width - 2)}{_dur(total)}")
    return lines


# ---------------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;
 color:#1d2330;background:#f6f7f9;line-height:1.45}
main{max-width:1120px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:1.55em;margin:.2em 0 .1em} h2{font-size:1.2em;margin:1.8em 0 .6em;border-bottom:1px solid #d5d9e0;
 padding-bottom:.2em} h3{font-size:1.02em;margin:0 0 .3em}
.meta{color:#5b6475;font-size:.92em}
.box{background:#fff;border:1px solid #d5d9e0;border-radius:8px;padding:14px 18px;margin:12px 0}
.summary{border-left:6px solid #2e7d32} .summary.bad{border-left-color:#c62828} .summary.open{border-left-color:#ef8f00}
.kv{display:grid;grid-template-columns:150px 1fr;gap:6px 14px} .kv b{color:#374151}
table{border-collapse:collapse;width:100%;font-size:.9em;background:#fff}
th,td{border:1px solid #dde1e7;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600} td.num{text-align:right;white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:.8em;font-weight:600;color:#fff}
.confirmed{background:#2e7d32}.supported{background:#558b2f}.refuted{background:#c62828}.open{background:#8a94a6}
.ok{color:#2e7d32;font-weight:600}.fail{color:#c62828;font-weight:600}
.ev{margin:4px 0 8px 0;padding-left:0;list-style:none} .ev li{margin:5px 0}
.eff{display:inline-block;min-width:64px;font-size:.78em;font-weight:600;text-transform:uppercase;color:#5b6475}
.eff.supports{color:#2e7d32}.eff.refutes{color:#c62828}.eff.weakens{color:#b26a00}.eff.confirms{color:#1b5e20}
pre{background:#0f172a;color:#e2e8f0;padding:8px 10px;border-radius:6px;overflow-x:auto;font-size:.8em;margin:4px 0}
pre .hit{color:#fde68a;font-weight:600} .src{font-size:.75em;color:#6b7280}
.why{background:#fff7ed;border:1px solid #fed7aa;border-radius:6px;padding:8px 12px;margin:8px 0}
.chosen td{background:#f3e8ff;font-weight:600} ol li{margin:4px 0} code{font-size:.92em}
svg{background:#fff;border:1px solid #d5d9e0;border-radius:8px}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def render_html(rep: Report) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no script, no external files)."""
    c = rep.status
    cls = "summary" + ("" if c == "isolated" else (" bad" if c in ("error", "interrupted") else " open"))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(rep.title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{_e(rep.title)}</h1>",
        f'<div class="meta">Model <b>{_e(rep.model)}</b> on {_e(rep.hardware)}. Started {_e(rep.started)}. '
        f"Transcript <code>{_e(rep.transcript)}</code>.</div>",
    ]
    if not rep.finished:
        parts.append(
            '<div class="box why"><b>Unfinished run:</b> the transcript ends without run.ended.</div>'
        )
    parts.append(f'<section class="box {cls}"><div class="kv">')
    for k, v in rep.summary:
        parts.append(f"<b>{_e(k)}</b><div>{_e(v)}</div>")
    if rep.ruled_out:
        items = "".join(f"<li><b>{_e(w)}</b><br><i>{_e(y)}</i></li>" for w, y in rep.ruled_out)
        parts.append(f'<b>ruled out</b><div><ul style="margin:0;padding-left:18px">{items}</ul></div>')
    parts.append("</div></section>")
    parts.append("<h2>How the run got there</h2><ol>")
    parts += [f"<li>{_e(line)}</li>" for line in rep.narrative]
    parts.append("</ol>")
    parts.append("<h2>Experiments</h2>")
    parts.append(
        "<table><tr><th>#</th><th>change</th><th>approval</th><th>outcome</th><th>stage reached</th>"
        "<th>ready after</th><th>crash after</th><th>host time</th><th>note</th></tr>"
    )
    for e in rep.experiments:
        what = e.change if e.change != "—" else e.label.split(" ", 1)[1]
        parts.append(
            f"<tr><td class=num>{e.number}</td><td>{_e(what)}<br><span class=src>{_e(e.experiment_id)}</span></td>"
            f"<td>{_e(e.approval)}</td><td class={'ok' if e.ok else 'fail'}>{_e(e.outcome)}</td><td>{_e(e.stage)}</td>"
            f"<td class=num>{_dur(e.to_ready_s)}</td><td class=num>{_dur(e.to_crash_s)}</td>"
            f"<td class=num>{e.host_seconds:.0f} s</td><td>{_e(e.notes)}</td></tr>"
        )
    parts.append("</table>")
    parts.append("<p class=meta>Timeline of the experiments in host time (one after another):</p>")
    parts.append(timeline_svg(rep))
    parts.append("<h2>Hypotheses</h2>")
    parts.append(
        "<table><tr><th>hypothesis</th><th>component</th><th>verdict</th><th>p at start</th><th>p at end</th></tr>"
    )
    for h in rep.hypotheses:
        parts.append(
            f"<tr><td><code>{_e(h.id)}</code><br><span class=src>{_e(h.statement)}</span></td><td>{_e(h.component)}</td>"
            f'<td><span class="badge {h.status}">{_e(h.verdict)}</span></td>'
            f"<td class=num>{h.prior:.2f}</td><td class=num>{h.posterior:.2f}</td></tr>"
        )
    parts.append("</table>")
    if rep.steps:
        parts.append("<p class=meta>Probability of each hypothesis after each experiment:</p>")
        parts.append(probability_svg(rep))
    for h in rep.hypotheses:
        parts.append(f'<div class="box" id="h-{_e(h.id)}">')
        parts.append(
            f'<h3><code>{_e(h.id)}</code> <span class="badge {h.status}">{_e(h.verdict)}</span>'
            f' <span class="meta">p {h.prior:.2f} → {h.posterior:.2f} · {_e(h.component)} · from {_e(h.source)}</span></h3>'
        )
        parts.append(f"<div>{_e(h.statement)}</div>")
        if h.rationale:
            parts.append(f'<div class="meta">Why it was considered: {_e(h.rationale)}</div>')
        if h.why_dropped:
            parts.append(
                '<div class="why"><b>Why it was dropped</b><ul style="margin:4px 0;padding-left:18px">'
            )
            parts += [f"<li>{_e(s)}</li>" for s in h.why_dropped]
            parts.append("</ul></div>")
        parts.append('<ul class="ev">')
        for ev in h.evidence:
            where = f" · {_e(ev.experiment)}" if ev.experiment else ""
            if ev.line_numbers:
                where += f" · log line{'s' if len(ev.line_numbers) > 1 else ''} {_e(', '.join(map(str, ev.line_numbers[:6])))}"
            parts.append(
                f'<li><span class="eff {_e(ev.effect)}">{_e(ev.effect)}</span> <span class=src>{_e(ev.kind)}{where}</span>'
                f"<br>{_e(ev.detail)}"
            )
            if ev.quoted_under:
                parts.append(
                    f' <span class=src>(log lines quoted under <a href="#h-{_e(ev.quoted_under)}">'
                    f"{_e(ev.quoted_under)}</a>)</span>"
                )
            if ev.excerpt:
                body = "\n".join(
                    (
                        f'<span class="hit">&gt; {n:>6}  {_e(t[:220])}</span>'
                        if cited
                        else f"  {n:>6}  {_e(t[:220])}"
                    )
                    for n, t, cited in ev.excerpt.lines
                )
                parts.append(f"<pre>{body}</pre><div class=src>from {_e(ev.excerpt.source)}</div>")
            parts.append("</li>")
        parts.append("</ul></div>")
    parts.append("<h2>Alternatives weighed at each step</h2>")
    for d in rep.design:
        parts.append(f'<div class="box"><h3>Step {d.step}: {_e(d.chosen)}</h3>')
        parts.append(f'<div class="meta">{_e(d.why)} Approval: {_e(d.decision)}.</div>')
        if d.alternatives:
            parts.append(
                "<table><tr><th>change</th><th>tests hypothesis</th><th>P(fix)</th><th>P(fix) per host-s</th><th></th></tr>"
            )
            for a in d.alternatives:
                parts.append(
                    f"<tr class={'chosen' if a.chosen else ''}><td>{_e(a.change)}</td><td>{_e(', '.join(a.tests) or '—')}</td>"
                    f"<td class=num>{a.p_fix:.3f}</td><td class=num>{a.score:.2e}</td><td>{'chosen' if a.chosen else ''}</td></tr>"
                )
            parts.append("</table>")
        if d.skipped:
            parts.append(
                "<ul>"
                + "".join(f"<li>skipped for <code>{_e(h)}</code>: {_e(w)}</li>" for h, w in d.skipped)
                + "</ul>"
            )
        parts.append("</div>")
    if rep.knowledge:
        parts.append("<h2>Knowledge read</h2><ul>")
        parts += [
            f"<li>{_e(t)} — relevance {r:.2f} <span class=src>{_e(p)}</span></li>"
            for p, t, r in rep.knowledge
        ]
        parts.append("</ul>")
    if rep.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in rep.notes) + "</ul>")
    if rep.findings_entry:
        parts.append(f"<h2>FINDINGS.md entry</h2><pre>{_e(rep.findings_entry)}</pre>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


_TICKS_S = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def _nice_step(total: float, target: int = 8) -> float:
    """A tick interval for a time axis of ``total`` seconds: a round duration giving ~``target`` ticks."""
    raw = total / target
    return float(next((t for t in _TICKS_S if t >= raw), _TICKS_S[-1]))


def timeline_svg(rep: Report) -> str:
    """Experiments one after another on a host-time axis: loading (launch → ready), serving
    (ready → stop, green when the probes passed, red when not), a cross where it crashed."""
    rows = rep.experiments
    if not rows:
        return '<p class="meta">(no experiment ran)</p>'
    left, width, row_h, top = 300, 760, 30, 20
    total = sum(r.host_seconds for r in rows) or 1.0
    height = top + row_h * len(rows) + 70
    sx = width / total
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {left + width + 120} {height}" '
        f'font-family="system-ui,sans-serif" font-size="12">'
    ]
    tick = _nice_step(total)
    t = 0.0
    while t <= total + 1e-9:
        x = left + t * sx
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{top + row_h * len(rows)}" stroke="#e5e7eb"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{top + row_h * len(rows) + 16}" text-anchor="middle" fill="#6b7280">{_e(_dur(t))}</text>'
        )
        t += tick
    t0 = 0.0
    for i, r in enumerate(rows):
        y = top + i * row_h
        x0 = left + t0 * sx
        w = max(2.0, r.host_seconds * sx)
        ready = r.to_ready_s
        end_load = (
            ready if ready is not None else (r.to_crash_s if r.to_crash_s is not None else r.host_seconds)
        )
        lw = min(w, max(1.0, end_load * sx))
        out.append(
            f'<text x="{left - 8}" y="{y + 19}" text-anchor="end" fill="#111827">{_e(r.label[:44])}</text>'
        )
        out.append(
            f'<rect x="{x0:.1f}" y="{y + 6}" width="{lw:.1f}" height="18" fill="#93c5fd"><title>loading</title></rect>'
        )
        if ready is not None:
            color = "#22c55e" if r.ok else "#ef4444"
            out.append(
                f'<rect x="{x0 + lw:.1f}" y="{y + 6}" width="{max(0.0, w - lw):.1f}" height="18" fill="{color}">'
                f"<title>serving ({_e(r.stage)})</title></rect>"
            )
            out.append(
                f'<circle cx="{x0 + lw:.1f}" cy="{y + 15}" r="4" fill="#fff" stroke="#166534" stroke-width="2"><title>ready after {_e(_dur(ready))}</title></circle>'
            )
        if r.to_crash_s is not None:
            cx = x0 + min(w, r.to_crash_s * sx)
            out.append(
                f'<path d="M{cx - 6:.1f},{y + 9} l12,12 m0,-12 l-12,12" stroke="#7f1d1d" stroke-width="3">'
                f"<title>crash after {_e(_dur(r.to_crash_s))}</title></path>"
            )
        out.append(
            f'<rect x="{x0 + w - 2:.1f}" y="{y + 3}" width="3" height="24" fill="#111827"><title>stopped</title></rect>'
        )
        out.append(f'<text x="{x0 + w + 10:.1f}" y="{y + 19}" fill="#374151">{_e(r.stage)}</text>')
        t0 += r.host_seconds
    ly = top + row_h * len(rows) + 40
    legend = [
        ("#93c5fd", "loading (launch → ready)"),
        ("#22c55e", "serving, probes ok"),
        ("#ef4444", "serving, failed"),
    ]
    x = left
    for color, text in legend:
        out.append(f'<rect x="{x}" y="{ly - 10}" width="14" height="12" fill="{color}"/>')
        out.append(f'<text x="{x + 20}" y="{ly}" fill="#374151">{_e(text)}</text>')
        x += 190
    out.append(f'<path d="M{x},{ly - 10} l10,10 m0,-10 l-10,10" stroke="#7f1d1d" stroke-width="3"/>')
    out.append(f'<text x="{x + 16}" y="{ly}" fill="#374151">crash</text>')
    out.append(f'<rect x="{x + 70}" y="{ly - 12}" width="3" height="14" fill="#111827"/>')
    out.append(f'<text x="{x + 78}" y="{ly}" fill="#374151">stop</text>')
    out.append(f'<text x="8" y="{ly}" fill="#6b7280">host time →</text>')
    out.append("</svg>")
    return "\n".join(o for o in out if o)


def probability_svg(rep: Report) -> str:
    """Posterior of each hypothesis after each experiment (lines), with a legend; refuted hypotheses
    end in a cross, the confirmed one in a check mark."""
    steps = rep.steps
    left, width, top, height = 60, 620, 20, 260
    legend_x = left + width + 40
    n = len(rep.hypotheses)
    total_h = max(top + height + 50, top + 22 * n + 20)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {legend_x + 460} {total_h}" '
        f'font-family="system-ui,sans-serif" font-size="12">'
    ]

    def sx(i: int) -> float:
        return left + (width * i / (len(steps) - 1) if len(steps) > 1 else width / 2)

    def sy(p: float) -> float:
        return top + height * (1 - p)

    for p in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(
            f'<line x1="{left}" y1="{sy(p):.1f}" x2="{left + width}" y2="{sy(p):.1f}" stroke="#e5e7eb"/>'
        )
        out.append(
            f'<text x="{left - 8}" y="{sy(p) + 4:.1f}" text-anchor="end" fill="#6b7280">{p:.2f}</text>'
        )
    labels = {e.number: e.label for e in rep.experiments}
    for i, s in enumerate(steps):
        out.append(
            f'<line x1="{sx(i):.1f}" y1="{top}" x2="{sx(i):.1f}" y2="{top + height}" stroke="#f1f5f9"/>'
        )
        text = labels.get(s, f"#{s}")
        anchor = "middle" if 0 < i < len(steps) - 1 or len(steps) == 1 else ("start" if i == 0 else "end")
        out.append(
            f'<text x="{sx(i):.1f}" y="{top + height + 16}" text-anchor="{anchor}" fill="#374151">'
            f"after {_e(text[:34])}</text>"
        )
    for k, h in enumerate(rep.hypotheses):
        color = _PALETTE[k % len(_PALETTE)]
        vals = _carry(rep.series.get(h.id, {}), steps)
        pts = [(sx(i), sy(v)) for i, v in enumerate(vals) if v is not None]
        if not pts:
            continue
        wide = 3 if h.status in ("confirmed", "supported") else 2
        out.append(
            f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" fill="none" stroke="{color}" '
            f'stroke-width="{wide}"><title>{_e(h.id)}</title></polyline>'
        )
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
        x, y = pts[-1]
        if h.status == "refuted":
            out.append(
                f'<path d="M{x - 6:.1f},{y - 6:.1f} l12,12 m0,-12 l-12,12" stroke="#b91c1c" stroke-width="2.5"/>'
            )
        elif h.status == "confirmed":
            out.append(
                f'<path d="M{x - 6:.1f},{y:.1f} l4,5 l9,-11" fill="none" stroke="#166534" stroke-width="3"/>'
            )
        ly = top + 10 + 22 * k
        out.append(f'<rect x="{legend_x}" y="{ly - 9}" width="16" height="4" fill="{color}"/>')
        out.append(
            f'<text x="{legend_x + 22}" y="{ly - 3}" fill="#111827">{_e(h.id[:40])} '
            f'<tspan fill="#6b7280">({_e(h.verdict or h.status)}, {h.prior:.2f} → {h.posterior:.2f})</tspan></text>'
        )
    out.append(f'<text x="{left}" y="{top - 6}" fill="#6b7280">posterior probability</text>')
    out.append("</svg>")
    return "\n".join(out)


def render(run: RecordedRun, fmt: str) -> str:
    """The report of ``run`` as ``md`` or ``html`` text. Raises ValueError for another format."""
    rep = build_report(run)
    # Log excerpts come from the server logs too, and older transcripts were not redacted: the whole
    # document passes the run's redaction (the case as recorded, this process's environment).
    redact = run_redactor(_recorded_case(run))
    if fmt == "md":
        return redact(render_markdown(rep))
    if fmt == "html":
        return redact(render_html(rep))
    raise ValueError(f"--format {fmt}: expected md or html")


def _recorded_case(run: RecordedRun) -> Any:
    """The case of ``run`` as its ``run.started`` recorded it, or None."""
    from agent.case import Case

    data = run.started.get("case_data")
    try:
        return Case.model_validate(data) if data else None
    except ValueError:
        return None
