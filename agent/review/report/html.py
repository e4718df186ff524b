"""The review document as one self-contained HTML page: the timeline and probability charts
(inline SVG) rendered through the Jinja2 templates under ``agent/review/templates``."""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from agent.review.report.model import _PALETTE, HypothesisView, Report, _carry, _dur

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
