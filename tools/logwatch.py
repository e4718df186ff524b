"""Incremental tail of a log file on a host.

`LogWatcher.poll()` reads only the bytes appended since the last poll (through `Host.read_from`, by
byte offset), returns the complete records among them, and keeps an unterminated tail for the next poll.

A *record* ends at "\\n", "\\r\\n" or a lone "\\r". tqdm progress bars (SGLang's "Loading safetensors
checkpoint shards", "Capturing batches") redraw themselves with "\\r" on one physical line of the log
file (tqdm's `status_printer` writes "\\r" + the bar, and a newline only when the bar closes), so one
physical line can hold hundreds of updates: each is a record of its own, all with that line's number.
"""

from __future__ import annotations

import re
import time
from typing import BinaryIO

from pydantic import BaseModel, Field

from tools.host import Host

_CHUNK = 1 << 20
#: At most this many bytes are read per poll, so one poll takes a bounded time however fast the server
#: writes (the rest is read by the next polls; ``backlog`` says some is waiting).
_POLL_BYTES = 4 << 20
#: An overlong line's record is its first ``max_line_bytes`` followed by this note; the rest of that
#: line is read past without being matched or shown (a 10 MB line costs hypoloop a bounded time).
CUT_NOTE = " … [the rest of this log line is skipped: it is longer than {limit} bytes]"
_BREAK = re.compile(rb"\r\n|\r|\n")


class LogLine(BaseModel):
    """One log line: its 1-based number ``line`` in the server log and its ``text`` (the one log-line
    model: a watcher's line as read, and a line a launch's evidence keeps). ``seen_monotonic`` is
    ``time.monotonic()`` when a watcher read it (0 for a line kept as evidence); it is not serialised,
    so a transcript's kept lines are ``{"line", "text"}``."""

    line: int
    text: str
    seen_monotonic: float = Field(default=0.0, exclude=True)


