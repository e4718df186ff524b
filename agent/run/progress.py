"""What a user sees while a server loads: the stage, how far it got, elapsed and expected time, the
latest log line.

A launch on a real GPU host spends minutes between "launched" and "ready" (weights, KV pool, CUDA-graph
capture, warm-up). `LoadProgress` follows one launch's log lines as the session reads them and shows:

- on a terminal, a rich Live display that updates with every line (and every second for the clock),
  ending in one summary line (`✓ ready after 1:32 — init 0:03 · weights 0:41 · ...`);
- elsewhere (a pipe, CI, `nohup`), one plain line per stage change and the same summary line.

The stage is read from the log with the project's progress signatures (`knowledge/signatures.toml`,
kinds progress and ready): their `stage` and `components` say which step a line belongs to, and their
named groups give how far it got (`percent` of the checkpoint shards, `done`/`total` of the CUDA-graph
batches; SGLang's tqdm bars, `sglang/srt/model_loader/weight_utils.py` and
`sglang/srt/model_executor/cuda_graph_runner.py`, 0.5.9 and 0.5.23). A tqdm bar redrawn with carriage
returns on one physical line counts by its latest state.

Expected time: from earlier launches of the run (`LoadHistory`: when each reached each stage and
ready), scaled by how fast this launch reached its current stage compared with them; with no earlier
launch, from the log's own rhythm: the time the current stage has taken for the fraction it reports.
All times are the orchestrator's wall seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from agent.review.text import clock, failure_line, print_hanging, shown_line, summary_line
from tools.sanitize import visible
from tools.signatures import Signature
from tools.tracebacks import TRACEBACK_START, exception_of

#: The steps of a start-up in order, as a user names them.
STAGES = ("init", "weights", "KV pool", "CUDA-graph capture", "warm-up")
READY = "ready"


def stage_of(sig: Signature) -> str | None:
    """The start-up step a progress or ready signature belongs to (None: not a start-up line).

    From the signature's data, not its id: kind ready → ready; stage serve → warm-up (uvicorn is up,
    SGLang sends its warm-up request); stage capture → CUDA-graph capture; a load-stage line that
    implicates the KV pool → KV pool; one that implicates the model load → weights; other launch and
    load lines (arguments, NCCL init) → init.
    """
    if sig.kind == "ready":
        return READY
    if sig.kind != "progress" or sig.stage in ("decode", "request"):
        return None
    if sig.stage == "serve":
        return "warm-up"
    if sig.stage == "capture":
        return "CUDA-graph capture"
    if any(c.startswith("memory.kv_pool") for c in sig.components):
        return "KV pool"
    if any(c.startswith("model.load") for c in sig.components):
        return "weights"
    return "init"


def failed_stage(sig: Signature) -> str | None:
    """The start-up step a failure signature says failed (None: it does not say): a capture failure →
    CUDA-graph capture; one that implicates the KV pool → KV pool (not the weights step the last progress
    line showed); the model load → weights; a warm-up failure → warm-up."""
    if sig.kind not in ("fatal", "error"):
        return None
    if sig.stage == "capture" or any(c.startswith("cuda_graph") for c in sig.components):
        return "CUDA-graph capture"
    if any(c.startswith("memory.kv_pool") for c in sig.components):
        return "KV pool"
    if any(c.startswith("model.load") for c in sig.components):
        return "weights"
    if sig.stage == "serve":
        return "warm-up"
    return None


#: Components every crash drags along (the scheduler process that died): the least telling fatal lines.
_ECHO_COMPONENTS = frozenset({"scheduler"})


def _telling(sig: Signature) -> int:
    """How much a failure line says: the number of components it implicates beyond the dying scheduler."""
    return len(set(sig.components) - _ECHO_COMPONENTS)


@dataclass
class FatalLine:
    """The most telling failure line seen so far: its number, text, the step it says failed, its weight."""

    lineno: int
    text: str
    stage: str | None
    weight: int


#: Lines of a traceback (a chained one included) followed for the line that states its exception.
_TRACEBACK_LINES = 400


class _TracebackEnd:
    """A traceback whose bare header ("Traceback (most recent call last):") is the failure line so far: its
    lines, until its exception line (``RuntimeError: ...``, through any chained traceback) says what failed
    (``tools.tracebacks.exception_of``). The header itself says nothing of the failure."""

    def __init__(self, start: int, text: str) -> None:
        self.start = start
        self.lines: list[tuple[int, str]] = [(start, text)]

    def add(self, lineno: int, text: str) -> tuple[int, str] | None:
        """Take the next log line; the (line number, text) of the traceback's exception line once it ended."""
        if len(self.lines) >= _TRACEBACK_LINES:
            return None
        self.lines.append((lineno, text))
        if not text.strip() or text[:1].isspace():  # a frame, its source line or markers: not the end
            return None
        return exception_of(self.lines, self.start)


