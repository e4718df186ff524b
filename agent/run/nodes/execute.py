"""execute: run the approved experiment on the host and keep its evidence.

Launch the server (or adopt the one an ended process of this run left running, or reuse a result it
already saved), watch its log until ready, crash, stall or timeout, probe it, stop it and verify it is
gone; the evidence (``agent.domain.evidence.RawEvidence``) goes into the state for analyze.

Side effects:

- host: launches one server (``tools.server.ServerSession``), sends the probe requests and
  ``/get_server_info`` to it, stops it (always, also on Ctrl-C: ``Runtime.close`` stops an interrupted
  one); may connect to the host first; after a launch that did not end ready, asks the free space of
  its log's disk (``Host.free_bytes``);
- transcript: ``tool.call`` (launch_server), ``server.launched`` (before anything waits on it) or
  ``server.adopted``, ``observation`` (ready and fatal lines), ``server.ready``, ``probe.result``,
  ``server.crashed``/``server.timeout``, ``server.stopped``, ``experiment.skipped``, ``error`` (the host
  failed), and through ``agent.run.recovery.recover`` ``experiment.recovered``, ``server.lost``,
  ``experiment.relaunched``; sets the transcript's step;
- files: the server's log (``EXP.log``, ``EXP.launchN.log`` for a relaunch) in the run's host workdir
  and the saved result ``$HYPOLOOP_HOME/runs/RUN_ID/EXP.result.json``.

Any host failure (unreachable, changed host key, refused authentication, no SFTP, full disk, missing
launcher) ends the run: the update carries ``status: "error"`` with the cause, and after analyze the
graph's error edge goes to conclude; it is never evidence about the deployment. Besides what the host
raises, a launch that ended without being ready is checked for the launcher having vanished (Python's
"No module named" for the ``-m`` module, exit status 127) and for a full disk under its log. A probe
that fails across a dropped connection is sent again after reconnecting (``agent.run.crashsafe``), and
``server.launching`` is written before the spawn (``agent.run.recovery``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.domain.accuracy import probe_set_jobs
from agent.domain.case import Case, server_api_key
from agent.domain.evidence import RawEvidence, WatchedLaunch
from agent.domain.excerpt import LogExcerpt
from agent.domain.models import Experiment
from agent.record.wire import to_payload
from agent.run.crashsafe import infra_failure, probe_through_drops, server_info_through_drops
from agent.run.progress import LoadProgress
from agent.run.recovery import prior_launch, record_intent, recover, save_result
from agent.run.runtime import Runtime
from agent.run.state import RunState, case_of, next_step
from tools.host import (
    MIN_FREE_BYTES,
    Host,
    HostError,
    ProcessHandle,
    QueuesJobs,
    SchedulerError,
    disk_full_error,
    expand_argv,
)
from tools.probes import ProbeResult, import_client
from tools.server import (
    LaunchResult,
    ServerSession,
    SessionOptions,
    WatchEvent,
    launcher_missing,
    render_command,
)
from tools.signatures import SignatureMatcher
from tools.stall import StallWatch


class JobEnded(SchedulerError):
    """The scheduler ended this experiment's job (cancelled by an operator, preempted, node failure, time
    limit): an infrastructure outcome of this one experiment, not of the host. `evidence` is its
    ``infra_error`` evidence (launched, with the host time it used), already saved as its result."""

    def __init__(self, message: str, evidence: RawEvidence) -> None:
        super().__init__(message)
        self.evidence = evidence


def execute(state: RunState, rt: Runtime) -> RunState:
    """The execute node: see the module docstring."""
    tr = rt.transcript
    exp = Experiment.model_validate(state["pending"])
    if any(o["experiment_id"] == exp.id for o in state.get("outcomes", [])):
        tr.emit("experiment.skipped", {"experiment_id": exp.id, "reason": "already executed"}, node="execute")
        return {"pending": None}
    tr.step = next_step(state)
    unreachable: RunState = {}
    # Earlier attempts of this experiment that launched a server which was lost or stopped before
    # its outcome was read: their launches and host time count against the budget too.
    earlier, earlier_host_s = 0, 0.0
    time_scale = 1.0
    try:
        # An earlier process of this run may have finished this experiment, or left its server
        # running when it died: reuse the result or adopt the server, never launch a duplicate.
        case = case_of(state)
        host = rt.host(case)
        time_scale = host.time_scale
        prior = prior_launch(tr.path, exp.id)  # one read of the transcript serves both
        evidence, adopt, record = recover(rt, host, state["run_id"], exp.id, prior=prior)
        if evidence is None and adopt is None:
            earlier, earlier_host_s = prior.attempts, prior.host_s(host.time_scale)
        elif evidence is None:  # an adopted server counts as the launch and keeps its own clock
            earlier, earlier_host_s = prior.before_adopted(host.time_scale)
        if evidence is None:
            evidence = run_experiment(
                rt, case, state["run_id"], exp, adopt=adopt, record=record, launch_no=prior.attempts + 1
            )
            save_result(rt.state_dir, state["run_id"], evidence, redact=tr.redact)
        elif evidence.status == "infra_error":
            # An earlier process saw the scheduler end this job and was interrupted before ending the
            # run: end it now as it would have (the launch is counted from the saved result).
            tr.emit("error", {"message": evidence.error or "the host failed", "experiment_id": exp.id},
                    node="execute")
            unreachable = infra_failure(rt, exp.id, SchedulerError(evidence.error or "the host failed"))
    except HostError as exc:
        tr.emit("error", {"message": str(exc), "experiment_id": exp.id}, node="execute")
        # Launches of this experiment that produced no outcome, this one included (the host failed
        # under a running server): each used the host, so each counts, with the time it was seen.
        lost = prior_launch(tr.path, exp.id)
        earlier, earlier_host_s = lost.attempts, lost.host_s(time_scale)
        # The host failed, not the server: that is no evidence about the deployment, and nothing more
        # can be learned there. The run ends in error (conclude stops what it can still reach).
        unreachable = infra_failure(rt, exp.id, exc)
        evidence = RawEvidence.infra_error(exp.id, str(exc))
    exp.status = "running"
    return {
        **unreachable,
        "pending": None,
        "raw": evidence.model_dump(mode="json"),
        "experiments": [*state.get("experiments", []), exp.model_dump(mode="json")],
        # Every server start counts against the budget, the lost or interrupted ones too.
        "launches": state.get("launches", 0) + (1 if evidence.launched else 0) + earlier,
        "host_seconds": round(
            state.get("host_seconds", 0.0) + evidence.timings.host_seconds + earlier_host_s, 3
        ),
    }


@dataclass
class _Launch:
    """One launch of an experiment being run: the run around it, the host, what watches it
    (``watched``: signatures, stall, probes; ``excerpt``: the log lines kept as evidence; ``watch``: the
    progress display), its session once made, its start (``t0``, monotonic seconds) and the wall seconds
    spent saving its evidence (``spent``: the orchestrator's time, not the server's)."""

    rt: Runtime
    case: Case
    run_id: str
    exp: Experiment
    host: Host
    watched: WatchedLaunch
    excerpt: LogExcerpt
    watch: LoadProgress | None
    t0: float = 0.0
    spent: float = 0.0
    session: ServerSession | None = None

    def evidence(
        self, res: LaunchResult, server_info: dict[str, Any] | None, *, wall_s: float
    ) -> RawEvidence:
        """The evidence of the launch as it stands (``res``: how the wait for ready ended)."""
        assert self.session is not None
        return RawEvidence.from_launch(
            self.watched, final=self.session.result(), server_info=server_info, t_ready_s=res.t_ready_s,
            wall_s=wall_s,
        )

    def keep(self, res: LaunchResult, server_info: dict[str, Any] | None, *, partial: bool) -> None:
        """Save the evidence so far, on disk before the next event: a kill after the server failed leaves
        what it showed (agent.run.recovery uses it), not a launch to repeat."""
        began = time.monotonic()
        evidence = self.evidence(res, server_info, wall_s=began - self.t0 - self.spent)
        redact = self.rt.transcript.redact
        save_result(self.rt.state_dir, self.run_id, evidence, redact=redact, partial=partial)
        self.spent += time.monotonic() - began

    def cut_off(self, res: LaunchResult, why: str) -> RawEvidence:
        """The scheduler ended the job: what the server showed is no evidence. Its saved result is an
        infra_error (launched, with its host time), so a resume never reads the cut launch as a crash."""
        lost = self.evidence(res, None, wall_s=time.monotonic() - self.t0 - self.spent)
        infra = RawEvidence(experiment_id=self.exp.id, launched=True, status="infra_error", error=why,
                            log_path=self.watched.log_path, timings=lost.timings)
        save_result(self.rt.state_dir, self.run_id, infra, redact=self.rt.transcript.redact)
        return infra


def run_experiment(
    rt: Runtime,
    case: Case,
    run_id: str,
    exp: Experiment,
    *,
    adopt: ProcessHandle | None = None,
    record: dict[str, Any] | None = None,
    launch_no: int = 1,
) -> RawEvidence:
    """Launch one experiment, watch it to ready/crash/timeout, probe it, stop it; return its evidence.

    ``adopt``: instead of launching, take over this server, which an earlier process of the run
    launched (``record`` is its ``server.launched`` event data: port, log). ``launch_no``: which launch
    of this experiment this is (a relaunch after a lost one writes a new log, ``EXP.launchN.log``, and
    leaves the earlier log as it was). The server is stopped (and verified gone) before this returns,
    also on KeyboardInterrupt. Raises HostError when the host itself fails.
    """
    host = rt.host(case)
    port = int(record["port"]) if adopt is not None and record else host.free_port()
    name = exp.id if launch_no <= 1 else f"{exp.id}.launch{launch_no}"
    log_path = adopt.log_path if adopt is not None else f"{host.workdir(run_id)}/{name}.log"
    matcher = SignatureMatcher(rt.signatures_for(case))
    scale = _launch_scale(host, record if adopt is not None else None)
    watched = WatchedLaunch(exp.id, matcher, _stall_watch(rt, case, scale), log_path, scale)
    watch = rt.progress.launch(exp.id, rt.signatures_for(case)) if rt.progress is not None else None
    # excerpt: the lines kept as evidence (tracebacks, errors, warnings, the tail)
    launch = _Launch(rt, case, run_id, exp, host, watched, LogExcerpt(), watch)
    session, argv = _new_session(launch, port)
    rt.sessions[exp.id] = launch.session = session
    with session:
        import_client()  # before the server's clock starts, not while a ready server waits to be probed
        launch.t0 = _start_or_adopt(launch, argv, adopt=adopt, record=record)
        res = _wait_ready(session, watch)
        ended = _ended_by_scheduler(host, session, res)  # asked at once: nothing of it is saved as a crash
        if ended is not None:
            server_info = None
            launch.cut_off(res, ended)
        else:
            server_info = _probe_or_record_failure(launch, res)
            _raise_if_the_host_failed(session, host, log_path)
            # complete: saved before the stop, so a kill during it costs nothing
            launch.keep(res, server_info, partial=False)
        stopped = session.stop()
    wall = time.monotonic() - launch.t0 - launch.spent
    try:
        wall, queued = _record_stop(rt, host, session, exp, stopped, wall=wall, t0=launch.t0)
    except SchedulerError as exc:
        ended = str(exc)
    if ended is not None:
        raise JobEnded(ended, launch.cut_off(res, ended))
    return RawEvidence.from_launch(
        watched,
        final=session.result(),
        server_info=server_info,
        t_ready_s=res.t_ready_s,
        wall_s=wall,
        log_excerpt=launch.excerpt.lines(),
        queued_s=queued,
    )


def _launch_scale(host: Host, adopted: dict[str, Any] | None) -> float:
    """The host time scale a launch runs on: the host's, or for a server adopted from an earlier process
    (``adopted``: its launch record) the one it was launched with, which a resumed process may not share."""
    return float((adopted or {}).get("time_scale") or host.time_scale)


def _ended_by_scheduler(host: Host, session: ServerSession, res: LaunchResult) -> str | None:
    """Why the scheduler ended the job of a launch that did not end ready (`QueuesJobs.job_failure`:
    cancelled by an operator, preempted, node failure...), in the words `_record_stop` uses; None when
    the launch is not a job, ended ready, or ended on its own (its crash is evidence)."""
    if res.status == "ready" or session.handle is None or not isinstance(host, QueuesJobs):
        return None
    failure = host.job_failure(session.handle)
    return None if failure is None else f"{failure}; the outcome is no evidence about the server"


def _raise_if_the_host_failed(session: ServerSession, host: Host, log_path: str) -> None:
    """Raise HostError when a launch that did not end ready (or wrote no log) failed because of the host,
    not the server: its launcher is gone (`tools.server.launcher_missing`: present at the run's start,
    removed or replaced since), or the disk of its log is full (`tools.host.DiskFull`: the server's lines,
    its traceback included, could not be written). Either way the outcome says nothing about the
    deployment. One ``Host.free_bytes`` query, only for such a launch."""
    final = session.result()
    if final.status == "ready" and session.lines:
        return
    missing = launcher_missing(session.argv, session.lines, final.exit_code)
    if missing is not None:
        raise HostError(f"{host.name}: {missing}")
    folder = log_path.rsplit("/", 1)[0] or "/"
    free = host.free_bytes(folder)
    if free is not None and free < MIN_FREE_BYTES:
        raise disk_full_error(host.name, folder, free)


def _stall_watch(rt: Runtime, case: Case, time_scale: float) -> StallWatch:
    """The launch's stall watch: no log progress for a stage-appropriate time (tools/stall.py), capped by
    the case's stall_timeout_s when given; ``time_scale``: the host clock the server runs on."""
    return StallWatch(
        rt.signatures_for(case),
        time_scale=time_scale,
        ceiling_s=case.budget.stall_timeout_s * time_scale if case.budget.stall_timeout_s else None,
    )


