"""SlurmHost: experiments as Slurm jobs, behind the same `Host` protocol as `LocalHost` and `SSHHost`.

Targets: ``slurm://PARTITION`` runs the Slurm commands (sbatch, squeue, scontrol, scancel, srun) on this
machine; ``slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION`` runs the same commands on a login node over SSH
(through `tools.ssh.SSHHost`, with all its options). Either way a *shell* host (a `LocalHost` or an
`SSHHost`) runs the commands and reads files; the cluster's compute nodes run the servers.

What each `Host` operation means here, and why:

- `spawn` submits one batch job: ``sbatch --parsable --partition P --job-name hypoloop.RUN.EXP
  --comment hypoloop:run=RUN;client=HOST;pid=PID --output LOG --no-requeue [job options] WRAPPER ARGV...``.
  WRAPPER is a fixed two-line ``/bin/sh`` script (``exec "$@"``) written beside the log, so the launch
  command travels as separate arguments and is never parsed by a shell; the job inherits the submission
  environment (``--export=ALL``) with the experiment's variables added. Job options come from the
  case's ``[host.slurm]`` table (`SlurmOptions`): GPUs as ``--gres=gpu[:TYPE]:N``, nodes, time limit,
  account, and extra sbatch arguments as a list (each one argument, never a shell string). `spawn` returns
  as soon as the job id is known, so the launch is recorded before anything waits on the queue.
- `wait_started` (called by `tools.server.ServerSession` before it waits for the ready line) waits while
  the job is pending: the handle's start becomes the job's start, so ready timeouts, stall detection
  and host-seconds count from the moment the job runs, not from submission. A job pending longer than
  `pending_limit_s` is cancelled and reported with its partition and the scheduler's reason
  (`JobPending`, which ends the run: the cluster cannot give the resources now).
- The log is the job's output file, read by byte offset through the shell host (it lives in the per-run
  work dir, which must be on storage both the submit host and the compute nodes see, as a cluster's
  home directories usually are).
- Liveness and exit codes come from the scheduler (``scontrol show job -o``; ``sacct`` once the
  controller has forgotten the job), asked at most every `poll_s` seconds per job.
- `terminate` is ``scancel --signal=TERM`` (the server's own graceful stop), then, after `grace_s`,
  ``scancel`` (Slurm's TERM, KillWait, KILL), verified by polling the job state until it has ended.
- `forward_port` reaches the server on the compute node: directly when the node's address is this
  machine, through a local TCP relay otherwise (``slurm://``), or through the login node with SSH
  ``direct-tcpip`` (``slurm+ssh://``). The server listens on `listen_host` (default ``0.0.0.0``: a
  compute node's loopback is unreachable from elsewhere).
- `job_failure` tells an infrastructure end (cancelled by someone else, node failure, preemption, time
  limit, boot failure, out of memory in the allocation) from the server's own exit: the former is no
  evidence about the deployment (`SchedulerError`, an ``infra_error`` outcome).
- `find_orphans` lists jobs named ``hypoloop.*`` whose orchestrator (``client`` and ``pid`` in the job's
  comment) is gone from this machine; `stop_orphan` cancels one, verified.

Sources: the Slurm 22.05 man pages of sbatch(1) (``--parsable`` prints ``JOBID[;CLUSTER]``; a batch
script's arguments follow it), scontrol(1) (``show job -o``: one line of KEY=VALUE), squeue(1) (``%k``
comment, ``%r`` reason) and the job state codes in squeue(1) "JOB STATE CODES".
"""

from __future__ import annotations

import contextlib
import getpass
import os
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.host import (
    MIN_FREE_BYTES,
    CommandResult,
    Host,
    HostError,
    HostUnreachable,
    LocalHost,
    ProcessHandle,
    SchedulerError,
    disk_full_error,
)
from tools.local_procs import pid_alive
from tools.relay import LocalListener, pump
from tools.sanitize import without_credentials
from tools.ssh import SSHHost, parse_target

__all__ = [
    "JobPending",
    "SlurmHost",
    "SlurmOptions",
    "SlurmOrphan",
    "SlurmTarget",
    "is_slurm_target",
    "parse_slurm_target",
]

