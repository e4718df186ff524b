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

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from agent.record.recorded import ExperimentRun, HypothesisRecord, RecordedRun
from agent.record.redact import run_redactor
from agent.review.render import _change_text, alternative_text, answer_rows, shown_line
from agent.review.wording import count
from tools.fingerprint import engine_label
from tools.sanitize import fenced, map_strings, md_text, visible_data

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
#: (``agent.run.graph.build_conclusion``): it may have been tested without a verdict, or never.
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
    #: The answer the report opens with: the root cause in one sentence, the root fix apart from the
    #: workarounds (``agent.review.render.answer_rows``), the launch command that worked ("" when none).
    answer_head: str = ""
    answer: list[tuple[str, str]] = field(default_factory=list)
    command: str = ""


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
    """The ``wanted`` lines (1-based, split on "\\n" only, as the log watcher numbers them), whole; a
    progress bar redrawn with carriage returns shows its last state (``render.shown_line``)."""
    out: dict[int, str] = {}
    last = max(wanted)
    with open(path, "rb") as fh:  # binary: text mode would also split on the "\r" of a tqdm bar
        for n, raw in enumerate(fh, start=1):
            if n in wanted:
                out[n] = shown_line(raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "replace"))
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


def _hardware(fp: dict[str, Any]) -> str:
    """The recorded host fingerprint as one line, or a note that none was recorded."""
    if not fp:
        return "unknown (no fingerprint recorded)"
    return (
        f"{fp.get('gpu_count')} × {fp.get('gpu_name')} (compute capability {fp.get('compute_capability')}, "
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
        out.append(("blocker fixed", _change_text(b) + " — adopted into the baseline first; the fix needs it too"))
    if c.get("fix"):
        fix_run = run.run_of(c.get("fix_experiment_id"))
        how = ""
        if fix_run and fix_run.outcome:
            probes = fix_run.outcome.get("probes", [])
            how = (
                f" — experiment #{fix_run.step} served correctly with it "
                f"({sum(1 for p in probes if p.get('ok'))}/{len(probes)} probes ok)"
            )
        out.append(("fix", _change_text(c["fix"]) + how))
        for a in c.get("alternatives", []):
            out.append(("alternative", alternative_text(a)))
    if c.get("confirmation_experiment_id"):
        conf = run.run_of(c["confirmation_experiment_id"])
        if conf and conf.outcome:
            probes = conf.outcome.get("probes", [])
            out.append(
                (
                    "confirmation",
                    f"{_exp_label(conf)}: {conf.outcome.get('stage')}, "
                    f"{sum(1 for p in probes if p.get('ok'))}/{len(probes)} probes ok",
                )
            )
    return out


def _summary(run: RecordedRun, c: dict[str, Any], status: str, symptom: str) -> list[tuple[str, str]]:
    """The summary rows in order: status, the fix rows, symptom, why it stopped, the leading
    hypothesis (when no root cause was named) and the cost."""
    summary: list[tuple[str, str]] = []
    summary.append(("status", status if run.finished else f"{status} — the transcript has no run.ended"))
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
            "The transcript ends without run.ended: the run is still going, waits for an approval, or its "
            "process died; this report shows what was recorded so far."
        )
    return narrative


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
            f"Rejected: {_change_text(rj['change']) if rj.get('change') else rj['experiment_id']} — {rj['reason']}"
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
    """The open hypothesis with the highest probability, as one line (id, probability, component,
    statement, and why it is still open), for a run that named no root cause; None when none is open.
    One the conclusion ruled out is not open, whatever the ledger says."""
    ruled_out = _ruled_out_by_conclusion(c)
    open_ = [h for h in run.hypotheses.values() if h.status == "open" and h.id not in ruled_out]
    if not open_:
        return None
    h = max(open_, key=lambda x: x.posterior)
    why = next((str(u.get("why")) for u in c.get("untested", []) if u.get("id") == h.id and u.get("why")), "")
    text = f"{h.id} (p={h.posterior:.2f}, {h.added.get('component', '?')}): {h.added.get('statement', '')}"
    return text + (f" — {why}" if why else "")


def _findings_entry(run: RecordedRun, c: dict[str, Any]) -> str:
    """The entry ``hypoloop findings add`` would append (the same text), for an isolated run."""
    from agent.review.findings import FindingsWriteError, entry_for

    try:
        return entry_for(run)
    except FindingsWriteError:
        return str(c.get("findings_entry") or "")


