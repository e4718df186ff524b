"""How fast `hypoloop replay` starts on a long transcript, and whether `--follow` keeps memory flat.

    python -m bench.replay_bench [--events 10000] [--follow-events 60000]

1. Builds a transcript of ``--events`` events by repeating the experiment steps of the reference run
   (transcripts/reference/glm5-nvfp4-sm120.jsonl) with fresh seq and step numbers.
2. Start time: in-process, from calling ``agent.review.replay.replay`` to its first output, and the whole
   replay; as a command, ``hypoloop replay FILE`` from process start to the first byte on stdout (that
   includes Python's start and the CLI's imports) and to the end.
3. Follow memory: a writer appends ``--follow-events`` events (written the way the agent writes them,
   a line at a time) while ``hypoloop replay --follow`` reads them; the follower's VmRSS
   (/proc/PID/status) is sampled as the file grows. The same follow loop is also measured in-process
   with tracemalloc (Python heap only).

Prints a table; nothing here is a pass/fail assertion (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from rich.console import Console

from agent.review.replay import ReplayRenderer, follow_events, replay

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"
HYPOLOOP = [sys.executable, "-c", "from agent.cli import main; main()"]


def synthetic_events(n: int) -> list[dict[str, Any]]:
    """``n`` events: the reference run's intake, its experiment steps repeated, its conclusion."""
    events = [json.loads(line) for line in SOURCE.read_text(encoding="utf-8").splitlines()]
    head = [e for e in events if e["step"] == 0]
    body = [e for e in events if e["step"] > 0 and e["type"] not in ("conclusion", "run.ended")]
    tail = [e for e in events if e["type"] in ("conclusion", "run.ended")]
    out = list(head)
    rounds = 0
    while len(out) + len(tail) < n:
        for e in body:
            if len(out) + len(tail) >= n:
                break
            out.append({**e, "step": e["step"] + 3 * rounds})
        rounds += 1
    out += tail
    t0 = time.time()
    for i, e in enumerate(out, start=1):
        e["seq"], e["ts"] = i, t0 + i * 0.01
    return out


def write_events(path: Path, events: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for e in events:
            fh.write(json.dumps(e, ensure_ascii=False) + "\n")


class _FirstWrite(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None

    def write(self, s: str) -> int:
        if self.first is None and s.strip():
            self.first = time.perf_counter()
        return super().write(s)


def in_process_start(path: Path) -> tuple[float, float]:
    """(seconds to the first output, seconds for the whole replay), output to memory."""
    buf = _FirstWrite()
    console = Console(file=buf, width=160, color_system=None)
    t0 = time.perf_counter()
    replay(path, console)
    end = time.perf_counter()
    return (buf.first or end) - t0, end - t0


def command_start(path: Path, command: list[str]) -> tuple[float, float]:
    """(seconds from process start to the first stdout byte, seconds to exit) of a replay command."""
    env = dict(os.environ, COLUMNS="160")
    t0 = time.perf_counter()
    proc = subprocess.Popen([*command, str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    proc.stdout.read(1)
    first = time.perf_counter() - t0
    proc.stdout.read()
    proc.wait()
    return first, time.perf_counter() - t0


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def follow_rss(events: list[dict[str, Any]], tmp: Path, samples: int = 8) -> list[tuple[int, float, int]]:
    """(events written, file MiB, follower RSS KiB) as a growing transcript is followed by the command."""
    path = tmp / "live.jsonl"
    path.write_text("", encoding="utf-8")
    proc = subprocess.Popen(
        [*HYPOLOOP, "replay", str(path), "--follow"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, COLUMNS="160"),
    )
    rows = []
    try:
        time.sleep(2.0)  # let it import and reach the tail loop
        step = max(1, len(events) // samples)
        with open(path, "a", encoding="utf-8") as fh:
            for i, e in enumerate(events[:-1], start=1):  # the last one, run.ended, makes it exit
                fh.write(json.dumps(e, ensure_ascii=False) + "\n")
                fh.flush()
                if i % step == 0 or i == len(events) - 1:
                    _wait_caught_up(proc.pid, path)
                    rows.append((i, path.stat().st_size / 2**20, _rss_kib(proc.pid)))
            fh.write(json.dumps(events[-1], ensure_ascii=False) + "\n")
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rows


def _wait_caught_up(pid: int, path: Path, timeout: float = 60.0) -> None:
    """Wait until the follower has read to the end of the file (its fd offset, /proc/PID/fdinfo)."""
    size = path.stat().st_size
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) == str(path):
                    pos = int(Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().split()[1])
                    if pos >= size:
                        return
            except (OSError, ValueError):
                continue
        time.sleep(0.05)


def follow_tracemalloc(
    events: list[dict[str, Any]], tmp: Path, samples: int = 6
) -> list[tuple[int, float, float]]:
    """(events read, file MiB, traced Python heap MiB) while the follow loop renders a growing file."""
    path = tmp / "live-tm.jsonl"
    path.write_text("", encoding="utf-8")
    step = max(1, len(events) // samples)
    done = threading.Event()

    def writer() -> None:
        with open(path, "a", encoding="utf-8") as fh:
            for e in events:
                fh.write(json.dumps(e, ensure_ascii=False) + "\n")
        done.set()

    render = ReplayRenderer(Console(file=open(os.devnull, "w"), width=160, color_system=None))  # noqa: SIM115
    rows = []
    tracemalloc.start()
    t = threading.Thread(target=writer)
    t.start()
    for n, ev in enumerate(follow_events(path, poll_s=0.01), start=1):
        render(ev)
        if n % step == 0 or ev.type == "run.ended":
            current, _ = tracemalloc.get_traced_memory()
            rows.append((n, path.stat().st_size / 2**20, current / 2**20))
    t.join()
    tracemalloc.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--follow-events", type=int, default=60_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hypoloop-replay-bench-") as d:
        tmp = Path(d)
        big = tmp / "big.jsonl"
        write_events(big, synthetic_events(args.events))
        print(f"transcript: {args.events} events, {big.stat().st_size / 2**20:.1f} MiB")
        first, total = in_process_start(big)
        print(f"{'in process':<24}: first output after {first * 1000:.1f} ms, whole replay {total:.2f} s")
        for name, command in (
            ("hypoloop replay", [*HYPOLOOP, "replay"]),
            ("python -m agent.review.replay", [sys.executable, "-m", "agent.review.replay"]),
        ):
            first, total = command_start(big, command)
            print(
                f"{name:<24}: first output after {first:.2f} s (process start and imports included), exit {total:.2f} s"
            )
        small = tmp / "small.jsonl"
        write_events(small, synthetic_events(60))
        first, _ = command_start(small, [*HYPOLOOP, "replay"])
        print(
            f"{'hypoloop replay, 60 ev.':<24}: first output after {first:.2f} s (the CLI's import cost alone)"
        )
        follow = synthetic_events(args.follow_events)
        print(f"\nfollowing a growing transcript of {args.follow_events} events (hypoloop replay --follow):")
        print(f"{'events':>8} {'file MiB':>9} {'RSS MiB':>8}")
        for n, mib, rss in follow_rss(follow, tmp):
            print(f"{n:>8} {mib:>9.1f} {rss / 1024:>8.1f}")
        print("\nsame loop in process, Python heap (tracemalloc):")
        print(f"{'events':>8} {'file MiB':>9} {'heap MiB':>9}")
        for n, mib, heap in follow_tracemalloc(follow, tmp):
            print(f"{n:>8} {mib:>9.1f} {heap:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
