"""The header an engine's logger puts before each message, read apart from the message.

vLLM formats every record as ``(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [FILE:LINE] message``
(``_FORMAT`` in vllm/logger.py, vLLM 0.32.0; the process part is added by ``decorate_logs`` in
vllm/utils/system_utils.py) and its ``NewLineFormatter`` (vllm/logging_utils/formatter.py) repeats that
header on every line of a multi-line message, so each line of a logged traceback carries it. SGLang
formats records as ``[YYYY-MM-DD HH:MM:SS TPn] message`` (``configure_logger`` in
sglang/srt/utils/common.py, 0.5.x) with no level and no repetition. Python's default handler writes
``LEVEL:logger:message``.

What is read here is only the header's shape, never an engine's name: a record whose header says
``WARNING`` or ``INFO`` reports no failure, and a word of the header (``ERROR``, ``WARNING``, a file
name) is not a word of the message.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: Levels of Python's logging module (``logging.getLevelName``), and the short forms some engines print.
LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL")
#: Levels whose records do not report a failure.
QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN"})

_LEVEL = "|".join(LEVELS)
_HEADER = re.compile(
    r"^(?P<header>"
    r"(?:\(\s*[\w.:-]+(?:\s+[\w.:-]+)*\s+pid=\d+\)\s+)?"  # (EngineCore pid=7) / (APIServer pid=7)
    rf"(?:(?P<level>{_LEVEL})\s+)"  # LEVEL
    r"(?:\d{2,4}-\d{2}(?:-\d{2})?[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+)?"  # 12-02 09:03:56
    r"(?:\[[^\]\n]{1,120}\]\s?)?"  # [core.py:1510]
    r"|\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}[^\]\n]{0,80}\]\s?"  # [2026-01-10 13:23:27 TP0]
    rf"|(?P<plain>{_LEVEL}):[\w.]*:"  # WARNING:root:
    r")"
)


@dataclass(frozen=True)
class LogRecord:
    """One log line read apart: ``header`` as written (``""`` when the line has none), the record's
    ``level`` when the header names one (upper case), and the ``message`` after the header."""

    header: str
    level: str | None
    message: str

    @property
    def quiet(self) -> bool:
        """The header says the record reports no failure (DEBUG, INFO or WARNING)."""
        return self.level in QUIET_LEVELS


@functools.lru_cache(maxsize=8192)
def read_record(text: str) -> LogRecord:
    """``text`` (one log line) as header, level and message; a line with no known header is all message.
    Cached by the text (a `LogRecord` is frozen): the planner reads every kept line again each step."""
    m = _HEADER.match(text)
    if not m or not m.group("header"):
        return LogRecord("", None, text)
    level = m.group("level") or m.group("plain")
    return LogRecord(m.group("header"), level.upper() if level else None, text[m.end():])


#: Lines only a program's output holds, whatever its logger: Python's traceback header and exception line
#: (``ValueError: ...``, ``torch.OutOfMemoryError: ...``: traceback.format_exception_only), faulthandler's
#: ``Fatal Python error:``, argparse's usage and error lines (``usage: PROG ...``, ``PROG: error: ...``:
#: ArgumentParser.print_usage and .error) and the C++ runtime's ``terminate called ...``.
_OUTPUT_LINE = re.compile(
    r"Traceback \(most recent call last\):"
    r"|\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::\s|:?\s*$)"
    r"|Fatal Python error:|usage: \S|[\w./ -]{1,80}: error: |terminate called "
)


def looks_like_log(text: str) -> bool:
    """Whether ``text`` holds at least one line a server's output holds and prose does not: a record with
    a logger's header (`read_record`'s shapes), a Python traceback or exception line, an argparse usage or
    error line. A README or notes that quote a server's messages inline have none; a log cut before the
    engine spoke may also have none. Reads line by line and stops at the first such line."""
    start = 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end]
        m = _HEADER.match(line)
        if (m and m.group("header")) or _OUTPUT_LINE.match(line):
            return True
        start = end + 1
    return False