# ---------------------------------------------------------------------------------- Markdown


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_summary(rep: Report) -> list[str]:
    """The title, the run's context line and the summary (with what was ruled out)."""
    out: list[str] = [f"# {rep.title}", ""]
    out.append(
        f"Model **{rep.model}** on {rep.hardware}. Started {rep.started}. Transcript `{rep.transcript}`."
    )
    if not rep.finished:
        out += ["", "> **Unfinished run**: the transcript ends without `run.ended`."]
    if rep.answer:
        out += ["", "## Answer", ""]
        if rep.answer_head:
            out += [rep.answer_head, ""]
        out += [f"- **{k}**: {v}" for k, v in rep.answer]
        if rep.command:
            out += ["", "Launch command that worked:", "", "```bash", rep.command, "```"]
    out += ["", "## Summary", ""]
    for k, v in rep.summary:
        out.append(f"- **{k}**: {v}")
    if rep.ruled_out:
        out.append("- **ruled out**:")
        for what, why in rep.ruled_out:
            out.append(f"  - {what} — *{why}*")
    return out


def _md_experiments(rep: Report) -> list[str]:
    """The experiment table and the text timeline."""
    out = ["", "## Experiments", ""]
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
    out.append("```")
    return out


def _md_hypothesis_tables(rep: Report) -> list[str]:
    """The verdict table of the hypotheses and their probability after each step."""
    out = ["", "## Hypotheses", ""]
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
    return out


def _md_evidence_item(item: EvidenceItem) -> list[str]:
    """One evidence bullet, with its log excerpt (or a pointer to where the same lines are quoted)."""
    where = f" — {item.experiment}" if item.experiment else ""
    lines = (
        f", log line{'s' if len(item.line_numbers) > 1 else ''} {', '.join(map(str, item.line_numbers[:6]))}"
        if item.line_numbers
        else ""
    )
    out = [f"- *{item.effect}* ({item.kind}{where}{lines}): {item.detail}"]
    if item.quoted_under:
        out.append(f"  (log lines quoted under `{item.quoted_under}` above)")
    if item.excerpt:
        out.append("")
        out.append("  ```text")
        for n, text, cited in item.excerpt.lines:
            out.append(f"  {'>' if cited else ' '} {n:>6}  {text}")
        out.append("  ```")
        out.append(f"  <sub>from {item.excerpt.source}</sub>")
        out.append("")
    return out


def _md_hypothesis(h: HypothesisView) -> list[str]:
    """One hypothesis's section: statement, why it was considered and dropped, its evidence."""
    out = ["", f"### `{h.id}` — {h.verdict}", ""]
    out.append(f"{h.statement} *({h.component}; from {h.source}; p {h.prior:.2f} → {h.posterior:.2f})*")
    if h.rationale:
        out += ["", f"Why it was considered: {h.rationale}"]
    if h.why_dropped:
        out += ["", "**Why it was dropped:**", ""]
        out += [f"- {s}" for s in h.why_dropped]
    out += ["", "Evidence:", ""]
    for item in h.evidence:
        out += _md_evidence_item(item)
    return out


def _md_design(rep: Report) -> list[str]:
    """The alternatives weighed at each design step, and what was skipped."""
    out = ["", "## Alternatives weighed at each step", ""]
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
    return out


def _md_appendix(rep: Report) -> list[str]:
    """The knowledge read, the notes and the FINDINGS.md entry (each only when there is one)."""
    out: list[str] = []
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
    return out


def render_markdown(rep: Report) -> str:
    """The report as GitHub-flavoured Markdown (pictures become a text timeline and a table)."""
    out = _md_summary(rep)
    out += ["", "## How the run got there", ""]
    out += [f"{i}. {line}" for i, line in enumerate(rep.narrative, start=1)]
    out += _md_experiments(rep)
    out += _md_hypothesis_tables(rep)
    for h in rep.hypotheses:
        out += _md_hypothesis(h)
    out += _md_design(rep)
    out += _md_appendix(rep)
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
    label_w = max((len(e.label) for e in rep.experiments), default=10)  # whole labels: a change is never cut
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
        lines.append(f"{e.label:<{label_w}} {' ' * start}{bar}")
        t0 += e.host_seconds
    lines.append(f"{'':<{label_w}} 0{' ' * (width - 2)}{_dur(total)}")
    return lines


