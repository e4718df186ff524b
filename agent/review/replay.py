"""Replaying a transcript: the run as it looked live, step by step, and re-deciding it with a planner.

- ``replay``: prints the events through the live view's renderer (``agent.review.render.EventRenderer``), plus
  what the live view leaves out: each hypothesis's evidence (signatures with log line numbers, boosts,
  findings), the ledger before each proposal with what each hypothesis predicts, and the alternatives
  the design step weighed (``considered``). ``from_step`` jumps, ``speed`` paces the replay by the
  recorded timestamps, ``follow`` tails a transcript still being written (memory stays flat: one
  line is held at a time, plus the ledger).
- ``redecide`` (``agent.review.redecide``, its own module): feeds the recorded history to a planner and compares its decisions (hypothesis
  verdicts, the next experiment, the conclusion) with the recorded ones, stopping at the first
  divergence: later observations were made under the recorded decision and no longer apply.

The terminal replay imports only the transcript reader and rich, so it starts at once; re-deciding
loads the planner machinery when it is asked for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.record.recorded import awaited_approval
from agent.record.transcript import (
    SkippedLines,
    TranscriptError,
    TranscriptEvent,
    hand_over,
    parse_event,
    read_transcript,
)
from agent.review.render import EventRenderer, change_text, shown_line
from agent.review.wording import count, status_word
from tools.sanitize import SafeConsole, visible

__all__ = [
    "MAX_GAP_S",
    "ReplayRenderer",
    "ReplaySummary",
    "follow_events",
    "main",
    "no_step",
    "replay",
]

#: Longest pause between two events with ``--speed`` (seconds, after scaling): a run that waited
#: overnight for an approval should not make its replay wait too.
MAX_GAP_S = 3.0

_EFFECT_MARK = {
    "supports": "[green]+[/]",
    "weakens": "[yellow]−[/]",
    "refutes": "[red]✗[/]",
    "confirms": "[bold green]✓[/]",
    "neutral": "[dim]·[/]",
}
_EXPECT = {"fixed": "[green]fixed[/]", "may_fix": "[yellow]may fix[/]", "persists": "[dim]persists[/]"}


# ---------------------------------------------------------------------------------- reading


def follow_events(
    path: Path,
    *,
    poll_s: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
    on_bad: Callable[[TranscriptError], None] | None = None,
    idle: Callable[[], bool] | None = None,
) -> Iterator[TranscriptEvent]:
    """Events of a transcript that may still be growing: everything written so far, then each new
    event as it is appended, until a ``run.ended`` that nothing follows (a resumed run appends after its
    earlier ``run.ended``), until ``idle()`` says, at the end of what is written, that nothing will write
    more (a run waiting for approval that no process drives), or until the caller stops iterating (e.g.
    on Ctrl-C).

    Only whole lines are parsed: a line still being written waits for its newline. A file that
    shrinks (a resumed run cuts a torn last line) is re-read from the last whole line. Memory holds one
    line at a time. Waits for the file to appear. Raises TranscriptError on a malformed line, or hands it
    to ``on_bad`` and reads on (as ``read_transcript``).
    """
    while not path.exists():
        sleep(poll_s)
    lineno = 0
    done = 0  # bytes of whole lines consumed
    buf = b""
    try:
        fh = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read: {exc.strerror}") from None
    ended = False  # a run.ended was read; stop once nothing follows it (a resumed run writes on after one)
    with fh:
        while True:
            chunk = fh.read(1 << 16)
            if not chunk:
                if (ended or (idle is not None and idle())) and not buf:
                    return
                if os.fstat(fh.fileno()).st_size < done + len(buf):
                    fh.seek(done)  # the torn tail was cut; what follows is written from there
                    buf = b""
                sleep(poll_s)
                continue
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                raw = buf[start : nl + 1]
                start = nl + 1
                lineno += 1
                done += len(raw)
                if not raw.strip():
                    continue
                try:
                    ev = parse_event(raw, where=f"{path}: line {lineno}")
                except TranscriptError as exc:
                    hand_over(exc, lineno, on_bad)
                    continue
                yield ev
                ended = ev.type == "run.ended"
            buf = buf[start:]


# ---------------------------------------------------------------------------------- the view


class ReplayRenderer(EventRenderer):
    """The live renderer plus the ledger, the evidence behind each hypothesis and the alternatives the
    design step weighed. Keeps only the ledger between events (its memory does not grow with the run).

    ``from_step``: events before this step only update the ledger; the first shown event is preceded
    by a summary of what was believed at that point.
    """

    batch_new_hypotheses = False  # a replay explains each hypothesis

    def __init__(self, console: Console, *, verbose: bool = False, from_step: int = 0) -> None:
        super().__init__(console, verbose=verbose)
        self.from_step = from_step
        self.ledger: dict[str, dict[str, Any]] = {}
        self.run_id = ""
        self.case = ""
        self.ended: dict[str, Any] | None = None
        self.waiting: dict[str, Any] | None = None  # the approval request the run waits on, unanswered
        self.last_seq = 0
        self.max_step = 0
        self.shown = 0
        self.launches = 0
        self.baseline: dict[str, Any] | None = None

    def __call__(self, ev: TranscriptEvent) -> None:
        self._track(ev)
        if ev.step < self.from_step:
            return
        if self.shown == 0 and self.from_step > 0:
            self._jump_header(ev)
        self.shown += 1
        super().__call__(ev)

    # ----- state

    def _track(self, ev: TranscriptEvent) -> None:
        d = ev.data
        self.last_seq = ev.seq
        self.waiting = awaited_approval(self.waiting, ev)
        self.max_step = max(self.max_step, ev.step)
        self.run_id = self.run_id or ev.run_id
        if ev.type == "run.started":
            self.case = self.case or str(d.get("case"))
            self.ended = None
        elif ev.type == "run.resumed":
            self.ended = None
        elif ev.type == "run.ended":
            self.ended = d
        elif ev.type == "hypothesis.added":
            self.ledger[d["id"]] = {
                "statement": d.get("statement", ""),
                "component": d.get("component", ""),
                "posterior": d.get("posterior", 0.0),
                "status": d.get("status", "open"),
                "interventions": [
                    (tuple(iv.get("names", [])), tuple(str(v).lower() for v in iv.get("values", [True])))
                    for iv in d.get("interventions", [])
                ],
            }
        elif ev.type.startswith("hypothesis.") and d.get("id") in self.ledger:
            h = self.ledger[d["id"]]
            h["posterior"] = d.get("posterior", h["posterior"])
            kind = ev.type.split(".", 1)[1]
            if kind != "updated":
                h["status"] = kind
        elif ev.type == "baseline.changed":
            self.baseline = d.get("baseline")
        elif ev.type == "server.launched":
            self.launches += 1

    def _tests(self, change_text: str) -> list[str]:
        name, _, rest = change_text.partition(":")
        after = rest.rsplit("→", 1)[-1].strip()
        value = "true" if after == "(on)" else after.lower()
        return [
            hid
            for hid, h in self.ledger.items()
            if any(name.strip() in names and value in values for names, values in h["interventions"])
        ]

    # ----- extra views

    def _jump_header(self, ev: TranscriptEvent) -> None:
        self._p(
            f"[bold]▶ run {self.run_id}[/]  case [cyan]{escape(self.case)}[/]  — jumped to step {self.from_step} "
            f"(seq {ev.seq}); {count(self.launches, 'launch')} before it"
        )
        if self.baseline:
            flags = " ".join(
                k if v is True else f"{k} {v}" for k, v in (self.baseline.get("flags") or {}).items()
            )
            self._p(f"  baseline: [dim]{escape(flags)}[/]")
        if self.ledger and ev.type != "experiment.proposed":  # a proposal shows the ledger itself
            self.console.print(self._ledger_table({}))

    def _ledger_table(self, predictions: dict[str, str]) -> Table:
        t = Table(box=None, padding=(0, 1), show_header=True, header_style="dim", pad_edge=False)
        t.add_column("  p", justify="right")
        t.add_column("status")
        t.add_column("hypothesis", overflow="fold")
        if predictions:
            t.add_column("predicts")
        for hid, h in sorted(self.ledger.items(), key=lambda kv: -float(kv[1]["posterior"])):
            style = {"refuted": "red", "supported": "green", "confirmed": "bold green"}.get(h["status"], "")
            row = [
                f"  {float(h['posterior']):.2f}",
                f"[{style}]{status_word(h['status'], float(h['posterior']))}[/]" if style else h["status"],
                f"{hid} [dim]({escape(h['component'])})[/]",
            ]
            if predictions:
                row.append(_EXPECT.get(predictions.get(hid, ""), "[dim]—[/]"))
            t.add_row(*row)
        return t

    def _evidence_lines(self, evidence: list[dict[str, Any]], indent: str = "      ") -> None:
        for e in evidence:
            mark = _EFFECT_MARK.get(e.get("effect", "supports"), "·")
            where = ""
            if e.get("lines"):
                word = "log line" if len(e["lines"]) == 1 else "log lines"
                where = f" [dim]({word} {', '.join(map(str, e['lines'][:6]))}"
                where += f" of {e['experiment_id']})[/]" if e.get("experiment_id") else ")[/]"
            kind, detail = str(e.get("kind")), shown_line(str(e.get("detail", "")))
            # "signature: signature probability_tensor_nan: ..." says the kind twice: once is enough
            label = "" if detail.startswith(f"{kind} ") else f"[dim]{escape(kind)}:[/] "
            self._p(f"{indent}{mark} {label}{escape(detail)}{where}")

    # ----- handlers (the live ones plus detail)

    def _hypothesis_added(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        super()._hypothesis_added(ev, d)
        if d.get("rationale"):
            self._p(f"      [dim]why: {escape(d['rationale'])}[/]")
        self._evidence_lines(d.get("evidence", []))

    def _experiment_proposed(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        super()._experiment_proposed(ev, d)
        preds = {p["hypothesis_id"]: p["expect"] for p in d.get("predictions", [])}
        if self.ledger:
            self._p("  [dim]ledger at this point (what each hypothesis predicts for this experiment):[/]")
            self.console.print(self._ledger_table(preds))
        self._considered(
            d.get("considered", []), chosen=change_text(d.get("change")) if d.get("change") else None
        )

    def _considered(self, considered: list[dict[str, Any]], *, chosen: str | None) -> None:
        scored = [c for c in considered if "change" in c]
        if scored:
            self._p(f"  [dim]alternatives weighed ({len(scored)}), best P(fix) per host-second first:[/]")
            t = Table(box=None, padding=(0, 1), show_header=True, header_style="dim", pad_edge=False)
            t.add_column("  P(fix)", justify="right")
            t.add_column("per host-s", justify="right")
            t.add_column("change", overflow="fold")  # wrapped, never cut: the change is the evidence
            t.add_column("tests", overflow="fold")
            for c in sorted(scored, key=lambda c: -float(c.get("score", 0.0))):
                mark = "  [bold magenta]◀ chosen[/]" if c["change"] == chosen else ""
                t.add_row(
                    f"  {float(c.get('p_fix', 0.0)):.3f}",
                    f"{float(c.get('score', 0.0)):.2e}",
                    escape(str(c["change"])) + mark,
                    escape(", ".join(self._tests(str(c["change"])))) or "[dim]—[/]",
                )
            self.console.print(t)
        for c in considered:
            if "skipped" in c:
                whose = f" for {escape(str(c['hypothesis']))}" if c.get("hypothesis") else ""
                self._p(f"  [dim]skipped{whose}: {escape(str(c['skipped']))}[/]")
            elif "omitted" in c:
                self._p(f"  [dim]… and {escape(str(c['omitted']))} more weighed or skipped, not recorded[/]")

    def _status(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        super()._status(ev, d)
        last = (d.get("evidence") or [{}])[-1]
        if last.get("lines") and last.get("experiment_id"):
            self._p(f"      [dim](those are lines of {last['experiment_id']}'s log)[/]")

    _hypothesis_refuted = _status
    _hypothesis_supported = _status
    _hypothesis_confirmed = _status
    _hypothesis_open = _status

    def _design_none(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        super()._design_none(ev, d)
        self._considered(d.get("considered", []), chosen=None)

    def _run_ended(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        reason = f" — {escape(str(d['reason']))}" if d.get("reason") else ""
        cost = ""
        if d.get("launches") is not None:
            host_s = float(d.get("host_seconds") or 0)
            cost = f" ({count(d.get('launches'), 'launch')}, {count(host_s, 'host-second', fmt='.0f')})"
        self._p(f"[bold]■ run ended:[/] {d.get('status')}{cost}{reason}")


# ---------------------------------------------------------------------------------- replay


@dataclass
class ReplaySummary:
    """What a replay showed: events shown, the last seq, whether the run had ended (and how)."""

    shown: int
    last_seq: int
    ended: dict[str, Any] | None
    max_step: int


def replay(
    path: Path,
    console: Console,
    *,
    from_step: int = 0,
    follow: bool = False,
    speed: float | None = None,
    verbose: bool = False,
    poll_s: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
    on_bad: Callable[[TranscriptError], None] | None = None,
    driven: Callable[[], bool] | None = None,
) -> ReplaySummary:
    """Print a transcript step by step (see module docstring). Raises TranscriptError on a malformed
    line, or hands it to ``on_bad`` and reads on (``agent.record.transcript.SkippedLines``);
    KeyboardInterrupt passes through (the caller says where it stopped). ``driven``: whether a process
    still drives the run (holds its lock); following stops at a question for approval nobody drives."""
    render = ReplayRenderer(console, verbose=verbose, from_step=from_step)

    def undriven() -> bool:  # waiting for an answer, and no process is there to ask for it
        return driven is not None and render.ended is None and render.waiting is not None and not driven()

    events: Iterator[TranscriptEvent] = (
        follow_events(path, poll_s=poll_s, sleep=sleep, on_bad=on_bad, idle=undriven) if follow
        else read_transcript(path, on_bad=on_bad)
    )
    prev_ts: float | None = None
    for ev in events:
        if speed and prev_ts is not None and ev.step >= from_step:
            gap = (ev.ts - prev_ts) / speed
            if gap > 0:
                sleep(min(gap, MAX_GAP_S))
        prev_ts = ev.ts
        render(ev)
    if render.last_seq == 0 and not follow:
        raise TranscriptError(f"{path}: no transcript events (the file is empty or not a transcript)")
    summary = ReplaySummary(render.shown, render.last_seq, render.ended, render.max_step)
    if render.ended is None and render.waiting is not None and not _torn_tail(path):
        # as `hypoloop runs` says it, whether the process that asked is still at its prompt or was killed there
        console.print(
            f"[bold yellow]⏸ waiting for approval[/] of {escape(str(render.waiting.get('experiment_id')))}: the "
            f"transcript ends at this question, unanswered; the run continues from it with: hypoloop resume "
            f"{escape(render.run_id)}",
            highlight=False,
        )
    elif render.ended is None:
        tail = ""
        if not follow and _torn_tail(path):
            tail = "; its last line is incomplete (a write cut short)"
        console.print(
            f"[bold yellow]◌ unfinished:[/] the transcript ends at seq {render.last_seq} without run.ended "
            f"(the run is still going, waits for approval, or its process died){tail}",
            highlight=False,
        )
    return summary


def _torn_tail(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() == 0:
                return False
            fh.seek(-1, 2)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    """``python -m agent.review.replay TRANSCRIPT [--step N] [--follow] [--speed X] [-v]``: the terminal replay
    without the CLI's imports (the planner, LangGraph, the SSH and HTTP clients), so it starts at once.
    Exit codes as ``hypoloop replay``."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m agent.review.replay", description=main.__doc__)
    ap.add_argument("transcript", type=Path)
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--follow", "-f", action="store_true")
    ap.add_argument("--speed", type=float, default=None)
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args(argv)
    console = SafeConsole()
    if args.speed is not None and (args.speed <= 0 or args.follow):
        print(
            "error: --speed needs a positive number and a finished recording (not --follow)", file=sys.stderr
        )
        return 2
    skipped = SkippedLines()
    try:
        summary = replay(
            args.transcript,
            console,
            from_step=args.step,
            follow=args.follow,
            speed=args.speed,
            verbose=args.verbose,
            on_bad=skipped,
        )
    except TranscriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _warn_skipped(skipped)
        print(f"stopped following {args.transcript}", file=sys.stderr)
        return 130
    _warn_skipped(skipped)
    if args.step and summary.shown == 0:
        print(f"error: {no_step(args.step, summary)}", file=sys.stderr)
        return 2
    return 0


def no_step(step: int, summary: ReplaySummary) -> str:
    """The error of a ``--step`` past the transcript's end (nothing shown from it): which steps there are."""
    return f"no step {step}: the transcript has steps 0 to {summary.max_step}"


def _warn_skipped(skipped: SkippedLines) -> None:
    import sys

    if (text := skipped.summary()) is not None:
        print(f"warning: {visible(text)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
