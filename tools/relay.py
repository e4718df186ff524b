"""Local TCP listeners that relay each connection somewhere else: the one accept loop, the one byte
pump and the one relay behind `tools.ssh` (a port forwarded through the SSH connection) and
`tools.slurm` (a port relayed to a compute node).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable
from typing import Any


class LocalListener:
    """A socket listening on 127.0.0.1 at a free port (`local_port`); each connection is handed to
    ``serve(client, peer)`` on a thread of its own until `close()`. ``name`` names the threads."""

    def __init__(self, name: str, serve: Callable[[socket.socket, tuple[str, int]], None]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.local_port = int(self.sock.getsockname()[1])
        self.closed = threading.Event()
        self._serve = serve
        threading.Thread(target=self._accept, name=name, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client, peer), daemon=True).start()

    def close(self) -> None:
        """Stop accepting; connections being relayed end within half a second (see `pump`)."""
        self.closed.set()
        with contextlib.suppress(OSError):
            self.sock.close()


def pump(a: Any, b: Any, closed: threading.Event) -> None:
    """Copy bytes both ways between ``a`` and ``b`` (sockets, or anything with ``fileno``, ``recv`` and
    ``sendall``, such as a paramiko channel) until one side ends or ``closed`` is set. Errors of either
    side (OSError, EOFError and the caller's own transport errors) end the copy; closing is the
    caller's."""
    while not closed.is_set():
        ready, _, _ = select.select([a, b], [], [], 0.5)
        for src, dst in ((a, b), (b, a)):
            if src in ready:
                data = src.recv(1 << 16)
                if not data:
                    return
                dst.sendall(data)


class Relay:
    """A local listening port (`local_port`, on 127.0.0.1) whose every connection is relayed to what
    ``open_upstream(peer)`` opens for it: a TCP socket, a paramiko ``direct-tcpip`` channel, anything
    `pump` can copy to. When the upstream cannot be opened (``OSError`` or one of `errors`) the client's
    connection is closed: the caller sees a reset, as a dead server looks too. `close()` ends the
    listener and every connection being relayed. `name` names the threads."""

    def __init__(
        self,
        name: str,
        open_upstream: Callable[[tuple[str, int]], Any],
        errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._open_upstream = open_upstream
        self._errors: tuple[type[BaseException], ...] = (OSError, EOFError, *errors)
        self._conns: set[tuple[socket.socket, Any]] = set()
        self._lock = threading.Lock()
        self._listener = LocalListener(name, self._serve)
        self.local_port = self._listener.local_port

    def _serve(self, client: socket.socket, peer: tuple[str, int]) -> None:
        try:
            upstream = self._open_upstream(peer)
        except self._errors:
            client.close()
            return
        with self._lock:
            self._conns.add((client, upstream))
        try:
            pump(client, upstream, self._listener.closed)
        except self._errors:
            pass
        finally:
            with self._lock:
                self._conns.discard((client, upstream))
            upstream.close()
            client.close()

    def close(self) -> None:
        """Stop accepting and close every relayed connection (both ends) now."""
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for client, upstream in conns:
            with contextlib.suppress(*self._errors):
                upstream.close()
            with contextlib.suppress(OSError):
                client.close()