def _new_session(launch: _Launch, port: int) -> tuple[ServerSession, list[str]]:
    """(the not yet started server session of ``launch`` on ``port``, its launch argv)."""
    case, exp, host, watched = launch.case, launch.exp, launch.host, launch.watched
    # A server on a batch node must listen beyond its loopback to be reached (SlurmHost.listen_host).
    listen = getattr(host, "listen_host", "127.0.0.1")
    argv = render_command(
        expand_argv(case.launcher.argv, host), case.model.path, exp.config().flags, host=listen, port=port,
        engine=case.launcher.engine_impl(),
    )
    session = ServerSession(
        host,
        argv,
        env=exp.config().env,
        log_path=watched.log_path,
        port=port,
        matcher=watched.matcher,
        on_event=lambda ev: _on_watch_event(launch, ev),
        options=SessionOptions(
            ready_timeout_s=case.budget.ready_timeout_s * watched.time_scale,
            stall_timeout_s=watched.stall.limit,
            api_key=server_api_key(exp.config().flags),
        ),
    )
    return session, argv


def _record_stop(
    rt: Runtime, host: Host, session: ServerSession, exp: Experiment, stopped: bool, *, wall: float, t0: float
) -> tuple[float, float | None]:
    """Record the stopped server (``server.stopped``); return (wall seconds, seconds queued or None).

    Raises SchedulerError when the scheduler ended the job (node failure, cancelled by someone): its
    outcome is no evidence about the server."""
    queued: float | None = None
    if isinstance(host, QueuesJobs) and session.handle is not None:
        # Queue time is not GPU time: host-seconds count from the job's start, wall-clock from submission.
        queued = max(0.0, min(wall, session.handle.started_monotonic - t0))
    rt.transcript.emit(
        "server.stopped",
        {
            "experiment_id": exp.id,
            "verified": stopped,
            "wall_s": round(wall, 3),
            # Where the log stood when hypoloop asked the server to stop: later lines are its shutdown,
            # never evidence (tools.server.ServerSession.stop).
            "log_line_at_stop": session.stop_line,
            "shutdown_lines": len(session.shutdown_lines),
            **_job_record(host, session.handle),
        },
        node="execute",
    )
    rt.sessions.pop(exp.id, None)  # stopped and recorded; Runtime.close() handles only interrupted ones
    failure = host.job_failure(session.handle) if isinstance(host, QueuesJobs) and session.handle else None
    if failure is not None:
        raise SchedulerError(f"{failure}; the outcome is no evidence about the server")
    return wall, queued


