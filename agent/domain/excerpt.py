"""The log lines a launch keeps as evidence: ``LogExcerpt`` is fed every log line while a launch is
watched (or a log file is read) and keeps what an engineer would read.

Each Python traceback whole (with the exception line and the numbered list of possible solutions SGLang
prints after some errors), the lines just before a fatal or error line, warnings, lines that name a flag
to use, the engine's settings line and the tail of the log. Memory stays bounded whatever the log's
length. The kept lines become ``RawEvidence.log_excerpt`` and then ``Outcome.log_excerpt``
(``agent.domain.evidence``, ``agent.domain.models``).

Traceback text is CPython's format (``Traceback (most recent call last):``, ``  File "PATH", line N, in
FUNC``, the source line, the exception line); SGLang logs it as one multi-line record whose first line
carries the log prefix (``Scheduler hit an exception: Traceback ...``; sglang/srt/managers/scheduler.py,
0.5.x). A process killed by a signal leaves CPython's faulthandler dump instead, with the native stack a
reporter adds (``tools.tracebacks.DUMP_LINE``): every line of it is kept.
"""

from __future__ import annotations

import re
from collections import deque

from tools.engines import settings_marker_in
from tools.logwatch import LogLine
from tools.tracebacks import DUMP_LINE, TRACEBACK_START

__all__ = ["LogExcerpt", "excerpt_of_text"]

#: Lines of the log's end that are always kept.
TAIL_LINES = 80
#: Lines kept before an error line (what led to it).
BEFORE_LINES = 3
#: Lines kept after an exception line (SGLang's numbered "possible solutions" follow it).
AFTER_LINES = 16
#: Upper bound of kept lines besides the tail (a log full of warnings stays bounded).
MAX_KEPT = 600

#: The first line of a Python traceback (CPython's format).
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
_EXC_LINE = re.compile(
    r"^(?:\[[^\]]*\]\s*)?(?P<exc>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b.*|"
    r"AssertionError.*|KeyboardInterrupt.*)$"
)
_INTERESTING = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b|\bWARN(?:ING)?\b|\bwarn(?:ing)?\b|"
    r"\berror\b|\bfailed\b|\bfatal\b|possible solutions|\bUse --|\bset --|\bIncrease --|\bDecrease --|"
    r"\btry --|\bnan\b|\binf\b|out of memory|[Uu]nsupported|not supported|illegal memory|"
    r"device-side assert|undefined symbol|cannot open shared object|Segmentation fault|core dumped|"
    # a notice that the run leaves part of the host unused, logged without a level (SGLang's default
    # format): "... has 2 numa nodes available, but ... so only 1 numa nodes are used" (0.5.23
    # srt/utils/numa_utils.py init_threads_binding)
    r"\bonly \d+ [a-z][a-z ]{0,30}\b(?:is|are) used\b|"
    # the engine saying a setting of the user's took it off its default path: "aiter mla gluon is disabled
    # manually." then "... is disabled; falling back to zero-pad mla_decode_fwd" (0.5.23
    # srt/layers/attention/aiter_mla_gluon.py _gluon_fn, log_mla_gluon_capability)
    r"\b(?:disabled|enabled|forced|overridden) manually\b|\bfalling back to\b",
    re.IGNORECASE,
)

class LogExcerpt:
    """Collects the log lines worth keeping as evidence while a log is read (see module docstring)."""

    def __init__(self) -> None:
        self._tail: deque[tuple[int, str]] = deque(maxlen=TAIL_LINES)
        self._before: deque[tuple[int, str]] = deque(maxlen=BEFORE_LINES)
        self._kept: dict[int, str] = {}
        self._in_traceback = False
        self._after = 0

    def _keep(self, lineno: int, text: str) -> None:
        if len(self._kept) < MAX_KEPT:
            self._kept[lineno] = text

    def feed(self, lineno: int, text: str) -> None:
        """One log line (1-based number); lines fed twice are kept once."""
        text = text.rstrip("\r\n")
        if settings_marker_in(text):  # every effective setting, after the engine's own resolution
            self._kept[lineno] = text
        if TRACEBACK_START.search(text):
            self._in_traceback = True
            for n, t in self._before:
                self._keep(n, t)
            self._keep(lineno, text)
        elif self._in_traceback:
            self._keep(lineno, text)
            if text[:1] not in (" ", "\t") and not _FRAME.match(text) and text.strip():
                self._in_traceback = False  # the exception line ends the traceback
                self._after = AFTER_LINES
        elif DUMP_LINE.search(text):  # a process killed by a signal: faulthandler's dump, its native stack
            self._keep(lineno, text)
        elif self._after > 0:
            self._keep(lineno, text)
            self._after -= 1
        elif _INTERESTING.search(text):
            for n, t in self._before:
                self._keep(n, t)
            self._keep(lineno, text)
            if _EXC_LINE.match(text.strip()) or "possible solutions" in text:
                self._after = AFTER_LINES
        self._before.append((lineno, text))
        self._tail.append((lineno, text))

    def lines(self) -> list[LogLine]:
        """The kept lines in log order."""
        kept = dict(self._kept)
        kept.update(dict(self._tail))
        return [
            LogLine(line=n, text=t if settings_marker_in(t) else t[:2000])
            for n, t in sorted(kept.items())
        ]


def excerpt_of_text(text: str) -> list[LogLine]:
    """``LogExcerpt`` over a whole log text (an existing crash log)."""
    ex = LogExcerpt()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        ex.feed(n, line)
    return ex.lines()
