"""What a `SlurmHost` is told: the job's resources (`SlurmOptions`, the case's ``[host.slurm]`` table),
the ``slurm://`` / ``slurm+ssh://`` target, and what it reports (`JobPending`, `SlurmOrphan`)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.host import HostError, HostUnreachable
from tools.sanitize import without_credentials
from tools.ssh import parse_target

JOB_PREFIX = "hypoloop."
_PARTITION = re.compile(r"^[A-Za-z0-9_.+-]+$")

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
