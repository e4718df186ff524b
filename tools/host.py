"""Hosts: where commands run and servers live.

A `Host` runs short commands, spawns long-lived servers in their own process group with a log file,
reads that log incrementally, and stops what it started (TERM the group, wait, KILL, verify gone).
`LocalHost` does all of this with `subprocess` on this machine; `SSHHost` (tools/ssh/) does it on a
remote host over SSH; `tools.connect.connect_host` picks one from a target string.
Every process a `LocalHost` spawns is tracked in a module registry so `terminate_all()` (also
registered with `atexit`) can stop anything still running when the orchestrator exits.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, BinaryIO, Protocol, runtime_checkable

from pydantic import BaseModel

from tools import leftovers, local_procs, ports

TIME_SCALE_ENV = "HYPOLOOP_LAB_TIME_SCALE"


class CommandResult(BaseModel):
    """The result of a finished short command. `duration_s` is wall time in seconds."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


class ProcessHandle(BaseModel):
    """A spawned, detached process group. `pgid` equals `pid` (the process leads its own session).

    `started_wall` is `time.time()` and `started_monotonic` is `time.monotonic()` at spawn, on the
    orchestrator's clock; `log_path` is the path on the host that receives stdout and stderr.
    """

    pid: int
    pgid: int
    argv: list[str]
    log_path: str
    started_wall: float
    started_monotonic: float


class HostError(Exception):
    """The host could not do what was asked: unreachable, command not found, timeout, bad setting.

    The message is one line a user can act on.
    """


class HostUnreachable(HostError):
    """The host cannot be reached (connection refused, timed out, or lost and not re-established).

    A run that hits this ends with status ``error``: nothing more can be learned from that host now.
    """


class DiskFull(HostError):
    """The disk that holds a run's folder on the host is full (or nearly): a server's log cannot be
    written there, so a launch would say nothing about the deployment. A run that hits this ends with
    status ``error``."""


#: Below this many free bytes (for unprivileged writers) a run's folder counts as full: no launch starts
#: there, and a launch that failed there is taken for the disk's failure, not the server's. An SGLang
#: launch log is tens of KB to a few MB; 1 MiB is far below what any working host has free.
MIN_FREE_BYTES = 1 << 20
#: The umask servers are started with (-1: this process's own). The CLI makes hypoloop's own files
#: private (umask 077) and sets this to the user's umask, so a server's own files are as before.
SERVER_UMASK = -1


def disk_full_error(host: str, path: str, free: int) -> DiskFull:
    """The `DiskFull` of a run folder `path` on `host` with `free` bytes left, in plain words."""
    return DiskFull(
        f"{host}: the disk holding {path} is full ({free} bytes free): the server's log cannot be written "
        "there, so a launch would say nothing about the deployment; free some space there, then start the "
        "run again"
    )


class CommandTimeout(HostError):
    """`Host.run` hit its timeout; the command's whole process group was killed.

    `result` holds what the command printed before it was killed (returncode is -9).
    """

    def __init__(self, message: str, result: CommandResult) -> None:
        super().__init__(message)
        self.result = result


class SchedulerError(HostError):
    """A batch scheduler refused, cancelled or failed a job (or its node): the launch says nothing about
    the server, so its experiment is an infrastructure error, never evidence."""