def _job_record(host: Host, handle: ProcessHandle | None) -> dict[str, Any]:
    """``{"job": {...}}`` for a server that is a batch job (id, node, state, submitted/started/ended
    wall-clock times, queue seconds: `QueuesJobs.job_info`), else nothing."""
    if handle is None or not isinstance(host, QueuesJobs):
        return {}
    return {"job": host.job_info(handle)}


def _on_watch_event(launch: _Launch, ev: WatchEvent) -> None:
    """Feed the stall watch and the progress display every event and the excerpt every line; record
    ready and fatal lines as observations (whole: the evidence is never cut)."""
    launch.watched.stall.observe(ev)
    if launch.watch is not None:
        launch.watch.observe(ev)
    if ev.kind == "line" and ev.line is not None:
        launch.excerpt.feed(ev.line.line, ev.line.text)
    if ev.kind in ("ready", "fatal") and ev.line is not None:
        launch.rt.transcript.emit(
            "observation",
            {"experiment_id": launch.exp.id, "kind": ev.kind, "line": ev.line.line, "text": ev.line.text},
            node="execute",
        )


def _wait_ready(session: ServerSession, watch: LoadProgress | None) -> LaunchResult:
    """``session.wait_ready()`` with the launch's progress display (if any) shown until it returns."""
    if watch is None:
        return session.wait_ready()
    with watch:
        res = session.wait_ready()
        watch.finish(res.status)
    return res