# ---------------------------------------------------------------------------------- HTML

#: Chart geometry: SVG user units of the plot areas. The plots stretch to their container
#: (preserveAspectRatio="none", strokes that do not scale); every text is HTML beside them, so it wraps
#: and is never clipped at any page width.
_TRACK_W = 1000.0
_PLOT_W, _PLOT_H = 1000.0, 300.0


@dataclass
class TimelineRow:
    """One experiment on the host-time axis; positions are percent of the track's width."""

    label: str
    stage: str
    ok: bool
    start: float
    load: float  # launch → ready (or to the crash / the end when never ready)
    serve: float  # ready → stop (0 when never ready)
    ready_at: float | None
    crash_at: float | None
    stop_at: float
    ready_s: str
    crash_s: str


@dataclass
class TimelineChart:
    """The experiment timeline: rows in order, axis ticks (percent, text)."""

    rows: list[TimelineRow]
    ticks: list[tuple[float, str]]


@dataclass
class Series:
    """One hypothesis's probability over the steps: SVG points in the plot's units, its legend text."""

    id: str
    color: str
    width: int
    points: list[tuple[float, float]]
    mark: str  # ✓ confirmed, ✕ refuted, "" otherwise
    note: str


@dataclass
class ProbabilityChart:
    """Posterior of each hypothesis after each step: y ticks (percent from top, text), step labels
    (one column per step, each point at its column's centre), the series."""

    y_ticks: list[tuple[float, str]]
    step_labels: list[str]
    series: list[Series]
    #: Hypotheses left out of the chart: they stayed unlikely and no experiment settled them.
    hidden: int = 0
    hidden_below: float = 0.0

    @property
    def columns(self) -> int:
        return max(1, len(self.step_labels))


_TICKS_S = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def _nice_step(total: float, target: int = 8) -> float:
    """A tick interval for a time axis of ``total`` seconds: a round duration giving ~``target`` ticks."""
    raw = total / target
    return float(next((t for t in _TICKS_S if t >= raw), _TICKS_S[-1]))


def timeline_chart(rep: Report) -> TimelineChart:
    """Experiments one after another on a host-time axis: loading (launch → ready), serving
    (ready → stop, green when the probes passed, red when not), where it crashed, where it stopped."""
    total = sum(r.host_seconds for r in rep.experiments) or 1.0

    def pct(t: float) -> float:
        return round(100.0 * t / total, 3)

    rows: list[TimelineRow] = []
    t0 = 0.0
    for r in rep.experiments:
        ready = r.to_ready_s
        end_load = ready if ready is not None else (r.to_crash_s if r.to_crash_s is not None else r.host_seconds)
        load = min(r.host_seconds, end_load)
        rows.append(
            TimelineRow(
                label=r.label,
                stage=r.stage,
                ok=r.ok,
                start=pct(t0),
                load=pct(load),
                serve=pct(r.host_seconds - load) if ready is not None else 0.0,
                ready_at=pct(t0 + ready) if ready is not None else None,
                crash_at=pct(t0 + min(r.to_crash_s, r.host_seconds)) if r.to_crash_s is not None else None,
                stop_at=pct(t0 + r.host_seconds),
                ready_s=_dur(ready),
                crash_s=_dur(r.to_crash_s),
            )
        )
        t0 += r.host_seconds
    step = _nice_step(total, target=6)  # room for each label at 800 px (tested in Chromium)
    ticks: list[tuple[float, str]] = []
    t = 0.0
    while t <= total + 1e-9:
        ticks.append((pct(t), _dur(t).replace(".0 ", " ")))  # "40 min", not "40.0 min"
        t += step
    return TimelineChart(rows, ticks)


