"""Servers on an SSH host: started detached from the session (``setsid``), found again by their PID
file, watched through ``/proc`` and stopped group-wide with one command (`SSHServers`)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tools.host import HostError, ProcessHandle, disk_full_error, expand_argv, merge_env, one_line
from tools.leftovers import port_from_argv
from tools.ssh.files import SSHFiles
from tools.ssh.shell import DISK_FULL_MARK, NOT_FOUND_MARK, spawn_script, stop_group_script
from tools.ssh.stream import LogStream, Pace, Spawned


class SSHServers(SSHFiles):
    """Starting, finding, watching and stopping servers (the server part of `SSHHost`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # SSHHost's arguments, for SSHConnection
        super().__init__(*args, **kwargs)
        self._spawned: dict[int, Spawned] = {}
        self._by_log: dict[str, Spawned] = {}
        self._streams: dict[str, LogStream] = {}
        self._paces: dict[str, Pace] = {}
        self._stream_ok = self.options.follow

    def spawn(
        self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
    ) -> ProcessHandle:
        """Start `argv` on the host detached from the SSH session; stdout+stderr go to `log_path`.

        The log (created with its directory, or truncated) gets a PID file ``LOG.pid``, an exit-status
        file ``LOG.rc`` and a description ``LOG.json`` beside it. The handle's `pgid` is the session
        leader's pid, `pid` the server's. `env` is merged over the host environment; PYTHONUNBUFFERED=1 is
        added unless set. A spawn cut off by a dropped connection is finished after reconnecting without
        starting a second server. Raises `DiskFull` (a `HostError`) when the log's disk has less than
        `tools.host.MIN_FREE_BYTES` free, `HostError` if the command is not found or does not start.
        """
        self._deliver()
        cmd = expand_argv(argv, self)
        if not cmd:
            raise HostError("empty command")
        path = self._abs(log_path)
        merged = merge_env(self._env, env)
        merged.setdefault("PYTHONUNBUFFERED", "1")
        nonce = secrets.token_hex(8)
        pid_file, rc_file = f"{path}.pid", f"{path}.rc"
        port = port_from_argv(cmd)
        script = spawn_script(cmd, merged, path, nonce=nonce, port=port)
        status, out, err = self._exec(script, timeout=60.0)
        self._deliver()
        stderr = err.decode("utf-8", "replace")
        if status == 127 and NOT_FOUND_MARK in stderr:
            raise HostError(f"command not found: {cmd[0]} (on {self.name})")
        if status == 28 and DISK_FULL_MARK in stderr:
            free = stderr.split(DISK_FULL_MARK, 1)[1].split()[0]
            raise disk_full_error(self.name, path.rsplit("/", 1)[0] or "/", int(free) if free.isdigit() else 0)
        lines = out.decode("utf-8", "replace").split()
        if status != 0 or len(lines) < 4:
            raise HostError(
                f"cannot start {cmd[0]} on {self.name}: {one_line(stderr) or f'exit status {status}'}"
            )
        lead, starttime, child_pid = int(lines[0]), lines[1], int(lines[3])
        handle = ProcessHandle(
            pid=child_pid,
            pgid=lead,
            argv=cmd,
            log_path=path,
            started_wall=time.time(),
            started_monotonic=time.monotonic(),
        )
        sp = Spawned(handle=handle, starttime=starttime, pid_file=pid_file, rc_file=rc_file, port=port)
        with self._lock:
            self._spawned[lead] = sp
            self._by_log[path] = sp
            old = self._streams.pop(path, None)
            self._paces.pop(path, None)
        if old is not None:
            old.close()
        return handle

    def find_launch(self, log_path: str) -> ProcessHandle | None:
        """The live server an earlier process started with this log (found by its PID file, which the
        server's session leader writes before the server starts), or None."""
        self._deliver()
        path = self._abs(log_path)
        words = (self._sftp_small(f"{path}.pid") or b"").decode(errors="replace").split("\n")
        first = words[0].split() if words else []
        if len(first) < 2 or not first[0].isdigit():
            return None
        lead = int(first[0])
        child = words[1].strip() if len(words) > 1 else ""
        meta_raw = self._sftp_small(f"{path}.json") or b"{}"
        try:
            meta = json.loads(meta_raw)
        except ValueError:
            meta = {}
        started = float(meta.get("started") or time.time()) if isinstance(meta, dict) else time.time()
        handle = ProcessHandle(
            pid=int(child) if child.isdigit() else lead,
            pgid=lead,
            argv=[str(a) for a in meta.get("argv", [])] if isinstance(meta, dict) else [],
            log_path=path,
            started_wall=started,
            started_monotonic=time.monotonic() - max(0.0, time.time() - started),
        )
        sp = Spawned(
            handle=handle, starttime=first[1], pid_file=f"{path}.pid", rc_file=f"{path}.rc",
            port=port_from_argv(handle.argv),
        )
        if not self._check_alive(sp):
            return None
        with self._lock:
            self._spawned[lead] = sp
            self._by_log[path] = sp
        return handle

    def _spawned_for(self, handle: ProcessHandle) -> Spawned:
        sp = self._spawned.get(handle.pgid)
        if sp is None:
            # A handle from another SSHHost object (e.g. before a restart): read its PID file.
            pid_file = f"{handle.log_path}.pid"
            words = (self._sftp_small(pid_file) or b"").decode(errors="replace").split()
            starttime = words[1] if len(words) >= 2 and words[0] == str(handle.pgid) else ""
            sp = Spawned(
                handle=handle,
                starttime=starttime,
                pid_file=pid_file,
                rc_file=f"{handle.log_path}.rc",
                port=port_from_argv(handle.argv),
            )
            with self._lock:
                self._spawned[handle.pgid] = sp
                self._by_log.setdefault(handle.log_path, sp)
        return sp

    def _check_alive(self, sp: Spawned) -> bool:
        """Ask the host whether the server process runs (not a zombie, still in our process group)."""
        raw = self._sftp_small(f"/proc/{sp.handle.pid}/stat", 4096)
        sp.last_check = time.monotonic()
        if not raw:
            return False
        text = raw.decode("ascii", "replace")
        fields = text[text.rfind(")") + 2 :].split()
        return len(fields) > 2 and fields[0] not in ("Z", "X") and fields[2] == str(sp.handle.pgid)

    def is_alive(self, handle: ProcessHandle) -> bool:
        """True while the server runs; a zombie counts as exited.

        While its log is being streamed this costs no round trip (the stream ends when the server does),
        except for a confirming check every `liveness_check_s` seconds; otherwise at most one check per
        0.25 s.
        """
        self._deliver()
        sp = self._spawned_for(handle)
        if sp.dead:
            return False
        now = time.monotonic()
        stream = self._streams.get(handle.log_path)
        if stream is not None and stream.state == "running":
            if now - sp.last_check < self.options.liveness_check_s:
                return True
        elif stream is None and now - sp.last_check < 0.25:
            return True
        alive = self._check_alive(sp)
        if not alive:
            sp.dead = True
        self._deliver()
        return alive

    def exit_code(self, handle: ProcessHandle) -> int | None:
        """The server's exit code (negative = killed by that signal), None while it runs or if unknown."""
        sp = self._spawned_for(handle)
        if sp.exit_code is not None:
            return sp.exit_code
        if not sp.dead and self.is_alive(handle):
            return None
        for _ in range(10):
            text = (self._sftp_small(sp.rc_file) or b"").decode(errors="replace").strip()
            if text.isdigit():
                rc = int(text)
                sp.exit_code = -(rc - 128) if rc > 128 else rc
                return sp.exit_code
            time.sleep(0.05)  # the leader writes the status right after the server ends
        return None

    def terminate(self, handle: ProcessHandle, grace_s: float = 10.0) -> bool:
        """Stop the server's whole process group: SIGTERM, wait up to `grace_s` s, SIGKILL, verify.

        One command does it all on the host. Returns True when no process of the group remains and the
        server's ``--port`` (if its argv had one) no longer listens; False if something survived 5 s
        after SIGKILL or the port stayed taken. Also ends the log streams of this server. Safe to call
        repeatedly (once verified gone, without asking the host again). Raises `HostUnreachable` if the
        host cannot be reached.
        """
        self._deliver()
        sp = self._spawned_for(handle)
        if sp.stopped:
            return True  # verified gone before; a process group does not come back
        with self._lock:
            stream = self._streams.get(handle.log_path)
        stream_pids = list(sp.stream_pids)
        if stream is not None and stream.remote_pid is not None:
            stream_pids.append(stream.remote_pid)
        script = stop_group_script(sp, stream_pids, grace_s)
        _, out, _ = self._exec(script, timeout=grace_s + 30.0)
        self._deliver()
        text = out.decode(errors="replace")
        ok = "gone=1" in text and "free=1" in text
        if "gone=1" in text:
            sp.dead = True
            sp.stopped = True
        if stream is not None:
            stream.close()
        return ok