class LogWatcher:
    """Tails `path` on `host` from byte `start_offset`, one complete record at a time.

    Attributes: `offset` — byte offset just past the last complete record returned (a new watcher started
    there resumes cleanly); `lines_read` — complete physical lines so far (line numbers continue from it;
    with `start_offset` > 0 they count from the start offset, not the file's start); `bytes_read` — bytes
    consumed including an unterminated tail; `last_growth_monotonic` — when new bytes last arrived (None
    before any); `backlog` — the last poll stopped at its byte limit with more written (read it next).

    Records end at "\\n", "\\r\\n" or a lone "\\r" (a tqdm redraw); records of one physical line share
    its 1-based `line`, so line numbers agree with an editor's. Empty pieces between carriage returns
    are skipped; an empty line ended by "\\n" is a record. Text is decoded as UTF-8 with replacement. A
    record longer than `max_line_bytes` (64 KiB) is emitted as its first `max_line_bytes` and `CUT_NOTE`
    as soon as they are there, and the rest of it is read past: memory and matching time stay bounded.
    """

    def __init__(
        self, host: Host, path: str, *, start_offset: int = 0, max_line_bytes: int = 64 << 10
    ) -> None:
        self.host = host
        self.path = path
        self.offset = start_offset
        self.lines_read = 0
        self.bytes_read = 0
        self.last_growth_monotonic: float | None = None
        self._max_line_bytes = max_line_bytes
        self._tail = b""
        self._cr_pending = False  # the last byte consumed was a "\r" that may be half of "\r\n"
        self._line_has_records = False  # the current physical line already gave a record
        self._skipping = False  # inside the rest of an overlong record (already emitted, cut)
        self.backlog = False

    def _read_new(self) -> bytes:
        """The bytes appended since the last read, at most `_POLL_BYTES`, in chunks of at most 1 MiB."""
        parts: list[bytes] = []
        pos = self.offset + len(self._tail)
        got = 0
        self.backlog = False
        while True:
            data = self.host.read_from(self.path, pos, _CHUNK)
            if not data:
                break
            parts.append(data)
            pos += len(data)
            got += len(data)
            if len(data) < _CHUNK:
                break
            if got >= _POLL_BYTES:
                self.backlog = True
                break
        return b"".join(parts)

    def has_unread(self) -> bool:
        """Whether the file holds bytes past everything read so far (the server wrote since the last
        poll): one byte is read to see. Raises `HostError` from the host."""
        return bool(self.host.read_from(self.path, self.offset + len(self._tail), 1))

    def _make(self, raw: bytes, seen: float) -> LogLine:
        self._line_has_records = True
        return LogLine(line=self.lines_read + 1, text=raw.decode("utf-8", "replace"), seen_monotonic=seen)

    def _end_line(self) -> None:
        self.lines_read += 1
        self._line_has_records = False

    def poll(self) -> list[LogLine]:
        """Complete records appended since the last poll ([] if none). Raises `HostError` from the host."""
        data = self._read_new()
        if not data:
            return []
        seen = time.monotonic()
        self.bytes_read += len(data)
        self.last_growth_monotonic = seen
        buf = self._tail + data
        out: list[LogLine] = []
        start = 0
        if self._cr_pending:
            self._cr_pending = False
            if buf.startswith(b"\n"):  # the "\n" of a "\r\n" split across two reads
                self._end_line()
                self.offset += 1
                start = 1
        for m in _BREAK.finditer(buf, start):
            piece = buf[start : m.start()]
            if self._skipping:  # the end of an overlong record, emitted already
                self._skipping = False
                piece = b""
            if m.group() == b"\r":
                if piece:
                    out.append(self._cut(piece, seen))
                self._cr_pending = m.end() == len(buf)
            else:
                if piece or not self._line_has_records:
                    out.append(self._cut(piece, seen))
                self._end_line()
            self.offset += m.end() - start
            start = m.end()
        tail = buf[start:]
        if not self._skipping and len(tail) > self._max_line_bytes:
            out.append(self._cut(tail, seen))
            self._skipping = True
        if self._skipping:  # read past, never kept
            self.offset += len(tail)
            tail = b""
        self._tail = tail
        return out

    def _cut(self, raw: bytes, seen: float) -> LogLine:
        """The record of ``raw``: its first `max_line_bytes` and `CUT_NOTE` when it is longer."""
        if len(raw) <= self._max_line_bytes:
            return self._make(raw, seen)
        line = self._make(raw[: self._max_line_bytes], seen)
        line.text += CUT_NOTE.format(limit=self._max_line_bytes)
        return line

    def flush(self) -> list[LogLine]:
        """Read what is new, then return the unterminated tail as a last record (for a process that exited)."""
        out = self.poll()
        while self.backlog:
            out += self.poll()
        if self._tail:
            seen = time.monotonic()
            out.append(self._make(self._tail, seen))
            self.offset += len(self._tail)
            self._tail = b""
            self._end_line()
        return out


def split_records(text: str) -> list[tuple[int, str]]:
    """A whole log text as (1-based physical line number, record) pairs, split exactly like `LogWatcher`.

    Records end at "\\n", "\\r\\n" or a lone "\\r"; empty pieces between carriage returns are dropped, an
    empty line is kept; a last line without a newline is a record.
    """
    out: list[tuple[int, str]] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        pieces = [p for p in line.split("\r") if p]
        out.extend((lineno, p) for p in pieces or [""])
    return out


#: The longest log line read whole (the watcher's default ``max_line_bytes``; README "64 KiB").
MAX_LINE_BYTES = 64 << 10


def read_capped(stream: BinaryIO, limit: int = MAX_LINE_BYTES) -> bytes:
    """A whole log from ``stream`` (binary, read to its end) with every line longer than ``limit`` bytes
    cut to its first ``limit`` and `CUT_NOTE`: the rest of such a line is read past in 1 MiB chunks, never
    held, so one giant line costs memory and matching time bounded by ``limit`` (as `LogWatcher` does).
    Line ends are kept as they are, so line numbers are unchanged."""
    out: list[bytes] = []
    note = CUT_NOTE.format(limit=limit).encode()
    while line := stream.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            out.append(line)
            continue
        out.append(line[:limit] + note)
        while chunk := stream.readline(_CHUNK):  # the rest of the line, up to and with its "\n"
            if chunk.endswith(b"\n"):
                out.append(b"\n")
                break
    return b"".join(out)
