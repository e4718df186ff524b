"""`SSHHost`: the parts of an SSH host (connection, commands, files, servers, logs, leftovers, ports)
put together behind the `tools.host.Host` protocol, and the interpreter-exit cleanup of every one."""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from tools.host import HostError
from tools.ssh.config import SSHOptions
from tools.ssh.forwarding import SSHForwarding
from tools.ssh.logs import SSHLogs
from tools.ssh.orphans import SSHOrphans

# Every SSHHost alive in this process, so an interpreter exit stops what they started.
_HOSTS: weakref.WeakSet[SSHHost] = weakref.WeakSet()


def _close_all() -> None:
    for host in list(_HOSTS):
        with contextlib.suppress(Exception):  # interpreter shutdown: best effort, never a traceback
            host.close()


atexit.register(_close_all)


class SSHHost(SSHLogs, SSHOrphans, SSHForwarding):
    """A remote host over SSH (see the `tools.ssh` docstring for how each operation is done there).

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

    def __init__(
        self,
        target: str,
        *,
        env: Mapping[str, str] | None = None,
        options: SSHOptions | None = None,
        on_event: Callable[[str, dict[str, Any]], object] | None = None,
    ) -> None:
        super().__init__(target, env=env, options=options, on_event=on_event)
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
        self._close_connection()
        _HOSTS.discard(self)
