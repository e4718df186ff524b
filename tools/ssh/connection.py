"""The SSH connection under an `SSHHost`: where the target really is (ssh config), host-key checking,
authentication, keep-alives, counting bytes, and re-establishing a dropped connection with backoff
(`SSHConnection`, the base class every other part of `SSHHost` builds on)."""

from __future__ import annotations

import base64
import contextlib
import getpass
import hashlib
import logging
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from tools.host import TIME_SCALE_ENV, HostError, HostUnreachable, one_line, parse_time_scale
from tools.ssh.config import SSHOptions, SSHStats, parse_target
from tools.ssh.shell import env_words

T = TypeVar("T")

# Paramiko's transport thread logs a failed handshake (with its traceback) on the "paramiko" logger; with no
# handler anywhere that reached Python's last-resort handler and printed raw tracebacks before hypoloop's own
# one-line error. The failure still surfaces: connect() raises, and _open names it.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


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


class SSHConnection:
    """The connection part of `SSHHost` (see there for `target`, `env`, `options` and `on_event`).

    The constructor only records the settings and reads the ssh config (raises `HostError` for a bad
    target, option or environment name); `_connect(first=True)` opens the connection.
    """

    name: str
    python: str
    time_scale: float

    def __init__(
        self,
        target: str,
        *,
        env: Mapping[str, str] | None,
        options: SSHOptions | None,
        on_event: Callable[[str, dict[str, Any]], object] | None,
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
        env_words(self._env)  # refuse bad names now, not at the first command
        self.time_scale = parse_time_scale(self._env)
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
        self._resolve()

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
                raise HostError(f"ssh config {cfg_path}: {one_line(str(exc))}") from None
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
                    raise HostError(f"known_hosts file {self._known_hosts}: {one_line(str(exc))}") from None
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
            detail = one_line(str(exc) or type(exc).__name__)
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
            {"target": self.name, "reason": one_line(reason), "seen_at": round(time.time(), 3)},
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
                    raise HostError(f"{self.name}: {one_line(str(exc) or type(exc).__name__)}") from None
                self._drop(str(exc) or type(exc).__name__)
                if attempt == 2:
                    raise HostUnreachable(f"{self.name}: the connection keeps dropping ({exc})") from None
        raise AssertionError("unreachable")

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

    def wire_bytes(self) -> tuple[int, int]:
        """(sent, received) bytes on the wire so far, over all connections."""
        sock = self._sock
        sent, received = self.stats.wire_bytes_sent, self.stats.wire_bytes_received
        if sock is not None:
            sent += sock.sent
            received += sock.received
        return sent, received

    def _close_connection(self) -> None:
        """Close the SFTP session, its open files and the connection (never raises)."""
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
