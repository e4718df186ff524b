"""SSHHost: a remote host reached over SSH with paramiko, behind the same `Host` protocol as `LocalHost`.

What it does on the remote side, and why:

- Every command is a POSIX ``/bin/sh`` script sent on the channel's stdin (``exec /bin/sh -s``), so the
  login shell (bash, zsh, fish) never parses anything but that fixed line; every argv item and every
  environment value inside the script is ``shlex.quote``-d, and environment names must be identifiers.
- A server is started detached from the SSH session: ``setsid -f /bin/sh -c LEADER`` makes a new session
  whose leader (a small ``sh``) writes a PID file, runs the server as its only child, and writes the
  child's exit status when it ends. Output goes to the log file, so a dropped connection neither kills the
  server nor blocks it, and a reconnect finds it again by its PID file. The PID file holds the leader's
  pid (= process group id), its start time in clock ticks (so a recycled pid is never mistaken for it) and
  the server's pid; a JSON file beside it records the argv and which orchestrator started it, and the
  orchestrator touches the PID file every `heartbeat_s` seconds while it owns the server. That is how
  the next start finds orphans (`find_orphans`).
- The log is streamed, not polled: one channel per log runs ``tail -c +OFFSET --pid=SERVER -f LOG``; the
  bytes land in a local buffer that `read_from` serves by byte offset without a round trip, and ``tail``
  exits by itself shortly after the server does. Liveness is therefore known without asking, and
  re-checked with one command every `liveness_check_s` seconds (a zombie counts as exited, like
  locally). Where ``tail`` has no ``--pid`` (BusyBox) or `follow` is off, reads fall back to SFTP
  (seek + read from the offset) with adaptive pacing: 50 ms after growth, backing off to 0.5 s when idle.
- Requests reach a server that listens on the host's loopback through ``direct-tcpip`` channels:
  `forward_port` opens a local listening port whose connections are tunnelled to ``127.0.0.1:PORT`` there.
- A dropped connection is re-established transparently (keep-alive every `keepalive_s` s detects a dead
  peer): every operation that fails because the transport died reconnects with exponential backoff for
  at most `reconnect_timeout_s` seconds, then retries once; after that it raises `HostUnreachable`.

Remote requirements: Linux (/proc), a POSIX ``/bin/sh``, ``setsid`` (util-linux), ``timeout`` and
``tail`` (GNU coreutils for streaming; anything else falls back to SFTP), an SFTP subsystem.

Host keys are checked against ``known_hosts`` (`known_hosts`, else the ssh config's
``UserKnownHostsFile``, else ``~/.ssh/known_hosts`` plus ``/etc/ssh/ssh_known_hosts``); an unknown key is
refused with the ``ssh-keyscan`` line that would trust it. `insecure_accept_host_key` accepts any key
(nothing is written to known_hosts) and says so in `connect_info`.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import getpass
import hashlib
import json
import os
import random
import re
import secrets
import shlex
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import paramiko
from pydantic import BaseModel, Field

from tools.host import (
    MIN_FREE_BYTES,
    TIME_SCALE_ENV,
    CommandResult,
    CommandTimeout,
    HostError,
    HostUnreachable,
    ProcessHandle,
    disk_full_error,
    expand_argv,
)
from tools.leftovers import Orphan
from tools.leftovers import port_from_argv as _port_from_argv
from tools.relay import LocalListener, pump
from tools.sanitize import without_credentials

__all__ = ["Orphan", "SSHHost", "SSHOptions", "SSHStats", "SSHTarget", "parse_target"]

T = TypeVar("T")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NOT_FOUND_MARK = "hypoloop: command not found: "
_DISK_FULL_MARK = "hypoloop: disk full: "
#: Free KiB (POSIX ``df -Pk``: the "Available" column, for unprivileged writers) of the filesystem holding
#: "$d"; empty when df cannot tell.
_SH_FREE_KB = """avail=$(df -Pk -- "$d" 2>/dev/null | awk 'NR==2 {print $4}')\n"""


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# --- configuration -------------------------------------------------------------------------------


class SSHOptions(BaseModel):
    """How to reach and use an SSH host. Paths may start with ``~``; seconds everywhere.

    `key_path`: private key file (None: the ssh config's IdentityFile, the agent, ~/.ssh/id_*).
    `known_hosts`: known_hosts file to check the host key against (see the module docstring).
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

# Process inspection in POSIX sh through /proc, with builtins only (no fork per process).
# Fields after "(comm) " in /proc/PID/stat: $1 state, $3 pgrp, ${20} starttime (proc(5) fields 3, 5, 22).
_SH_PROC = r"""
_st() {
  s=; read -r s 2>/dev/null < "/proc/$1/stat" || return 1
  r=${s##*") "}; set -- $r
  S_STATE=$1 S_PGRP=$3 S_START=${20}
}
_group_alive() {
  if _st "$1"; then
    [ "$S_START" = "$2" ] || return 1
    [ "$S_STATE" != Z ] && [ "$S_STATE" != X ] && return 0
  fi
  for d in /proc/[0-9]*; do
    _st "${d#/proc/}" || continue
    [ "$S_PGRP" = "$1" ] && [ "$S_STATE" != Z ] && [ "$S_STATE" != X ] && return 0
  done
  return 1
}
_listening() {
  [ -n "$1" ] || return 1
  h=$(printf '%04X' "$1")
  grep -Eq "^ *[0-9]+: [0-9A-F]+:$h [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
"""


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _env_words(env: Mapping[str, str]) -> list[str]:
    """``NAME=value`` words for ``env``, quoted; names must be identifiers (raises HostError)."""
    words = []
    for k, v in env.items():
        if not _ENV_NAME.match(str(k)):
            raise HostError(f"environment variable name {str(k)!r} is not a valid identifier")
        words.append(_q(f"{k}={v}"))
    return words


def _spawn_script(cmd: list[str], env: dict[str, str], path: str, *, nonce: str, port: int | None) -> str:
    """The script ``SSHHost.spawn`` runs: start ``cmd`` detached, logged to ``path``; print its PID file's line."""
    pid_file, rc_file, meta_file = f"{path}.pid", f"{path}.rc", f"{path}.json"
    meta = json.dumps(
        {
            "argv": cmd,
            "log": path,
            "port": port,
            "client": socket.gethostname(),
            "client_pid": os.getpid(),
            "started": time.time(),
        }
    )
    child = (
        f"echo $$ >> {_q(pid_file + '.tmp')} && mv {_q(pid_file + '.tmp')} {_q(pid_file)} && exec "
        + _command_words(cmd, env)
    )
    leader = (
        "trap : TERM INT HUP\n"
        'read -r s < /proc/$$/stat; r=${s##*") "}; set -- $r\n'
        f'echo "$$ ${{20}} {nonce}" > {_q(pid_file + ".tmp")}\n'
        f"/bin/sh -c {_q(child)}\n"
        f"echo $? > {_q(rc_file)}\n"
    )
    directory = path.rsplit("/", 1)[0] or "/"
    return (
        # A retry after a dropped connection finds the server this very call started.
        f"if [ -s {_q(pid_file)} ] && grep -q {_q(nonce)} {_q(pid_file)}; then cat {_q(pid_file)}; exit 0; fi\n"
        + _precheck(cmd[0])
        # hypoloop's run folder and the log are private (0700/0600); the server keeps the login's umask
        + f"(umask 077 && mkdir -p -- {_q(directory)}) || exit 1\n"
        # A full disk: the server's log could not be written, so the launch would say nothing.
        + f"d={_q(directory)}\n"
        + _SH_FREE_KB
        + f'case "$avail" in ""|*[!0-9]*) ;; *) if [ "$avail" -lt {MIN_FREE_BYTES // 1024} ]; then '
        + f'echo "{_DISK_FULL_MARK}$((avail * 1024))" >&2; exit 28; fi ;; esac\n'
        + f"rm -f -- {_q(pid_file)} {_q(pid_file + '.tmp')} {_q(rc_file)}\n"
        + f"(umask 077 && : > {_q(path)}) || exit 1\n"
        + f"printf '%s\\n' {_q(meta)} > {_q(meta_file)}\n"
        + f"setsid -f /bin/sh -c {_q(leader)} </dev/null >> {_q(path)} 2>&1 || exit 1\n"
        + "i=0\n"
        + f"while [ ! -s {_q(pid_file)} ]; do\n"
        + "  i=$((i+1)); if [ $i -gt 1000 ]; then echo 'hypoloop: no PID file after 20 s' >&2; exit 1; fi\n"
        + "  sleep 0.02\n"
        + "done\n"
        + f"cat {_q(pid_file)}\n"
    )


def _command_words(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """``env NAME=value ... ARGV`` as one quoted shell command line (``env`` so no shell syntax remains)."""
    return " ".join(["env", *_env_words(env), *(_q(a) for a in argv)])


def _precheck(argv0: str) -> str:
    """A script line that fails with a recognisable message when `argv0` cannot be run.

    Raises HostError for a program name ``env`` would misread (an option or a NAME=VALUE word).
    """
    if not argv0 or argv0.startswith("-") or "=" in argv0:
        raise HostError(f"{argv0!r}: not a program name (it must not start with '-' or contain '=')")
    msg = _q(_NOT_FOUND_MARK + argv0)
    return f"command -v {_q(argv0)} >/dev/null 2>&1 || {{ echo {msg} >&2; exit 127; }}\n"


# --- private state ---------------------------------------------------------------------------------


class _CountingSocket:
    """A socket wrapper that counts the bytes paramiko sends and receives (for `SSHStats`)."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.sent = 0
        self.received = 0

    def send(self, data: bytes) -> int:
        n = int(self._sock.send(data))
        self.sent += n
        return n

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(data)
        self.sent += len(data)

    def recv(self, n: int) -> bytes:
        data = bytes(self._sock.recv(n))
        self.received += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise _UnknownHostKey(hostname, key)


class _AcceptAny(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        return None  # accepted for this connection only; nothing is written to known_hosts


def key_fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a public key (as ``ssh-keygen -lf`` prints it)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _Stream:
    """The bytes of one remote log from `base` on, as ``tail -c +N --pid=P -f`` streams them.

    A reader thread appends to `buf`; `take` hands out bytes by absolute offset and forgets what lies
    before the offset asked for (readers only move forward). `state`: running, exited (tail ended by
    itself: the server is gone, or tail failed) or lost (the connection dropped).
    """

    def __init__(self, chan: paramiko.Channel, offset: int, on_bytes: Callable[[int], None]) -> None:
        self.chan = chan
        self.base = offset
        self.buf = bytearray()
        self.remote_pid: int | None = None
        self.state = "running"
        self.exit_status: int | None = None
        self.received = 0
        self._head = b""
        self._lock = threading.Lock()
        self._on_bytes = on_bytes
        self._thread = threading.Thread(target=self._pump, name="ssh-log-stream", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while True:
                data = self.chan.recv(1 << 16)
                if not data:
                    break
                with self._lock:
                    if self.remote_pid is None:
                        self._head += data
                        nl = self._head.find(b"\n")
                        if nl < 0:
                            continue
                        with contextlib.suppress(ValueError):
                            self.remote_pid = int(self._head[:nl])
                        data, self._head = self._head[nl + 1 :], b""
                    self.buf += data
                    self.received += len(data)
                self._on_bytes(len(data))
        except (OSError, EOFError, paramiko.SSHException):
            pass
        status = self.chan.recv_exit_status()  # -1 when the channel died without an exit status
        with self._lock:
            self.exit_status = status
            self.state = "exited" if status != -1 else "lost"
        self.chan.close()

    @property
    def end(self) -> int:
        with self._lock:
            return self.base + len(self.buf)

    def take(self, offset: int, max_bytes: int) -> bytes | None:
        """Bytes from `offset` (b"" if none yet), or None if `offset` is outside what this stream holds."""
        with self._lock:
            if offset < self.base or offset > self.base + len(self.buf):
                return None
            del self.buf[: offset - self.base]
            self.base = offset
            return bytes(self.buf[:max_bytes])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.chan.close()


@dataclass
class _Spawned:
    handle: ProcessHandle
    starttime: str
    pid_file: str
    rc_file: str
    port: int | None
    stream_pids: list[int] = field(default_factory=list)
    dead: bool = False
    exit_code: int | None = None
    last_check: float = 0.0
    stopped: bool = False


@dataclass
class _Pace:
    """Adaptive pacing of SFTP polls of one log (fallback mode)."""

    interval: float = 0.05
    next_due: float = 0.0
    end: int = 0  # the end of the file as last seen; reads before it are never delayed


class _Forwarder:
    """A local listening socket whose connections are tunnelled to `to_host`:`port` as seen from the host."""

    def __init__(self, host: SSHHost, port: int, to_host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self.to_host = to_host
        self._conns: set[tuple[socket.socket, paramiko.Channel]] = set()
        self._lock = threading.Lock()
        self._listener = LocalListener(f"ssh-forward-{port}", self._serve)
        self.local_port = self._listener.local_port
        self._closed = self._listener.closed

    def _serve(self, client: socket.socket, peer: tuple[str, int]) -> None:
        try:
            chan = self.host._open_direct_tcpip(self.port, peer, self.to_host)
        except (HostError, OSError, paramiko.SSHException):
            client.close()  # the caller sees a reset connection: what a dead server looks like too
            return
        with self._lock:
            self._conns.add((client, chan))
        try:
            pump(client, chan, self._closed)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            with self._lock:
                self._conns.discard((client, chan))
            chan.close()
            client.close()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for client, chan in conns:
            chan.close()
            with contextlib.suppress(OSError):
                client.close()


# Every SSHHost alive in this process, so an interpreter exit stops what they started.
_HOSTS: weakref.WeakSet[SSHHost] = weakref.WeakSet()


def _close_all() -> None:
    for host in list(_HOSTS):
        with contextlib.suppress(Exception):  # interpreter shutdown: best effort, never a traceback
            host.close()


atexit.register(_close_all)


class SSHHost:
    """A remote host over SSH (see the module docstring for how each operation is done there).

    `target` is ``ssh://[USER@]HOST[:PORT]``; HOST may be an alias of the ssh config, whose HostName,
    User, Port, IdentityFile, UserKnownHostsFile and ProxyCommand are honoured (the target's own user and
    port win). `env` is the host environment for every command and server: each value already set in
    hypoloop's own environment wins (as locally), and HYPOLOOP_LAB_TIME_SCALE is passed on when set
    here. `on_event(type, data)` is told about connects, lost connections and reconnects; it is called
    only from threads that call this host's methods (events seen by background threads wait for the
    next call).

    Connects in the constructor. Raises `HostError` with one actionable line: unknown or changed host
    key, authentication refused, unreachable host, bad target or option.
    """

    name: str
    python: str
    time_scale: float

    def __init__(
        self,
        target: str,
        *,
        env: Mapping[str, str] | None = None,
        options: SSHOptions | None = None,
        on_event: Callable[[str, dict[str, Any]], object] | None = None,
    ) -> None:
        self.options = options or SSHOptions()
        self.target = parse_target(target)
        self.name = target.rstrip("/")
        self.python = self.options.python
        self.on_event = on_event
        self.stats = SSHStats()
        self.connect_info: dict[str, Any] = {}
        extra = {str(k): str(v) for k, v in (env or {}).items()}
        self._env = {k: os.environ.get(k, v) for k, v in extra.items()}
        if TIME_SCALE_ENV in os.environ:
            self._env[TIME_SCALE_ENV] = os.environ[TIME_SCALE_ENV]
        _env_words(self._env)  # refuse bad names now, not at the first command
        raw = self._env.get(TIME_SCALE_ENV, "1.0")
        try:
            scale = float(raw)
        except ValueError:
            raise HostError(f"{TIME_SCALE_ENV}={raw!r} is not a number") from None
        if not scale > 0:
            raise HostError(f"{TIME_SCALE_ENV}={raw!r} must be > 0")
        self.time_scale = scale

        self._lock = threading.RLock()  # connection state
        self._sftp_lock = threading.RLock()
        self._client: paramiko.SSHClient | None = None
        self._sock: _CountingSocket | None = None
        self._sftp_client: paramiko.SFTPClient | None = None
        self._sftp_files: dict[str, paramiko.SFTPFile] = {}
        self._home: str | None = None
        self._given_up = False
        self._closed = False
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._spawned: dict[int, _Spawned] = {}
        self._by_log: dict[str, _Spawned] = {}
        self._streams: dict[str, _Stream] = {}
        self._paces: dict[str, _Pace] = {}
        self._forwarders: dict[tuple[str, int], _Forwarder] = {}
        self._ports_handed_out: set[int] = set()
        self._stream_ok = self.options.follow
        self._heartbeat_stop = threading.Event()
        self._resolve()
        self._connect(first=True)
        try:
            # Logs, PID files and the work dir go through SFTP: a host without it is refused now, in plain
            # words, instead of failing the first launch with "Channel closed.".
            _ = self.home
        except HostError:
            client = self._client
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
            raise
        _HOSTS.add(self)
        threading.Thread(target=self._heartbeat, name="ssh-heartbeat", daemon=True).start()

    # -- connection ------------------------------------------------------------------------------

    def _resolve(self) -> None:
        """Fill in hostname, port, user, keys, known_hosts and proxy from the target and ssh config."""
        opts = self.options
        cfg_path = Path(opts.ssh_config or "~/.ssh/config").expanduser()
        look: dict[str, Any] = {}
        if opts.ssh_config and not cfg_path.is_file():
            raise HostError(f"ssh config {cfg_path}: file not found")
        if cfg_path.is_file():
            try:
                look = dict(paramiko.SSHConfig.from_path(str(cfg_path)).lookup(self.target.host))
            except (OSError, paramiko.ConfigParseError) as exc:
                raise HostError(f"ssh config {cfg_path}: {_one_line(str(exc))}") from None
        self._hostname = str(look.get("hostname") or self.target.host)
        self._port = self.target.port or int(look.get("port") or 22)
        self._user = self.target.user or look.get("user") or getpass.getuser()
        if opts.key_path:
            keys = [str(Path(opts.key_path).expanduser())]
        else:
            keys = [str(Path(p).expanduser()) for p in look.get("identityfile", [])]
            keys = [k for k in keys if Path(k).is_file()]
        for k in keys:
            if not Path(k).is_file():
                raise HostError(f"ssh key {k}: file not found")
        self._keys = keys
        self._explicit_key = bool(opts.key_path)
        known = opts.known_hosts or (
            str(look["userknownhostsfile"]).split()[0] if look.get("userknownhostsfile") else None
        )
        self._known_hosts = str(Path(known or "~/.ssh/known_hosts").expanduser())
        self._known_hosts_default = known is None
        if known is not None and not opts.insecure_accept_host_key and not Path(self._known_hosts).is_file():
            raise HostError(f"known_hosts file {self._known_hosts}: file not found")
        self._proxy = look.get("proxycommand")

    def _where(self) -> str:
        return f"{self._hostname}:{self._port}" if self._port != 22 else self._hostname

    def _keyscan_hint(self, key: paramiko.PKey) -> str:
        port = f"-p {self._port} " if self._port != 22 else ""
        return f"ssh-keyscan {port}-t {key.get_name()} {self._hostname} >> {self._known_hosts}"

    def _connect(self, *, first: bool = False) -> None:
        """Open a new connection (the old one, if any, is dropped first). Raises HostError."""
        client = self._new_client()
        sock = self._open(client)
        info = self._connection_info(client)
        if self.connect_info and self.connect_info.get("host_key") != info["host_key"]:
            # Only possible with --insecure-accept-host-key: a checked key cannot change under us.
            client.close()
            raise HostError(f"{self.name}: the host key changed on reconnect ({info['host_key']}); refusing")
        with self._lock:
            self._client = client
            self._sock = sock
            self._given_up = False
        self.stats.connects += 1
        self.stats.round_trips += 4  # version exchange, key exchange, auth, session setup
        if first:
            self.connect_info = info
            self._notify("host.connected", info)
        else:
            self.stats.reconnects += 1
            self._notify("host.reconnected", {"target": self.name, "host_key": info["host_key"]})

    def _new_client(self) -> paramiko.SSHClient:
        """A client that checks host keys against known_hosts (or accepts any with --insecure-accept-host-key)."""
        opts = self.options
        client = paramiko.SSHClient()
        if opts.insecure_accept_host_key:
            client.set_missing_host_key_policy(_AcceptAny())
        else:
            if self._known_hosts_default:
                with contextlib.suppress(OSError):
                    client.load_system_host_keys()
            if Path(self._known_hosts).is_file():
                try:
                    client.load_host_keys(self._known_hosts)
                except (OSError, paramiko.SSHException) as exc:
                    raise HostError(f"known_hosts file {self._known_hosts}: {_one_line(str(exc))}") from None
            client.set_missing_host_key_policy(_RefuseUnknown())
        return client

    def _open(self, client: paramiko.SSHClient) -> _CountingSocket:
        """Connect and authenticate ``client``; return its counting socket. Raises HostError (HostUnreachable
        when the host cannot be reached), closing the client first."""
        opts = self.options
        who = f"{self._user}@{self._where()}"
        try:
            raw: Any
            if self._proxy:
                raw = paramiko.ProxyCommand(str(self._proxy))
            else:
                raw = socket.create_connection((self._hostname, self._port), timeout=opts.connect_timeout_s)
            sock = _CountingSocket(raw)
            client.connect(
                self._hostname,
                self._port,
                username=self._user,
                key_filename=self._keys or None,
                allow_agent=not self._explicit_key,
                look_for_keys=not self._keys,
                timeout=opts.connect_timeout_s,
                banner_timeout=opts.connect_timeout_s,
                auth_timeout=opts.connect_timeout_s,
                sock=sock,
            )
        except _UnknownHostKey as exc:
            client.close()
            raise HostError(
                f"{self.name}: the host key of {self._where()} ({exc.key.get_name()} "
                f"{key_fingerprint(exc.key)}) is not in {self._known_hosts}; check the fingerprint, then "
                f"trust it with: {self._keyscan_hint(exc.key)} "
                "(or pass --insecure-accept-host-key for a throwaway host)"
            ) from None
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostError(
                f"{self.name}: the host key of {self._where()} ({key_fingerprint(exc.key)}) does not match "
                f"the one in {self._known_hosts} ({key_fingerprint(exc.expected_key)}): refusing to connect; "
                "if the host was reinstalled, remove the old key with ssh-keygen -R "
                f"{shlex.quote(self._known_name())} -f {self._known_hosts}"
            ) from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise HostError(
                f"{self.name}: the key {', '.join(self._keys)} is encrypted; load it into ssh-agent "
                "(ssh-add) and leave out --ssh-key"
            ) from None
        except paramiko.AuthenticationException:
            client.close()
            keys = ", ".join(self._keys) if self._keys else "the agent's and ~/.ssh keys"
            raise HostError(
                f"{self.name}: authentication failed for {self._user} with {keys}: the host refused the "
                "key (check --ssh-key and the host's authorized_keys)"
            ) from None
        except (OSError, EOFError, paramiko.SSHException) as exc:
            client.close()
            detail = _one_line(str(exc) or type(exc).__name__)
            raise HostUnreachable(f"{self.name}: cannot connect to {who}: {detail}") from None
        return sock

    def _connection_info(self, client: paramiko.SSHClient) -> dict[str, Any]:
        """Turn on keepalives of the connected ``client``; return the ``host.connected`` record of it."""
        opts = self.options
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(max(1, int(opts.keepalive_s)))
        server_key = transport.get_remote_server_key()
        return {
            "target": self.name,
            "user": self._user,
            "hostname": self._hostname,
            "port": self._port,
            "host_key": f"{server_key.get_name()} {key_fingerprint(server_key)}",
            "host_key_checked": not opts.insecure_accept_host_key,
            "known_hosts": None if opts.insecure_accept_host_key else self._known_hosts,
        }

    @property
    def connection_epoch(self) -> int:
        """How many connections were opened so far: it changes exactly when the connection was lost and
        re-established, so a failure seen across a change may be the connection's, not the server's."""
        return self.stats.connects

    def check_connection(self) -> None:
        """Make sure the connection works (one round trip; reconnects if it dropped). Raises
        `HostUnreachable` if it cannot be re-established, `HostError` for a changed host key or refused
        authentication on reconnect."""
        self._deliver()
        self._exec("exit 0\n", timeout=self.options.connect_timeout_s + 15.0)
        self._deliver()

    def _known_name(self) -> str:
        return f"[{self._hostname}]:{self._port}" if self._port != 22 else self._hostname

    def _transport(self) -> paramiko.Transport | None:
        client = self._client
        transport = client.get_transport() if client is not None else None
        return transport if transport is not None and transport.is_active() else None

    def _drop(self, reason: str) -> None:
        """Forget a dead connection (and everything that lived on it)."""
        with self._lock:
            client, sock = self._client, self._sock
            if client is None:
                return
            self._client = None
            self._sock = None
            if sock is not None:
                self.stats.wire_bytes_sent += sock.sent
                self.stats.wire_bytes_received += sock.received
        with self._sftp_lock:
            self._sftp_client = None
            self._sftp_files.clear()
        with contextlib.suppress(Exception):
            client.close()
        # seen_at: when the drop was noticed here; the event itself is written later (at the next call).
        self._notify(
            "host.connection_lost",
            {"target": self.name, "reason": _one_line(reason), "seen_at": round(time.time(), 3)},
        )

    def _ensure(self) -> paramiko.Transport:
        """The live transport, reconnecting with backoff if the connection dropped.

        Tries for at most `reconnect_timeout_s` seconds (once, after an earlier attempt gave up).
        Raises `HostUnreachable` when that fails, `HostError` for a key or authentication problem.
        """
        with self._lock:
            transport = self._transport()
            if transport is not None:
                return transport
            if self._closed:
                raise HostError(f"{self.name}: the connection is closed")
            if self._client is not None:
                self._drop("the connection dropped")
            budget = 0.0 if self._given_up else self.options.reconnect_timeout_s
            deadline = time.monotonic() + budget
            delay = 0.25
            while True:
                try:
                    self._connect()
                except HostUnreachable as exc:
                    if time.monotonic() + delay > deadline:
                        self._given_up = True
                        within = f"within {budget:g} s" if budget else "(an earlier reconnect gave up)"
                        raise HostUnreachable(
                            f"{self.name}: the connection was lost and could not be re-established {within} "
                            f"({exc})"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 4.0)
                    continue
                transport = self._transport()
                if transport is not None:
                    return transport

    def _call(self, fn: Callable[[paramiko.Transport], T]) -> T:
        """Run `fn` on a live transport; if the transport dies under it, reconnect and run it once more."""
        for attempt in (1, 2):
            transport = self._ensure()
            try:
                return fn(transport)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                # A request that got no answer in time means a peer that vanished without closing the
                # TCP connection (keep-alives alone do not notice that): treat it as a drop.
                dead = not transport.is_active() or isinstance(exc, EOFError | TimeoutError)
                if not dead:
                    raise HostError(f"{self.name}: {_one_line(str(exc) or type(exc).__name__)}") from None
                self._drop(str(exc) or type(exc).__name__)
                if attempt == 2:
                    raise HostUnreachable(f"{self.name}: the connection keeps dropping ({exc})") from None
        raise AssertionError("unreachable")

    # -- events ----------------------------------------------------------------------------------

    def _notify(self, type_: str, data: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append((type_, data))

    def _deliver(self) -> None:
        """Hand queued connection events to `on_event` (called at the start of every public method)."""
        with self._lock:
            pending, self._pending = self._pending, []
        if self.on_event is not None:
            for type_, data in pending:
                self.on_event(type_, data)

    # -- commands --------------------------------------------------------------------------------

    def _exec(self, script: str, *, timeout: float) -> tuple[int, bytes, bytes]:
        """Run a POSIX sh `script` on the host; (exit status, stdout, stderr). Reconnects on a drop.

        `timeout` (seconds) bounds the wait for the result on this side; the script itself must make sure
        it ends (commands run under ``timeout``). Raises HostError when no result comes in time.
        """

        def op(transport: paramiko.Transport) -> tuple[int, bytes, bytes]:
            chan = transport.open_session(timeout=self.options.connect_timeout_s)
            self.stats.commands += 1
            self.stats.round_trips += 3
            try:
                chan.exec_command("exec /bin/sh -s")
                chan.sendall(script.encode())
                chan.shutdown_write()
                out, err = bytearray(), bytearray()
                deadline = time.monotonic() + timeout
                chan.settimeout(0.2)
                while True:
                    got = False
                    while chan.recv_stderr_ready():
                        err += chan.recv_stderr(1 << 16)
                        got = True
                    try:
                        data = chan.recv(1 << 16)
                    except TimeoutError:
                        data = None
                    if data:
                        out += data
                        got = True
                    elif data == b"":
                        while chan.recv_stderr_ready():
                            err += chan.recv_stderr(1 << 16)
                        status = chan.recv_exit_status()
                        if status == -1:
                            raise EOFError("the connection dropped during a command")
                        while chan.recv_stderr_ready():
                            err += chan.recv_stderr(1 << 16)
                        return status, bytes(out), bytes(err)
                    if not got and time.monotonic() > deadline:
                        raise HostError(f"{self.name}: no answer from the host within {timeout:g} s")
                    if not transport.is_active():
                        raise EOFError("the connection dropped during a command")
            finally:
                chan.close()

        return self._call(op)

    def _merged_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        merged = dict(self._env)
        if env:
            merged.update({str(k): str(v) for k, v in env.items()})
        return merged

    def run(
        self, argv: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """Run `argv` on the host to completion under ``timeout`` (its whole process group is killed at
        `timeout` seconds); stdout/stderr as text.

        Raises `HostError` if the command is not found, `CommandTimeout` on timeout, `HostUnreachable`
        if the host cannot be reached. A command cut off by a dropped connection is run again once after
        reconnecting: commands sent here must be safe to repeat (queries).
        """
        self._deliver()
        cmd = expand_argv(argv, self)
        if not cmd:
            raise HostError("empty command")
        script = (
            _precheck(cmd[0])
            + f"exec timeout -k 5 {max(timeout, 0.001):.3f} "
            + _command_words(cmd, self._merged_env(env))
            + " </dev/null\n"
        )
        start = time.monotonic()
        status, out, err = self._exec(script, timeout=timeout + 15.0)
        duration = time.monotonic() - start
        self._deliver()
        stderr = err.decode("utf-8", "replace")
        if status == 127 and _NOT_FOUND_MARK in stderr:
            raise HostError(f"command not found: {cmd[0]} (on {self.name})")
        if status in (124, 137) and duration >= timeout * 0.98:
            result = CommandResult(
                argv=cmd,
                returncode=-9,
                stdout=out.decode("utf-8", "replace"),
                stderr=stderr,
                duration_s=duration,
            )
            raise CommandTimeout(f"command timed out after {timeout:g} s: {cmd[0]} (on {self.name})", result)
        return CommandResult(
            argv=cmd,
            returncode=status,
            stdout=out.decode("utf-8", "replace"),
            stderr=stderr,
            duration_s=duration,
        )

    # -- paths -----------------------------------------------------------------------------------

    def _sftp(self) -> paramiko.SFTPClient:
        """The SFTP session of the current connection (caller holds `_sftp_lock`; may raise on a drop)."""
        if self._sftp_client is None:
            client = self._client
            if client is None:
                raise EOFError("not connected")
            try:
                self._sftp_client = client.open_sftp()
            except paramiko.SSHException as exc:
                transport = client.get_transport()
                if transport is not None and transport.is_active():
                    # The connection is fine but the server refused the subsystem ("Channel closed.").
                    raise HostError(
                        f"{self.name}: the host offers no SFTP subsystem ({_one_line(str(exc))}); hypoloop "
                        "needs it to read logs and PID files: enable it in the host's sshd_config "
                        "(Subsystem sftp internal-sftp)"
                    ) from None
                raise
            channel = self._sftp_client.get_channel()
            if channel is not None:
                channel.settimeout(max(self.options.connect_timeout_s, 30.0))
            self.stats.round_trips += 3
        return self._sftp_client

    @property
    def home(self) -> str:
        """The remote user's home directory (asked once)."""
        if self._home is None:

            def op(transport: paramiko.Transport) -> str:
                with self._sftp_lock:
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                    return str(self._sftp().normalize("."))

            self._home = self._call(op)
        return self._home

    def _abs(self, path: str) -> str:
        if path == "~":
            return self.home
        if path.startswith("~/"):
            return f"{self.home}/{path[2:]}"
        if not path.startswith("/"):
            return f"{self.home}/{path}"
        return path

    def _sftp_small(self, path: str, limit: int = 1 << 20) -> bytes | None:
        """A small file's content over SFTP (also /proc files, whose size reads as 0); None if missing."""

        def op(transport: paramiko.Transport) -> bytes | None:
            with self._sftp_lock:
                sftp = self._sftp()
                self.stats.sftp_requests += 1
                self.stats.round_trips += 1
                try:
                    with sftp.open(path, "rb") as f:
                        data = f.read(limit)
                        self.stats.sftp_requests += 3  # read, read to EOF, close
                        self.stats.round_trips += 3
                except (FileNotFoundError, PermissionError):
                    return None
                except OSError:
                    # A process that exits between the open and the read takes its /proc entry with it;
                    # the SFTP server then answers a bare "Failure" (SSH_FX_FAILURE). That is "gone", not a
                    # host error, as long as the connection itself is fine.
                    if path.startswith("/proc/") and transport.is_active():
                        return None
                    raise
                return bytes(data)

        return self._call(op)

    def _sftp_makedirs(self, path: str) -> None:
        """``mkdir -p`` over SFTP. Raises HostError."""

        def op(transport: paramiko.Transport) -> None:
            with self._sftp_lock:
                sftp = self._sftp()
                missing: list[str] = []
                current = path.rstrip("/")
                while current:
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                    try:
                        sftp.stat(current)
                        break
                    except FileNotFoundError:
                        missing.append(current)
                        current = current.rsplit("/", 1)[0]
                for d in reversed(missing):
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                    try:
                        sftp.mkdir(d)
                    except OSError as exc:
                        try:
                            sftp.stat(d)  # made by someone else in the meantime
                        except OSError:
                            raise HostError(
                                f"cannot create work dir {path} on {self.name}: {_one_line(str(exc))}"
                            ) from None

        self._call(op)

    def workdir(self, run_id: str) -> str:
        """A per-run directory on the host (created): `workdir_root`/`run_id` (~/.hypoloop/runs/RUN_ID).

        Raises `HostError` if `run_id` is not a plain name or the directory cannot be created.
        """
        self._deliver()
        if not run_id or "/" in run_id or run_id in (".", "..") or "\x00" in run_id:
            raise HostError(f"invalid run id {run_id!r}: expected a plain name")
        path = f"{self._abs(self.options.workdir_root).rstrip('/')}/{run_id}"
        self._sftp_makedirs(path)
        return path

    def free_bytes(self, path: str) -> int | None:
        """Bytes an unprivileged writer may still use on the host's filesystem holding `path` (POSIX
        ``df -Pk``, "Available"); None when it cannot be told (no df, `path` missing). One command."""
        self._deliver()
        script = f"d={_q(self._abs(path))}\n" + _SH_FREE_KB + 'echo "$avail"\n'
        _, out, _ = self._exec(script, timeout=30.0)
        self._deliver()
        text = out.decode(errors="replace").strip()
        return int(text) * 1024 if text.isdigit() else None

    # -- servers ---------------------------------------------------------------------------------

    def spawn(
        self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
    ) -> ProcessHandle:
        """Start `argv` on the host detached from the SSH session; stdout+stderr go to `log_path`.

        The log (created with its directory, or truncated) gets a PID file ``LOG.pid``, an exit-status
        file ``LOG.rc`` and a description ``LOG.json`` beside it. The handle's `pgid` is the session
        leader's pid, `pid` the server's. `env` is merged over the host environment; PYTHONUNBUFFERED=1 is
        added unless set. A spawn cut off by a dropped connection is finished after reconnecting without
        starting a second server. Raises `DiskFull` (a `HostError`) when the log's disk has less than
        `tools.host.MIN_FREE_BYTES` free, `HostError` if the command is not found or does not start.
        """
        self._deliver()
        cmd = expand_argv(argv, self)
        if not cmd:
            raise HostError("empty command")
        path = self._abs(log_path)
        merged = self._merged_env(env)
        merged.setdefault("PYTHONUNBUFFERED", "1")
        nonce = secrets.token_hex(8)
        pid_file, rc_file = f"{path}.pid", f"{path}.rc"
        port = _port_from_argv(cmd)
        script = _spawn_script(cmd, merged, path, nonce=nonce, port=port)
        status, out, err = self._exec(script, timeout=60.0)
        self._deliver()
        stderr = err.decode("utf-8", "replace")
        if status == 127 and _NOT_FOUND_MARK in stderr:
            raise HostError(f"command not found: {cmd[0]} (on {self.name})")
        if status == 28 and _DISK_FULL_MARK in stderr:
            free = stderr.split(_DISK_FULL_MARK, 1)[1].split()[0]
            raise disk_full_error(self.name, path.rsplit("/", 1)[0] or "/", int(free) if free.isdigit() else 0)
        lines = out.decode("utf-8", "replace").split()
        if status != 0 or len(lines) < 4:
            raise HostError(
                f"cannot start {cmd[0]} on {self.name}: {_one_line(stderr) or f'exit status {status}'}"
            )
        lead, starttime, child_pid = int(lines[0]), lines[1], int(lines[3])
        handle = ProcessHandle(
            pid=child_pid,
            pgid=lead,
            argv=cmd,
            log_path=path,
            started_wall=time.time(),
            started_monotonic=time.monotonic(),
        )
        sp = _Spawned(handle=handle, starttime=starttime, pid_file=pid_file, rc_file=rc_file, port=port)
        with self._lock:
            self._spawned[lead] = sp
            self._by_log[path] = sp
            old = self._streams.pop(path, None)
            self._paces.pop(path, None)
        if old is not None:
            old.close()
        return handle

    def find_launch(self, log_path: str) -> ProcessHandle | None:
        """The live server an earlier process started with this log (found by its PID file, which the
        server's session leader writes before the server starts), or None."""
        self._deliver()
        path = self._abs(log_path)
        words = (self._sftp_small(f"{path}.pid") or b"").decode(errors="replace").split("\n")
        first = words[0].split() if words else []
        if len(first) < 2 or not first[0].isdigit():
            return None
        lead = int(first[0])
        child = words[1].strip() if len(words) > 1 else ""
        meta_raw = self._sftp_small(f"{path}.json") or b"{}"
        try:
            meta = json.loads(meta_raw)
        except ValueError:
            meta = {}
        started = float(meta.get("started") or time.time()) if isinstance(meta, dict) else time.time()
        handle = ProcessHandle(
            pid=int(child) if child.isdigit() else lead,
            pgid=lead,
            argv=[str(a) for a in meta.get("argv", [])] if isinstance(meta, dict) else [],
            log_path=path,
            started_wall=started,
            started_monotonic=time.monotonic() - max(0.0, time.time() - started),
        )
        sp = _Spawned(
            handle=handle, starttime=first[1], pid_file=f"{path}.pid", rc_file=f"{path}.rc",
            port=_port_from_argv(handle.argv),
        )
        if not self._check_alive(sp):
            return None
        with self._lock:
            self._spawned[lead] = sp
            self._by_log[path] = sp
        return handle

    def _spawned_for(self, handle: ProcessHandle) -> _Spawned:
        sp = self._spawned.get(handle.pgid)
        if sp is None:
            # A handle from another SSHHost object (e.g. before a restart): read its PID file.
            pid_file = f"{handle.log_path}.pid"
            words = (self._sftp_small(pid_file) or b"").decode(errors="replace").split()
            starttime = words[1] if len(words) >= 2 and words[0] == str(handle.pgid) else ""
            sp = _Spawned(
                handle=handle,
                starttime=starttime,
                pid_file=pid_file,
                rc_file=f"{handle.log_path}.rc",
                port=_port_from_argv(handle.argv),
            )
            with self._lock:
                self._spawned[handle.pgid] = sp
                self._by_log.setdefault(handle.log_path, sp)
        return sp

    def _check_alive(self, sp: _Spawned) -> bool:
        """Ask the host whether the server process runs (not a zombie, still in our process group)."""
        raw = self._sftp_small(f"/proc/{sp.handle.pid}/stat", 4096)
        sp.last_check = time.monotonic()
        if not raw:
            return False
        text = raw.decode("ascii", "replace")
        fields = text[text.rfind(")") + 2 :].split()
        return len(fields) > 2 and fields[0] not in ("Z", "X") and fields[2] == str(sp.handle.pgid)

    def is_alive(self, handle: ProcessHandle) -> bool:
        """True while the server runs; a zombie counts as exited.

        While its log is being streamed this costs no round trip (the stream ends when the server does),
        except for a confirming check every `liveness_check_s` seconds; otherwise at most one check per
        0.25 s.
        """
        self._deliver()
        sp = self._spawned_for(handle)
        if sp.dead:
            return False
        now = time.monotonic()
        stream = self._streams.get(handle.log_path)
        if stream is not None and stream.state == "running":
            if now - sp.last_check < self.options.liveness_check_s:
                return True
        elif stream is None and now - sp.last_check < 0.25:
            return True
        alive = self._check_alive(sp)
        if not alive:
            sp.dead = True
        self._deliver()
        return alive

    def exit_code(self, handle: ProcessHandle) -> int | None:
        """The server's exit code (negative = killed by that signal), None while it runs or if unknown."""
        sp = self._spawned_for(handle)
        if sp.exit_code is not None:
            return sp.exit_code
        if not sp.dead and self.is_alive(handle):
            return None
        for _ in range(10):
            text = (self._sftp_small(sp.rc_file) or b"").decode(errors="replace").strip()
            if text.isdigit():
                rc = int(text)
                sp.exit_code = -(rc - 128) if rc > 128 else rc
                return sp.exit_code
            time.sleep(0.05)  # the leader writes the status right after the server ends
        return None

    def terminate(self, handle: ProcessHandle, grace_s: float = 10.0) -> bool:
        """Stop the server's whole process group: SIGTERM, wait up to `grace_s` s, SIGKILL, verify.

        One command does it all on the host. Returns True when no process of the group remains and the
        server's ``--port`` (if its argv had one) no longer listens; False if something survived 5 s
        after SIGKILL or the port stayed taken. Also ends the log streams of this server. Safe to call
        repeatedly (once verified gone, without asking the host again). Raises `HostUnreachable` if the
        host cannot be reached.
        """
        self._deliver()
        sp = self._spawned_for(handle)
        if sp.stopped:
            return True  # verified gone before; a process group does not come back
        with self._lock:
            stream = self._streams.get(handle.log_path)
        stream_pids = list(sp.stream_pids)
        if stream is not None and stream.remote_pid is not None:
            stream_pids.append(stream.remote_pid)
        ticks = max(0, int(grace_s / 0.05))
        script = (
            _SH_PROC
            + f"lead={handle.pgid}; st={_q(sp.starttime or 'unknown')}; port={sp.port or ''}; log={_q(handle.log_path)}\n"
            + 'if [ "$st" = unknown ]; then _st $lead && st=$S_START; fi\n'
            + "if _group_alive $lead $st; then\n"
            + "  kill -s TERM -- -$lead 2>/dev/null\n"
            + f"  i=0; while _group_alive $lead $st && [ $i -lt {ticks} ]; do sleep 0.05; i=$((i+1)); done\n"
            + "  if _group_alive $lead $st; then\n"
            + "    kill -s KILL -- -$lead 2>/dev/null\n"
            + "    i=0; while _group_alive $lead $st && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
            + "  fi\n"
            + "fi\n"
            + f"for f in {' '.join(str(p) for p in stream_pids)}; do\n"
            + '  if tr "\\000" " " < /proc/$f/cmdline 2>/dev/null | grep -qF -- "$log"; then kill $f 2>/dev/null; fi\n'
            + "done\n"
            + "gone=1; _group_alive $lead $st && gone=0\n"
            + 'free=1; i=0; while _listening "$port"; do\n'
            + "  if [ $i -ge 100 ]; then free=0; break; fi; sleep 0.05; i=$((i+1))\n"
            + "done\n"
            + 'echo "gone=$gone free=$free"\n'
        )
        _, out, _ = self._exec(script, timeout=grace_s + 30.0)
        self._deliver()
        text = out.decode(errors="replace")
        ok = "gone=1" in text and "free=1" in text
        if "gone=1" in text:
            sp.dead = True
            sp.stopped = True
        if stream is not None:
            stream.close()
        return ok

    # -- logs ------------------------------------------------------------------------------------

    def _start_stream(self, sp: _Spawned, offset: int) -> _Stream:
        path = sp.handle.log_path
        script = (
            "echo $$\n"
            f"exec tail -c +{offset + 1} --pid={sp.handle.pid} -s 0.1 -f -- {_q(path)} 2>/dev/null </dev/null\n"
        )

        def on_bytes(n: int) -> None:
            self.stats.log_bytes += n

        def op(transport: paramiko.Transport) -> _Stream:
            chan = transport.open_session(timeout=self.options.connect_timeout_s)
            self.stats.streams += 1
            self.stats.round_trips += 2
            chan.exec_command("exec /bin/sh -s")
            chan.sendall(script.encode())
            chan.shutdown_write()
            return _Stream(chan, offset, on_bytes)

        stream = self._call(op)
        with self._lock:
            self._streams[path] = stream
        return stream

    def _sftp_read(self, path: str, offset: int, max_bytes: int) -> bytes:
        def op(transport: paramiko.Transport) -> bytes:
            with self._sftp_lock:
                sftp = self._sftp()
                f = self._sftp_files.get(path)
                if f is None:
                    try:
                        f = sftp.open(path, "rb")
                    except FileNotFoundError:
                        return b""
                    self._sftp_files[path] = f
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                size = f.stat().st_size
                self.stats.sftp_requests += 1
                self.stats.round_trips += 1
                if size is None or offset >= size:
                    return b""
                n = min(max_bytes, size - offset)
                f.seek(offset)
                data = f.read(n)
                calls = max(1, -(-n // 32768))
                self.stats.sftp_requests += calls
                self.stats.round_trips += calls
                self.stats.log_bytes += len(data)
                return bytes(data)

        try:
            return self._call(op)
        except HostError as exc:
            if isinstance(exc, HostUnreachable):
                raise
            raise HostError(f"cannot read {path} on {self.name}: {exc}") from None

    def read_from(self, path: str, offset: int, max_bytes: int = 1 << 20) -> bytes:
        """Up to `max_bytes` bytes of `path` on the host from byte `offset`; b"" if nothing new or missing.

        A server's log is streamed (see the module docstring): reads are served from what arrived, at no
        round trip. Other files, and logs where streaming is unavailable, are read over SFTP from the
        offset, never from the start; while their server runs, those reads are paced (50 ms after
        growth, up to 0.5 s when idle). After `close()` nothing new is read (b""). Raises
        `HostUnreachable` if the host cannot be reached.
        """
        if self._closed:
            return b""
        self._deliver()
        path = self._abs(path)
        sp = self._by_log.get(path)
        stream = self._streams.get(path)
        if stream is not None:
            data = stream.take(offset, max_bytes)
            if data:
                return data
            if data is not None and stream.state == "running":
                return b""
            if stream.state == "lost":
                with self._lock:
                    self._streams.pop(path, None)
                    if stream.remote_pid is not None and sp is not None:
                        sp.stream_pids.append(stream.remote_pid)
                stream = None
            elif stream.state == "exited" and stream.exit_status not in (0, None) and stream.received == 0:
                self._stream_ok = False  # no GNU tail --pid on this host: poll instead
        if stream is None and sp is not None and not sp.dead and self._stream_ok:
            stream = self._start_stream(sp, offset)
            self._deliver()
            return stream.take(offset, max_bytes) or b""
        live = sp is not None and not sp.dead
        pace = self._paces.setdefault(path, _Pace())
        now = time.monotonic()
        if live and offset >= pace.end and now < pace.next_due:
            return b""  # polling for growth too soon after the last look
        data = self._sftp_read(path, offset, max_bytes)
        if offset >= pace.end:
            pace.interval = 0.05 if data else min(pace.interval * 1.5, 0.5)
            pace.next_due = time.monotonic() + pace.interval
        pace.end = max(pace.end, offset + len(data))
        self._deliver()
        return data

    def read_text(self, path: str, max_bytes: int = 4 << 20) -> str | None:
        """The first `max_bytes` bytes of the file at `path` on the host as text (UTF-8, undecodable
        bytes replaced), read over SFTP in one open; None when it is missing or unreadable (a
        directory too). Raises `HostUnreachable` if the host cannot be reached."""
        self._deliver()
        try:
            data = self._sftp_small(self._abs(path), limit=max_bytes)
        except HostUnreachable:
            raise
        except (HostError, OSError):
            return None
        return None if data is None else data.decode("utf-8", "replace")

    # -- network ---------------------------------------------------------------------------------

    def _open_direct_tcpip(self, port: int, peer: tuple[str, int], to_host: str = "127.0.0.1") -> paramiko.Channel:
        def op(transport: paramiko.Transport) -> paramiko.Channel:
            self.stats.forwarded_connections += 1
            self.stats.round_trips += 2
            return transport.open_channel(
                "direct-tcpip", (to_host, port), peer, timeout=self.options.connect_timeout_s
            )

        return self._call(op)

    def forward_port(self, port: int, *, to_host: str = "127.0.0.1") -> int:
        """A port on 127.0.0.1 here whose connections reach `to_host`:`port` as seen from the host
        (direct-tcpip; `to_host` defaults to the host's loopback, another address is e.g. a compute
        node behind a login node).

        The same local port is returned for the same destination; connections made after a reconnect use
        the new connection.
        """
        self._deliver()
        with self._lock:
            fwd = self._forwarders.get((to_host, port))
            if fwd is None:
                fwd = _Forwarder(self, port, to_host)
                self._forwarders[(to_host, port)] = fwd
            return fwd.local_port

    def free_port(self) -> int:
        """A TCP port on the host with nothing listening on it a moment ago (20000-32767, random).

        Read from /proc/net/tcp and tcp6 on the host; ports handed out before are not repeated.
        """
        self._deliver()
        table = (self._sftp_small("/proc/net/tcp", 1 << 24) or b"") + (
            self._sftp_small("/proc/net/tcp6", 1 << 24) or b""
        )
        taken = set(self._ports_handed_out)
        for line in table.decode(errors="replace").splitlines():
            cols = line.split()
            if len(cols) > 3 and ":" in cols[1]:
                with contextlib.suppress(ValueError):
                    taken.add(int(cols[1].rsplit(":", 1)[1], 16))
        candidates = [p for p in range(20000, 32768) if p not in taken]
        if not candidates:
            raise HostError(f"no free TCP port in 20000-32767 on {self.name}")
        port = random.choice(candidates)
        self._ports_handed_out.add(port)
        return port

    # -- orphans ---------------------------------------------------------------------------------

    def find_orphans(self, *, stale_after_s: float | None = None) -> list[Orphan]:
        """Servers of earlier hypoloop runs that still run on the host with no orchestrator looking after them.

        Scans ``workdir_root/*/*.pid``. A server counts as orphaned when its orchestrator ran on this
        machine and that process is gone, or when nobody touched its PID file for `stale_after_s`
        seconds (default: four heartbeats, 60 s). Servers this object started are never listed.
        """
        self._deliver()
        root = self._abs(self.options.workdir_root).rstrip("/")
        stale = 4 * self.options.heartbeat_s if stale_after_s is None else stale_after_s
        script = (
            _SH_PROC
            + "now=$(date +%s)\n"
            + f"for p in {_q(root)}/*/*.pid; do\n"
            + '  [ -f "$p" ] || continue\n'
            + '  { read -r lead st nonce; read -r child; } < "$p" 2>/dev/null || continue\n'
            + '  _group_alive "$lead" "$st" || continue\n'
            + '  m=$(stat -c %Y "$p" 2>/dev/null || echo 0)\n'
            + '  meta=$(head -c 8000 "${p%.pid}.json" 2>/dev/null | tr "\\t\\n" "  ")\n'
            + '  printf \'%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n\' "$p" "$lead" "$st" "$child" "$((now - m))" "$meta"\n'
            + "done\n"
        )
        _, out, _ = self._exec(script, timeout=60.0)
        me = socket.gethostname()
        found: list[Orphan] = []
        for line in out.decode("utf-8", "replace").splitlines():
            cols = line.split("\t")
            if len(cols) < 6 or not cols[1].isdigit():
                continue
            pid_file, lead, st, child, age, meta_text = cols[:6]
            if int(lead) in self._spawned:
                continue
            try:
                meta = json.loads(meta_text) if meta_text.strip() else {}
            except ValueError:
                meta = {}
            client, client_pid = meta.get("client"), meta.get("client_pid")
            age_s = float(age) if age.lstrip("-").isdigit() else 0.0
            why = ""
            if client == me and isinstance(client_pid, int) and not _local_pid_alive(client_pid):
                why = f"its orchestrator (pid {client_pid} on this machine) is gone"
            elif age_s >= stale:
                why = f"no heartbeat from its orchestrator for {age_s:.0f} s"
            if not why:
                continue
            argv = [str(a) for a in meta.get("argv", [])] if isinstance(meta.get("argv"), list) else []
            found.append(
                Orphan(
                    pid_file=pid_file,
                    log_path=pid_file[: -len(".pid")],
                    pgid=int(lead),
                    pid=int(child) if child.isdigit() else None,
                    starttime=st,
                    argv=argv,
                    port=meta.get("port") if isinstance(meta.get("port"), int) else _port_from_argv(argv),
                    client=client,
                    client_pid=client_pid if isinstance(client_pid, int) else None,
                    heartbeat_age_s=age_s,
                    why=why,
                )
            )
        return found

    def stop_orphan(self, orphan: Orphan, grace_s: float = 10.0) -> bool:
        """Stop an orphaned server like `terminate` does (TERM, grace, KILL, verify group gone, port free)."""
        handle = ProcessHandle(
            pid=orphan.pid or orphan.pgid,
            pgid=orphan.pgid,
            argv=orphan.argv,
            log_path=orphan.log_path,
            started_wall=0.0,
            started_monotonic=0.0,
        )
        sp = _Spawned(
            handle=handle,
            starttime=orphan.starttime,
            pid_file=orphan.pid_file,
            rc_file=f"{orphan.log_path}.rc",
            port=orphan.port,
        )
        with self._lock:
            self._spawned[orphan.pgid] = sp
        try:
            return self.terminate(handle, grace_s=grace_s)
        finally:
            with self._lock:
                self._spawned.pop(orphan.pgid, None)

    # -- housekeeping ----------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Touch the PID files of running servers so other orchestrators know they are looked after."""
        while not self._heartbeat_stop.wait(self.options.heartbeat_s):
            with self._lock:
                files = [sp.pid_file for sp in self._spawned.values() if not sp.dead]
            if not files or self._transport() is None:
                continue
            try:
                with self._sftp_lock:
                    sftp = self._sftp()
                    for f in files:
                        with contextlib.suppress(OSError):
                            sftp.utime(f, None)
                        self.stats.sftp_requests += 1
                        self.stats.round_trips += 1
            except (OSError, EOFError, paramiko.SSHException):
                continue

    def wire_bytes(self) -> tuple[int, int]:
        """(sent, received) bytes on the wire so far, over all connections."""
        sock = self._sock
        sent, received = self.stats.wire_bytes_sent, self.stats.wire_bytes_received
        if sock is not None:
            sent += sock.sent
            received += sock.received
        return sent, received

    def close(self) -> None:
        """Stop every server this host started that still runs (2 s grace), then close the connection.

        Never raises: a server that cannot be stopped because the host is unreachable stays there and
        is reported as an orphan at the next start.
        """
        if self._closed:
            return
        self._heartbeat_stop.set()
        with self._lock:
            live = [sp for sp in self._spawned.values() if not sp.stopped]
        for sp in live:
            try:
                self.terminate(sp.handle, grace_s=2.0)
            except HostError:
                self._given_up = True  # one quick attempt per remaining server, no long backoff
        with contextlib.suppress(Exception):
            self._deliver()
        self._closed = True
        with self._lock:
            streams = list(self._streams.values())
            forwarders = list(self._forwarders.values())
            self._streams.clear()
            self._forwarders.clear()
        for s in streams:
            s.close()
        for fwd in forwarders:
            fwd.close()
        with self._sftp_lock:
            for f in self._sftp_files.values():
                with contextlib.suppress(Exception):
                    f.close()
            self._sftp_files.clear()
            if self._sftp_client is not None:
                with contextlib.suppress(Exception):
                    self._sftp_client.close()
            self._sftp_client = None
        with self._lock:
            client, sock = self._client, self._sock
            self._client = None
            self._sock = None
            if sock is not None:
                self.stats.wire_bytes_sent += sock.sent
                self.stats.wire_bytes_received += sock.received
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        _HOSTS.discard(self)


def _local_pid_alive(pid: int) -> bool:
    """True if `pid` runs on this machine (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not Path("/proc").is_dir()
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")