JOB_PREFIX = "hypoloop."
_PARTITION = re.compile(r"^[A-Za-z0-9_.+-]+$")
_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
#: Job states in which the job has not ended (squeue(1), JOB STATE CODES). COMPLETING counts as ended:
#: the batch script has exited and Slurm is only cleaning up.
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
    }
)
#: Ends that say nothing about the server: the scheduler or an administrator ended the job, or its node,
#: allocation or time limit failed it. (FAILED = the batch script exited non-zero: the server's own exit.)
INFRA_STATES = frozenset(
    {"CANCELLED", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "TIMEOUT", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"}
)
# Options hypoloop sets itself; given in extra_args they would break the job's bookkeeping.
_OWNED = (
    "--output",
    "--error",
    "--input",
    "--job-name",
    "--comment",
    "--parsable",
    "--wrap",
    "--partition",
    "--chdir",
    "--array",
    "--wait",
    "--test-only",
    "--export",
    "--open-mode",
    "--requeue",
    "--no-requeue",
    "--gres",
    "--gpus",
    "--nodes",
    "--time",
    "--account",
    "--hold",
    "--help",
    "--usage",
    "--version",
)
_OWNED_SHORT = {
    "-o": "--output",
    "-e": "--error",
    "-i": "--input",
    "-J": "--job-name",
    "-p": "--partition",
    "-D": "--chdir",
    "-a": "--array",
    "-W": "--wait",
    "-N": "--nodes",
    "-t": "--time",
    "-A": "--account",
    "-G": "--gpus",
    "-H": "--hold",
    "-h": "--help",
    "-V": "--version",
}


class JobPending(HostUnreachable):
    """A job waited in the queue longer than the limit; it was cancelled. The message names the job,
    the partition and the scheduler's reason (e.g. ``Resources``, ``Priority``, ``QOSMaxGRESPerUser``)."""


class SlurmOptions(BaseModel):
    """What each experiment's job asks the scheduler for (the case's ``[host.slurm]`` table).

    `gpus`: GPUs per node, as ``--gres=gpu:N`` (``gpu:TYPE:N`` with `gpu_type`); `nodes`: ``--nodes``
    (the launch command runs once, on the first node: a multi-node launcher starts its other ranks
    itself); `time_limit`: ``--time`` in a Slurm time format (``MM``, ``HH:MM:SS``, ``D-HH``...);
    `account`: ``--account``; `extra_args`: more sbatch options, one argument per item
    (``["--qos=high", "--constraint=h100"]``), never a shell string. `pending_limit_s`: how long a job
    may wait in the queue (seconds) before it is cancelled and the run ends with the reason;
    `poll_s`: how often a job's state is asked (seconds); `listen_host`: the address the server binds on
    the compute node.
    """

    model_config = ConfigDict(extra="forbid")

    gpus: int | None = Field(default=None, ge=0)
    gpu_type: str | None = None
    nodes: int = Field(default=1, ge=1)
    time_limit: str | None = None
    account: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    pending_limit_s: float = Field(default=1800.0, gt=0)
    poll_s: float = Field(default=0.5, gt=0)
    listen_host: str = "0.0.0.0"

    @field_validator("gpu_type", "account")
    @classmethod
    def _word(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", v):
            raise ValueError(f"{v!r}: expected one word of letters, digits, '_', '.', '+' or '-'")
        return v

    @field_validator("time_limit")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE", v):
            raise ValueError(f"{v!r}: expected a Slurm time limit such as 30, 02:00:00 or 1-12")
        return v

    @field_validator("listen_host")
    @classmethod
    def _listen(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]+", v):
            raise ValueError(f"{v!r}: expected an address such as 0.0.0.0")
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        for item in v:
            if not item.startswith("-"):
                raise ValueError(
                    f"{item!r}: each item is one sbatch option starting with '-' (write '--qos=high', "
                    "not 'qos high'; a value goes in the same item after '=')"
                )
            if any(c in item for c in "\n\r\x00"):
                raise ValueError(f"{item!r}: an option has no line breaks")
            name = item.split("=", 1)[0]
            if name.startswith("--"):
                # sbatch takes any unambiguous prefix of a long option (--out for --output)
                owned = next((o for o in _OWNED if o == name or (len(name) > 4 and o.startswith(name))), None)
            else:
                owned = _OWNED_SHORT.get(name[:2])
            if owned is not None:
                raise ValueError(
                    f"{item!r}: {owned} is set by hypoloop (GPUs, nodes, time limit and account have their "
                    "own fields: gpus, gpu_type, nodes, time_limit, account)"
                )
        return v

    def sbatch_args(self) -> list[str]:
        """The job's resource options as sbatch arguments (one list item per argument)."""
        args = [f"--nodes={self.nodes}"]
        if self.gpus:
            args.append(
                f"--gres=gpu:{self.gpu_type}:{self.gpus}" if self.gpu_type else f"--gres=gpu:{self.gpus}"
            )
        if self.time_limit:
            args.append(f"--time={self.time_limit}")
        if self.account:
            args.append(f"--account={self.account}")
        return args + list(self.extra_args)


class SlurmTarget(BaseModel):
    """A parsed Slurm target: the partition, and the login node's ``ssh://`` target (None: this machine)."""

    partition: str
    login: str | None = None


def is_slurm_target(target: str) -> bool:
    """True for ``slurm://...`` and ``slurm+ssh://...``."""
    return target.startswith(("slurm://", "slurm+ssh://"))


def parse_slurm_target(target: str) -> SlurmTarget:
    """Parse ``slurm://PARTITION`` or ``slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION``.

    Raises `HostError` with one line naming what is wrong.
    """
    shown = without_credentials(target)  # a password is refused (parse_target), never echoed
    if target.startswith("slurm://"):
        part = target[len("slurm://") :].strip("/")
        if not part or not _PARTITION.match(part):
            raise HostError(f"{shown}: expected slurm://PARTITION (a partition name such as gpu)")
        return SlurmTarget(partition=part)
    if target.startswith("slurm+ssh://"):
        parts = urlsplit(target)
        part = parts.path.strip("/")
        if not part or not _PARTITION.match(part) or parts.query or parts.fragment:
            raise HostError(f"{shown}: expected slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION")
        login = f"ssh://{parts.netloc}"
        try:
            parse_target(login)
        except HostError as exc:
            raise HostError(f"{shown}: {str(exc).split(': ', 1)[-1]}") from None
        return SlurmTarget(partition=part, login=login)
    raise HostError(f"{shown}: expected slurm://PARTITION or slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION")


class SlurmOrphan(BaseModel):
    """A job of an earlier hypoloop run that is still queued or running while its orchestrator is gone.

    `pgid` repeats the job id and `log_path` the job's output file, so the orphan notices shared with
    SSH hosts read the same; `run_id` is the run it belongs to.
    """

    job_id: int
    pgid: int
    run_id: str
    name: str
    state: str
    partition: str
    node: str | None = None
    log_path: str
    client: str | None = None
    client_pid: int | None = None
    why: str


@dataclass
class _Job:
    """What this host knows about one job."""

    handle: ProcessHandle
    partition: str
    submitted_wall: float
    started_wall: float | None = None
    ended_wall: float | None = None
    state: str = "PENDING"
    reason: str | None = None
    node: str | None = None
    exit_code: int | None = None
    checked: float = 0.0
    cancelled_by_us: bool = False
    port: int | None = None
    ended_sent: bool = False


def _slurm_time(text: str | None) -> float | None:
    """``2026-12-01T15:58:22`` (the controller's local time) as epoch seconds; None for Unknown/None."""
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def _exit_code(text: str | None) -> int | None:
    """Slurm's ``EXIT:SIGNAL`` as one code like Popen's: the exit status, or minus the signal."""
    if not text or ":" not in text:
        return None
    code, _, sig = text.partition(":")
    try:
        c, s = int(code), int(sig)
    except ValueError:
        return None
    return -s if s else c


def _fields(line: str) -> dict[str, str]:
    """One ``scontrol -o`` line as a dict (values never contain spaces in the fields read here)."""
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


class _Relay:
    """A local listening socket whose connections are relayed to (`host`, `port`) over TCP."""

    def __init__(self, host: str, port: int) -> None:
        self.dest = (host, port)
        self._listener = LocalListener(f"slurm-relay-{port}", self._serve)
        self.local_port = self._listener.local_port
        self._closed = self._listener.closed

    def _serve(self, client: socket.socket, peer: tuple[str, int]) -> None:
        try:
            upstream = socket.create_connection(self.dest, timeout=10.0)
        except OSError:
            client.close()
            return
        try:
            pump(client, upstream, self._closed)
        except OSError:
            pass
        finally:
            upstream.close()
            client.close()

    def close(self) -> None:
        self._listener.close()


_WRAPPER = "hypoloop-job.sh"
# Written by `sh -c` with the path as $1: the script itself is a constant, nothing is interpolated.
_WRITE_WRAPPER = (
    "umask 022; [ -s \"$1\" ] || { printf '%s\\n' '#!/bin/sh' 'exec \"$@\"' > \"$1.$$\" && "
    'chmod +x "$1.$$" && mv -f "$1.$$" "$1"; }'
)


class SlurmHost:
    """A Slurm partition reached from this machine or a login node (see the module docstring).

    `target` is ``slurm://PARTITION`` or ``slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION``; `env` the host
    environment (for the commands and, through ``--export=ALL``, the jobs); `options` the job's
    resources; `ssh` the `tools.ssh.SSHOptions` for a login node; `local_root` where per-run work dirs go
    for ``slurm://`` (shared storage); `on_event(type, data)` hears ``slurm.job_submitted``,
    ``slurm.job_started``, ``slurm.job_pending`` and ``slurm.job_ended`` (with submitted/started/ended
    wall-clock times) and the SSH connection notices.

    Checks at once that the partition exists (``sinfo``). Raises `HostError` with one line: no Slurm
    commands there, unknown partition, unreachable login node.
    """

    name: str
    python: str
    time_scale: float
    listen_host: str

    def __init__(
        self,
        target: str,
        *,
        env: Mapping[str, str] | None = None,
        options: SlurmOptions | None = None,
        ssh: Any = None,
        local_root: str | None = None,
        on_event: Callable[[str, dict[str, Any]], object] | None = None,
    ) -> None:
        self.target = parse_slurm_target(target)
        self.options = options or SlurmOptions()
        self.name = target.rstrip("/")
        self.partition = self.target.partition
        self.on_event = on_event
        self.listen_host = self.options.listen_host
        self.shell: Host
        if self.target.login is None:
            self.shell = LocalHost(env=env, root=local_root)
        else:
            self.shell = SSHHost(self.target.login, env=env, options=ssh, on_event=on_event)
        self.python = self.shell.python
        self.time_scale = self.shell.time_scale
        self._jobs: dict[int, _Job] = {}
        self._lock = threading.Lock()
        self._relays: dict[tuple[str, int], _Relay] = {}
        self._node_addr: dict[str, str] = {}
        self._ports_handed_out: set[int] = set()
        self._closed = False
        self._client = f"{socket.gethostname()}"
        try:
            self._check_partition()
        except BaseException:
            self.shell.close()
            raise

    # -- helpers ---------------------------------------------------------------------------------

    def _emit(self, type_: str, data: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(type_, data)

    def _slurm(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True) -> CommandResult:
        """Run a Slurm client command through the shell host; a failure is one `HostError` line."""
        try:
            r = self.shell.run(list(argv), timeout=timeout)
        except HostError as exc:
            if "command not found" in str(exc):
                raise HostError(
                    f"{self.name}: {argv[0]} not found on {self.shell.name} (is Slurm's client installed "
                    "there, and SLURM_CONF set if the cluster needs it?)"
                ) from None
            raise
        if check and r.returncode != 0:
            msg = " ".join((r.stderr or r.stdout).split())[:300] or f"exit code {r.returncode}"
            raise SchedulerError(f"{self.name}: {argv[0]} failed: {msg}")
        return r

    def _check_partition(self) -> None:
        r = self._slurm(["sinfo", "-h", "-p", self.partition, "-o", "%P|%a|%D|%G"], check=False)
        if r.returncode != 0:
            msg = " ".join((r.stderr or r.stdout).split())[:300]
            raise HostError(f"{self.name}: cannot reach the Slurm controller: {msg}")
        if not r.stdout.strip():
            known = self._slurm(["sinfo", "-h", "-o", "%R"], check=False).stdout.split()
            raise HostError(
                f"{self.name}: no partition {self.partition!r} (partitions: {', '.join(sorted(set(known))) or 'none'})"
            )

    def _srun_args(self, name: str) -> list[str]:
        return [
            "srun",
            f"--partition={self.partition}",
            "--quiet",
            f"--job-name={name}",
            *self.options.sbatch_args(),
        ]

    def _queue_position(self, job_id: str) -> tuple[int, int] | None:
        """(1-based place of the job among the partition's pending jobs in the scheduler's priority
        order, how many are pending), or None when it is not pending (squeue(1): ``-t PENDING``,
        ``--sort=-p,i``)."""
        r = self._slurm(["squeue", "-h", "-p", self.partition, "-t", "PENDING", "--sort=-p,i", "-o", "%i"],
                        check=False)
        ids = r.stdout.split()
        return (ids.index(job_id) + 1, len(ids)) if job_id in ids else None

    def _pending_job(self, name: str) -> tuple[str, str] | None:
        """(job id, the scheduler's reason) of the pending job named ``name``; None when it is not pending."""
        r = self._slurm(["squeue", "-h", "-n", name, "-t", "PENDING", "-o", "%i|%r"], check=False)
        for line in r.stdout.splitlines():
            job_id, _, reason = line.strip().partition("|")
            if job_id:
                return job_id, reason
        return None

    def _cancel_named(self, name: str) -> None:
        """Cancel every job of this user named ``name`` (a short command's allocation); never raises."""
        with contextlib.suppress(HostError):
            self._slurm(["scancel", "--name", name, "--user", getpass.getuser()], check=False)

    def _pending_note(self, job_id: str, reason: str | None, waited: float, what: str) -> None:
        """Say what a pending job waits for: the reason, its place in the queue, how long so far."""
        place = self._queue_position(job_id)
        self._emit(
            "slurm.job_pending",
            {
                "job_id": int(job_id.split("_")[0]) if job_id.split("_")[0].isdigit() else 0,
                "partition": self.partition,
                "reason": reason,
                "waited_s": round(waited, 3),
                "position": place[0] if place else None,
                "pending_jobs": place[1] if place else None,
                "limit_s": self.options.pending_limit_s,
                "what": what,
            },
        )

    # -- commands --------------------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """Run `argv` on a compute node of the partition with ``srun`` (with the job's resources, so
        ``nvidia-smi`` and ``launch_server --help`` see what an experiment will), to completion within
        `timeout` seconds (queue time included). `env` is added to the job's environment. While its
        allocation is pending, ``slurm.job_pending`` says why (the scheduler's reason, the place in the
        queue), again every 30 s; pending past `pending_limit_s` the allocation is cancelled, and so it is
        when this call is interrupted.

        Raises `HostError` if srun or the command is missing, `CommandTimeout` on timeout, `JobPending`
        past the pending limit (the cluster's state, never the case's).
        """
        name = f"{JOB_PREFIX}command.{os.getpid()}.{random.getrandbits(32):08x}"
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["result"] = self.shell.run([*self._srun_args(name), *argv], timeout=timeout, env=env)
            except BaseException as exc:  # handed to the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=call, name=f"srun-{argv[0]}", daemon=True)
        started = time.monotonic()
        worker.start()
        reported: tuple[str | None, int] | None = None
        try:
            while True:
                worker.join(max(0.5, self.options.poll_s))
                if not worker.is_alive():
                    break
                pending = self._pending_job(name)
                if pending is None:
                    continue
                job_id, reason = pending
                waited = time.monotonic() - started
                note = (reason, int(waited // 30))  # a new reason, or every 30 s of waiting
                if note != reported:
                    reported = note
                    self._pending_note(job_id, reason, waited, f"srun {argv[0]}")
                if waited >= self.options.pending_limit_s:
                    self._cancel_named(name)
                    worker.join(10.0)
                    raise JobPending(
                        f"srun {argv[0]} (job {job_id}) pending for {waited:.0f} s in partition {self.partition} "
                        f"(reason: {reason or 'none given'}); cancelled (the cluster cannot run it now; "
                        "pending_limit_s in [host.slurm] sets how long to wait)"
                    )
        except BaseException:
            self._cancel_named(name)  # given up or interrupted: nothing of ours stays in the queue
            raise
        if "error" in box:
            raise box["error"]
        r: CommandResult = box["result"]
        if r.returncode != 0 and "execve(): " in r.stderr and "No such file" in r.stderr:
            raise HostError(f"command not found: {argv[0]} (on a node of {self.name})")
        return r

    def workdir(self, run_id: str) -> str:
        """The per-run directory on the submit side's storage (see the module docstring); created."""
        return self.shell.workdir(run_id)

    def free_bytes(self, path: str) -> int | None:
        """Free bytes of the submit side's filesystem holding `path` (where job output goes)."""
        return self.shell.free_bytes(path)

    def read_from(self, path: str, offset: int, max_bytes: int = 1 << 20) -> bytes:
        """Up to `max_bytes` of `path` (a job's output file) from byte `offset`; b"" if nothing new."""
        return self.shell.read_from(path, offset, max_bytes)

    def read_text(self, path: str, max_bytes: int = 4 << 20) -> str | None:
        """The file at `path` as text, read on the submit side (None when missing or unreadable).

        Used for installed-source files named by a traceback: clusters install software on storage or
        images the login and compute nodes share, so the submit side's copy is the job's copy. Where it
        is not, the reader reports the frame as missing or differing, never a wrong line."""
        return self.shell.read_text(path, max_bytes)

    # -- jobs ------------------------------------------------------------------------------------

    def spawn(
        self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
    ) -> ProcessHandle:
        """Submit `argv` as one batch job whose output (stdout and stderr) goes to `log_path`.

        Returns as soon as the job id is known (the handle's `pid` and `pgid` are the job id, its start
        the submission until `wait_started`). The run id is the log's folder name (the per-run work dir)
        and tags the job (name and comment). Raises `SchedulerError` when sbatch refuses the job (e.g.
        an unknown gres or account), `DiskFull` when the log's folder has less than `MIN_FREE_BYTES` free,
        `HostError` when the host fails.
        """
        if not argv:
            raise HostError("empty command")
        folder, _, base = log_path.rpartition("/")
        run_id = folder.rpartition("/")[2] or "run"
        if not _RUN_ID.match(run_id):
            run_id = "run"
        exp = base.removesuffix(".log")
        free = self.shell.free_bytes(folder)
        if free is not None and free < MIN_FREE_BYTES:
            raise disk_full_error(self.name, folder, free)
        wrapper = f"{folder}/{_WRAPPER}"
        r = self.shell.run(["sh", "-c", _WRITE_WRAPPER, "sh", wrapper], timeout=30.0)
        if r.returncode != 0:
            raise SchedulerError(
                f"cannot write {wrapper} on {self.shell.name}: {' '.join(r.stderr.split())[:200]}"
            )
        job_env = {"PYTHONUNBUFFERED": "1", **dict(env or {})}
        cmd = [
            "sbatch",
            "--parsable",
            f"--partition={self.partition}",
            f"--job-name={JOB_PREFIX}{run_id}.{exp}",
            f"--comment=hypoloop:run={run_id};client={self._client};pid={os.getpid()}",
            f"--output={log_path}",
            "--open-mode=truncate",
            f"--chdir={folder}",
            "--no-requeue",
            "--export=ALL",
            *self.options.sbatch_args(),
            wrapper,
            *argv,
        ]
        submitted = time.time()
        r = self.shell.run(cmd, timeout=60.0, env=job_env)
        if r.returncode != 0:
            msg = " ".join((r.stderr or r.stdout).split())[:300]
            raise SchedulerError(f"{self.name}: sbatch refused the job: {msg}")
        first = r.stdout.strip().split(";")[0]
        if not first.isdigit():
            raise SchedulerError(f"{self.name}: sbatch printed no job id: {r.stdout.strip()[:200]!r}")
        job_id = int(first)
        handle = ProcessHandle(
            pid=job_id,
            pgid=job_id,
            argv=list(argv),
            log_path=log_path,
            started_wall=submitted,
            started_monotonic=time.monotonic() - (time.time() - submitted),
        )
        job = _Job(handle=handle, partition=self.partition, submitted_wall=submitted, port=_port_of(argv))
        with self._lock:
            self._jobs[job_id] = job
        self._emit(
            "slurm.job_submitted",
            {
                "job_id": job_id,
                "partition": self.partition,
                "log": log_path,
                "submitted_wall": submitted,
                "options": self.options.sbatch_args(),
            },
        )
        return handle

    def _job(self, handle: ProcessHandle) -> _Job:
        with self._lock:
            job = self._jobs.get(handle.pid)
            if job is None:  # adopted from an earlier process: its record is the handle
                job = _Job(
                    handle=handle,
                    partition=self.partition,
                    submitted_wall=handle.started_wall,
                    port=_port_of(handle.argv),
                )
                self._jobs[handle.pid] = job
            return job

    def _refresh(self, job: _Job, *, force: bool = False) -> _Job:
        """Ask the scheduler for the job's state (at most every `poll_s` s unless `force`)."""
        now = time.monotonic()
        if not force and now - job.checked < self.options.poll_s:
            return job
        if job.state not in LIVE_STATES and job.state != "COMPLETING" and job.checked:
            return job  # an ended job does not change
        job.checked = now
        r = self._slurm(["scontrol", "show", "job", "-o", str(job.handle.pid)], check=False)
        info = _fields(r.stdout.strip().splitlines()[0]) if r.returncode == 0 and r.stdout.strip() else {}
        if not info:
            info = self._sacct(job.handle.pid)
        if not info:
            if job.state in LIVE_STATES:
                job.state, job.reason = "UNKNOWN", "the scheduler no longer knows the job"
            return job
        state = info.get("JobState", "UNKNOWN").split()[0]
        job.state = state
        job.reason = info.get("Reason")
        node = info.get("BatchHost") or info.get("NodeList")
        if node and node not in ("(null)", "None"):
            job.node = node
        started = _slurm_time(info.get("StartTime"))
        if state not in ("PENDING",) and started is not None and job.started_wall is None:
            job.started_wall = started
        if state not in LIVE_STATES:
            job.ended_wall = job.ended_wall or _slurm_time(info.get("EndTime")) or time.time()
            job.exit_code = _exit_code(info.get("ExitCode"))
        return job

    def _sacct(self, job_id: int) -> dict[str, str]:
        """The job from Slurm's accounting (sacct) once the controller has forgotten it; {} if none."""
        try:
            r = self._slurm(
                [
                    "sacct",
                    "-n",
                    "-P",
                    "-X",
                    "-j",
                    str(job_id),
                    "-o",
                    "JobID,State,ExitCode,Start,End,NodeList,Reason",
                ],
                check=False,
            )
        except HostError:
            return {}
        for line in r.stdout.splitlines():
            cols = line.split("|")
            if len(cols) >= 7 and cols[0] == str(job_id):
                return {
                    "JobState": cols[1].split()[0],
                    "ExitCode": cols[2],
                    "StartTime": cols[3],
                    "EndTime": cols[4],
                    "NodeList": cols[5],
                    "Reason": cols[6],
                }
        return {}

    def job_info(self, handle: ProcessHandle) -> dict[str, Any]:
        """The job as the transcript records it: id, partition, node, state, reason, submitted/started/
        ended wall-clock times (epoch seconds) and the queue time in seconds."""
        job = self._refresh(self._job(handle))
        queued = (job.started_wall - job.submitted_wall) if job.started_wall else None
        return {
            "job_id": handle.pid,
            "partition": job.partition,
            "node": job.node,
            "state": job.state,
            "reason": job.reason,
            "submitted_wall": round(job.submitted_wall, 3),
            "started_wall": round(job.started_wall, 3) if job.started_wall else None,
            "ended_wall": round(job.ended_wall, 3) if job.ended_wall else None,
            "queued_s": round(max(0.0, queued), 3) if queued is not None else None,
            "exit_code": job.exit_code,
        }

    def wait_started(self, handle: ProcessHandle, *, limit_s: float | None = None) -> ProcessHandle:
        """Wait while the job is pending; return the handle with the job's start as its start.

        A job that already ended is returned as it is (the session then reads its log and exit). A job
        pending for `limit_s` seconds (default `pending_limit_s`, counted from submission) is cancelled:
        raises `JobPending` naming the partition and the scheduler's reason.
        """
        job = self._job(handle)
        limit = self.options.pending_limit_s if limit_s is None else limit_s
        reported: tuple[str | None, int] | None = None
        while True:
            self._refresh(job, force=True)
            if job.state != "PENDING" and job.state != "CONFIGURING":
                break
            waited = time.time() - job.submitted_wall
            note = (job.reason, int(waited // 30))  # a new reason, or every 30 s of waiting
            if note != reported:
                reported = note
                self._pending_note(str(handle.pid), job.reason, waited, "the experiment's job")
            if waited >= limit:
                self._cancel(job)
                raise JobPending(
                    f"job {handle.pid} pending for {waited:.0f} s in partition {job.partition} "
                    f"(reason: {job.reason or 'none given'}); cancelled"
                )
            time.sleep(min(0.2, self.options.poll_s))
        # The scheduler's StartTime has one-second resolution; the first time it was seen running here
        # is never earlier than the job's real start, so the later of the two bounds the queue time.
        started = max(job.started_wall or time.time(), job.submitted_wall)
        job.started_wall = started
        if job.state in LIVE_STATES:  # (a job cancelled while queued never started)
            self._emit(
                "slurm.job_started",
                {
                    "job_id": handle.pid,
                    "partition": job.partition,
                    "node": job.node,
                    "submitted_wall": round(job.submitted_wall, 3),
                    "started_wall": round(started, 3),
                    "queued_s": round(started - job.submitted_wall, 3),
                },
            )
        new = handle.model_copy(
            update={
                "started_wall": started,
                "started_monotonic": time.monotonic() - max(0.0, time.time() - started),
            }
        )
        job.handle = new
        return new

    def is_alive(self, handle: ProcessHandle) -> bool:
        """True while the job is queued or running (scheduler state; asked at most every `poll_s` s)."""
        return self._refresh(self._job(handle)).state in LIVE_STATES

    def exit_code(self, handle: ProcessHandle) -> int | None:
        """The batch script's exit code (minus the signal that killed it), None while the job runs."""
        job = self._refresh(self._job(handle))
        return None if job.state in LIVE_STATES else job.exit_code

    def job_failure(self, handle: ProcessHandle) -> str | None:
        """Why the job ended for a reason that is no evidence about the server (one line), else None:
        cancelled by someone else, node failure, preemption, time limit, out of memory, boot failure."""
        job = self._refresh(self._job(handle), force=True)
        if job.cancelled_by_us:
            return None  # our own stop, whatever state it left
        # FAILED is the batch script's own non-zero exit: the server's, evidence like a local crash.
        # (Slurm 22.05 also gives a server that died of a signal Reason=JobLaunchFailure, so the reason
        # does not tell a launch that never happened apart; its empty log does.)
        if job.state not in INFRA_STATES:
            return None
        where = f" on {job.node}" if job.node else ""
        why = f" (reason: {job.reason})" if job.reason and job.reason != "None" else ""
        return f"job {handle.pid} ended {job.state}{where} in partition {job.partition}{why}"

    def _cancel(self, job: _Job, *, signal_name: str | None = None) -> None:
        job.cancelled_by_us = True
        argv = (
            ["scancel"]
            + ([f"--signal={signal_name}", "--full"] if signal_name else [])
            + [str(job.handle.pid)]
        )
        self._slurm(argv, check=False)
        job.checked = 0.0

    def terminate(self, handle: ProcessHandle, grace_s: float = 10.0) -> bool:
        """Stop the job: ``scancel --signal=TERM --full`` (the server's graceful stop), wait up to
        `grace_s` s, then ``scancel`` (TERM, KillWait, KILL); verify the job has ended (60 s at most).

        Records ``slurm.job_ended``. Returns True when the scheduler reports the job ended. Raises
        `HostError` only if the submit host cannot be reached.
        """
        job = self._job(handle)
        self._refresh(job, force=True)
        if job.state in LIVE_STATES:
            self._cancel(job, signal_name="TERM" if job.state == "RUNNING" else None)
            deadline = time.monotonic() + max(0.0, grace_s)
            while self._refresh(job, force=True).state in LIVE_STATES and time.monotonic() < deadline:
                time.sleep(0.1)
            if job.state in LIVE_STATES:
                self._cancel(job)
        deadline = time.monotonic() + 60.0
        while (
            self._refresh(job, force=True).state in (*LIVE_STATES, "COMPLETING")
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        ok = job.state not in LIVE_STATES and job.state != "COMPLETING"
        self._emit_ended(job)
        return ok

    def _emit_ended(self, job: _Job) -> None:
        if job.ended_sent:
            return
        job.ended_sent = True
        self._emit("slurm.job_ended", self.job_info(job.handle))

    # -- network ---------------------------------------------------------------------------------

    def _node_address(self, node: str) -> str:
        addr = self._node_addr.get(node)
        if addr is None:
            r = self._slurm(["scontrol", "show", "node", "-o", node], check=False)
            addr = _fields(r.stdout).get("NodeAddr") or node
            self._node_addr[node] = addr
        return addr

    def forward_port(self, port: int) -> int:
        """A port on 127.0.0.1 here that reaches `port` on the compute node of the job whose launch
        command listens on it (see `forward_job_port`). Raises `HostError` if no job of this host
        uses that port."""
        with self._lock:
            jobs = [j for j in self._jobs.values() if j.port == port]
        if not jobs:
            raise HostError(f"{self.name}: no job listens on port {port}")
        return self.forward_job_port(jobs[-1].handle, port)

    def forward_job_port(self, handle: ProcessHandle, port: int) -> int:
        """A port on 127.0.0.1 here that reaches `port` on the (first) node of the job `handle`:
        the same port when the node is this machine, a local TCP relay to the node (``slurm://``), or
        SSH forwarding through the login node (``slurm+ssh://``). Raises `HostError` if the job has no
        node yet."""
        job = self._job(handle)
        job.port = port
        if job.node is None:
            self._refresh(job, force=True)
        node = (job.node or "").split(",")[0]
        if not node:
            raise HostError(f"{self.name}: job {handle.pid} has no node yet")
        addr = self._node_address(node)
        if self.target.login is not None:
            assert isinstance(self.shell, SSHHost)
            return self.shell.forward_port(port, to_host=addr)
        if _is_this_machine(addr):
            return port
        with self._lock:
            relay = self._relays.get((addr, port))
            if relay is None:
                relay = self._relays[(addr, port)] = _Relay(addr, port)
            return relay.local_port

    def free_port(self) -> int:
        """A TCP port for the next server (20000-32767, random, never handed out twice by this host).

        The node is not known before the job starts, so the port cannot be checked there; a collision
        shows as a server that cannot bind (its log says so).
        """
        with self._lock:
            while True:
                port = random.randint(20000, 32767)
                if port not in self._ports_handed_out:
                    self._ports_handed_out.add(port)
                    return port

    # -- leftovers -------------------------------------------------------------------------------

    def find_orphans(self) -> list[SlurmOrphan]:
        """Jobs named ``hypoloop.*`` of this user still queued or running whose orchestrator is gone:
        its comment names this machine and a process that no longer runs. Jobs this object submitted
        are never listed; jobs of orchestrators on other machines are left to them."""
        user = getpass.getuser() if self.target.login is None else None
        argv = ["squeue", "-h", "-o", "%i|%j|%T|%k|%P|%N|%r"] + (["-u", user] if user else ["--me"])
        r = self._slurm(argv, check=False)
        if r.returncode != 0:
            raise HostError(f"{self.name}: squeue failed: {' '.join(r.stderr.split())[:200]}")
        found: list[SlurmOrphan] = []
        me = socket.gethostname()
        for line in r.stdout.splitlines():
            cols = line.split("|")
            if len(cols) < 7 or not cols[0].isdigit() or not cols[1].startswith(JOB_PREFIX):
                continue
            job_id = int(cols[0])
            if job_id in self._jobs:
                continue
            meta = dict(
                kv.partition("=")[::2] for kv in cols[3].removeprefix("hypoloop:").split(";") if "=" in kv
            )
            run_id = meta.get("run") or cols[1][len(JOB_PREFIX) :].split(".")[0]
            pid = int(meta["pid"]) if meta.get("pid", "").isdigit() else None
            if meta.get("client") != me or pid is None or pid_alive(pid):
                continue
            log = self._job_output(job_id)
            found.append(
                SlurmOrphan(
                    job_id=job_id,
                    pgid=job_id,
                    run_id=run_id,
                    name=cols[1],
                    state=cols[2],
                    partition=cols[4],
                    node=cols[5] or None,
                    log_path=log,
                    client=meta.get("client"),
                    client_pid=pid,
                    why=f"its orchestrator (pid {pid} on this machine) is gone",
                )
            )
        return found

    def _job_output(self, job_id: int) -> str:
        r = self._slurm(["scontrol", "show", "job", "-o", str(job_id)], check=False)
        return _fields(r.stdout).get("StdOut", "")

    def stop_orphan(self, orphan: Any, grace_s: float = 10.0) -> bool:
        """Cancel a leftover job (as `terminate` does) and verify it ended."""
        handle = ProcessHandle(
            pid=orphan.job_id,
            pgid=orphan.job_id,
            argv=[],
            log_path=orphan.log_path,
            started_wall=0.0,
            started_monotonic=0.0,
        )
        try:
            return self.terminate(handle, grace_s=grace_s)
        finally:
            with self._lock:
                self._jobs.pop(orphan.job_id, None)

    # -- housekeeping ----------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel every job this host submitted that is still queued or running (2 s grace), close the
        relays and the shell host. Never raises."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            with contextlib.suppress(HostError):
                if job.state in LIVE_STATES or not job.checked:
                    self.terminate(job.handle, grace_s=2.0)
        for relay in self._relays.values():
            relay.close()
        self._relays.clear()
        with contextlib.suppress(Exception):
            self.shell.close()


def _port_of(argv: Sequence[str]) -> int | None:
    """The ``--port`` value of a launch argv, if any."""
    for i, a in enumerate(argv):
        if a == "--port" and i + 1 < len(argv) and str(argv[i + 1]).isdigit():
            return int(argv[i + 1])
        if str(a).startswith("--port=") and str(a)[7:].isdigit():
            return int(str(a)[7:])
    return None


def _is_this_machine(addr: str) -> bool:
    """True for a loopback address or one of this machine's own names/addresses."""
    if addr in ("localhost", socket.gethostname()) or addr.startswith("127."):
        return True
    try:
        target = socket.gethostbyname(addr)
    except OSError:
        return False
    if target.startswith("127."):
        return True
    with contextlib.suppress(OSError):
        return target in socket.gethostbyname_ex(socket.gethostname())[2]
    return False
