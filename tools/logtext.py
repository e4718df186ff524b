"""A server log's bytes as text: stray binary bytes replaced and counted, a mostly binary file refused.

Engines leave stray NUL bytes in their logs (a crash or a truncated write leaves a block of zeros where
the file was extended; a reboot mid-write does the same), and a log may hold bytes that are not UTF-8 (a
Latin-1 path, a cut multi-byte character). Such a log is still the server's log: each run of NUL bytes
and each invalid byte becomes U+FFFD (the Unicode replacement character), and `DecodedLog.note` says
what was replaced and on which lines. Line numbers are unchanged (no line end is added or removed).
Other control characters stay in the text; every terminal and report shows them through
`tools.sanitize.visible`.

A file is refused as not text when more than `BINARY_SHARE` of its units are binary, a unit being a
byte, or a whole run of NUL bytes counted once (so one block of zeros in a log does not outweigh its
lines). Where the threshold comes from: measured on this machine (2026-12-03), executables, shared
libraries, gzip and PNG files score 0.5-0.62 and compiled Python 0.30-0.50; server logs with a 64 KiB
block of NULs score under 0.001 (a unit here is one byte of those files' first MiB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Above this share of binary units a file is not taken for a log (see the module's docstring).
BINARY_SHARE = 0.25
#: C0 controls a text log does not hold (tab, line feed, vertical tab, form feed, carriage return and
#: escape are text: terminals' colour codes are common in logs); DEL.
_CONTROL = re.compile(rb"[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f]")
_NULS = re.compile(rb"\x00+")
_REPLACED = "\ufffd"


class NotText(ValueError):
    """The bytes are mostly binary (``share`` of their units), not a log."""

    def __init__(self, share: float) -> None:
        super().__init__(f"{share:.0%} of it is binary (NUL, control or not UTF-8)")
        self.share = share


@dataclass(frozen=True)
class DecodedLog:
    """A log's text, and what was replaced in it: ``nul_bytes`` in ``nul_runs`` runs, ``invalid_bytes``
    not valid UTF-8, on ``lines`` (1-based line numbers, in order)."""

    text: str
    nul_bytes: int = 0
    nul_runs: int = 0
    invalid_bytes: int = 0
    lines: tuple[int, ...] = ()

    def note(self, shown_lines: int = 5) -> str | None:
        """One line saying what was replaced by U+FFFD and where (the first ``shown_lines`` lines), or
        None when nothing was."""
        what = []
        if self.nul_bytes:
            runs = f" in {self.nul_runs} runs" if self.nul_runs > 1 else ""
            what.append(f"{self.nul_bytes} NUL byte{'s' if self.nul_bytes > 1 else ''}{runs}")
        if self.invalid_bytes:
            what.append(f"{self.invalid_bytes} byte{'s' if self.invalid_bytes > 1 else ''} not valid UTF-8")
        if not what:
            return None
        where = ", ".join(str(n) for n in self.lines[:shown_lines])
        more = f" and {len(self.lines) - shown_lines} more" if len(self.lines) > shown_lines else ""
        line_word = "line" if len(self.lines) == 1 else "lines"
        return f"{' and '.join(what)} replaced by {_REPLACED} ({line_word} {where}{more})"


def decode_log(data: bytes) -> DecodedLog:
    """``data`` (a log's bytes) decoded as UTF-8: each run of NUL bytes and each invalid byte becomes one
    U+FFFD, counted in the result. Raises NotText when more than `BINARY_SHARE` of its units are binary
    (see the module's docstring)."""
    mark = _REPLACED.encode()
    texts: list[str] = []
    lines: list[int] = []
    nul_bytes = nul_runs = invalid = 0
    for n, raw in enumerate(data.split(b"\n"), 1):  # a UTF-8 character never spans a line end
        runs = _NULS.findall(raw)
        text = _NULS.sub(mark, raw).decode("utf-8", errors="replace")
        bad = text.count(_REPLACED) - raw.count(mark) - len(runs)  # a U+FFFD the file itself holds is text
        if runs or bad:
            lines.append(n)
            nul_runs, nul_bytes, invalid = nul_runs + len(runs), nul_bytes + sum(map(len, runs)), invalid + bad
        texts.append(text)
    units = len(data) - nul_bytes + nul_runs
    share = (nul_runs + len(_CONTROL.findall(data)) + invalid) / max(units, 1)
    if share > BINARY_SHARE:
        raise NotText(share)
    return DecodedLog("\n".join(texts), nul_bytes, nul_runs, invalid, tuple(lines))
