"""Transcripts: one JSON object per line, append-only, flushed per event (DESIGN.md, "Transcript event").

Each line is ``{"v", "seq", "ts", "run_id", "step", "node", "type", "data"}``. ``ts`` is Unix time in
seconds; ``seq`` counts from 1 within a file and continues when a run is resumed; ``step`` is the
experiment step (0 before the first experiment). A reader tolerates a truncated last line (a crash in
the middle of a write) and reports any other malformed line with its line number.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

TRANSCRIPT_VERSION = 1


class TranscriptError(ValueError):
    """A transcript line that is not valid; the message names the file and line number."""


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


class Transcript:
    """Append-only JSONL writer. Every event is written and flushed (and fsynced) before ``emit`` returns,
    so a crash loses at most the event being written."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self.step = 0
        self.listeners: list[Listener] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self.seq = _last_seq(path)
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def emit(self, type: str, data: dict[str, Any] | None = None, *, node: str = "") -> TranscriptEvent:
        """Append one event; returns it after it is on disk and listeners have seen it."""
        self.seq += 1
        ev = TranscriptEvent(
            seq=self.seq,
            ts=time.time(),
            run_id=self.run_id,
            step=self.step,
            node=node,
            type=type,
            data=data or {},
        )
        self._fh.write(json.dumps(ev.model_dump(mode="json"), ensure_ascii=False, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        for listener in self.listeners:
            listener(ev)
        return ev

    def close(self) -> None:
        """Close the file (events already written stay)."""
        if not self._fh.closed:
            self._fh.close()


def _last_seq(path: Path) -> int:
    if not path.exists():
        return 0
    last = 0
    for ev in read_transcript(path):
        last = ev.seq
    return last


def read_transcript(path: Path) -> Iterator[TranscriptEvent]:
    """Events of a transcript in order. A truncated last line is skipped; any other malformed line raises
    TranscriptError naming the file and the line number."""
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read: {exc.strerror}") from None
    with fh:
        lines = fh.readlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = i == len(lines)
        try:
            yield TranscriptEvent.model_validate_json(line)
        except ValidationError as exc:
            if last and not line.endswith("\n"):
                return  # a write cut short by a crash
            raise TranscriptError(
                f"{path}: line {i}: not a transcript event ({exc.errors()[0]['msg']})"
            ) from None
