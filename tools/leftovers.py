"""Servers a hypoloop process started on this machine, found again from nothing but ``/proc``.

`LocalHost.spawn` puts two variables into every server's environment before it is exec'd:
``HYPOLOOP_LAUNCH_LOG`` (the absolute log path, which also names the run: ``ROOT/RUN_ID/EXP.log``) and
``HYPOLOOP_ORCHESTRATOR`` (``PID:STARTTIME`` of the hypoloop process that launched it). The environment
is part of the process from its first instruction, so there is no instant at which a server runs
without them: a ``kill -9`` of the orchestrator anywhere around a launch leaves a server this module
finds by its log path (`find_launch`, used by resume to adopt it) or as an orphan of its root
(`find_orphans`, used at the next start and by ``hypoloop runs``). Linux only (``/proc``); elsewhere
nothing is found.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field


class Orphan(BaseModel):
    """A server of an earlier hypoloop run still running on the host while its orchestrator is gone.

    `heartbeat_age_s` is how long ago its orchestrator last touched the PID file; `why` says why it is
    considered orphaned; `port` is its ``--port`` if the argv had one.
    """

    pid_file: str
    log_path: str
    pgid: int
    pid: int | None
    starttime: str
    argv: list[str] = Field(default_factory=list)
    port: int | None = None
    client: str | None = None
    client_pid: int | None = None
    heartbeat_age_s: float
    why: str


def port_from_argv(argv: Sequence[str]) -> int | None:
    """The value of the last ``--port N`` / ``--port=N`` in `argv`, if any."""
    port: int | None = None
    for i, a in enumerate(argv):
        value = None
        if a == "--port" and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith("--port="):
            value = a.split("=", 1)[1]
        if value is not None and value.isdigit():
            port = int(value)
    return port


LAUNCH_LOG_ENV = "HYPOLOOP_LAUNCH_LOG"
ORCHESTRATOR_ENV = "HYPOLOOP_ORCHESTRATOR"

_PROC = Path("/proc")


def proc_starttime(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks since boot), or None if gone."""
    try:
        raw = (_PROC / str(pid) / "stat").read_bytes().decode("ascii", "replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    return rest[19]


def orchestrator_marker(pid: int | None = None) -> str:
    """``PID:STARTTIME`` of this process (or `pid`): a pid a later process reuses never matches it."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{proc_starttime(pid) or ''}"


def orchestrator_alive(marker: str) -> bool:
    """Whether the process a `orchestrator_marker` names still runs (same pid and start time)."""
    pid_text, _, start = marker.partition(":")
    if not pid_text.isdigit():
        return False
    now = proc_starttime(int(pid_text))
    return now is not None and (not start or now == start)


class LaunchedProcess:
    """A group leader on this machine that hypoloop launched (from its environment)."""

    def __init__(self, pid: int, log_path: str, orchestrator: str, starttime: str) -> None:
        self.pid = pid
        self.log_path = log_path
        self.orchestrator = orchestrator
        self.starttime = starttime

    def age_s(self) -> float:
        """Seconds since the process started (0.0 if unknown)."""
        try:
            ticks = os.sysconf("SC_CLK_TCK")
            uptime = float((_PROC / "uptime").read_text().split()[0])
            return max(0.0, uptime - int(self.starttime) / ticks)
        except (OSError, ValueError):
            return 0.0

    def argv(self) -> list[str]:
        """Its command line."""
        return _cmdline(self.pid)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def launched_processes() -> list[LaunchedProcess]:
    """Every live process-group leader on this machine whose environment carries a hypoloop launch
    marker (processes of other users, whose environment cannot be read, are skipped)."""
    if not _PROC.is_dir():
        return []
    found: list[LaunchedProcess] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_bytes().decode("ascii", "replace")
            rest = stat[stat.rfind(")") + 2 :].split()
            if rest[0] in ("Z", "X") or int(rest[2]) != pid:  # only live group leaders
                continue
            env = (entry / "environ").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if LAUNCH_LOG_ENV.encode() not in env:
            continue
        values = dict(
            item.decode(errors="replace").split("=", 1) for item in env.split(b"\0") if b"=" in item
        )
        log = values.get(LAUNCH_LOG_ENV)
        if log:
            found.append(LaunchedProcess(pid, log, values.get(ORCHESTRATOR_ENV, ""), rest[19]))
    return found


def find_launch(log_path: str) -> LaunchedProcess | None:
    """The live server launched with this log path, if any."""
    path = os.path.abspath(log_path)
    return next((p for p in launched_processes() if p.log_path == path), None)


def servers_under(root: str) -> list[LaunchedProcess]:
    """Live servers whose log lies under `root` (a ``runs`` folder: ``ROOT/RUN_ID/EXP.log``)."""
    base = os.path.abspath(root).rstrip("/") + "/"
    return [p for p in launched_processes() if p.log_path.startswith(base)]


def claim(log_path: str) -> None:
    """Record that this process now looks after the server of `log_path` (``LOG.owner``), so that a
    server adopted by a resumed run is not taken for an orphan of its dead launcher."""
    owner = Path(f"{os.path.abspath(log_path)}.owner")
    try:
        tmp = owner.with_suffix(".owner.tmp")
        tmp.write_text(orchestrator_marker() + "\n", encoding="utf-8")
        os.replace(tmp, owner)
    except OSError:
        pass  # best effort: without it the server is merely offered for stopping as an orphan


def _owner_alive(log_path: str) -> bool:
    try:
        marker = Path(f"{log_path}.owner").read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return orchestrator_alive(marker)


def orphans_under(root: str) -> list[LaunchedProcess]:
    """Servers under `root` whose launching hypoloop process is gone and that no later process adopted."""
    return [
        p
        for p in servers_under(root)
        if not orchestrator_alive(p.orchestrator) and not _owner_alive(p.log_path)
    ]
