"""What an earlier process of a run left behind, so that nothing is launched twice.

- ``runs/RUN_ID/EXP_ID.result.json`` under ``$HYPOLOOP_HOME``: an experiment's evidence
  (``agent.domain.evidence.RawEvidence``), saved the moment it is complete, so a process killed after a launch
  finished but before its checkpoint was written does not launch again.
- A launch is recorded in the transcript twice: ``server.launching`` (log, port, run directory) BEFORE
  the process is spawned (`record_intent`), ``server.launched`` (pid, process group) before anything
  waits on it; :func:`prior_launch` reads those records back on resume and :func:`recover` decides
  between reusing a result, adopting a live server and launching again. A kill between the two leaves
  an intent that `resolve_intent` settles by finding the server by its log (``Host.find_launch``: the
  log path is in a local server's environment, an SSH server's session leader writes ``LOG.pid`` first).
- The evidence is saved before the server is stopped; a kill during the stop leaves a result and a
  running server, which `stop_leftover` stops before the result is reused.
- Damaged transcript lines are skipped (``on_bad``): recovery reads past them.

Side effects: ``save_result`` writes the result file; ``recover`` and ``emit_once`` append to the
transcript.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agent.domain.evidence import RawEvidence
from agent.record.redact import redact_data
from agent.record.transcript import Transcript, TranscriptError, TranscriptEvent, read_transcript, skip_bad
from tools.host import HostError, ProcessHandle

if TYPE_CHECKING:
    from agent.run.runtime import Runtime


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


def result_path(home: Path, run_id: str, experiment_id: str, *, partial: bool = False) -> Path:
    """Where an experiment's evidence is kept once complete (``partial``: while it is being gathered)."""
    return home / "runs" / run_id / f"{experiment_id}.{'partial' if partial else 'result'}.json"


