"""The run step by step, for the review document: the experiment rows, the log excerpts cited as
evidence, each design step with the alternatives it weighed, and why a hypothesis was dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.record.recorded import ExperimentRun, HypothesisRecord, RecordedRun
from agent.review.report.model import (
    _CONTEXT,
    _MAX_EXCERPT_LINES,
    Alternative,
    DesignStep,
    EvidenceItem,
    Excerpt,
    ExperimentRow,
)
from agent.review.text import change_text, shown_line
from tools.host_time import on_host_clock


def _exp_label(r: ExperimentRun) -> str:
    e = r.experiment
    if e.get("change"):
        what = change_text(e["change"])
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
        chosen = change_text(d["change"]) if d.get("change") else ""
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
            decision += f"; ran {change_text(dec['change'])} instead"
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


def _approval(r: ExperimentRun) -> str:
    """How the experiment was approved (``approve (auto)``), or "—"."""
    dec = (r.proposal.decision or {}) if r.proposal else {}
    approval = str(dec.get("decision") or ("— (observed log)" if r.observed_log else "—"))
    return approval + (f" ({dec['by']})" if dec.get("by") else "")


def _interrupted_rows(r: ExperimentRun) -> list[ExperimentRow]:
    """A row for each launch of ``r`` that gave no outcome (the run was interrupted or killed while it ran):
    it counts in the run's launches and host time, so the table lists it, marked interrupted; its host time
    is the wall time it was seen running over the host's time scale (as the run counted it)."""
    rows = []
    for ev, wall in r.unconcluded_launches():
        again = "; launched again after the run resumed" if ev is not r.launched[-1] else ""
        rows.append(ExperimentRow(
            label=_exp_label(r), number=r.step, experiment_id=r.id, purpose=str(r.experiment.get("purpose")),
            change=change_text(r.experiment["change"]) if r.experiment.get("change") else "—",
            approval=_approval(r), outcome="interrupted: no outcome (the run stopped while this server ran)",
            stage="interrupted", to_ready_s=None, to_crash_s=None,
            host_seconds=round(wall / float(ev.data.get("time_scale") or 1.0), 3), ok=False,
            notes=f"interrupted{again}",
        ))
    return rows


def _crash_on_host_clock(r: ExperimentRun, t: dict[str, Any]) -> float | None:
    """When the launch ended (``to_end_s``) on the clock of its host-seconds (``tools.host_time.on_host_clock``:
    the request phase as real seconds, as the launch is billed), at most its host-seconds; None when unknown."""
    end = t.get("to_end_s")
    if end is None:
        return None
    scale = next((float(ev.data["time_scale"]) for ev in reversed(r.launched) if ev.data.get("time_scale")), 1.0)
    at = on_host_clock(float(end), t.get("to_ready_s"), scale)
    return min(at, r.host_seconds) if r.host_seconds > 0 else at


def _experiment_rows(run: RecordedRun) -> list[ExperimentRow]:
    """The experiment table's rows in the order the launches ran: each experiment with an outcome, and
    each launch that gave none (``_interrupted_rows``)."""
    rows = []
    for r in run.runs:
        rows += _interrupted_rows(r)
        if r.outcome is None:
            continue
        o = r.outcome
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
        approval = _approval(r)
        crash = None if ok or stage == "ready" else _crash_on_host_clock(r, t)
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
                change=change_text(r.experiment["change"]) if r.experiment.get("change") else "—",
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
