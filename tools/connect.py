"""Pick and connect the host a target string names: ``local`` or ``ssh://[USER@]HOST[:PORT]``.

Apart from ``tools.host`` (the protocol and ``LocalHost``) and ``tools.ssh`` (``SSHHost``, which imports
``tools.host``), so that neither of those imports the other both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tools.host import Host, HostError, LocalHost
from tools.ssh import SSHHost, SSHOptions


def connect_host(
    target: str,
    *,
    env: Mapping[str, str] | None = None,
    local_root: str | None = None,
    ssh: SSHOptions | None = None,
    on_event: Callable[[str, dict[str, Any]], object] | None = None,
) -> Host:
    """The host named by `target`: ``local`` (a `LocalHost` with work dirs under `local_root`) or
    ``ssh://[USER@]HOST[:PORT]`` (an `SSHHost` with `tools.ssh.SSHOptions` `ssh`, connected now).

    `env` is the host environment; `on_event(type, data)` hears about SSH connects and reconnects.
    Raises `HostError` (one line) for an unknown target or a host that cannot be reached or trusted.
    """
    if target == "local":
        return LocalHost(env=env, root=local_root)
    if target.startswith("ssh://"):
        return SSHHost(target, env=env, options=ssh, on_event=on_event)
    raise HostError(f"{target}: expected 'local' or 'ssh://[USER@]HOST[:PORT]'")
