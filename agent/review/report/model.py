"""What a run's review document holds (``Report`` and its parts) and the wording shared by its
builders and renderers."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    #: what the launch showed: its fatal signature and log line, "served correctly (n/m probes ok)", or its summary
    outcome: str
    #: the outcome class (Outcome.stage: request_failed, ok, interrupted ...), shown under "outcome"
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
    #: an unfinished run waiting for approval: the request and how to answer it ("" otherwise)
    waiting: str
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


def _dur(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _carry(series: dict[int, float], steps: list[int]) -> list[float | None]:
    vals: list[float | None] = []
    cur: float | None = None
    for s in steps:
        if s in series:
            cur = series[s]
        vals.append(cur)
    return vals
