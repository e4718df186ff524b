"""Processes on this machine, seen through Linux ``/proc`` (with signal-0 probes where there is no
``/proc``): a process's state, its group's liveness, descendants that left the group, and signals that
tolerate a process already gone. Used by `tools.host.LocalHost` and by the orphan checks of
`tools.ssh` and `tools.slurm` (is an orchestrator on this machine still running?).

Source: proc(5), ``/proc/PID/stat`` fields 3 (state), 4 (ppid) and 5 (pgrp).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PROC = Path("/proc")


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of `pid` from /proc/<pid>/stat, or None if it is gone or unreadable."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields after the last ')' are fixed.
    rest = raw[raw.rfind(")") + 2 :].split()
    if len(rest) < 3:
        return None
    return rest[0], int(rest[1]), int(rest[2])


def all_pids() -> list[int]:
    """The pids in /proc now ([] without /proc)."""
    try:
        return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in process group `pgid`."""
    if PROC.is_dir():
        for pid in all_pids():
            st = proc_stat(pid)
            if st is not None and st[2] == pgid and st[0] not in ("Z", "X"):
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    st = proc_stat(pid)
    if st is not None:
        return st[0] not in ("Z", "X")
    if PROC.is_dir():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def descendants_outside_group(root: int, pgid: int) -> list[int]:
    """Descendants of `root` that moved to another process group (e.g. called setsid)."""
    if not PROC.is_dir():
        return []
    children: dict[int, list[int]] = {}
    groups: dict[int, int] = {}
    for pid in all_pids():
        st = proc_stat(pid)
        if st is None:
            continue
        children.setdefault(st[1], []).append(pid)
        groups[pid] = st[2]
    out: list[int] = []
    stack = [root]
    seen = {root}
    while stack:
        for child in children.get(stack.pop(), []):
            if child in seen:
                continue
            seen.add(child)
            stack.append(child)
            if groups.get(child) != pgid:
                out.append(child)
    return out


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to process group `pgid`; a group already gone (or not ours) is ignored."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_pid(pid: int, sig: int) -> None:
    """Send `sig` to `pid`; a process already gone (or not ours) is ignored."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
