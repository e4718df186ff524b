"""Reaching ports on or behind an SSH host: local ports tunnelled through ``direct-tcpip`` channels
(`tools.relay.Relay`), and a free port on the host (`SSHForwarding`)."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import paramiko

from tools import ports
from tools.host import HostError
from tools.relay import Relay
from tools.ssh.files import SSHFiles


class SSHForwarding(SSHFiles):
    """`forward_port` and `free_port` (the network part of `SSHHost`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # SSHHost's arguments, for SSHConnection
        super().__init__(*args, **kwargs)
        self._forwarders: dict[tuple[str, int], Relay] = {}
        self._ports_handed_out: set[int] = set()

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
                fwd = Relay(
                    f"ssh-forward-{port}",
                    lambda peer: self._open_direct_tcpip(port, peer, to_host),
                    (HostError, paramiko.SSHException),
                )
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
        candidates = ports.candidates(taken)
        if not candidates:
            raise HostError(f"no free TCP port in 20000-32767 on {self.name}")
        port = random.choice(candidates)
        self._ports_handed_out.add(port)
        return port
