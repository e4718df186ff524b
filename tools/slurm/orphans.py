"""Jobs an earlier orchestrator of this machine left queued or running: finding them by name and
comment, and cancelling one (`SlurmOrphans`)."""

from __future__ import annotations

import getpass
import socket
from typing import Any

from tools.host import HostError, ProcessHandle
from tools.local_procs import pid_alive
from tools.slurm.config import JOB_PREFIX, SlurmOrphan
from tools.slurm.jobs import SlurmJobs
from tools.slurm.states import scontrol_fields


class SlurmOrphans(SlurmJobs):
    """`find_orphans` and `stop_orphan` (the leftovers part of `SlurmHost`)."""

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
        """The output file of job `job_id` (``StdOut`` of ``scontrol show job``; "" if unknown)."""
        r = self._slurm(["scontrol", "show", "job", "-o", str(job_id)], check=False)
        return scontrol_fields(r.stdout).get("StdOut", "")

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
