"""A throwaway one-node Slurm cluster on 127.0.0.1 for the Slurm tests and the parallel benchmark.

`start_cluster(workdir)` writes a slurm.conf (and gres.conf) into `workdir` and runs Debian's
`slurmctld -D` and `slurmd -D` (package slurm-wlm) as children, with:

- `AuthType=auth/none` and `CredType=cred/none`: no munge daemon is needed (test clusters only);
- the controller and the node daemon on free ports of 127.0.0.1 (`SlurmctldHost=THIS_HOST(127.0.0.1)`,
  `NodeAddr=127.0.0.1`), every state, spool, log and PID file inside `workdir`;
- `SelectType=select/cons_tres` with one node of `cpus` CPUs and `gpus` fake GPUs (`Gres=gpu:N`, a
  gres.conf line with no device files), `SlurmdParameters=config_overrides` so the node is not drained
  for claiming more CPUs than the machine has;
- `JobCompType=jobcomp/filetxt`: every finished job's line (JobId, JobName, StartTime, EndTime, JobState,
  ...) lands in `jobcomp.txt`, the scheduler's own record of when each job ran (`completions()`); there
  is no slurmdbd, so `sacct` has nothing to read and hypoloop falls back to `scontrol show job`.

Commands find the cluster through `SLURM_CONF` (`cluster.env`). `stop()` cancels what is left, ends both
daemons and every job step they forked. Nothing outside `workdir` is touched.

Standalone use (prints the `SLURM_CONF` to export, stops on Enter):

    python .ci/slurm.py DIR
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
NODE = "hlnode1"
PARTITION = "debug"


def slurm_available() -> bool:
    """True when slurmctld, slurmd and the client commands (sbatch, squeue, scancel, scontrol) exist."""
    return (
        os.access(SLURMCTLD, os.X_OK)
        and os.access(SLURMD, os.X_OK)
        and all(shutil.which(c) for c in ("sbatch", "squeue", "scancel", "scontrol", "srun"))
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parents.setdefault(int(fields[1]), []).append(int(entry))
    out, stack = [], [root]
    while stack:
        for child in parents.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


@dataclass
class ThrowawayCluster:
    """A running test cluster: `partition`, `node`, `conf` (the slurm.conf path), `env` (SLURM_CONF)."""

    workdir: Path
    conf: Path
    partition: str
    node: str
    gpus: int
    cpus: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """What a client command needs to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    @property
    def jobcomp(self) -> Path:
        """The scheduler's job-completion log (jobcomp/filetxt)."""
        return self.workdir / "jobcomp.txt"

    def command(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster (text output, no check)."""
        return subprocess.run(
            list(argv),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def completions(self) -> list[dict[str, str]]:
        """The finished jobs the controller recorded (one dict of KEY=VALUE fields per job)."""
        try:
            text = self.jobcomp.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            rec: dict[str, str] = {}
            for word in line.split():
                key, sep, value = word.partition("=")
                if sep:
                    rec[key] = value
            if rec:
                out.append(rec)
        return out

    def node_state(self) -> str:
        """The node's state as `sinfo` reports it (idle, mixed, alloc, down, drain, ...)."""
        r = self.command("sinfo", "-h", "-n", self.node, "-o", "%T")
        return r.stdout.strip()

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until no job is queued or running; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.command("squeue", "-h", "-o", "%i")
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(0.1)
        raise TimeoutError(f"jobs still queued after {timeout:g} s: {r.stdout.strip()}")

    def stop(self) -> None:
        """Cancel every job, stop slurmd and slurmctld (TERM, then KILL) and any job process left."""
        with contextlib.suppress(Exception):
            self.command("scancel", "--full", "--user", getpass.getuser(), timeout=10)
        leftovers: list[int] = []
        for proc in reversed(self.procs):
            leftovers += _descendants(proc.pid)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        for pid in leftovers:  # slurmstepd and job processes outlive slurmd by design
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.procs.clear()


def write_config(workdir: Path, *, cpus: int = 8, gpus: int = 8) -> Path:
    """Write slurm.conf and gres.conf for a one-node cluster on free loopback ports; return slurm.conf."""
    workdir.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (workdir / sub).mkdir(exist_ok=True)
    user = getpass.getuser()
    ctld_port, slurmd_port = _free_port(), _free_port()
    conf = workdir / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=hypoloop-test",
                f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
                "MailProg=/bin/true",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                f"SlurmUser={user}",
                f"SlurmdUser={user}",
                "AuthType=auth/none",
                "CredType=cred/none",
                f"StateSaveLocation={workdir / 'state'}",
                f"SlurmdSpoolDir={workdir / 'spool'}",
                f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
                f"SlurmdPidFile={workdir / 'slurmd.pid'}",
                f"SlurmctldLogFile={workdir / 'slurmctld.log'}",
                f"SlurmdLogFile={workdir / 'slurmd.log'}",
                "ProctrackType=proctrack/pgid",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={workdir / 'jobcomp.txt'}",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=sched_interval=1,bf_interval=1",
                "SlurmdParameters=config_overrides",
                "ReturnToService=2",
                "MpiDefault=none",
                "KillWait=5",
                "MinJobAge=600",
                "SlurmctldTimeout=30",
                "SlurmdTimeout=30",
                "InactiveLimit=0",
                "GresTypes=gpu",
                f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs={cpus} "
                f"Gres=gpu:{gpus} RealMemory=1000 State=UNKNOWN",
                f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    # slurmd counts a GPU per device file; plain files stand in for /dev/nvidiaN (nothing opens them).
    dev = workdir / "dev"
    dev.mkdir(exist_ok=True)
    for i in range(gpus):
        (dev / f"nvidia{i}").touch()
    (workdir / "gres.conf").write_text(
        f"AutoDetect=off\nNodeName={NODE} Name=gpu File={dev}/nvidia[0-{gpus - 1}]\n"
    )
    return conf


def start_cluster(workdir: Path, *, cpus: int = 8, gpus: int = 8, timeout: float = 30.0) -> ThrowawayCluster:
    """Start slurmctld and slurmd on `workdir`'s config and wait until the node takes jobs.

    Raises RuntimeError (with the daemons' last log lines) if the node is not idle within `timeout` s.
    """
    conf = write_config(workdir, cpus=cpus, gpus=gpus)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = ThrowawayCluster(
        workdir=workdir, conf=conf, partition=PARTITION, node=NODE, gpus=gpus, cpus=cpus
    )
    try:
        for argv in ([SLURMCTLD, "-D", "-i", "-f", str(conf)], [SLURMD, "-D", "-N", NODE, "-f", str(conf)]):
            cluster.procs.append(
                subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=open(workdir / f"{Path(argv[0]).name}.stderr", "wb"),  # noqa: SIM115
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for proc in cluster.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {_tail(workdir)}")
            state = cluster.node_state()
            if state.startswith("idle"):
                return cluster
            time.sleep(0.1)
        raise RuntimeError(f"node {NODE} not idle after {timeout:g} s (state {state!r}): {_tail(workdir)}")
    except BaseException:
        cluster.stop()
        raise


def _tail(workdir: Path) -> str:
    lines: list[str] = []
    for name in ("slurmctld.log", "slurmd.log", "slurmctld.stderr", "slurmd.stderr"):
        with contextlib.suppress(OSError):
            lines += [f"{name}: {x}" for x in (workdir / name).read_text().splitlines()[-3:]]
    return " | ".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python .ci/slurm.py DIR")
    started = time.monotonic()
    c = start_cluster(Path(sys.argv[1]).resolve())
    print(f"cluster up in {time.monotonic() - started:.1f} s; partition {c.partition}, node {c.node}")
    print(f"export SLURM_CONF={c.conf}")
    try:
        input("Enter stops it. ")
    finally:
        c.stop()