def _rank(stage: str) -> int:
    return len(STAGES) if stage == READY else STAGES.index(stage)


@dataclass
class StageStep:
    """What one log line says about the start-up: its step, and how far that step got (0..1, or None)."""

    stage: str
    fraction: float | None = None
    detail: str = ""


class StageReader:
    """Reads the start-up step from log lines with the progress/ready signatures (see module docstring)."""

    def __init__(self, signatures: Iterable[Signature]) -> None:
        self._sigs: list[tuple[re.Pattern[str], str]] = []
        self._fatal: list[tuple[re.Pattern[str], Signature]] = []
        for s in signatures:
            stage = stage_of(s)
            if stage is not None:
                self._sigs.append((re.compile(s.pattern), stage))
            elif s.kind in ("fatal", "error"):
                self._fatal.append((re.compile(s.pattern), s))

    def failure(self, lineno: int, text: str) -> FatalLine | None:
        """The failure `text` (one log line) states, as a FatalLine, or None when it states none."""
        text = shown_line(text)
        hits = [sig for regex, sig in self._fatal if regex.search(text)]
        if not hits:
            return None
        best = max(hits, key=_telling)
        stage = next((st for st in (failed_stage(h) for h in hits) if st is not None), None)
        return FatalLine(lineno, text.strip(), stage, _telling(best) + (1 if best.kind == "fatal" else 0))

    def read(self, text: str) -> StageStep | None:
        """The step `text` (one log line) shows, or None when it shows none."""
        text = shown_line(text)
        best: StageStep | None = None
        for regex, stage in self._sigs:
            m = regex.search(text)
            if m is None:
                continue
            step = StageStep(stage)
            groups = m.groupdict()
            if groups.get("percent"):
                step.fraction = int(groups["percent"]) / 100
                step.detail = f"{groups['percent']}%"
            elif groups.get("done") and groups.get("total") and int(groups["total"]) > 0:
                step.fraction = int(groups["done"]) / int(groups["total"])
                step.detail = f"{groups['done']} of {groups['total']}"
            if best is None or (_rank(step.stage), step.fraction is not None) > (
                _rank(best.stage),
                best.fraction is not None,
            ):
                best = step
        return best


@dataclass
class LoadHistory:
    """Earlier launches of the run: for each, the elapsed wall seconds at which it entered each stage,
    and at which it was ready (key `ready`)."""

    launches: list[dict[str, float]] = field(default_factory=list)

    def ready_launches(self) -> list[dict[str, float]]:
        return [t for t in self.launches if READY in t]


