"""tools.slurm: experiments as Slurm jobs, behind the same `Host` protocol as `LocalHost` and `SSHHost`.

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

Where each part lives: `config` (options, target, orphans), `states` (job states, scontrol output),
`scheduler` (Slurm's client commands on the submit side), `commands` (``srun``), `jobs` (state,
terminate), `submit` (``sbatch``, waiting in the queue), `network` (ports), `orphans`, `slurm_host`
(`SlurmHost`).
"""

from __future__ import annotations

from tools.slurm.config import (
    JobPending,
    SlurmOptions,
    SlurmOrphan,
    SlurmTarget,
    is_slurm_target,
    parse_slurm_target,
)
from tools.slurm.slurm_host import SlurmHost

__all__ = [
    "JobPending",
    "SlurmHost",
    "SlurmOptions",
    "SlurmOrphan",
    "SlurmTarget",
    "is_slurm_target",
    "parse_slurm_target",
]
