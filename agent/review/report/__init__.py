"""A review document of one run, from its transcript: Markdown or a single self-contained HTML file.

Contents: the summary (root cause, fix, confirmation, symptom, what was ruled out and why, cost), how
the run got there step by step (why each experiment was chosen over the alternatives it weighed), the
experiment table (change, outcome, what it showed, time to ready / to crash, host-seconds), a timeline
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

from typing import Any

from agent.record.recorded import RecordedRun
from agent.record.redact import run_redactor
from agent.review.report.build import build_report
from agent.review.report.html import (
    ProbabilityChart,
    Series,
    TimelineChart,
    TimelineRow,
    probability_chart,
    render_html,
    timeline_chart,
)
from agent.review.report.markdown import md_safe, render_markdown
from agent.review.report.model import (
    Alternative,
    DesignStep,
    EvidenceItem,
    Excerpt,
    ExperimentRow,
    HypothesisView,
    Report,
)
from agent.review.report.steps import excerpt
from tools.sanitize import map_strings, visible_data

__all__ = [
    "Alternative",
    "DesignStep",
    "EvidenceItem",
    "Excerpt",
    "ExperimentRow",
    "HypothesisView",
    "ProbabilityChart",
    "Report",
    "Series",
    "TimelineChart",
    "TimelineRow",
    "build_report",
    "excerpt",
    "probability_chart",
    "render",
    "render_html",
    "render_markdown",
    "timeline_chart",
]


def render(run: RecordedRun, fmt: str) -> str:
    """The report of ``run`` as ``md`` or ``html`` text. Raises ValueError for another format."""
    # Server log lines, FINDINGS titles, case text: control and escape sequences shown visibly
    # (tools/sanitize.py); the HTML is escaped by its templates, the Markdown here.
    # Log excerpts come from the server logs too, and older transcripts were not redacted: every text of
    # the report passes the run's redaction (the case as recorded, this process's environment) before it
    # is rendered, so that `<redacted>` is escaped like any text and never cuts into the HTML's own tags.
    rep = map_strings(visible_data(build_report(run)), run_redactor(_recorded_case(run)))
    if fmt == "md":
        return render_markdown(md_safe(rep))
    if fmt == "html":
        return render_html(rep)
    raise ValueError(f"--format {fmt}: expected md or html")


def _recorded_case(run: RecordedRun) -> Any:
    """The case of ``run`` as its ``run.started`` recorded it, or None."""
    from agent.domain.case import Case

    data = run.started.get("case_data")
    try:
        return Case.model_validate(data) if data else None
    except ValueError:
        return None