def save_result(
    home: Path,
    run_id: str,
    evidence: RawEvidence,
    *,
    redact: Callable[[str], str] | None = None,
    partial: bool = False,
) -> None:
    """Write an experiment's evidence atomically (temp file, fsync, rename); ``redact`` (the run's
    redactor) keeps secrets out of it (a log line may quote ``api_key='...'``). Raises OSError naming the
    file (e.g. ENOSPC: a full disk)."""
    path = result_path(home, run_id, evidence.experiment_id, partial=partial)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    data = evidence.model_dump(mode="json")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(redact_data(data, redact) if redact is not None else data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc  # a full disk: say which file


def load_result(home: Path, run_id: str, experiment_id: str, *, partial: bool = False) -> RawEvidence | None:
    """The saved evidence of an experiment, if a process completed it (None if absent or unreadable);
    ``partial``: what a process had gathered when it last saved (a launch it did not finish)."""
    path = result_path(home, run_id, experiment_id, partial=partial)
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
    ``server.stopped``, or to the last event recorded while it was being watched when nobody stopped it;
    ``open_wall_s``: the part of ``wall_s`` that belongs to the launch still open (a server adopted keeps
    counting its own clock from its start, so that part is not added again). ``scales``: each launch's
    host time scale as its ``server.launched`` recorded it (None where it did not), in launch order;
    ``walls``: each launch's part of ``wall_s``; ``unstopped``: the last launch has no ``server.stopped``.
    """

    open: dict[str, Any] | None
    attempts: int
    wall_s: float = 0.0
    open_wall_s: float = 0.0
    walls: list[float] = field(default_factory=list)
    scales: list[float | None] = field(default_factory=list)
    unstopped: bool = False

    def host_s(self, default_scale: float, *, skip_open: bool = False) -> float:
        """Host-seconds of the launches seen: each launch's wall seconds over the time scale it ran under
        (a resumed process may run at another one), ``default_scale`` where none was recorded;
        ``skip_open``: without the launch still open (its server is adopted and keeps its own clock)."""
        walls = self.walls[:-1] if skip_open and self.unstopped else self.walls
        return round(sum(w / (s or default_scale) for w, s in zip(walls, self.scales, strict=False)), 3)

    def before_adopted(self, default_scale: float) -> tuple[int, float]:
        """Launches and host-seconds (``host_s``) of the earlier attempts when the open launch's server is
        adopted: every attempt but the adopted one (which counts as this experiment's launch), or all of
        them when the adopted server was found from a launch intent that no ``server.launched`` recorded."""
        if self.open is not None and not self.open.get("intent") and self.attempts:
            return self.attempts - 1, self.host_s(default_scale, skip_open=True)
        return self.attempts, self.host_s(default_scale)


def prior_launch(transcript: Path, experiment_id: str) -> PriorLaunch:
    """Read the transcript for earlier launches of ``experiment_id`` (a missing transcript: none)."""
    record: dict[str, Any] | None = None
    attempts = 0
    wall = open_wall = 0.0
    start: float | None = None  # wall-clock start of the attempt being followed
    last = 0.0  # the latest event seen while it ran
    walls: list[float] = []
    scales: list[float | None] = []
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
                    walls.append(max(0.0, last - start))
                attempts += 1
                scales.append(float(ev.data["time_scale"]) if ev.data.get("time_scale") else None)
                record = dict(ev.data)
                start = float(ev.data.get("started_wall") or ev.ts)
            elif ev.type == "server.adopted":
                record = dict(ev.data)
            elif ev.type == "server.stopped":
                record = None
            last = max(last, ev.ts)
            if ev.type == "server.stopped" and start is not None:
                walls.append(max(0.0, last - start))
                start = None
        if start is not None:
            open_wall = max(0.0, last - start)
            walls.append(open_wall)
    except TranscriptError:
        pass
    wall = sum(walls)
    return PriorLaunch(open=record, attempts=attempts, wall_s=round(wall, 3), open_wall_s=round(open_wall, 3),
                       walls=walls, scales=scales, unstopped=start is not None)


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
        _use_saved_result(tr, host, experiment_id, prior or prior_launch(tr.path, experiment_id))
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
        gathered = _lost_server(rt, run_id, experiment_id, prior.open)
        if gathered is not None:
            return gathered, None, None
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


def _use_saved_result(tr: Transcript, host: Any, experiment_id: str, prior: PriorLaunch) -> None:
    """An earlier process finished ``experiment_id`` and saved its result: stop the server it may have
    left running and write ``experiment.recovered``."""
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


def _lost_server(rt: Runtime, run_id: str, experiment_id: str, record: dict[str, Any]) -> RawEvidence | None:
    """The server an ended process launched (``record``) is gone: the evidence that process saved when it
    shows the failure (``experiment.recovered``; nothing is launched again), else None (``server.lost``)."""
    tr = rt.transcript
    gathered = load_result(rt.state_dir, run_id, experiment_id, partial=True)
    if gathered is not None and _shows_failure(gathered):
        # The server is gone, but what the earlier process saw explains why (it crashed, or a probe
        # failed): that is the outcome; launching again would repeat the experiment.
        tr.emit(
            "experiment.recovered",
            {
                "experiment_id": experiment_id,
                "reason": "the process watching this launch was killed after the server failed; the "
                "evidence it had saved is the outcome, and nothing is launched again",
            },
            node="execute",
        )
        return gathered
    tr.emit(
        "server.lost",
        {
            "experiment_id": experiment_id,
            "pid": record.get("pid"),
            "log": record.get("log"),
            "reason": "launched by an earlier process that ended; the server is no longer running and "
            "its outcome was never read",
        },
        node="execute",
    )
    return None


def record_intent(tr: Transcript, experiment_id: str, *, log_path: str, port: int, run_dir: str) -> None:
    """Write ``server.launching`` (the launch about to happen) before the process is spawned."""
    tr.emit(
        "server.launching",
        {"experiment_id": experiment_id, "log": log_path, "port": port, "run_dir": run_dir},
        node="execute",
    )


def find_launch(host: Any, log_path: str) -> ProcessHandle | None:
    """The live server launched with ``log_path`` on ``host`` (a host that cannot tell: None)."""
    finder = getattr(host, "find_launch", None)
    if finder is None or not log_path:
        return None
    handle: ProcessHandle | None = finder(log_path)
    return handle


def _log_started(host: Any, log_path: str) -> bool:
    try:
        return bool(host.read_from(log_path, 0, 1))
    except HostError:
        return False


def resolve_intent(
    tr: Transcript, host: Any, experiment_id: str, prior: PriorLaunch
) -> ProcessHandle | None:
    """An earlier process wrote ``server.launching`` for this experiment and died before
    ``server.launched``: find out what became of that launch.

    Returns the handle of the server if it runs (``prior.open`` becomes its launch record, with pid, and
    a ``server.launched`` marked ``recovered`` is written so the transcript counts it); if it started and
    is gone, records it as launched (``prior.attempts`` + 1) and leaves ``prior.open`` for ``server.lost``;
    if it never started, clears ``prior.open``. Raises HostError when the host cannot be asked.
    """
    intent = prior.open
    assert intent is not None
    log = str(intent.get("log") or "")
    handle = find_launch(host, log)
    if handle is None and not _log_started(host, log):
        prior.open = None  # killed before the spawn: nothing ran, nothing counts
        return None
    record = {
        "experiment_id": experiment_id,
        "port": intent.get("port"),
        "log": log,
        "pid": handle.pid if handle else None,
        "pgid": handle.pgid if handle else None,
        "started_wall": handle.started_wall if handle else None,
        "orchestrator_pid": None,
        "recovered": True,
        "reason": "the process that launched it was killed before it could record the launch; found by "
        + ("its log path" if handle else "its log, but the server is no longer running"),
    }
    tr.emit("server.launched", record, node="execute")
    prior.attempts += 1
    prior.open = record
    return handle


def stop_leftover(
    tr: Transcript,
    host: Any,
    experiment_id: str,
    record: dict[str, Any],
    *,
    reason: str = "its result was saved before an earlier process was killed; stopped now",
) -> None:
    """Stop the server of an open launch record whose result is already saved (an earlier process was
    killed while stopping it), and record the stop. Never raises for a host that cannot be reached."""
    handle = handle_from_record(record) or find_launch(host, str(record.get("log") or ""))
    if handle is None:
        return
    try:
        verified = host.terminate(handle, grace_s=5.0)
    except HostError:
        verified = False
    tr.emit(
        "server.stopped",
        {"experiment_id": experiment_id, "pid": handle.pid, "log": handle.log_path, "verified": verified,
         "wall_s": 0.0, "reason": reason},
        node="execute",
    )


def open_launches(tr: Transcript) -> dict[str, dict[str, Any]]:
    """Launch records of the transcript that no ``server.stopped`` closed, by experiment id."""
    ids = {
        str(ev.data.get("experiment_id"))
        for ev in read_transcript(tr.path, on_bad=skip_bad)
        if ev.type in ("server.launching", "server.launched", "server.adopted")
    }
    out = {}
    for exp_id in sorted(ids):
        rec = prior_launch(tr.path, exp_id).open
        if rec is not None:
            out[exp_id] = rec
    return out


def _shows_failure(evidence: RawEvidence) -> bool:
    """Whether saved partial evidence already ends the launch: it crashed, exited or timed out, or a probe
    failed (the server's end is then explained by what was seen)."""
    if evidence.status not in (None, "ready"):
        return True
    return any(not p.ok for p in evidence.probes)
