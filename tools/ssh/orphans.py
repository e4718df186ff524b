"""Servers an earlier orchestrator left running on an SSH host: the heartbeat that marks ours as looked
after (their PID files are touched), finding the others, and stopping one (`SSHOrphans`)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Any

import paramiko

from tools.host import ProcessHandle
from tools.leftovers import Orphan, port_from_argv
from tools.local_procs import pid_alive
from tools.ssh.servers import SSHServers
from tools.ssh.shell import orphan_scan_script
from tools.ssh.stream import Spawned


def orphan_of(cols: list[str], me: str, stale_s: float) -> Orphan | None:
    """The orphan one line of `orphan_scan_script` describes, or None when its orchestrator still looks
    after it: it ran on this machine (`me`) and is alive, or elsewhere and touched the PID file within
    `stale_s` seconds."""
    pid_file, lead, st, child, age, meta_text = cols[:6]
    try:
        meta = json.loads(meta_text) if meta_text.strip() else {}
    except ValueError:
        meta = {}
    client, client_pid = meta.get("client"), meta.get("client_pid")
    age_s = float(age) if age.lstrip("-").isdigit() else 0.0
    why = ""
    if client == me and isinstance(client_pid, int) and not pid_alive(client_pid):
        why = f"its orchestrator (pid {client_pid} on this machine) is gone"
    elif age_s >= stale_s:
        why = f"no heartbeat from its orchestrator for {age_s:.0f} s"
    if not why:
        return None
    argv = [str(a) for a in meta.get("argv", [])] if isinstance(meta.get("argv"), list) else []
    return Orphan(
        pid_file=pid_file,
        log_path=pid_file[: -len(".pid")],
        pgid=int(lead),
        pid=int(child) if child.isdigit() else None,
        starttime=st,
        argv=argv,
        port=meta.get("port") if isinstance(meta.get("port"), int) else port_from_argv(argv),
        client=client,
        client_pid=client_pid if isinstance(client_pid, int) else None,
        heartbeat_age_s=age_s,
        why=why,
    )


class SSHOrphans(SSHServers):
    """The heartbeat, `find_orphans` and `stop_orphan` (the leftovers part of `SSHHost`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # SSHHost's arguments, for SSHConnection
        super().__init__(*args, **kwargs)
        self._heartbeat_stop = threading.Event()

    def find_orphans(self, *, stale_after_s: float | None = None) -> list[Orphan]:
        """Servers of earlier hypoloop runs that still run on the host with no orchestrator looking after them.

        Scans ``workdir_root/*/*.pid``. A server counts as orphaned when its orchestrator ran on this
        machine and that process is gone, or when nobody touched its PID file for `stale_after_s`
        seconds (default: four heartbeats, 60 s). Servers this object started are never listed.
        """
        self._deliver()
        root = self._abs(self.options.workdir_root).rstrip("/")
        stale = 4 * self.options.heartbeat_s if stale_after_s is None else stale_after_s
        _, out, _ = self._exec(orphan_scan_script(root), timeout=60.0)
        me = socket.gethostname()
        found: list[Orphan] = []
        for line in out.decode("utf-8", "replace").splitlines():
            cols = line.split("\t")
            if len(cols) < 6 or not cols[1].isdigit() or int(cols[1]) in self._spawned:
                continue
            orphan = orphan_of(cols, me, stale)
            if orphan is not None:
                found.append(orphan)
        return found

    def stop_orphan(self, orphan: Orphan, grace_s: float = 10.0) -> bool:
        """Stop an orphaned server like `terminate` does (TERM, grace, KILL, verify group gone, port free)."""
        handle = ProcessHandle(
            pid=orphan.pid or orphan.pgid,
            pgid=orphan.pgid,
            argv=orphan.argv,
            log_path=orphan.log_path,
            started_wall=0.0,
            started_monotonic=0.0,
        )
        sp = Spawned(
            handle=handle,
            starttime=orphan.starttime,
            pid_file=orphan.pid_file,
            rc_file=f"{orphan.log_path}.rc",
            port=orphan.port,
        )
        with self._lock:
            self._spawned[orphan.pgid] = sp
        try:
            return self.terminate(handle, grace_s=grace_s)
        finally:
            with self._lock:
                self._spawned.pop(orphan.pgid, None)

    def _heartbeat(self) -> None:
        """Touch the PID files of running servers so other orchestrators know they are looked after."""
        while not self._heartbeat_stop.wait(self.options.heartbeat_s):
            with self._lock:
                files = [sp.pid_file for sp in self._spawned.values() if not sp.dead]
            if not files or self._transport() is None:
                continue
            try:
                with self._sftp_lock:
                    sftp = self._sftp()
                    for f in files:
                        with contextlib.suppress(OSError):
                            sftp.utime(f, None)
                        self.stats.sftp_requests += 1
                        self.stats.round_trips += 1
            except (OSError, EOFError, paramiko.SSHException):
                continue
