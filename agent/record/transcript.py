"""Transcripts: one JSON object per line, append-only, flushed per event (transcripts/README.md).

Each line is ``{"v", "seq", "ts", "run_id", "step", "node", "type", "data"}``. ``ts`` is Unix time in
seconds; ``seq`` counts from 1 within a file and continues when a run is resumed; ``step`` is the
experiment step (0 before the first experiment). A reader tolerates a truncated last line (a crash in
the middle of a write) and reports any other malformed line with its line number.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agent.record.events import validate_payload
from agent.record.redact import redact_data, run_redactor
from tools.knowledge_files import item_path

TRANSCRIPT_VERSION = 1


class TranscriptError(ValueError):
    """A transcript line that is not valid; the message names the file and line number (``line``, from 1,
    when one line is at fault)."""

    line: int | None = None


class NewerFormat(TranscriptError):
    """A line in a format version newer than this hypoloop reads: not damage, so never skipped by
    `SkippedLines`."""


class SkippedLines:
    """``on_bad`` for a command that shows what a transcript holds: each damaged line (a torn last line
    too) is skipped and kept for `summary`; a line of a newer format version is raised, since skipping
    it would skip the whole file."""

    def __init__(self) -> None:
        self.problems: list[TranscriptError] = []

    def __call__(self, exc: TranscriptError) -> None:
        if isinstance(exc, NewerFormat):
            raise exc
        self.problems.append(exc)

    def summary(self) -> str | None:
        """One line telling what was skipped, with the line numbers and the first line's problem, e.g.
        ``run.jsonl: line 94: not JSON (...); skipped it, read the rest``; None when nothing was."""
        if not self.problems:
            return None
        first = self.problems[0]
        if len(self.problems) == 1:
            return f"{first}; skipped it, read the rest"
        numbers = [str(p.line) for p in self.problems[1:] if p.line is not None]
        shown = ", ".join(numbers[:10]) + (", ..." if len(numbers) > 10 else "")
        more = len(self.problems) - 1
        lines = "lines" if more > 1 else "line"
        return f"{first}; skipped it and {more} more damaged {lines} ({lines} {shown}), read the rest"


class TranscriptEvent(BaseModel):
    """One event of a run."""

    v: int = TRANSCRIPT_VERSION
    seq: int
    ts: float
    run_id: str
    step: int = 0
    node: str = ""
    type: str
    data: dict[str, Any] = {}


Listener = Callable[[TranscriptEvent], None]


#: Events written and flushed but not fsynced on their own: the many small records of a step's reasoning
#: and observations, none followed by a side effect on the host before an fsynced event (the proposal,
#: the approval, ``server.launching``, ``server.stopped``, the outcome, the end). fsync writes the whole
#: file, so once any later event is synced these are on disk too. About 7 ms an fsync on a small VM's
#: disk, twenty of these a step (bench: agent overhead per step).
_SYNCED_LATER = frozenset({
    "hypothesis.added", "hypothesis.updated", "hypothesis.supported", "hypothesis.refuted",
    "hypothesis.confirmed", "hypothesis.open", "observation", "tool.call", "tool.result", "probe.result",
})


class Transcript:
    """Append-only JSONL writer. Every event is written and flushed before ``emit`` returns, so a killed
    process loses at most the event being written; every event that comes before a side effect on the
    host (a launch, a stop) or ends a step is also fsynced, so a crashed machine loses none of them, and
    none of the reasoning written before them (``_SYNCED_LATER``).

    Secrets never reach the file: each event's data passes through ``redact`` (``agent.record.redact.redact_data``
    with ``redact``, a ``Redactor``: the run's, from ``agent.record.redact.run_redactor(case)``; by default the
    one for this process's environment) before it is written or shown to listeners.
    """

    def __init__(self, path: Path, run_id: str, *, redact: Callable[[str], str] | None = None) -> None:
        self.path = path
        self.run_id = run_id
        self.step = 0
        self.redact: Callable[[str], str] = redact or run_redactor()
        self.listeners: list[Listener] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_line(path)
        self.seq = _last_seq(path)
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
        # experiments of a parallel batch emit from their own threads (reentrant: a listener may emit)
        self._lock: Any = threading.RLock()

    def emit(self, type: str, data: dict[str, Any] | None = None, *, node: str = "") -> TranscriptEvent:
        """Append one event; returns it after it is on disk and listeners have seen it. Thread-safe:
        events of concurrent experiments get distinct, increasing sequence numbers. Raises OSError naming
        the transcript when it cannot be written (a full disk)."""
        with self._lock:
            self.seq += 1
            data = redact_data(data or {}, self.redact)
            ev = TranscriptEvent(
                seq=self.seq,
                ts=time.time(),
                run_id=self.run_id,
                step=self.step,
                node=node,
                type=type,
                data=data,
            )
            try:
                self._fh.write(json.dumps(ev.model_dump(mode="json"), ensure_ascii=False, default=str) + "\n")
                self._fh.flush()  # a killed process loses nothing written (the OS holds it)
                if type not in _SYNCED_LATER:  # a crashed machine: on disk before the next side effect
                    os.fsync(self._fh.fileno())
            except OSError as exc:  # e.g. ENOSPC: name the file, so the one-line error says which
                raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
            if _FAULT_KILL:
                _fault_point(type)
            for listener in self.listeners:
                listener(ev)
            return ev

    def close(self) -> None:
        """Close the file (events already written stay). Never raises OSError: what a full disk kept from
        being written made its `emit` fail already, and is not written now."""
        if not self._fh.closed:
            with contextlib.suppress(OSError):
                self._fh.close()


#: Fault injection for the kill tests (tests/test_crashproof.py): ``TYPE[#N][+MS]`` kills this process
#: with SIGKILL right after the N-th (default first) event of TYPE is on disk, or MS milliseconds later
#: (the process goes on meanwhile: a kill that lands a few ms after a step ends). Unset in normal use.
_FAULT_KILL = os.environ.get("HYPOLOOP_FAULT_KILL", "")
_fault_seen: dict[str, int] = {}


def _fault_point(type: str) -> None:
    spec, _, delay = _FAULT_KILL.partition("+")
    name, _, nth = spec.partition("#")
    if type != name:
        return
    _fault_seen[type] = _fault_seen.get(type, 0) + 1
    if _fault_seen[type] != int(nth or 1):
        return
    import signal
    import threading

    if delay:
        threading.Timer(int(delay) / 1000, os.kill, (os.getpid(), signal.SIGKILL)).start()
    else:
        os.kill(os.getpid(), signal.SIGKILL)


def _drop_torn_line(path: Path) -> None:
    """Cut a last line that a crash left without its newline, so a resumed run appends whole lines
    (the cut line was never a complete event; readers skip it anyway)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        data = fh.read()
        if not data.endswith(b"\n"):
            fh.truncate(data.rfind(b"\n") + 1)


