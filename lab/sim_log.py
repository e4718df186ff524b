"""The stand-in's log writer: SGLang-style records on a simulated clock, and tqdm-style progress bars.

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from lab.world_types import LineSpec

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class SimLog:
    """SGLang-style log writer on a simulated clock.

    Simulated time = start wall time + real elapsed / scale, so a log written at scale 0.01 shows
    the timestamps of a full-length run. Every record is one flushed write (thread-safe).
    """

    def __init__(self, scale: float, level: str, http_level: str | None) -> None:
        self.scale = scale
        self.start_wall = time.time()
        self.start_mono = time.monotonic()
        self.threshold = _LEVELS.get(level.lower(), 20)
        self.http_threshold = _LEVELS.get((http_level or level).lower(), self.threshold)
        self._lock = threading.Lock()
        self._bar_open = False  # a tqdm bar's physical line is not ended yet

    def sim_elapsed(self) -> float:
        return (time.monotonic() - self.start_mono) / self.scale

    def stamp(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.start_wall + self.sim_elapsed()))

    def sleep(self, sim_seconds: float) -> None:
        if sim_seconds > 0:
            time.sleep(sim_seconds * self.scale)

    def _write(self, text: str, *, stamped: str | None = None) -> None:
        """Write one record; ``stamped``: its prefix with ``{stamp}`` for the simulated time, taken under
        the lock so that records written by concurrent threads (the HTTP handlers) never go back in time."""
        with self._lock:
            if stamped is not None:
                text = stamped.format(stamp=self.stamp()) + text
            if self._bar_open:  # end the bar's physical line first, so the record starts a line of its own
                text = "\n" + text
                self._bar_open = False
            try:
                sys.stderr.write(text if text.endswith("\n") else text + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    def line(self, text: str, *, source: str = "server", level: str = "info", rank: int = 0) -> None:
        if _LEVELS.get(level, 20) < self.threshold:
            return
        if source == "scheduler":
            self._write(text, stamped=f"[{{stamp}} TP{rank}] ")
        elif source == "server":
            self._write(text, stamped="[{stamp}] ")
        else:
            self._write(text)

    def ranks(self, make: Any, tp_size: int, *, level: str = "info") -> None:
        """One scheduler line per TP rank; `make(rank)` returns the text."""
        for rank in range(tp_size):
            self.line(make(rank), source="scheduler", level=level, rank=rank)

    def uvicorn(self, text: str, level: str = "info") -> None:
        if _LEVELS.get(level, 20) < self.http_threshold:
            return
        self._write(text, stamped=f"[{{stamp}}] {level.upper() + ':':<9} ")

    def progress(self, text: str, *, last: bool = False) -> None:
        """A tqdm progress-bar update: no prefix, never filtered by --log-level, redrawn in place.

        tqdm's `status_printer` writes "\\r" + the bar for every update and a newline only when the bar
        closes, so a log file holds the whole bar on one physical line (tqdm/std.py, used by SGLang's
        weight loader and CUDA-graph capture).
        """
        with self._lock:
            try:
                sys.stderr.write("\r" + text + ("\n" if last else ""))
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            self._bar_open = not last

    def spec(self, spec: LineSpec, text: str, tp_size: int) -> None:
        if spec.ranks != "0" and spec.source == "scheduler":
            for rank in spec.rank_list(tp_size):
                self.line(text, source="scheduler", level=spec.level, rank=rank)
        else:
            self.line(text, source=spec.source, level=spec.level)


def tqdm_clock(seconds: float) -> str:
    """`seconds` as tqdm prints elapsed/remaining time: MM:SS, or H:MM:SS from an hour on."""
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_rate(per_item: float) -> str:
    """tqdm's rate for `per_item` seconds per item: "N.NNs/it" from 1 s on, else "N.NNit/s"."""
    if per_item <= 0:
        return "?it/s"
    return f"{per_item:5.2f}s/it" if per_item >= 1 else f"{1 / per_item:5.2f}it/s"


def tqdm_bar(frac: float, width: int = 10) -> str:
    """tqdm's bar for the done fraction `frac` (0-1), `width` characters of eighth blocks."""
    blocks = " ▏▎▍▌▋▊▉█"
    filled = frac * width
    full = int(filled)
    rest = int((filled - full) * 8)
    out = "█" * full + (blocks[rest] if full < width else "")
    return out.ljust(width)

