"""Durable runs: the checkpoint store, one lock per run, reading paused runs, and what an ended process
left behind.

Everything lives under ``$HYPOLOOP_HOME`` (default ``~/.hypoloop``):

- ``checkpoints.sqlite``: LangGraph's SQLite checkpointer; the thread id is the run id.
- ``locks/RUN_ID.lock``: an ``fcntl.flock`` held by the one process driving the run (``run`` or
  ``resume``); a second process gets :class:`RunInUse`. The lock goes away with its process, also on
  ``kill -9`` (servers are spawned with ``close_fds``, so they never inherit it).
- ``runs/RUN_ID/EXP_ID.result.json``: an experiment's raw evidence, saved the moment it is complete, so a
  process killed after a launch finished but before its checkpoint was written does not launch again.

A launch is recorded in the transcript (``server.launched`` with pid, process group, log and port)
before anything waits on it; :func:`prior_launch` reads that record back on resume.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

from agent.case import load_case
from agent.transcript import Transcript, TranscriptError, TranscriptEvent, read_transcript, skip_bad
from tools.host import ProcessHandle

if TYPE_CHECKING:
    from agent.graph import Runtime

RunStatus = Literal["running", "waiting for approval", "finished", "interrupted"]


class RunError(ValueError):
    """A run that cannot be used as asked (unknown id, nothing to resume); one line for the user."""


class RunInUse(RunError):
    """Another hypoloop process is driving this run right now."""


def home_dir() -> Path:
    """``$HYPOLOOP_HOME`` or ``~/.hypoloop``."""
    return Path(os.environ.get("HYPOLOOP_HOME", "~/.hypoloop")).expanduser()


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
        saver = SqliteSaver(conn)
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


class _ReadOnlyTranscript(Transcript):
    """Stands in for a transcript when a graph is built only to read checkpoints (never emits)."""

    def __init__(self) -> None:
        self.path = Path(os.devnull)
        self.run_id = ""
        self.step = 0
        self.seq = 0
        self.listeners = []

    def emit(self, type: str, data: dict[str, Any] | None = None, *, node: str = "") -> TranscriptEvent:
        raise RuntimeError("a read-only runtime does not write transcripts")

    def close(self) -> None:
        return None


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


def read_graph(home: Path, saver: SqliteSaver) -> Any:
    """The run graph compiled over ``saver`` with a runtime that can only read (for ``get_state``)."""
    from agent.graph import Runtime, build_graph

    return build_graph(Runtime(_ReadOnlyTranscript(), home), saver)


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
        return None
    pending = next((i.value for i in snap.interrupts if isinstance(i.value, dict)), None)
    holder = lock_holder(home, run_id)
    status: RunStatus
    if pending is not None:
        status = "waiting for approval"
    elif not snap.next and values.get("conclusion"):
        status = "finished"
    else:  # a run with no conclusion never counts as finished, whatever its checkpoint says comes next
        status = "running" if holder else "interrupted"
    conclusion = values.get("conclusion") or {}
    launches = int(values.get("launches", 0))
    if status in ("interrupted", "running") and values.get("transcript"):
        # A launch made after the last checkpoint (its process was killed, or is still watching it)
        # is only in the transcript yet; it is counted in the state when the run continues.
        launches = max(launches, _launches_in(Path(values["transcript"])))
    return RunInfo(
        run_id=run_id,
        status=status,
        case=(values.get("case") or {}).get("name", ""),
        updated=str(snap.created_at or ""),
        transcript=values.get("transcript"),
        pending=pending,
        result=conclusion.get("status") or values.get("status"),
        launches=launches,
        host_seconds=values.get("host_seconds", 0.0),
        holder=holder,
        next=list(snap.next or ()),
        leftovers=[] if holder else local_leftovers(home, run_id),
        values=values,
    )


def local_leftovers(home: Path, run_id: str) -> list[dict[str, Any]]:
    """Servers of ``run_id`` still running on this machine (found by the log path in their environment,
    ``tools/leftovers.py``): pid, log and port of each."""
    from tools.leftovers import servers_under
    from tools.ssh import _port_from_argv

    return [
        {"pid": p.pid, "log": p.log_path, "port": _port_from_argv(p.handle().argv)}
        for p in servers_under(str(home / "runs" / run_id))
    ]


def _launches_in(transcript: Path) -> int:
    """Servers launched according to a transcript (``server.launched`` events; 0 if it is unreadable)."""
    try:
        return sum(1 for ev in read_transcript(transcript, on_bad=skip_bad) if ev.type == "server.launched")
    except (OSError, TranscriptError):
        return 0


def list_runs(home: Path) -> list[RunInfo]:
    """Every run in ``home``'s checkpoint store, oldest first. Raises StoreError for a damaged store."""
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


