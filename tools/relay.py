"""Local TCP listeners that relay each connection somewhere else: the one accept loop and the one
byte pump behind `tools.ssh` (a port forwarded through the SSH connection) and `tools.slurm` (a port
relayed to a compute node).
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
