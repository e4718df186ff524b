"""What watching a growing server log over SSH costs: round trips, bytes on the wire, detection delay.

A writer on the host appends ~10 MB of 200-byte log lines (every line carries its write time) in bursts
over a few seconds, then stays idle; this side tails it the way `ServerSession` does (liveness check and
`LogWatcher.poll()` every 50 ms). Reported per mode (``stream``: ``tail -f`` channel; ``sftp``: paced
SFTP reads) for the growth phase and for an idle phase.

    python bench/ssh_watch.py                      # starts a throwaway sshd on 127.0.0.1 (needs root)
    python bench/ssh_watch.py --host ssh://u@h --ssh-key K --known-hosts F --remote-python python3

The "remote" writer's clock must be this machine's for the delay figures (true for the local sshd).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.logwatch import LogWatcher  # noqa: E402
from tools.ssh import SSHHost, SSHOptions  # noqa: E402

WRITER = r"""
import sys, time
total, burst, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
written = 0
pad = "x" * 160
while written < total:
    chunk = []
    for _ in range(burst // 200):
        line = f"{time.time():.6f} {written:012d} {pad}"
        line = line[:199] + "\n"
        chunk.append(line)
        written += len(line)
    sys.stdout.write("".join(chunk))
    sys.stdout.flush()
    time.sleep(pause)
sys.stdout.write(f"{time.time():.6f} DONE\n")
sys.stdout.flush()
time.sleep(float(sys.argv[4]))
"""


def _sshd(workdir: Path) -> Any:
    spec = importlib.util.spec_from_file_location("hypoloop_ci_sshd", REPO / ".ci" / "sshd.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.start_sshd(workdir)


def measure(host: SSHHost, *, size: int, burst: int, pause: float, idle_s: float) -> dict[str, Any]:
    """Tail a freshly written log of `size` bytes; returns the figures for growth and idle phases."""
    workdir = host.workdir(f"bench-{int(time.time() * 1000)}")
    handle = host.spawn(
        ["{python}", "-c", WRITER, str(size), str(burst), str(pause), str(idle_s + 5)],
        log_path=f"{workdir}/grow.log",
    )
    watcher = LogWatcher(host, handle.log_path)

    def snapshot() -> tuple[int, int, int, int]:
        sent, received = host.wire_bytes()
        return host.stats.round_trips, host.stats.commands + host.stats.sftp_requests, sent, received

    delays: list[float] = []
    t0 = time.monotonic()
    s0 = snapshot()
    done_at: float | None = None
    while done_at is None and time.monotonic() - t0 < 120:
        host.is_alive(handle)
        for line in watcher.poll():
            stamp, _, rest = line.text.partition(" ")
            seen = time.time()
            delays.append(seen - float(stamp))
            if rest.startswith("DONE"):
                done_at = time.monotonic()
        time.sleep(0.05)
    grow_s = time.monotonic() - t0
    s1 = snapshot()
    t1 = time.monotonic()
    while time.monotonic() - t1 < idle_s:
        host.is_alive(handle)
        watcher.poll()
        time.sleep(0.05)
    s2 = snapshot()
    host.terminate(handle, grace_s=1)
    return {
        "log_mb": watcher.bytes_read / 1e6,
        "grow_s": grow_s,
        "grow_rt": s1[0] - s0[0],
        "grow_requests": s1[1] - s0[1],
        "grow_sent": s1[2] - s0[2],
        "grow_received": s1[3] - s0[3],
        "idle_s": idle_s,
        "idle_rt": s2[0] - s1[0],
        "idle_requests": s2[1] - s1[1],
        "idle_sent": s2[2] - s1[2],
        "idle_received": s2[3] - s1[3],
        "delay_median_ms": 1000 * statistics.median(delays) if delays else None,
        "delay_p99_ms": 1000 * sorted(delays)[int(0.99 * (len(delays) - 1))] if delays else None,
        "delay_max_ms": 1000 * max(delays) if delays else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", help="ssh://USER@HOST[:PORT] (default: a throwaway sshd on 127.0.0.1)")
    p.add_argument("--ssh-key")
    p.add_argument("--known-hosts")
    p.add_argument("--remote-python", default=sys.executable)
    p.add_argument("--size-mb", type=float, default=10.0)
    p.add_argument("--idle-s", type=float, default=5.0)
    args = p.parse_args()
    sshd = None
    tmp = Path(tempfile.mkdtemp(prefix="hypoloop-bench-"))
    if args.host is None:
        sshd = _sshd(tmp / "sshd")
        args.host, args.ssh_key, args.known_hosts = sshd.target, str(sshd.key), str(sshd.known_hosts)
    try:
        rows = []
        for mode in ("stream", "sftp"):
            host = SSHHost(
                args.host,
                options=SSHOptions(
                    key_path=args.ssh_key,
                    known_hosts=args.known_hosts,
                    python=args.remote_python,
                    workdir_root=str(tmp / "runs") if sshd else "~/.hypoloop/bench",
                    follow=mode == "stream",
                ),
            )
            try:
                size = int(args.size_mb * 1e6)
                rows.append((mode, measure(host, size=size, burst=40_000, pause=0.02, idle_s=args.idle_s)))
            finally:
                host.close()
        print(f"watching a {args.size_mb:g} MB log grow over SSH ({args.host}), polled every 50 ms:")
        print(
            f"{'mode':7} {'phase':6} {'secs':>6} {'round trips':>11} {'RT/s':>6} {'requests':>8} "
            f"{'sent KB':>8} {'recv KB':>9} {'delay median/p99/max ms':>24}"
        )
        for mode, r in rows:
            for phase in ("grow", "idle"):
                secs = r[f"{phase}_s"]
                delay = (
                    f"{r['delay_median_ms']:.0f}/{r['delay_p99_ms']:.0f}/{r['delay_max_ms']:.0f}"
                    if phase == "grow"
                    else ""
                )
                print(
                    f"{mode:7} {phase:6} {secs:6.1f} {r[f'{phase}_rt']:11d} {r[f'{phase}_rt'] / secs:6.1f} "
                    f"{r[f'{phase}_requests']:8d} {r[f'{phase}_sent'] / 1e3:8.1f} "
                    f"{r[f'{phase}_received'] / 1e3:9.1f} {delay:>24}"
                )
            print(f"{mode:7} log bytes read: {r['log_mb']:.2f} MB")
    finally:
        if sshd is not None:
            sshd.stop()


if __name__ == "__main__":
    main()
