"""The review document as GitHub-flavoured Markdown (pictures become a text timeline and tables)."""

from __future__ import annotations

from typing import Any

from agent.review.report.model import EvidenceItem, Excerpt, HypothesisView, Report, _carry, _dur
from tools.sanitize import fence, fenced, map_strings, md_code, md_raw, md_text


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_summary(rep: Report) -> list[str]:
    """The title, the run's context line and the summary (with what was ruled out)."""
    out: list[str] = [f"# {rep.title}", ""]
    out.append(
        f"Model **{rep.model}** on {rep.hardware}. Started {rep.started}. Transcript {md_code(rep.transcript)}."
    )
    if rep.waiting:
        out += ["", f"> **Waiting for approval**: {_md(rep.waiting)}."]
    elif not rep.finished:
        out += ["", "> **Unfinished run**: the transcript ends without `run.ended`."]
    if rep.answer:
        out += ["", "## Answer", ""]
        if rep.answer_head:
            out += [rep.answer_head, ""]
        out += [f"- **{k}**: {v}" for k, v in rep.answer]
        if rep.command:
            command = md_raw(rep.command)  # a fence shows its text as it is: no entity or escape
            out += ["", "Launch command that worked:", "", fence(command) + "bash", command, fence(command)]
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
        "| # | change | approval | outcome | what it showed | ready after | crash after | host time | note |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for e in rep.experiments:
        out.append(
            f"| {e.number} | {_md(e.change if e.change != '—' else e.label.split(' ', 1)[1])} | {_md(e.approval)} | "
            f"{e.stage} | {_md(e.outcome)} | {_dur(e.to_ready_s)} | {_dur(e.to_crash_s)} | "
            f"{e.host_seconds:.0f} s | {_md(e.notes)} |"
        )
    out += ["", "*ready after* and *crash after* are host time from the launch, on the clock of *host time*: "
            "the load modelled, requests as the real seconds they took."]
    timeline = [md_raw(line) for line in _text_timeline(rep)]
    tick = fence("\n".join(timeline))
    out += ["", "Timeline (host time; `=` loading, `#` serving, `X` crash, `|` stop):", "", tick + "text"]
    out += timeline
    out.append(tick)
    return out


def _md_hypothesis_tables(rep: Report) -> list[str]:
    """The verdict table of the hypotheses and their probability after each step."""
    out = ["", "## Hypotheses", ""]
    out.append("| hypothesis | component | verdict | p at start | p at end |")
    out.append("|---|---|---|---|---|")
    for h in rep.hypotheses:
        out.append(
            f"| {md_code(h.id)} | {h.component} | {h.verdict} | {h.prior:.2f} | {h.posterior:.2f} |"
        )
    if rep.steps:
        out += ["", "Probability over the steps (after each experiment):", ""]
        out.append("| hypothesis | " + " | ".join(f"after #{s}" for s in rep.steps) + " |")
        out.append("|---|" + "---|" * len(rep.steps))
        for h in rep.hypotheses:
            vals = _carry(rep.series.get(h.id, {}), rep.steps)
            out.append(f"| {md_code(h.id)} | " + " | ".join("" if v is None else f"{v:.2f}" for v in vals) + " |")
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
        out.append(f"  (log lines quoted under {md_code(item.quoted_under)} above)")
    if item.excerpt:
        out.append("")
        tick = fence("\n".join(text for _, text, _ in item.excerpt.lines))
        out.append(f"  {tick}text")
        for n, text, cited in item.excerpt.lines:
            out.append(f"  {'>' if cited else ' '} {n:>6}  {text}")
        out.append(f"  {tick}")
        out.append(f"  <sub>from {item.excerpt.source}</sub>")
        out.append("")
    return out


def _md_hypothesis(h: HypothesisView) -> list[str]:
    """One hypothesis's section: statement, why it was considered and dropped, its evidence."""
    out = ["", f"### {md_code(h.id)} — {h.verdict}", ""]
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
            out.append(f"- skipped for {md_code(hid)}: {why}")
        if d.skipped:
            out.append("")
    return out


def _md_appendix(rep: Report) -> list[str]:
    """The knowledge read, the notes and the FINDINGS.md entry (each only when there is one)."""
    out: list[str] = []
    if rep.knowledge:
        out += ["## Knowledge read", ""]
        out += [f"- {_md(title)} — relevance {rel:.2f} ({md_code(path)})" for path, title, rel in rep.knowledge]
        out.append("")
    if rep.notes:
        out += ["## Notes", ""]
        out += [f"- {n}" for n in rep.notes]
        out.append("")
    if rep.findings_entry:
        tick = fence(rep.findings_entry, least=4)
        out += ["## FINDINGS.md entry", "", tick + "markdown", rep.findings_entry.rstrip(), tick, ""]
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


def md_safe(rep: Report) -> Report:
    """``rep`` with its text safe in Markdown: raw HTML from outside (a FINDINGS title's ``<script>``)
    shown as text, backticks as backticks (`tools.sanitize.md_text`); log excerpts and the FINDINGS
    entry, shown in code fences as long as `tools.sanitize.fence` makes them, only made visible."""

    def excerpt(obj: Any) -> Any:
        if isinstance(obj, Excerpt):
            return Excerpt(obj.experiment, md_text(obj.source), [(n, fenced(t), c) for n, t, c in obj.lines])
        return None

    safe: Report = map_strings(rep, md_text, excerpt)
    safe.findings_entry = fenced(rep.findings_entry)
    return safe
