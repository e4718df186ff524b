"""What an `SSHHost` is told (`SSHOptions`, the ``ssh://`` target) and what it counts (`SSHStats`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from tools.host import HostError
from tools.sanitize import without_credentials


class SSHOptions(BaseModel):
    """How to reach and use an SSH host. Paths may start with ``~``; seconds everywhere.

    `key_path`: private key file (None: the ssh config's IdentityFile, the agent, ~/.ssh/id_*).
    `known_hosts`: known_hosts file to check the host key against (see the `tools.ssh` docstring).
    `python`: what ``{python}`` expands to on the host. `ssh_config`: the ssh client config to read host
    aliases from (None: ``~/.ssh/config`` if it exists). `workdir_root`: per-run directories live below it.
    `follow`: stream logs with ``tail -f`` (False: SFTP polling). `reconnect_timeout_s`: how long to keep
    trying to re-establish a dropped connection before `HostUnreachable`.
    """

    key_path: str | None = None
    known_hosts: str | None = None
    insecure_accept_host_key: bool = False
    python: str = "python3"
    ssh_config: str | None = None
    workdir_root: str = "~/.hypoloop/runs"
    connect_timeout_s: float = Field(default=10.0, gt=0)
    keepalive_s: float = Field(default=10.0, gt=0)
    reconnect_timeout_s: float = Field(default=60.0, ge=0)
    heartbeat_s: float = Field(default=15.0, gt=0)
    liveness_check_s: float = Field(default=5.0, gt=0)
    follow: bool = True


class SSHTarget(BaseModel):
    """``ssh://[USER@]HOST[:PORT]`` split into its parts (None: from the ssh config or the default)."""

    user: str | None = None
    host: str
    port: int | None = None


def parse_target(target: str) -> SSHTarget:
    """Parse ``ssh://[USER@]HOST[:PORT]`` (HOST may be an ssh-config alias or ``[IPv6]``).

    Raises `HostError` naming what is wrong (no password, path, query or fragment is accepted); the
    message shows the target without its password.
    """
    shown = without_credentials(target)  # refused below, and never echoed
    if not target.startswith("ssh://"):
        raise HostError(f"{shown}: expected ssh://[USER@]HOST[:PORT]")
    parts = urlsplit(target)
    try:
        port = parts.port
    except ValueError:
        raise HostError(f"{shown}: the port is not a number in 1-65535") from None
    if parts.password is not None:
        raise HostError(f"{shown}: passwords are not accepted in the target; use a key (--ssh-key)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise HostError(f"{shown}: expected ssh://[USER@]HOST[:PORT] and nothing after it")
    if not parts.hostname:
        raise HostError(f"{shown}: no host name")
    if port == 0:
        raise HostError(f"{shown}: the port is not a number in 1-65535")
    if any(ch.isspace() for ch in parts.netloc):
        raise HostError(f"{shown}: a host name has no spaces")
    if parts.netloc.count("@") > 1:
        raise HostError(f"{shown}: more than one '@': expected ssh://[USER@]HOST[:PORT]")
    return SSHTarget(user=parts.username or None, host=parts.hostname, port=port)


class SSHStats(BaseModel):
    """What an `SSHHost` cost so far.

    `round_trips` counts the times the client waited for the server: a command costs 3 (channel open,
    exec request, completion), an SFTP request 1, a forwarded connection or a log stream 2 to open.
    `wire_bytes_*` are bytes on the TCP connection (encrypted, SSH framing included), summed over
    reconnects; `log_bytes` are log bytes received (streamed or read).
    """

    connects: int = 0
    reconnects: int = 0
    commands: int = 0
    sftp_requests: int = 0
    streams: int = 0
    forwarded_connections: int = 0
    round_trips: int = 0
    log_bytes: int = 0
    wire_bytes_sent: int = 0
    wire_bytes_received: int = 0


# --- the remote shell snippets ---------------------------------------------------------------------