def hand_over(exc: TranscriptError, line: int, on_bad: Callable[[TranscriptError], None] | None) -> None:
    """Line ``line`` (from 1) of a transcript did not parse (``exc``): raise ``exc``, or, with ``on_bad``,
    hand it over and let the reader read on (``read_transcript``, ``agent.review.replay.follow_events``)."""
    exc.line = line
    if on_bad is None:
        raise exc
    on_bad(exc)


def skip_bad(exc: TranscriptError) -> None:
    """``on_bad`` for readers that recover what they can from a damaged transcript (bad lines skipped)."""


def damaged_lines(path: Path) -> list[str]:
    """What is wrong with each bad line of a transcript (empty for a sound one)."""
    bad: list[str] = []
    try:
        for _ in read_transcript(path, on_bad=lambda exc: bad.append(str(exc))):
            pass
    except TranscriptError as exc:  # unreadable file
        bad.append(str(exc))
    return bad


def _last_seq(path: Path) -> int:
    if not path.exists():
        return 0
    last = 0
    # Only the seq matters here; a damaged line in the middle does not stop a run from continuing.
    for ev in read_transcript(path, payloads=False, on_bad=lambda exc: None):
        last = max(last, ev.seq)
    return last


def parse_event(line: str | bytes, *, where: str, payloads: bool = True) -> TranscriptEvent:
    """One transcript line -> its event, checked as an envelope and (``payloads``) against the payload
    model of its type (``agent.record.events``). Raises TranscriptError: ``where``, the field and what was
    expected, e.g. ``run.jsonl: line 12: outcome event (seq 12): field 'data.stage': Input should be ...``.
    """
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{where}: not JSON ({exc.msg.removesuffix(' at')}, column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    if not isinstance(obj, dict):
        raise TranscriptError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    try:
        ev = TranscriptEvent.model_validate(obj)
    except ValidationError as exc:
        raise TranscriptError(f"{where}: not a transcript event: {_field_error(exc)}") from None
    if ev.v > TRANSCRIPT_VERSION:
        raise NewerFormat(
            f"{where}: format version {ev.v} is newer than this hypoloop reads ({TRANSCRIPT_VERSION})"
        )
    if payloads:
        try:
            validate_payload(ev.type, ev.data)
        except ValidationError as exc:
            raise TranscriptError(f"{where}: {ev.type} event (seq {ev.seq}): {_field_error(exc, 'data')}") from None
    return ev


def _field_error(exc: ValidationError, prefix: str = "") -> str:
    err = exc.errors()[0]
    loc = item_path([p for p in (prefix, *err["loc"]) if p != ""])
    got = "" if err["type"] == "missing" else f" (got {json.dumps(err.get('input'), default=str)[:60]})"
    return f"field '{loc or '(top level)'}': {err['msg']}{got}"


def read_transcript(
    path: Path, *, payloads: bool = True, on_bad: Callable[[TranscriptError], None] | None = None
) -> Iterator[TranscriptEvent]:
    """Events of a transcript in order, read line by line (memory does not grow with the file).

    A truncated last line (no newline at the end, not a valid event: a write cut short by a crash) is
    skipped (and, with ``on_bad``, handed to it); any other malformed line raises TranscriptError naming
    the file, the line number and the field, or, with ``on_bad``, is handed to it and skipped (recovery
    reads a damaged transcript up to and past its bad lines; `SkippedLines` keeps them to be told). A
    line of a newer format version is a `NewerFormat`. ``payloads=False`` checks the envelope only.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read: {exc.strerror}") from None
    with fh:
        for i, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                ev = parse_event(raw, where=f"{path}: line {i}", payloads=payloads)
            except TranscriptError as exc:
                if not raw.endswith(b"\n"):  # a write cut short by a crash
                    if on_bad is not None:
                        hand_over(TranscriptError(f"{path}: line {i}: the last line is incomplete (a write cut "
                                                  "short)"), i, on_bad)
                    return
                hand_over(exc, i, on_bad)
                continue
            yield ev
