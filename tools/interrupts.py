"""A Ctrl-C (or SIGTERM/SIGHUP) that is never lost.

Python runs a signal handler in the main thread at the next bytecode boundary, wherever that is; when
it is inside a weakref callback or a ``__del__`` (importlib's module-lock cleanup, for one), the
``KeyboardInterrupt`` the handler raises is printed as "Exception ignored in ..." and dropped, and the
program goes on as if the key had never been pressed (CPython documents this for ``__del__``:
https://docs.python.org/3/reference/datamodel.html#object.__del__ "exceptions that occur during their
execution are ignored"). A run that loses its Ctrl-C keeps a server loading on an expensive host.

`install()` puts a handler in place that remembers the signal as pending before it raises, and a
watchdog thread that raises it again in the main thread (``_thread.interrupt_main``) every
`REDELIVER_S` seconds until the program says it has it (`delivered()`): the code that catches the
``KeyboardInterrupt`` to act on it (stop the servers, leave the run waiting) calls `delivered()` first.
"""

from __future__ import annotations

import _thread
import atexit
import signal
import threading
import time
from typing import Any

REDELIVER_S = 0.5
"""Seconds a raised interrupt may go unacknowledged before it is raised again (it was dropped)."""

_cond = threading.Condition()  # an RLock: the handler may run while the main thread holds it
_pending_since: float | None = None
_watchdog: threading.Thread | None = None
_exiting = False


def _handler(signum: int, frame: Any) -> None:
    global _pending_since
    with _cond:
        if _pending_since is None:
            _pending_since = time.monotonic()
            _cond.notify_all()
    raise KeyboardInterrupt


def _watch() -> None:
    global _pending_since
    with _cond:
        while not _exiting:
            if _pending_since is None:
                _cond.wait()
                continue
            left = _pending_since + REDELIVER_S - time.monotonic()
            if left > 0:
                _cond.wait(left)  # woken early by `delivered()`
                continue
            _pending_since = time.monotonic()
            _thread.interrupt_main(signal.SIGINT)  # `_handler` runs again in the main thread


def install(signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) -> None:
    """From now on each of `signals` raises ``KeyboardInterrupt`` in the main thread, again and again
    (every `REDELIVER_S` s) until `delivered()` says the program caught it. Call from the main thread.
    Idempotent."""
    global _watchdog
    for signum in {*signals, signal.SIGINT}:  # the watchdog raises it again through SIGINT's handler
        signal.signal(signum, _handler)
    if _watchdog is None:
        _watchdog = threading.Thread(target=_watch, name="interrupt-watchdog", daemon=True)
        _watchdog.start()
        atexit.register(_at_exit)  # runs before the exit handlers registered earlier (a host's cleanup)


def _at_exit() -> None:
    """The interpreter is exiting: an interrupt nobody caught is not raised into its exit handlers."""
    global _exiting, _pending_since
    with _cond:
        _exiting, _pending_since = True, None
        _cond.notify_all()


def delivered() -> None:
    """The ``KeyboardInterrupt`` reached the code that acts on it: stop raising it again."""
    global _pending_since
    with _cond:
        _pending_since = None
        _cond.notify_all()


def pending() -> bool:
    """True while an interrupt was raised and nobody said they have it."""
    with _cond:
        return _pending_since is not None
