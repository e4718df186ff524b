"""A Ctrl-C that Python drops (raised inside a ``__del__`` or weakref callback, printed as "Exception
ignored in ...") still ends a run: tools/interrupts.py raises it again until the run says it has it.

CI once saw this: a Ctrl-C that arrived while the openai client was being imported was raised inside
importlib's module-lock weakref callback and dropped; the run went on loading its server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The child drops one interrupt the way CPython drops any exception raised in a __del__: the signal's
# handler runs at the next bytecode boundary, which is still inside __del__.
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    INSTALL = sys.argv[1] == "install"
    if INSTALL:
        from tools import interrupts
        interrupts.install()
    else:
        signal.signal(signal.SIGINT, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    class Dropper:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(10))  # a few bytecodes: the handler runs here and its exception is dropped

    Dropper()
    print("dropped", flush=True)
    deadline = time.monotonic() + 5.0
    try:
        while time.monotonic() < deadline:
            time.sleep(0.01)
        print("never interrupted", flush=True)
        sys.exit(0)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    if INSTALL:
        interrupts.delivered()
        quiet_until = time.monotonic() + 4 * interrupts.REDELIVER_S
        try:
            while time.monotonic() < quiet_until:
                time.sleep(0.01)
        except KeyboardInterrupt:
            print("raised again after delivered()", flush=True)
            sys.exit(0)
        print("quiet after delivered()", flush=True)
    """
)


def _child(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, mode], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_a_dropped_ctrl_c_is_raised_again_and_stops_once_caught() -> None:
    proc = _child("install")
    assert "Exception ignored" in proc.stderr  # the first interrupt really was dropped
    assert proc.stdout.split() == ["dropped", "interrupted", "quiet", "after", "delivered()"], proc.stdout


def test_without_it_python_drops_the_ctrl_c() -> None:
    # the premise: with a plain handler the same dropped interrupt is lost for good
    proc = _child("plain")
    assert "Exception ignored" in proc.stderr
    assert proc.stdout.split() == ["dropped", "never", "interrupted"], proc.stdout
