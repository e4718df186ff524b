"""Submitting a server as one batch job (``sbatch``) and waiting while it is queued (`SlurmSubmit`)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence

from tools.host import MIN_FREE_BYTES, HostError, ProcessHandle, SchedulerError, disk_full_error
from tools.leftovers import port_from_argv
from tools.slurm.config import JOB_PREFIX, JobPending
from tools.slurm.jobs import SlurmJobs
from tools.slurm.states import LIVE_STATES, Job

_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_WRAPPER = "hypoloop-job.sh"
# Written by `sh -c` with the path as $1: the script itself is a constant, nothing is interpolated.
_WRITE_WRAPPER = (
    "umask 022; [ -s \"$1\" ] || { printf '%s\\n' '#!/bin/sh' 'exec \"$@\"' > \"$1.$$\" && "
    'chmod +x "$1.$$" && mv -f "$1.$$" "$1"; }'
)


class SlurmSubmit(SlurmJobs):
    """`spawn` and `wait_started` (the submission part of `SlurmHost`)."""

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
        cmd = self._sbatch_argv(argv, log_path)
        job_env = {"PYTHONUNBUFFERED": "1", **dict(env or {})}
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
        job = Job(handle=handle, partition=self.partition, submitted_wall=submitted, port=port_from_argv(argv))
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

    def _sbatch_argv(self, argv: Sequence[str], log_path: str) -> list[str]:
        """The sbatch command that submits `argv` with its output to `log_path`, tagged with the run id
        (the log's folder name) and the experiment (the log's name); writes the job wrapper first."""
        folder, _, base = log_path.rpartition("/")
        run_id = folder.rpartition("/")[2] or "run"
        if not _RUN_ID.match(run_id):
            run_id = "run"
        exp = base.removesuffix(".log")
        wrapper = self._prepare_folder(folder)
        return [
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

    def _prepare_folder(self, folder: str) -> str:
        """Check the log's `folder` has room and write the job wrapper there; return the wrapper's path.
        Raises `DiskFull` below `MIN_FREE_BYTES` free, `SchedulerError` when the wrapper cannot be written."""
        free = self.shell.free_bytes(folder)
        if free is not None and free < MIN_FREE_BYTES:
            raise disk_full_error(self.name, folder, free)
        wrapper = f"{folder}/{_WRAPPER}"
        r = self.shell.run(["sh", "-c", _WRITE_WRAPPER, "sh", wrapper], timeout=30.0)
        if r.returncode != 0:
            raise SchedulerError(
                f"cannot write {wrapper} on {self.shell.name}: {' '.join(r.stderr.split())[:200]}"
            )
        return wrapper

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
