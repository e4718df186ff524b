"""What an earlier process of a run left behind, so that nothing is launched twice.

- ``runs/RUN_ID/EXP_ID.result.json`` under ``$HYPOLOOP_HOME``: an experiment's evidence
  (``agent.evidence.RawEvidence``), saved the moment it is complete, so a process killed after a launch
  finished but before its checkpoint was written does not launch again.
- A launch is recorded in the transcript (``server.launched`` with pid, process group, log and port)
  before anything waits on it; :func:`prior_launch` reads that record back on resume and :func:`recover`
  decides between reusing a result, adopting a live server and launching again.

Side effects: ``save_result`` writes the result file; ``recover`` and ``emit_once`` append to the
transcript.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agent.evidence import RawEvidence
from agent.redact import scrub
from agent.transcript import Transcript, TranscriptError, TranscriptEvent, read_transcript
from tools.host import ProcessHandle

if TYPE_CHECKING:
    from agent.runtime import Runtime


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
        for ev in read_transcript(tr.path):
            if ev.type == type and all(ev.data.get(k) == v for k, v in want.items()):
                return None
    except TranscriptError:
        pass
    return tr.emit(type, data, node=node)


def result_path(home: Path, run_id: str, experiment_id: str) -> Path:
    """Where an experiment's raw evidence is kept once complete."""
    return home / "runs" / run_id / f"{experiment_id}.result.json"


def save_result(home: Path, run_id: str, evidence: RawEvidence) -> None:
    """Write an experiment's evidence atomically (temp file, fsync, rename)."""
    path = result_path(home, run_id, evidence.experiment_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(scrub(evidence.model_dump(mode="json")), fh)  # a server's --api-key is never written
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_result(home: Path, run_id: str, experiment_id: str) -> RawEvidence | None:
    """The saved evidence of an experiment, if a process completed it (None if absent or unreadable)."""
    path = result_path(home, run_id, experiment_id)
    try:
        return RawEvidence.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None


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
        for ev in read_transcript(transcript):
            if ev.data.get("experiment_id") != experiment_id:
                continue
            if ev.type in ("server.lost", "experiment.relaunched", "experiment.recovered"):
                continue  # written by a later process: not time the server was seen running
            if ev.type == "server.launched":
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
) -> tuple[RawEvidence | None, ProcessHandle | None, dict[str, Any] | None]:
    """Before executing an experiment: what an earlier process of this run left behind.

    Returns ``(evidence, adopt, record)``: the saved result if the experiment completed (nothing is
    launched again), or the handle and launch record of a server still running that an ended process
    launched (to adopt instead of launching a duplicate), or ``(None, None, None)`` to launch. Writes
    what it found to the transcript: ``experiment.recovered``, ``server.lost`` + ``experiment.relaunched``
    (the earlier server is gone), or ``experiment.relaunched`` (an earlier attempt was stopped before it
    finished).
    """
    tr = rt.transcript
    raw = load_result(rt.state_dir, run_id, experiment_id)
    if raw is not None:
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
