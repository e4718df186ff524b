"""A job's state as the scheduler tells it (``scontrol show job -o``, ``sacct`` once the controller
forgot it), asked at most every `poll_s` seconds; and stopping a job, verified (`SlurmJobs`)."""

from __future__ import annotations

import time
from typing import Any

from tools.host import HostError, ProcessHandle
from tools.leftovers import port_from_argv
from tools.slurm.scheduler import SlurmScheduler
from tools.slurm.states import (
    INFRA_STATES,
    LIVE_STATES,
    Job,
    exit_code_of,
    scontrol_fields,
    slurm_time,
)


class SlurmJobs(SlurmScheduler):
    """Job state, liveness, exit codes, infrastructure failures and `terminate` (the job part of
    `SlurmHost`)."""

    def _job(self, handle: ProcessHandle) -> Job:
        """This host's record of the job `handle` (made from the handle for a job of an earlier process)."""
        with self._lock:
            job = self._jobs.get(handle.pid)
            if job is None:  # adopted from an earlier process: its record is the handle
                job = Job(
                    handle=handle,
                    partition=self.partition,
                    submitted_wall=handle.started_wall,
                    port=port_from_argv(handle.argv),
                )
                self._jobs[handle.pid] = job
            return job

    def _refresh(self, job: Job, *, force: bool = False) -> Job:
        """Ask the scheduler for the job's state (at most every `poll_s` s unless `force`)."""
        now = time.monotonic()
        if not force and now - job.checked < self.options.poll_s:
            return job
        if job.state not in LIVE_STATES and job.state != "COMPLETING" and job.checked:
            return job  # an ended job does not change
        job.checked = now
        r = self._slurm(["scontrol", "show", "job", "-o", str(job.handle.pid)], check=False)
        info = scontrol_fields(r.stdout.strip().splitlines()[0]) if r.returncode == 0 and r.stdout.strip() else {}
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
        started = slurm_time(info.get("StartTime"))
        if state not in ("PENDING",) and started is not None and job.started_wall is None:
            job.started_wall = started
        if state not in LIVE_STATES:
            job.ended_wall = job.ended_wall or slurm_time(info.get("EndTime")) or time.time()
            job.exit_code = exit_code_of(info.get("ExitCode"))
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

    def _cancel(self, job: Job, *, signal_name: str | None = None) -> None:
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

    def _emit_ended(self, job: Job) -> None:
        """Record ``slurm.job_ended`` once per job."""
        if job.ended_sent:
            return
        job.ended_sent = True
        self._emit("slurm.job_ended", self.job_info(job.handle))
