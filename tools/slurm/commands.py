"""Short commands on a compute node of the partition, through ``srun`` with the job's resources
(`SlurmCommands`)."""

from __future__ import annotations

import contextlib
import getpass
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tools.host import CommandResult, HostError
from tools.slurm.config import JOB_PREFIX, JobPending
from tools.slurm.scheduler import SlurmScheduler


class SlurmCommands(SlurmScheduler):
    """`run` (the command part of `SlurmHost`)."""

    def _srun_args(self, name: str) -> list[str]:
        return [
            "srun",
            f"--partition={self.partition}",
            "--quiet",
            f"--job-name={name}",
            *self.options.sbatch_args(),
        ]

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
