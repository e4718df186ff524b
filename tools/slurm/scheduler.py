"""The part of a `SlurmHost` every other part builds on (`SlurmScheduler`): the shell host that runs
Slurm's client commands (this machine, or a login node over SSH), running one of them with a one-line
error, the partition check, events, and how a pending job is reported."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tools.host import CommandResult, Host, HostError, LocalHost, SchedulerError
from tools.relay import Relay
from tools.slurm.config import SlurmOptions, parse_slurm_target
from tools.slurm.states import Job
from tools.ssh import SSHHost


class SlurmScheduler:
    """Slurm's client commands on the submit side, and this host's state (see `SlurmHost`).

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
        self._jobs: dict[int, Job] = {}
        self._lock = threading.Lock()
        self._relays: dict[tuple[str, int], Relay] = {}
        self._node_addr: dict[str, str] = {}
        self._ports_handed_out: set[int] = set()
        self._closed = False
        self._client = f"{socket.gethostname()}"
        try:
            self._check_partition()
        except BaseException:
            self.shell.close()
            raise

    def _emit(self, type_: str, data: dict[str, Any]) -> None:
        """Tell `on_event` (if any) about `type_` with `data`."""
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

    def _queue_position(self, job_id: str) -> tuple[int, int] | None:
        """(1-based place of the job among the partition's pending jobs in the scheduler's priority
        order, how many are pending), or None when it is not pending (squeue(1): ``-t PENDING``,
        ``--sort=-p,i``)."""
        r = self._slurm(["squeue", "-h", "-p", self.partition, "-t", "PENDING", "--sort=-p,i", "-o", "%i"],
                        check=False)
        ids = r.stdout.split()
        return (ids.index(job_id) + 1, len(ids)) if job_id in ids else None

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