def _start_or_adopt(
    launch: _Launch, argv: list[str], *, adopt: ProcessHandle | None, record: dict[str, Any] | None
) -> float:
    """Start the server, or take over the one an earlier process launched; the monotonic start time.

    The launch record is on disk before anything waits on the server, so a process that resumes this
    run after a crash can find the server (``agent.run.recovery.recover``) and adopt it.
    """
    session, exp, host = launch.session, launch.exp, launch.host
    assert session is not None
    if adopt is not None:
        return _adopt(launch, adopt, record)
    tr = launch.rt.transcript
    port, log_path = session.port, session.log_path
    t0 = time.monotonic()
    tr.emit(
        "tool.call",
        {"tool": "launch_server", "argv": argv, "env": exp.config().env, "log": log_path},
        node="execute",
    )
    record_intent(tr, exp.id, log_path=log_path, port=port, run_dir=host.workdir(launch.run_id))
    session.start()
    if session.error is not None:  # the host could not start it (missing launcher, full disk)
        raise HostError(session.error)
    handle = session.handle
    tr.emit(
        "server.launched",
        {
            "experiment_id": exp.id,
            "port": port,
            "log": log_path,
            "pid": handle.pid if handle else None,
            "pgid": handle.pgid if handle else None,
            "started_wall": handle.started_wall if handle else None,
            "orchestrator_pid": os.getpid(),
            "time_scale": host.time_scale,  # turns its wall seconds into host-seconds if the run is killed
            **_job_record(host, handle),
        },
        node="execute",
    )
    return t0