@runtime_checkable
class Host(Protocol):
    """Where commands run. Implementations: `LocalHost` (this machine), `SSHHost` (remote)."""

    name: str
    python: str
    time_scale: float

    def run(
        self, argv: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> CommandResult: ...

    def spawn(
        self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
    ) -> ProcessHandle: ...

    def read_from(self, path: str, offset: int, max_bytes: int = 1 << 20) -> bytes: ...

    def read_text(self, path: str, max_bytes: int = 4 << 20) -> str | None: ...

    def is_alive(self, handle: ProcessHandle) -> bool: ...

    def exit_code(self, handle: ProcessHandle) -> int | None: ...

    def terminate(self, handle: ProcessHandle, grace_s: float = 10.0) -> bool: ...

    def forward_port(self, port: int) -> int: ...

    def free_port(self) -> int: ...

    def workdir(self, run_id: str) -> str: ...

    def free_bytes(self, path: str) -> int | None: ...

    def close(self) -> None: ...


@runtime_checkable
class FindsOrphans(Protocol):
    """A host that can find servers left behind by earlier runs whose orchestrator is gone (SSHHost)."""

    def find_orphans(self) -> Sequence[Any]: ...

    def stop_orphan(self, orphan: Any, grace_s: float = 10.0) -> bool: ...


@runtime_checkable
class QueuesJobs(Protocol):
    """A host whose servers are batch jobs that wait in a queue before they run (SlurmHost).

    `wait_started` blocks while the job is queued and returns the handle with the job's start as its
    start (ready timeouts and host-seconds count from there); `job_info` is the job as the transcript
    records it (id, node, state, submitted/started/ended wall-clock times); `job_failure` says (one
    line) when the job ended for a reason that is no evidence about the server, else None;
    `forward_job_port` is `Host.forward_port` for the node the job runs on.
    """

    def wait_started(self, handle: ProcessHandle) -> ProcessHandle: ...

    def job_info(self, handle: ProcessHandle) -> dict[str, Any]: ...

    def job_failure(self, handle: ProcessHandle) -> str | None: ...

    def forward_job_port(self, handle: ProcessHandle, port: int) -> int: ...


class RunsPython(Protocol):
    """Anything that says what ``{python}`` means on it (every `Host`)."""

    python: str


def expand_argv(argv: Sequence[str], host: RunsPython) -> list[str]:
    """Return `argv` with every `{python}` (whole item or inside an item) replaced by `host.python`."""
    return [str(a).replace("{python}", host.python) for a in argv]


class TimeScaleError(HostError):
    """HYPOLOOP_LAB_TIME_SCALE is set to something other than a positive number: a setting of this
    process or of the case's ``host.env``, not a fault of the host it names."""


def parse_time_scale(env: Mapping[str, str]) -> float:
    """The lab's time scale from `env`'s HYPOLOOP_LAB_TIME_SCALE (default 1.0; durations of a lab
    world are multiplied by it). Raises `TimeScaleError` (a `HostError`) if it is not a positive,
    finite number; the message names the variable, its value and what it takes."""
    raw = env.get(TIME_SCALE_ENV, "1.0")
    try:
        scale = float(raw)
    except ValueError:
        scale = math.nan
    if not (scale > 0 and math.isfinite(scale)):
        raise TimeScaleError(
            f"{TIME_SCALE_ENV}={raw!r}: expected a positive number (the lab's clock: a lab world's durations "
            "are multiplied by it, e.g. 0.01; unset or 1 on a real host)"
        )
    return scale


def one_line(text: str, limit: int = 300) -> str:
    """Collapse `text` to one line of at most `limit` characters (for error messages)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def merge_env(base: Mapping[str, str], env: Mapping[str, str] | None) -> dict[str, str]:
    """`base` with `env` (a call's own variables, as strings) laid over it."""
    merged = dict(base)
    if env:
        merged.update({str(k): str(v) for k, v in env.items()})
    return merged


@contextlib.contextmanager
def _start_errors(program: str, verb: str) -> Iterator[None]:
    """Turn an exception of starting `program` into one `HostError` line (not found, not executable,
    cannot `verb` it)."""
    try:
        yield
    except FileNotFoundError:
        raise HostError(f"command not found: {program}") from None
    except PermissionError:
        raise HostError(f"command not executable: {program}") from None
    except OSError as exc:
        raise HostError(f"cannot {verb} {program}: {one_line(str(exc))}") from None


# --- registry of everything spawned, for terminate_all / atexit ----------------------------------

_REGISTRY_LOCK = threading.Lock()
_REGISTRY: dict[int, tuple[LocalHost, ProcessHandle]] = {}


def _handle_of(found: leftovers.LaunchedProcess) -> ProcessHandle:
    age = found.age_s()
    return ProcessHandle(
        pid=found.pid,
        pgid=found.pid,
        argv=found.argv(),
        log_path=found.log_path,
        started_wall=time.time() - age,
        started_monotonic=time.monotonic() - age,
    )


def terminate_all(grace_s: float = 2.0) -> list[int]:
    """Stop every process group spawned by any `LocalHost` of this process that is still running.

    `grace_s` seconds between SIGTERM and SIGKILL. Returns the pids that were still running. Runs at
    interpreter exit (atexit); a CLI that turns SIGTERM into KeyboardInterrupt gets the same cleanup.
    """
    with _REGISTRY_LOCK:
        entries = list(_REGISTRY.values())
    stopped: list[int] = []
    for host, handle in entries:
        if host.is_alive(handle) or local_procs.group_alive(handle.pgid):
            stopped.append(handle.pid)
        host.terminate(handle, grace_s=grace_s)
    return stopped


atexit.register(terminate_all)


class LocalHost:
    """This machine, driven by `subprocess`.

    Host environment: `os.environ` overlaid with the constructor's `env`, except that keys already set
    in `os.environ` win (so a test or user can override e.g. HYPOLOOP_LAB_TIME_SCALE). Per-call `env`
    mappings are merged over the host environment. `time_scale` is HYPOLOOP_LAB_TIME_SCALE of the host
    environment (default 1.0). `{python}` expands to `sys.executable`.

    Raises `HostError` if HYPOLOOP_LAB_TIME_SCALE is not a positive number.
    """

    name: str
    python: str
    time_scale: float

    def __init__(self, env: Mapping[str, str] | None = None, *, root: str | None = None) -> None:
        self.name = "local"
        self.python = sys.executable
        self._extra_env = {str(k): str(v) for k, v in (env or {}).items()}
        self._root = root
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._ports_handed_out: set[int] = set()
        self.time_scale = parse_time_scale(self.host_env())

    # -- environment ------------------------------------------------------------------------------

    def host_env(self) -> dict[str, str]:
        """The host environment: constructor env overlaid by `os.environ` (process env wins)."""
        return {**self._extra_env, **os.environ}

    # -- commands ---------------------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """Run `argv` to completion in its own process group; capture stdout/stderr as text.

        `timeout` in seconds. Any process the command left behind in its group is killed afterwards.
        Raises `HostError` if the command is not found or not executable, `CommandTimeout` (a
        `HostError`) if it exceeds `timeout` — its whole process group is then SIGKILLed.
        """
        cmd = expand_argv(argv, self)
        if not cmd:
            raise HostError("empty command")
        start = time.monotonic()
        with _start_errors(cmd[0], "run"):
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=merge_env(self.host_env(), env),
                start_new_session=True,
            )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            local_procs.signal_group(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=5.0)
            except subprocess.TimeoutExpired:
                # A process that escaped the group still holds the pipes; give up on its output.
                proc.kill()
                out, err = b"", b""
            result = CommandResult(
                argv=cmd,
                returncode=proc.returncode if proc.returncode is not None else -9,
                stdout=out.decode("utf-8", "replace"),
                stderr=err.decode("utf-8", "replace"),
                duration_s=time.monotonic() - start,
            )
            raise CommandTimeout(f"command timed out after {timeout:g} s: {cmd[0]}", result) from None
        except BaseException:
            local_procs.signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        # Nothing a short command started may outlive it.
        local_procs.signal_group(proc.pid, signal.SIGKILL)
        return CommandResult(
            argv=cmd,
            returncode=proc.returncode,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            duration_s=time.monotonic() - start,
        )

    def spawn(
        self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
    ) -> ProcessHandle:
        """Start `argv` detached in a new session/process group; stdout+stderr go to `log_path`.

        The log file is created (with parent directories) or truncated. `env` is merged over the host
        environment; PYTHONUNBUFFERED=1 is added unless set, so a Python server's lines reach the file
        as they are printed. Raises `DiskFull` (a `HostError`) when the log's disk has less than
        `MIN_FREE_BYTES` free, `HostError` if the command is not found or cannot start.
        """
        cmd = expand_argv(argv, self)
        if not cmd:
            raise HostError("empty command")
        path = os.path.abspath(log_path)
        merged = merge_env(self.host_env(), env)
        merged.setdefault("PYTHONUNBUFFERED", "1")
        # In the server's environment from its first instruction: a later process finds it by its log
        # (resume adopts it) or as an orphan, whenever this process dies (tools/leftovers.py).
        merged[leftovers.LAUNCH_LOG_ENV] = path
        merged[leftovers.ORCHESTRATOR_ENV] = leftovers.orchestrator_marker()
        log = self._open_log(path)
        self._reap()
        with log, _start_errors(cmd[0], "start"):
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=merged,
                start_new_session=True,
                close_fds=True,
                umask=SERVER_UMASK,
            )
        handle = ProcessHandle(
            pid=proc.pid,
            pgid=proc.pid,
            argv=cmd,
            log_path=path,
            started_wall=time.time(),
            started_monotonic=time.monotonic(),
        )
        with self._lock:
            self._procs[proc.pid] = proc
        with _REGISTRY_LOCK:
            _REGISTRY[proc.pid] = (self, handle)
        return handle

    def _open_log(self, path: str) -> BinaryIO:
        """Create (with its folder) or truncate the server log at `path`, for writing. Raises `DiskFull`
        when its disk has less than `MIN_FREE_BYTES` free, `HostError` when it cannot be made."""
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError as exc:
            raise HostError(f"cannot create the folder of log file {path}: {one_line(str(exc))}") from None
        free = self.free_bytes(os.path.dirname(path))
        if free is not None and free < MIN_FREE_BYTES:
            raise disk_full_error(self.name, os.path.dirname(path), free)
        try:
            return open(path, "wb")  # noqa: SIM115 - handed to the child, closed by the caller
        except OSError as exc:
            raise HostError(f"cannot open log file {path}: {one_line(str(exc))}") from None

    def read_from(self, path: str, offset: int, max_bytes: int = 1 << 20) -> bytes:
        """Up to `max_bytes` bytes of `path` starting at byte `offset`; b"" if nothing new or missing."""
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(max_bytes)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise HostError(f"cannot read {path}: {one_line(str(exc))}") from None

    def read_text(self, path: str, max_bytes: int = 4 << 20) -> str | None:
        """The first `max_bytes` bytes of the file at `path` as text (UTF-8, undecodable bytes
        replaced); None when it is missing, a directory or unreadable (e.g. an installed source file
        named by a traceback that is not on this host)."""
        try:
            with open(path, "rb") as f:
                return f.read(max_bytes).decode("utf-8", "replace")
        except OSError:
            return None

    # -- liveness ---------------------------------------------------------------------------------

    def _reap(self) -> None:
        """Collect exit statuses of spawned children that ended (no zombies left behind)."""
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            proc.poll()

    def is_alive(self, handle: ProcessHandle) -> bool:
        """True while the spawned process (the group leader) runs; a zombie counts as exited."""
        proc = self._procs.get(handle.pid)
        if proc is not None:
            return proc.poll() is None
        return local_procs.pid_alive(handle.pid)

    def exit_code(self, handle: ProcessHandle) -> int | None:
        """The leader's exit code (negative = killed by that signal), None while running or unknown."""
        proc = self._procs.get(handle.pid)
        if proc is None:
            return None
        return proc.poll()

    def terminate(self, handle: ProcessHandle, grace_s: float = 10.0) -> bool:
        """Stop the whole process group: SIGTERM, wait up to `grace_s` seconds, SIGKILL, verify.

        Descendants that left the group (setsid) are signalled too. Reaps the leader. Returns True when
        no process of the group (and no such descendant) remains, False if something survived 5 s
        after SIGKILL. Safe to call repeatedly and on a process that already exited.
        """
        strays = local_procs.descendants_outside_group(handle.pid, handle.pgid)
        proc = self._procs.get(handle.pid)

        def gone() -> bool:
            if proc is not None:
                proc.poll()
            return not local_procs.group_alive(handle.pgid) and not any(local_procs.pid_alive(p) for p in strays)

        if not gone():
            local_procs.signal_group(handle.pgid, signal.SIGTERM)
            for pid in strays:
                local_procs.signal_pid(pid, signal.SIGTERM)
            deadline = time.monotonic() + max(0.0, grace_s)
            while not gone() and time.monotonic() < deadline:
                time.sleep(0.02)
        if not gone():
            strays += [p for p in local_procs.descendants_outside_group(handle.pid, handle.pgid) if p not in strays]
            local_procs.signal_group(handle.pgid, signal.SIGKILL)
            for pid in strays:
                local_procs.signal_pid(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while not gone() and time.monotonic() < deadline:
                time.sleep(0.02)
        ok = gone()
        if ok:
            with _REGISTRY_LOCK:
                _REGISTRY.pop(handle.pid, None)
        return ok

    # -- network and files ------------------------------------------------------------------------

    def forward_port(self, port: int) -> int:
        """A port on this machine that reaches `port` on the host; locally the same port."""
        return port

    def free_port(self) -> int:
        """A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range so no
        client connection takes it before the server binds (`tools.ports.local_free_port`)."""
        return ports.local_free_port(self._ports_handed_out)

    def workdir(self, run_id: str) -> str:
        """A per-run directory (created): `<root>/<run_id>`, root defaulting to ./.hypoloop/runs.

        Raises `HostError` if `run_id` is not a plain name or the directory cannot be created.
        """
        if not run_id or "/" in run_id or run_id in (".", "..") or "\x00" in run_id:
            raise HostError(f"invalid run id {run_id!r}: expected a plain name")
        root = self._root or os.path.join(os.getcwd(), ".hypoloop", "runs")
        path = os.path.join(os.path.abspath(root), run_id)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise HostError(f"cannot create work dir {path}: {one_line(str(exc))}") from None
        return path

    def free_bytes(self, path: str) -> int | None:
        """Bytes an unprivileged writer may still use on the filesystem holding `path` (statvfs
        ``f_bavail * f_frsize``); None when it cannot be told (`path` missing)."""
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return int(st.f_bavail * st.f_frsize)

    # -- servers of earlier processes (tools/leftovers.py) ------------------------------------------

    def find_launch(self, log_path: str) -> ProcessHandle | None:
        """The live server an earlier process launched with this log (even one killed before it could
        record the launch), or None."""
        found = leftovers.find_launch(log_path)
        return _handle_of(found) if found is not None else None

    def claim(self, handle: ProcessHandle) -> None:
        """Take over looking after a server an earlier process launched (it is no orphan any more)."""
        leftovers.claim(handle.log_path)

    def find_orphans(self) -> list[leftovers.Orphan]:
        """Servers launched under this host's runs folder whose hypoloop process is gone (``pid_file`` is
        ``LOG.pid``, so its folder names the run). Empty without a runs folder (``root``)."""
        if not self._root:
            return []
        out = []
        for p in leftovers.orphans_under(self._root):
            argv = p.argv()
            orch = p.orchestrator.partition(":")[0]
            out.append(
                leftovers.Orphan(
                    pid_file=f"{p.log_path}.pid",
                    log_path=p.log_path,
                    pgid=p.pid,
                    pid=p.pid,
                    starttime=p.starttime,
                    argv=argv,
                    port=leftovers.port_from_argv(argv),
                    client=socket.gethostname(),
                    client_pid=int(orch) if orch.isdigit() else None,
                    heartbeat_age_s=0.0,
                    why=f"the hypoloop process that launched it (pid {orch or '?'}) is gone",
                )
            )
        return out

    def stop_orphan(self, orphan: Any, grace_s: float = 10.0) -> bool:
        """Stop an orphaned server's process group (TERM, grace, KILL) and verify it is gone."""
        if leftovers.proc_starttime(orphan.pgid) not in (None, orphan.starttime):
            return True  # that pid belongs to another process now: the orphan is gone
        handle = ProcessHandle(
            pid=orphan.pgid, pgid=orphan.pgid, argv=list(orphan.argv), log_path=orphan.log_path,
            started_wall=0.0, started_monotonic=0.0,
        )
        return self.terminate(handle, grace_s=grace_s)

    def close(self) -> None:
        """Stop every process this host spawned that still runs (2 s grace) and forget them."""
        with _REGISTRY_LOCK:
            mine = [h for (host, h) in _REGISTRY.values() if host is self]
        for handle in mine:
            self.terminate(handle, grace_s=2.0)
        self._reap()
