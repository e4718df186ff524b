"""Incremental tail of a log file on a host.

`LogWatcher.poll()` reads only the bytes appended since the last poll (through `Host.read_from`, by
byte offset), returns the complete lines among them, and keeps an unterminated tail for the next poll.
"""

from __future__ import annotations

import time

from pydantic import BaseModel

from tools.host import Host

_CHUNK = 1 << 20


class LogLine(BaseModel):
    """One complete log line. `lineno` is 1-based; `seen_monotonic` is `time.monotonic()` when read."""

    lineno: int
    text: str
    seen_monotonic: float


class LogWatcher:
    """Tails `path` on `host` from byte `start_offset`, one complete line at a time.

    Attributes: `offset` — byte offset just past the last complete line returned (a new watcher started
    there resumes cleanly); `lines_read` — complete lines returned so far (line numbers continue from it;
    with `start_offset` > 0 they count from the start offset, not the file's start); `bytes_read` — bytes
    consumed including an unterminated tail; `last_growth_monotonic` — when new bytes last arrived (None
    before any), which also counts progress-bar updates that end in a carriage return.

    Lines are split on "\\n"; a trailing "\\r" is removed and the text decoded as UTF-8 with replacement.
    An unterminated tail longer than `max_line_bytes` is emitted as a line so memory stays bounded.
    """

    def __init__(
        self, host: Host, path: str, *, start_offset: int = 0, max_line_bytes: int = 1 << 20
    ) -> None:
        self.host = host
        self.path = path
        self.offset = start_offset
        self.lines_read = 0
        self.bytes_read = 0
        self.last_growth_monotonic: float | None = None
        self._max_line_bytes = max_line_bytes
        self._tail = b""

    def _read_new(self) -> bytes:
        """All bytes appended since the last read, in chunks of at most 1 MiB."""
        parts: list[bytes] = []
        pos = self.offset + len(self._tail)
        while True:
            data = self.host.read_from(self.path, pos, _CHUNK)
            if not data:
                break
            parts.append(data)
            pos += len(data)
            if len(data) < _CHUNK:
                break
        return b"".join(parts)

    def _make(self, raw: bytes, seen: float) -> LogLine:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        self.lines_read += 1
        return LogLine(lineno=self.lines_read, text=raw.decode("utf-8", "replace"), seen_monotonic=seen)

    def poll(self) -> list[LogLine]:
        """Complete lines appended since the last poll ([] if none). Raises `HostError` from the host."""
        data = self._read_new()
        if not data:
            return []
        seen = time.monotonic()
        self.bytes_read += len(data)
        self.last_growth_monotonic = seen
        buf = self._tail + data
        out: list[LogLine] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            out.append(self._make(buf[start:nl], seen))
            self.offset += nl + 1 - start
            start = nl + 1
        tail = buf[start:]
        while len(tail) > self._max_line_bytes:
            out.append(self._make(tail[: self._max_line_bytes], seen))
            self.offset += self._max_line_bytes
            tail = tail[self._max_line_bytes :]
        self._tail = tail
        return out

    def flush(self) -> list[LogLine]:
        """Read what is new, then return the unterminated tail as a last line (for a process that exited)."""
        out = self.poll()
        if self._tail:
            seen = time.monotonic()
            out.append(self._make(self._tail, seen))
            self.offset += len(self._tail)
            self._tail = b""
        return out