def load_run(home: Path, run_id: str) -> RunInfo:
    """One run; raises RunError when the store has no run with that id, StoreError when it is damaged."""
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


def seed_state(state: dict[str, Any], thread_id: str | None) -> dict[str, Any]:
    """The initial state of a run started with only ``{"case_ref": "lab:WORLD"}`` (LangGraph Studio).

    Empty when the state already holds a case. Raises CaseError for a bad reference.
    """
    if state.get("case") or not state.get("case_ref"):
        return {}
    case = load_case(str(state["case_ref"]))
    return initial_state(
        state.get("run_id") or thread_id or time.strftime("%Y%m%d-%H%M%S"),
        case.model_dump(mode="json"),
        approval=state.get("approval") or case.approval,
    )


def initial_state(run_id: str, case: dict[str, Any], *, approval: str, **extra: Any) -> dict[str, Any]:
    """The state a new run starts from (one shape for the CLI and LangGraph Studio); ``extra`` adds keys
    such as the transcript path and the planner spec."""
    return {
        "run_id": run_id,
        "case": case,
        "approval": approval,
        "launches": 0,
        "host_seconds": 0.0,
        "experiments": [],
        "outcomes": [],
        "rejections": [],
        "hypotheses": [],
        "edits": [],
        "approval_seq": 0,
        **extra,
    }


def emit_once(
    tr: Transcript, type: str, data: dict[str, Any], *, node: str, key: tuple[str, ...]
) -> TranscriptEvent | None:
    """Emit an event unless the transcript already holds one of this type with the same ``key`` fields.

    For events written before an ``interrupt()``: LangGraph runs the node again from its first line
    when the run is resumed, in this process or another one. Returns the event, or ``None`` if it was
    already there.
    """
    want = {k: data.get(k) for k in key}
    try:
        for ev in read_transcript(tr.path, on_bad=skip_bad):
            if ev.type == type and all(ev.data.get(k) == v for k, v in want.items()):
                return None
    except TranscriptError:
        pass
    return tr.emit(type, data, node=node)


# ---------------------------------------------------------------------------------------- recovery


def result_path(home: Path, run_id: str, experiment_id: str) -> Path:
    """Where an experiment's raw evidence is kept once complete."""
    return home / "runs" / run_id / f"{experiment_id}.result.json"


