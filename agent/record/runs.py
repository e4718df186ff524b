"""Durable runs: the checkpoint store, one lock per run, and reading runs for ``runs``/``show``.

Everything lives under ``$HYPOLOOP_HOME`` (default ``~/.hypoloop``):

- ``checkpoints.sqlite``: LangGraph's SQLite checkpointer; the thread id is the run id.
- ``locks/RUN_ID.lock``: an ``fcntl.flock`` held by the one process driving the run (``run`` or
  ``resume``); a second process gets :class:`RunInUse`. The lock goes away with its process, also on
  ``kill -9`` (servers are spawned with ``close_fds``, so they never inherit it).
- ``runs/RUN_ID/``: each experiment's saved result and local server logs (``agent.run.recovery``).

What an ended process left behind (saved results, launch records) is read by ``agent.run.recovery``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

from agent.record.transcript import TranscriptError, read_transcript, skip_bad

RunStatus = Literal["running", "waiting_for_approval", "finished", "interrupted"]
#: The one spelling of a waiting run in every ``--json`` output (``run``, ``resume``, ``runs``, ``show``);
#: people read it with spaces.


class RunError(ValueError):
    """A run that cannot be used as asked (unknown id, nothing to resume); one line for the user."""


class RunInUse(RunError):
    """Another hypoloop process is driving this run right now."""


def home_dir() -> Path:
    """``$HYPOLOOP_HOME`` or ``~/.hypoloop`` (also when the variable is empty)."""
    return Path(os.environ.get("HYPOLOOP_HOME") or "~/.hypoloop").expanduser()


class StoreError(RunError):
    """The checkpoint store cannot be read (damaged, truncated, not a database)."""


@contextlib.contextmanager
def open_checkpointer(home: Path) -> Iterator[SqliteSaver]:
    """LangGraph's SQLite saver on ``home/checkpoints.sqlite`` (created with its tables), closed on exit.

    Raises StoreError (one line) when the file is damaged or is an empty (0-byte) file: hypoloop writes
    its tables the moment it creates the store, so an empty one lost its runs and is never taken for
    "no runs yet".
    """
    home.mkdir(parents=True, exist_ok=True)
    path = home / "checkpoints.sqlite"
    if path.exists() and path.stat().st_size == 0:
        raise StoreError(
            f"{path}: the checkpoint store is empty (0 bytes): the runs it held are lost (the file was "
            "truncated); move it away to start a new store (transcripts still hold what each run did)"
        )
    # A generous busy timeout: `runs`/`show` may read while another process writes a checkpoint.
    conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
    try:
        saver = _FaultSaver(conn) if _FAULT_KILL_STORE else SqliteSaver(conn)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            saver.setup()
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{path}: the checkpoint store is damaged ({exc}); move it away to start a new store "
                "(transcripts still hold what each run did)"
            ) from None
        yield saver
    finally:
        conn.close()


#: Fault injection for the kill tests (tests/test_resume_any_kill.py): ``KIND#N[:fill=DIR]`` acts right
#: after the N-th save of KIND is committed to the store, KIND being ``put`` (a checkpoint), ``writes``
#: (a task's pending writes) or ``any`` (either, counted together): it kills this process with SIGKILL,
#: or with ``:fill=DIR`` fills the disk holding DIR (a test's small tmpfs), so the next save meets a
#: real full disk. Unset in normal use.
_FAULT_KILL_STORE = os.environ.get("HYPOLOOP_FAULT_KILL_STORE", "")


class _FaultSaver(SqliteSaver):
    """SqliteSaver that kills its process (or fills a disk) after the save ``HYPOLOOP_FAULT_KILL_STORE``
    names."""

    _seen = 0  # saves of the named kind by this process (every store it opens)

    def _count(self, kind: str) -> None:
        spec, _, action = _FAULT_KILL_STORE.partition(":")
        want, _, nth = spec.partition("#")
        if want not in (kind, "any"):
            return
        _FaultSaver._seen += 1
        if _FaultSaver._seen != int(nth or 1):
            return
        if action.startswith("fill="):
            fd = os.open(Path(action[5:]) / ".filler", os.O_WRONLY | os.O_CREAT, 0o600)
            for chunk in (1 << 16, 512, 1):  # down to the last byte a write can take
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * chunk)
            os.close(fd)
            return
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        out = super().put(*args, **kwargs)
        self._count("put")
        return out

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        super().put_writes(*args, **kwargs)
        self._count("writes")


# ---------------------------------------------------------------------------------------- locks


class RunLock:
    """An exclusive, non-blocking lock on one run (``home/locks/RUN_ID.lock``, holder's pid inside).

    ``acquire()`` raises RunInUse naming the holder's pid. Not re-entrant. The file is never deleted
    (deleting a lock file races with the next locker).
    """

    def __init__(self, home: Path, run_id: str) -> None:
        self.run_id = run_id
        self.path = home / "locks" / f"{run_id}.lock"
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        # A few quick tries: `hypoloop runs` probes the lock for a moment while listing.
        for attempt in range(5):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 4:
                    holder = _read_pid(fd)
                    os.close(fd)
                    who = f" (pid {holder})" if holder else ""
                    raise RunInUse(
                        f"run {self.run_id} is in use by another hypoloop process{who}; "
                        "wait for it to finish or pause, then try again"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def lock_holder(home: Path, run_id: str) -> int | None:
    """The pid holding the run's lock (``-1`` if it cannot be read), or ``None`` when nobody holds it."""
    path = home / "locks" / f"{run_id}.lock"
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------- reading runs


class RunInfo(BaseModel):
    """A run as ``hypoloop runs``/``show`` report it.

    ``pending``: the approval request waiting for an answer (``ApprovalRequest`` as a dict), if any;
    ``holder``: the pid driving the run now. ``status``: ``running`` (a process holds it), ``waiting for
    approval``, ``finished``, or ``interrupted`` (stopped mid-way with nobody driving it: resume it).
    """

    run_id: str
    status: RunStatus
    case: str = ""
    updated: str = ""
    transcript: str | None = None
    pending: dict[str, Any] | None = None
    result: str | None = None
    launches: int = 0
    host_seconds: float = 0.0
    holder: int | None = None
    #: The graph nodes the checkpoint says come next (empty for a run that ended, or whose checkpoint
    #: after its last step was lost: then it has no conclusion and is not finished).
    next: list[str] = []
    #: Servers this run launched that still run on this machine although no process drives the run.
    leftovers: list[dict[str, Any]] = []
    values: dict[str, Any] = {}


def run_ids(saver: SqliteSaver) -> list[str]:
    """Every run id (thread) in the checkpoint store, oldest first."""
    try:
        rows = saver.conn.execute(
            "SELECT thread_id, MIN(checkpoint_id) FROM checkpoints GROUP BY thread_id ORDER BY 2"
        ).fetchall()
    except sqlite3.OperationalError:  # a fresh store: no table yet
        return []
    return [str(r[0]) for r in rows]


def run_info(home: Path, graph: Any, run_id: str) -> RunInfo | None:
    """What the checkpoint store knows about ``run_id`` (``None`` if it has no such run)."""
    snap = graph.get_state({"configurable": {"thread_id": run_id}})
    values: dict[str, Any] = dict(snap.values or {})
    if not values:
        # Killed right after its first save: the checkpoint holds only the run's input, yet to start.
        values = _input_only(graph, run_id)
    if not values:
        return None
    # An answer given to the approval and saved before its process ended is not asked again: the run
    # continues with it (LangGraph's live view still lists the question until the approve step reruns).
    answered = _answer_saved(graph, run_id)
    pending = None if answered else next((i.value for i in snap.interrupts if isinstance(i.value, dict)), None)
    # Every task of the step to come, also one whose writes are saved already (its process ended before
    # the step's checkpoint): LangGraph's ``snap.next`` leaves those out, yet the run must go on from them.
    steps = [t.name for t in snap.tasks]
    holder = lock_holder(home, run_id)
    status: RunStatus
    if pending is not None:
        status = "waiting_for_approval"
    elif not steps and values.get("conclusion"):
        status = "finished"
    else:  # a run with no conclusion never counts as finished, whatever its checkpoint says comes next
        status = "running" if holder else "interrupted"
    conclusion = values.get("conclusion") or {}
    launches = int(values.get("launches", 0))
    host_seconds = float(values.get("host_seconds", 0.0))
    leftovers = [] if holder else local_leftovers(home, run_id)
    if status in ("interrupted", "running") and values.get("transcript"):
        # A launch made after the last checkpoint (its process was killed, or is still watching it)
        # is only in the transcript yet; it is counted in the state when the run continues.
        running = {str(p["log"]) for p in leftovers} if status == "interrupted" else None
        made = _launches_in(Path(values["transcript"]), running)
        host_seconds += sum(made[launches:])
        launches = max(launches, len(made))
    return RunInfo(
        run_id=run_id,
        status=status,
        case=(values.get("case") or {}).get("name", ""),
        updated=str(snap.created_at or ""),
        transcript=values.get("transcript"),
        pending=pending,
        result=conclusion.get("status") or values.get("status"),
        launches=launches,
        host_seconds=round(host_seconds, 3),
        holder=holder,
        next=steps,
        leftovers=leftovers,
        values=values,
    )


def _input_only(graph: Any, run_id: str) -> dict[str, Any]:
    """The input of a run whose only checkpoint is its input (LangGraph's ``__start__`` channel, step -1:
    the process ended before the first step), or ``{}``."""
    saver = graph.checkpointer
    saved = saver.get_tuple({"configurable": {"thread_id": run_id}}) if saver is not None else None
    start = saved.checkpoint.get("channel_values", {}).get("__start__") if saved else None
    return dict(start) if isinstance(start, dict) and start.get("run_id") == run_id else {}


def _answer_saved(graph: Any, run_id: str) -> bool:
    """Whether the run's latest checkpoint holds a saved answer to its approval question (a ``__resume__``
    pending write, saved the moment ``resume --decision`` handed it to the graph) that no step used yet.
    The channel name is LangGraph's ``RESUME`` (``langgraph/_internal/_constants.py``, langgraph 1.x)."""
    saver = graph.checkpointer
    saved = saver.get_tuple({"configurable": {"thread_id": run_id}}) if saver is not None else None
    return bool(saved and any(w[1] == "__resume__" for w in saved.pending_writes or ()))


def local_leftovers(home: Path, run_id: str) -> list[dict[str, Any]]:
    """Servers of ``run_id`` still running on this machine (found by the log path in their environment,
    ``tools/leftovers.py``): pid, log and port of each."""
    from tools.leftovers import port_from_argv, servers_under

    return [
        {"pid": p.pid, "log": p.log_path, "port": port_from_argv(p.argv())}
        for p in servers_under(str(home / "runs" / run_id))
    ]


def _launches_in(transcript: Path, running: set[str] | None = None) -> list[float]:
    """The modelled host-seconds of each server launched according to a transcript, in launch order
    (``server.launched`` events; none if it is unreadable): a launch with an outcome, its outcome's
    host-seconds; else its wall seconds to its ``server.stopped``, or (still open when the transcript
    ends: its process was killed) to the last sign of it (`_open_for`), over the host's time scale.
    ``running``: the logs of servers of the run found running here; given (the run's process is gone), a
    last ``server.launching`` no ``server.launched`` followed (killed between the two) counts too when its
    server started: it runs, or wrote its log (over the time scale of the run's other launches, else 1)."""
    launched: list[tuple[str, float, float, str]] = []  # (experiment id, wall-clock start, time scale, log)
    spent: list[float | None] = []
    last = 0.0
    intent: tuple[str, float, str] | None = None  # a launch written down, not yet seen launched
    try:
        for ev in read_transcript(transcript, on_bad=skip_bad):
            last = max(last, ev.ts)
            exp = ev.data.get("experiment_id")
            if ev.type == "server.launching":
                intent = (str(exp), ev.ts, str(ev.data.get("log") or ""))
            if ev.type == "server.launched":
                intent = None
                start = float(ev.data.get("started_wall") or ev.ts)
                launched.append((str(exp), start, float(ev.data.get("time_scale") or 1.0), str(ev.data.get("log") or "")))
                spent.append(None)
                continue
            i = next((i for i in range(len(launched) - 1, -1, -1) if launched[i][0] == exp), None)
            if i is None:
                continue
            if ev.type == "server.stopped" and spent[i] is None:
                spent[i] = float(ev.data.get("wall_s") or 0.0) / launched[i][2]
            elif ev.type == "outcome" and (timings := ev.data.get("timings") or {}).get("host_seconds") is not None:
                spent[i] = float(timings["host_seconds"])
    except (OSError, TranscriptError):
        return []
    if intent is not None and running is not None and (intent[2] in running or _wrote(intent[2])):
        launched.append((intent[0], intent[1], launched[-1][2] if launched else 1.0, intent[2]))
        spent.append(None)
    return [_open_for(start, last, log) / scale if s is None else s
            for (_, start, scale, log), s in zip(launched, spent, strict=True)]


def _wrote(log: str) -> bool:
    """Whether a server's log on this machine has anything in it (its server started)."""
    try:
        return bool(log) and Path(log).stat().st_size > 0
    except (OSError, ValueError):
        return False


def _open_for(start: float, last: float, log: str) -> float:
    """Wall seconds a launch the transcript never saw stop ran: from its ``start`` to the last sign of it,
    the transcript's ``last`` event or its server log's last write on this machine (the server wrote
    it while it loaded; a log that does not exist here, e.g. on an SSH host, is not read)."""
    with contextlib.suppress(OSError, ValueError):
        if log:
            last = max(last, Path(log).stat().st_mtime)
    return max(0.0, last - start)


#: Compiles the run graph over a checkpoint store to read its state (``agent.run.graph.read_graph``).
GraphReader = Callable[[Path, SqliteSaver], Any]


def list_runs(home: Path, read_graph: GraphReader) -> list[RunInfo]:
    """Every run in ``home``'s checkpoint store, oldest first, read through the graph ``read_graph``
    compiles. Raises StoreError for a damaged store."""
    if not (home / "checkpoints.sqlite").exists():
        return []
    try:
        with open_checkpointer(home) as saver:
            graph = read_graph(home, saver)
            infos = [run_info(home, graph, rid) for rid in run_ids(saver)]
    except (sqlite3.DatabaseError, ValueError) as exc:
        if isinstance(exc, RunError):
            raise
        raise StoreError(f"{home / 'checkpoints.sqlite'}: the checkpoint store is damaged ({exc})") from None
    return [i for i in infos if i is not None]


def load_run(home: Path, run_id: str, read_graph: GraphReader) -> RunInfo:
    """One run, read through the graph ``read_graph`` compiles; raises RunError when the store has no run with that id, StoreError when it is damaged."""
    if (home / "checkpoints.sqlite").exists():
        try:
            with open_checkpointer(home) as saver:
                info = run_info(home, read_graph(home, saver), run_id)
        except (sqlite3.DatabaseError, ValueError) as exc:
            if isinstance(exc, RunError):
                raise
            raise StoreError(
                f"{home / 'checkpoints.sqlite'}: the checkpoint store is damaged ({exc})"
            ) from None
        if info is not None:
            return info
    raise RunError(f"no run {run_id!r} in {home / 'checkpoints.sqlite'} (see `hypoloop runs`)")