def _adopt(launch: _Launch, adopt: ProcessHandle, record: dict[str, Any] | None) -> float:
    """Take over the server an earlier process of the run launched (``record``: its launch record);
    its monotonic start time."""
    session = launch.session
    assert session is not None
    launch.rt.transcript.emit(
        "server.adopted",
        {
            "experiment_id": launch.exp.id,
            "pid": adopt.pid,
            "pgid": adopt.pgid,
            "port": session.port,
            "log": session.log_path,
            "started_wall": adopt.started_wall,
            "reason": f"launched by an earlier hypoloop process (pid {(record or {}).get('orchestrator_pid')}) "
            "that ended while the server was running; this process takes the server over "
            "instead of launching a duplicate",
        },
        node="execute",
    )
    session.adopt(adopt)
    return adopt.started_monotonic


def _probe_or_record_failure(launch: _Launch, res: LaunchResult) -> dict[str, Any] | None:
    """A ready server: ask ``/get_server_info``, run the probes (appended to ``probes``) and watch a
    moment longer for a crash they caused; its server info. Otherwise record the crash or timeout.
    The progress display's per-step timing and the failure line go into the record, so ``replay``
    shows the summary line the live run showed."""
    rt, case, exp, watch, probes = launch.rt, launch.case, launch.exp, launch.watch, launch.watched.probes
    session = launch.session
    assert session is not None
    tr = rt.transcript
    shown: dict[str, Any] = {"stages": watch.stage_seconds} if watch is not None and watch.stage_seconds else {}
    if not (res.status == "ready" and res.base_url):
        launch.keep(res, None, partial=True)  # it crashed or timed out: that is its outcome, whatever happens next
        if watch is not None:
            shown["failed_at"] = watch.failed_at
            if watch.fatal is not None:
                shown["fatal_line"], shown["fatal_text"] = watch.fatal.lineno, watch.fatal.text
        tr.emit(
            "server.crashed" if res.status not in ("timeout", "stalled") else "server.timeout",
            {"experiment_id": exp.id, "status": res.status, "exit_code": res.exit_code, "after_s": res.t_end_s,
             **shown},
            node="execute",
        )
        return None
    tr.emit("server.ready", {"experiment_id": exp.id, "after_s": res.t_ready_s, **shown}, node="execute")
    host = session.host
    api_key = server_api_key(exp.config().flags)  # sent to the server, never written (the transcript redacts it)
    engine = case.launcher.engine_impl().data
    server_info = server_info_through_drops(host, res.base_url, api_key=api_key, paths=engine.server_info)
    send = functools.partial(probe_through_drops, tr, host, res.base_url, model=case.model.path,
                             experiment_id=exp.id, api_key=api_key, generate_api=engine.generate_api)
    asks: list[Callable[[], ProbeResult]] = [functools.partial(send, p) for p in [*case.probes, *exp.probes]]
    for ask in [*asks, *probe_set_jobs(case.reproduce.accuracy, send, case.reproduce.concurrency)]:  # graded
        pr = ask()
        probes.append(pr)
        if not pr.ok:  # the server may die of it: what it answered is kept before anything else happens
            launch.keep(res, server_info, partial=True)
        tr.emit("probe.result", to_payload("probe.result", pr, experiment_id=exp.id), node="execute")
        if pr.status in ("connection_error", "timeout"):
            break
    session.watch(2.0 if any(not p.ok for p in probes) else 0.2)
    return server_info