def save_result(home: Path, run_id: str, raw: dict[str, Any]) -> None:
    """Write an experiment's raw evidence atomically (temp file, fsync, rename)."""
    path = result_path(home, run_id, raw["experiment_id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(raw, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_result(home: Path, run_id: str, experiment_id: str) -> dict[str, Any] | None:
    """The saved raw evidence of an experiment, if a process completed it."""
    path = result_path(home, run_id, experiment_id)
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


@dataclass
class PriorLaunch:
    """What earlier processes of this run did with one experiment, from the transcript.

    ``open``: the last ``server.launched``/``server.adopted`` record that no ``server.stopped`` followed
    (the process driving it ended mid-way), else ``None``. ``attempts``: launches recorded so far.
    ``wall_s``: wall-clock seconds those launches are known to have run (seconds), from each launch to its
    ``server.stopped``, or to the last event recorded while it was being watched when nobody stopped it.
    """

    open: dict[str, Any] | None
    attempts: int
    wall_s: float = 0.0


def prior_launch(transcript: Path, experiment_id: str) -> PriorLaunch:
    """Read the transcript for earlier launches of ``experiment_id`` (a missing transcript: none)."""
    record: dict[str, Any] | None = None
    attempts = 0
    wall = 0.0
    start: float | None = None  # wall-clock start of the attempt being followed
    last = 0.0  # the latest event seen while it ran
    try:
        for ev in read_transcript(transcript, on_bad=skip_bad):
            if ev.data.get("experiment_id") != experiment_id:
                continue
            if ev.type in ("server.lost", "experiment.relaunched", "experiment.recovered"):
                continue  # written by a later process: not time the server was seen running
            if ev.type == "server.launching":  # an intent; superseded by the server.launched after it
                record = {**ev.data, "intent": True}
            elif ev.type == "server.launched":
                if start is not None:
                    wall += max(0.0, last - start)
                attempts += 1
                record = dict(ev.data)
                start = float(ev.data.get("started_wall") or ev.ts)
            elif ev.type == "server.adopted":
                record = dict(ev.data)
            elif ev.type == "server.stopped":
                record = None
            last = max(last, ev.ts)
            if ev.type == "server.stopped" and start is not None:
                wall += max(0.0, last - start)
                start = None
        if start is not None:
            wall += max(0.0, last - start)
    except TranscriptError:
        pass
    return PriorLaunch(open=record, attempts=attempts, wall_s=round(wall, 3))


def handle_from_record(record: dict[str, Any]) -> ProcessHandle | None:
    """The process handle a ``server.launched`` record describes (``None`` for a record without a pid).

    The monotonic start is rebuilt from the wall-clock start, so the ready deadline and the host-seconds
    keep counting from the original launch in a new process.
    """
    if not record.get("pid") or not record.get("log"):
        return None
    started_wall = float(record.get("started_wall") or time.time())
    return ProcessHandle(
        pid=int(record["pid"]),
        pgid=int(record.get("pgid") or record["pid"]),
        argv=[],
        log_path=str(record["log"]),
        started_wall=started_wall,
        started_monotonic=time.monotonic() - max(0.0, time.time() - started_wall),
    )


def recover(
    rt: Runtime, host: Any, run_id: str, experiment_id: str, *, prior: PriorLaunch | None = None
) -> tuple[dict[str, Any] | None, ProcessHandle | None, dict[str, Any] | None]:
    """Before executing an experiment: what an earlier process of this run left behind.

    Returns ``(raw, adopt, record)``: the saved raw result if the experiment completed (nothing is
    launched again), or the handle and launch record of a server still running that an ended process
    launched (to adopt instead of launching a duplicate), or ``(None, None, None)`` to launch. Writes
    what it found to the transcript: ``experiment.recovered``, ``server.lost`` + ``experiment.relaunched``
    (the earlier server is gone), or ``experiment.relaunched`` (an earlier attempt was stopped before it
    finished).
    """
    from agent.crashsafe import resolve_intent, stop_leftover

    tr = rt.transcript
    raw = load_result(rt.state_dir, run_id, experiment_id)
    if raw is not None:
        prior = prior or prior_launch(tr.path, experiment_id)
        if prior.open is not None and not prior.open.get("intent"):
            stop_leftover(tr, host, experiment_id, prior.open)
        tr.emit(
            "experiment.recovered",
            {
                "experiment_id": experiment_id,
                "reason": "an earlier process finished this experiment but ended before saving the run's "
                "state; its result is used and nothing is launched again",
            },
            node="execute",
        )
        return raw, None, None
    prior = prior or prior_launch(tr.path, experiment_id)  # the caller may have read it already
    if prior.open is not None and prior.open.get("intent"):
        found = resolve_intent(tr, host, experiment_id, prior)
        if found is not None and prior.open is not None:
            return None, found, prior.open
    if prior.open is not None:
        handle = handle_from_record(prior.open)
        if handle is not None and host.is_alive(handle):
            return None, handle, prior.open
        tr.emit(
            "server.lost",
            {
                "experiment_id": experiment_id,
                "pid": prior.open.get("pid"),
                "log": prior.open.get("log"),
                "reason": "launched by an earlier process that ended; the server is no longer running and "
                "its outcome was never read",
            },
            node="execute",
        )
    if prior.attempts:
        tr.emit(
            "experiment.relaunched",
            {
                "experiment_id": experiment_id,
                "earlier_launches": prior.attempts,
                "reason": "an earlier launch of this experiment did not finish (its process was stopped or "
                "ended), so it is launched again",
            },
            node="execute",
        )
    return None, None, None
