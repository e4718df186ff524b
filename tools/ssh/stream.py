"""What `SSHHost` keeps per server and per log: a streamed log (`LogStream`, ``tail -f`` on its own
channel), the pacing of SFTP polls where streaming is unavailable (`Pace`), and a started server's
record (`Spawned`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import paramiko

from tools.host import ProcessHandle


class LogStream:
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
        """The offset just past the last byte received."""
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
        """Close the stream's channel (``tail`` on the host ends with it)."""
        with contextlib.suppress(Exception):
            self.chan.close()


@dataclass
class Spawned:
    """A server this host started or found: its handle, the leader's start time (clock ticks, so a
    recycled pid is never mistaken for it), its PID and exit-status files, its ``--port``, and what is
    known of its end."""

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
class Pace:
    """Adaptive pacing of SFTP polls of one log (fallback mode)."""

    interval: float = 0.05
    next_due: float = 0.0
    end: int = 0  # the end of the file as last seen; reads before it are never delayed