class LoadProgress:
    """The display of one launch (see module docstring). Feed it the session's events with `observe`;
    use it as a context manager around the wait for ready, and call `finish(status)` when the wait ends.

    `live`: draw a rich Live display (a terminal) instead of plain lines at stage changes. `now`: the
    clock (monotonic seconds).
    """

    def __init__(
        self,
        console: Console,
        name: str,
        reader: StageReader,
        history: LoadHistory,
        *,
        live: bool,
        now: Callable[[], float] = time.monotonic,
        redact: Callable[[str], str] = lambda text: text,
    ) -> None:
        self.console = console
        self.redact = redact
        self.name = name
        self.reader = reader
        self.history = history
        self.live = live
        self.now = now
        self.t0 = now()
        self.stage = STAGES[0]
        self.fraction: float | None = None
        self.detail = ""
        self.entered: dict[str, float] = {STAGES[0]: 0.0}
        self.last_line: tuple[int, str] | None = None
        #: The most telling failure line so far (shown under a failed launch's summary line).
        self.fatal: FatalLine | None = None
        #: The traceback whose header is ``fatal`` (its exception line replaces it once printed), or None.
        self._traceback: _TracebackEnd | None = None
        #: Wall seconds spent in each start-up step, in order (set by ``finish``; recorded in the
        #: transcript so ``replay`` shows the same summary line).
        self.stage_seconds: dict[str, float] = {}
        self.failed_at: str | None = None
        self.lines = 0
        #: Lines of the server's fatal events: the run prints each as an observation as it comes
        #: (``agent.review.render``), so the summary does not print it again.
        self.shown: set[int] = set()
        self.done = False
        self._live: Live | None = None

    # -- events ------------------------------------------------------------------------------------

    def observe(self, event: Any) -> None:
        """Take one `tools.server.WatchEvent`; only `line` events move the display."""
        if getattr(event, "kind", None) == "fatal" and event.line is not None:
            self.shown.add(event.line.line)
        if self.done or getattr(event, "kind", None) != "line" or event.line is None:
            return
        self.lines += 1
        text = shown_line(self.redact(event.line.text))
        if text.strip():
            self.last_line = (event.line.line, text)
        failed = self.reader.failure(event.line.line, text)
        if failed is not None and (self.fatal is None or failed.weight > self.fatal.weight):
            self.fatal = failed
            # a bare header (weight 0: no signature but the generic one) says nothing; a header after a
            # line that names what failed ("warmup error: Traceback ...") stays the failure line
            bare = failed.weight == 0 and TRACEBACK_START.search(text) is not None
            self._traceback = _TracebackEnd(failed.lineno, text) if bare else None
        elif self._traceback is not None and self.fatal is not None:
            end = self._traceback.add(event.line.line, text)
            if end is not None:  # the exception line states the failure its traceback's header announced
                own = self.reader.failure(*end)
                stage = self.fatal.stage or (own.stage if own is not None else None)
                self.fatal = FatalLine(end[0], end[1], stage, self.fatal.weight)
        step = self.reader.read(text)
        if step is not None and step.stage != READY and _rank(step.stage) >= _rank(self.stage):
            changed = step.stage != self.stage
            if changed:
                self.stage = step.stage
                self.entered.setdefault(step.stage, self.now() - self.t0)
                self.fraction, self.detail = None, ""
            if step.fraction is not None:
                self.fraction, self.detail = step.fraction, step.detail
            if changed and not self.live:
                self._plain_line(f"loading: {self.stage} [dim]at {clock(self.elapsed())}[/]")
        if self._live is not None:
            self._live.update(self, refresh=True)

    def elapsed(self) -> float:
        return self.now() - self.t0

    def expected(self) -> tuple[float | None, str]:
        """(expected seconds from launch to ready, or None; how it was estimated)."""
        elapsed = self.elapsed()
        earlier = self.history.ready_launches()
        if earlier:
            spent = elapsed - self.entered.get(self.stage, 0.0)
            left: list[float] = []
            for t in earlier:  # what remained of an earlier launch from the same point
                begin = t.get(self.stage)
                if begin is None:
                    left.append(max(t[READY] - elapsed, 0.0))
                    continue
                end = min((v for k, v in t.items() if v > begin and k != self.stage), default=t[READY])
                stage_len = end - begin
                rest = stage_len * (1 - self.fraction) if self.fraction is not None else stage_len - spent
                left.append(max(rest, 0.0) + t[READY] - end)
            n = len(earlier)
            return elapsed + sum(left) / n, f"from {n} earlier launch{'es' if n > 1 else ''}"
        if self.fraction and self.fraction > 0:
            spent = elapsed - self.entered.get(self.stage, 0.0)
            stage_left = spent * (1 - self.fraction) / self.fraction
            return None, f"{self.stage} done in ~{clock(stage_left)}"  # later stages: no rhythm to go by yet
        return None, ""

    # -- showing -----------------------------------------------------------------------------------

    def _plain_line(self, text: str) -> None:
        print_hanging(self.console, f"    [dim]{escape(self.name)}[/] {text}")

    def __rich__(self) -> RenderableType:
        elapsed = self.elapsed()
        total, how = self.expected()
        stage = self.stage + (f" {self.detail}" if self.detail else "")
        head = Text.assemble(
            ("  ⏳ loading ", "bold"),
            (self.name, "dim"),
            "  ",
            (stage, "bold cyan"),
            f"  ({STAGES.index(self.stage) + 1}/{len(STAGES)})",
        )
        times = Text(f"elapsed {clock(elapsed)}")
        if total is not None:
            times.append(f" · expected ~{clock(total)}")
            times.append(f" ({how})", style="dim")
        elif how:
            times.append(f" · {how}")
        # The bar: the current stage's own fraction when the log gives one, else the expected total.
        if self.fraction is not None:
            bar = ProgressBar(total=1.0, completed=self.fraction, width=30)
        elif total:
            bar = ProgressBar(total=total, completed=min(elapsed, total), width=30)
        else:
            bar = ProgressBar(total=None, width=30)  # pulsing: no estimate yet
        row = Table.grid(padding=(0, 1))
        row.add_column(width=3)
        row.add_column(width=30, no_wrap=True)
        row.add_column()  # wraps: nothing is cut
        row.add_row("", bar, times)
        parts: list[RenderableType] = [head, row]
        if self.last_line is not None:
            n, text = self.last_line
            log = Table.grid(padding=(0, 1))
            log.add_column(no_wrap=True, style="dim")
            log.add_column(overflow="fold")  # the evidence wraps (under itself, not at column 0), never cut
            log.add_row(f"     log:{n}", Text(visible(text)))  # the server's bytes: escapes shown, not acted on
            parts.append(log)
        return Group(*parts)

    def __enter__(self) -> LoadProgress:
        self.t0 = self.now() if self.lines == 0 else self.t0
        if self.live:
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=True)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if not self.done:
            self.finish("interrupted")

    def finish(self, status: str) -> None:
        """End the display with one summary line; record the launch in the history when it got ready.
        `status`: the launch's status (`tools.server.LaunchStatus`, or "interrupted")."""
        if self.done:
            return
        self.done = True
        if self._live is not None:
            self._live.stop()
            self._live = None
        elapsed = self.elapsed()
        marks = sorted(self.entered.items(), key=lambda kv: kv[1])
        self.stage_seconds = {
            stage: round((marks[i + 1][1] if i + 1 < len(marks) else elapsed) - t, 3)
            for i, (stage, t) in enumerate(marks)
        }
        where: str | None = None
        if status == READY:
            self.history.launches.append({**self.entered, READY: elapsed})
        else:
            where = self.stage + (f" {self.detail}" if self.detail else "")
            if self.fatal is not None and self.fatal.stage not in (None, self.stage):
                where = self.fatal.stage  # what failed, not the last step a progress line showed
            self.failed_at = where
        print_hanging(self.console, summary_line(status, elapsed, self.stage_seconds, where))
        if status != READY and self.fatal is not None:
            line = failure_line(self.fatal.lineno, self.fatal.text, self.shown)
            if line:
                print_hanging(self.console, line, hang=6)



class ProgressBoard:
    """Makes a `LoadProgress` for each launch of a run and keeps the run's `LoadHistory` between them.

    `live`: None chooses a Live display when `console` is a terminal. `redact`: the run's redaction of a
    log line (its secrets), applied before a line is shown or read.
    """

    def __init__(self, console: Console, *, live: bool | None = None,
                 redact: Callable[[str], str] = lambda text: text) -> None:
        self.console = console
        self.redact = redact
        self.live = console.is_terminal if live is None else live
        self.history = LoadHistory()

    def launch(self, name: str, signatures: Iterable[Signature]) -> LoadProgress:
        """The display for one launch called `name` (the experiment id)."""
        return LoadProgress(self.console, name, StageReader(signatures), self.history, live=self.live,
                            redact=self.redact)
