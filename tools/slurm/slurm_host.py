"""`SlurmHost`: the parts of a Slurm host (scheduler commands, srun, job submission and state, network,
leftovers) put together behind the `tools.host.Host` protocol."""

from __future__ import annotations

import contextlib

from tools.host import HostError
from tools.slurm.commands import SlurmCommands
from tools.slurm.network import SlurmNetwork
from tools.slurm.orphans import SlurmOrphans
from tools.slurm.states import LIVE_STATES
from tools.slurm.submit import SlurmSubmit


class SlurmHost(SlurmSubmit, SlurmCommands, SlurmNetwork, SlurmOrphans):
    """A Slurm partition reached from this machine or a login node (see the `tools.slurm` docstring).

    `target` is ``slurm://PARTITION`` or ``slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION``; `env` the host
    environment (for the commands and, through ``--export=ALL``, the jobs); `options` the job's
    resources; `ssh` the `tools.ssh.SSHOptions` for a login node; `local_root` where per-run work dirs go
    for ``slurm://`` (shared storage); `on_event(type, data)` hears ``slurm.job_submitted``,
    ``slurm.job_started``, ``slurm.job_pending`` and ``slurm.job_ended`` (with submitted/started/ended
    wall-clock times) and the SSH connection notices.

    Checks at once that the partition exists (``sinfo``). Raises `HostError` with one line: no Slurm
    commands there, unknown partition, unreachable login node.
    """

    def workdir(self, run_id: str) -> str:
        """The per-run directory on the submit side's storage (see the `tools.slurm` docstring); created."""
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
