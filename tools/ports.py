"""The TCP port a launched server listens on.

A port the kernel picks for ``bind(("127.0.0.1", 0))`` comes from its ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), the range every outgoing
connection takes its source port from: between the pick and the server's own bind, any client on the
machine may take it, and the server then fails with "[Errno 98] address already in use", which reads
as the deployment's fault. Server ports are therefore drawn at random below that range (20000-32767),
the way Linux leaves room for listeners (Documentation/networking/ip-sysctl.rst, ip_local_port_range).
"""

from __future__ import annotations

import random
import socket
from collections.abc import Collection

SERVER_PORTS = range(20000, 32768)
_EPHEMERAL_DEFAULT = range(32768, 61000)


def ephemeral_range(text: str | None) -> range:
    """The kernel's ephemeral port range from the text of ``ip_local_port_range`` ("32768\\t60999");
    Linux's default when `text` is None or not two port numbers."""
    try:
        lo, hi = (int(w) for w in (text or "").split())
    except ValueError:
        return _EPHEMERAL_DEFAULT
    return range(lo, hi + 1) if 0 < lo <= hi < 65536 else _EPHEMERAL_DEFAULT


def candidates(taken: Collection[int], ephemeral: range = _EPHEMERAL_DEFAULT) -> list[int]:
    """Server ports (`SERVER_PORTS`) outside `ephemeral` and not in `taken` (listening, or handed out
    before); when a custom ephemeral range covers them all, any unprivileged port outside it."""
    out = [p for p in SERVER_PORTS if p not in taken and p not in ephemeral]
    return out or [p for p in range(1024, 65536) if p not in taken and p not in ephemeral]


def local_free_port(handed_out: set[int], tries: int = 64) -> int:
    """A TCP port on 127.0.0.1 that a test bind took a moment ago: random among `candidates`, outside
    this machine's ephemeral range, never one in `handed_out` (added to it). Falls back to a port the
    kernel picks when `tries` random candidates are all taken."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            ephemeral = ephemeral_range(f.read())
    except OSError:
        ephemeral = _EPHEMERAL_DEFAULT
    pool = candidates(handed_out, ephemeral)
    for port in random.sample(pool, min(tries, len(pool))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    handed_out.add(port)
    return port
