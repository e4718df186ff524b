"""Pick and connect the host a target string names: ``local``, ``ssh://[USER@]HOST[:PORT]``,
``slurm://PARTITION`` or ``slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION``.

Apart from ``tools.host`` (the protocol and ``LocalHost``), ``tools.ssh`` (``SSHHost``, which imports
``tools.host``) and ``tools.slurm`` (``SlurmHost``, which imports both), so that none of those imports
another both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tools.host import Host, HostError, LocalHost
from tools.slurm import SlurmHost, SlurmOptions
from tools.ssh import SSHHost, SSHOptions


def connect_host(
    target: str,
    *,
    env: Mapping[str, str] | None = None,
    local_root: str | None = None,
    ssh: SSHOptions | None = None,
    slurm: SlurmOptions | None = None,
    on_event: Callable[[str, dict[str, Any]], object] | None = None,
) -> Host:
    """The host named by `target`: ``local`` (a `LocalHost` with work dirs under `local_root`),
    ``ssh://[USER@]HOST[:PORT]`` (an `SSHHost` with `tools.ssh.SSHOptions` `ssh`, connected now), or
    ``slurm://PARTITION`` / ``slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION`` (a `tools.slurm.SlurmHost`
    whose jobs ask for `slurm`; a login node is reached with `ssh`; the partition is checked now).

    `env` is the host environment; `on_event(type, data)` hears about SSH connects and reconnects and
    about Slurm jobs. Raises `HostError` (one line) for an unknown target or a host that cannot be
    reached or trusted.
    """
    if target == "local":
        return LocalHost(env=env, root=local_root)
    if target.startswith("ssh://"):
        return SSHHost(target, env=env, options=ssh, on_event=on_event)
    if target.startswith(("slurm://", "slurm+ssh://")):
        return SlurmHost(target, env=env, options=slurm, ssh=ssh, local_root=local_root, on_event=on_event)
    raise HostError(
        f"{target}: expected 'local', 'ssh://[USER@]HOST[:PORT]', 'slurm://PARTITION' or "
        "'slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION'"
    )