def probability_chart(rep: Report) -> ProbabilityChart:
    """The posterior of each hypothesis after each experiment; refuted ones are marked ✕, the
    confirmed one ✓ (in the legend)."""
    steps = rep.steps
    n = max(1, len(steps))
    labels = {e.number: e.label for e in rep.experiments}
    series: list[Series] = []
    mattered = _hypotheses_that_mattered(rep)
    for h in rep.hypotheses:
        if h.id not in mattered:
            continue
        k = len(series)
        vals = _carry(rep.series.get(h.id, {}), steps)
        pts = [
            (round(_PLOT_W * (i + 0.5) / n, 2), round(_PLOT_H * (1 - v), 2)) for i, v in enumerate(vals) if v is not None
        ]
        if not pts:
            continue
        series.append(
            Series(
                id=h.id,
                color=_PALETTE[k % len(_PALETTE)],
                width=3 if h.status in ("confirmed", "supported") else 2,
                points=pts,
                mark={"confirmed": "✓", "refuted": "✕"}.get(h.status, ""),
                note=f"{h.verdict or h.status}, {h.prior:.2f} → {h.posterior:.2f}",
            )
        )
    return ProbabilityChart(
        y_ticks=[(round(100 * (1 - p), 2), f"{p:.2f}") for p in (1.0, 0.75, 0.5, 0.25, 0.0)],
        step_labels=[f"after {labels.get(s, f'#{s}')}" for s in steps],
        series=series,
        hidden=len(rep.hypotheses) - len(series),
        hidden_below=_CHART_MIN_P,
    )


#: A hypothesis is drawn when an experiment settled it (confirmed, supported, or refuted after once
#: reaching this probability) or when it ever reached this probability; the rest are one legend line.
_CHART_MIN_P = 0.10


def _hypotheses_that_mattered(rep: Report) -> set[str]:
    """The hypotheses the probability chart draws, at most one per palette colour (so no two lines
    share a colour), the most likely ones first."""
    def peak(h: HypothesisView) -> float:
        return max([h.prior, h.posterior, *rep.series.get(h.id, {}).values()])

    keep = [
        h for h in rep.hypotheses
        if h.status in ("confirmed", "supported") or peak(h) >= _CHART_MIN_P
        or (h.status == "refuted" and peak(h) >= _CHART_MIN_P / 2)
    ]  # fmt: skip
    keep.sort(key=lambda h: (h.status not in ("confirmed", "supported"), -peak(h)))
    return {h.id for h in keep[: len(_PALETTE)]}


def _environment() -> Environment:
    """The report's Jinja2 templates (package data under agent/review/templates), HTML-escaped throughout."""
    env = Environment(
        loader=PackageLoader("agent.review", "templates"),
        autoescape=select_autoescape(("html", "j2")),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["dur"] = _dur
    return env


def render_html(rep: Report) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no script, no external files),
    rendered from ``agent/review/templates/report.html.j2``."""
    c = rep.status
    tone = "" if c == "isolated" else (" bad" if c in ("error", "interrupted") else " open")
    return _environment().get_template("report.html.j2").render(
        rep=rep,
        tone=tone,
        timeline=timeline_chart(rep) if rep.experiments else None,
        probability=probability_chart(rep) if rep.steps else None,
        plot_w=_PLOT_W,
        plot_h=_PLOT_H,
        track_w=_TRACK_W,
    )


def render(run: RecordedRun, fmt: str) -> str:
    """The report of ``run`` as ``md`` or ``html`` text. Raises ValueError for another format."""
    # Server log lines, FINDINGS titles, case text: control and escape sequences shown visibly
    # (tools/sanitize.py); the HTML is escaped by its templates, the Markdown here.
    rep = visible_data(build_report(run))
    # Log excerpts come from the server logs too, and older transcripts were not redacted: the whole
    # document passes the run's redaction (the case as recorded, this process's environment).
    redact = run_redactor(_recorded_case(run))
    if fmt == "md":
        return redact(render_markdown(_md_safe(rep)))
    if fmt == "html":
        return redact(render_html(rep))
    raise ValueError(f"--format {fmt}: expected md or html")


def _md_safe(rep: Report) -> Report:
    """``rep`` with its text safe in Markdown: raw HTML from outside (a FINDINGS title's ``<script>``)
    shown as text (`tools.sanitize.md_text`); log excerpts and the FINDINGS entry, shown in code fences,
    only kept from closing their fence."""

    def excerpt(obj: Any) -> Any:
        if isinstance(obj, Excerpt):
            return Excerpt(obj.experiment, md_text(obj.source), [(n, fenced(t), c) for n, t, c in obj.lines])
        return None

    safe: Report = map_strings(rep, md_text, excerpt)
    safe.findings_entry = fenced(rep.findings_entry)
    return safe


def _recorded_case(run: RecordedRun) -> Any:
    """The case of ``run`` as its ``run.started`` recorded it, or None."""
    from agent.domain.case import Case

    data = run.started.get("case_data")
    try:
        return Case.model_validate(data) if data else None
    except ValueError:
        return None
