"""What a Slurm job's state means and how the scheduler writes it: the live and the infrastructure
states (squeue(1), JOB STATE CODES), ``scontrol -o`` lines, times and exit codes, and what a
`SlurmHost` knows about one job (`Job`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tools.host import ProcessHandle

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


@dataclass
class Job:
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


def slurm_time(text: str | None) -> float | None:
    """``2026-12-01T15:58:22`` (the controller's local time) as epoch seconds; None for Unknown/None."""
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def exit_code_of(text: str | None) -> int | None:
    """Slurm's ``EXIT:SIGNAL`` as one code like Popen's: the exit status, or minus the signal."""
    if not text or ":" not in text:
        return None
    code, _, sig = text.partition(":")
    try:
        c, s = int(code), int(sig)
    except ValueError:
        return None
    return -s if s else c


def scontrol_fields(line: str) -> dict[str, str]:
    """One ``scontrol -o`` line as a dict (values never contain spaces in the fields read here)."""
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out
