"""Crash safety around launches: the intent written before a server starts, and what a later process
does with an intent, a saved result or a transcript it finds after a ``kill -9``.

Order of records for one launch (each flushed and fsynced before the next step):

1. ``server.launching`` {experiment_id, log, port, run_dir}: written BEFORE the process is spawned;
2. the spawn (the server's environment carries its log path, ``tools/leftovers.py``; over SSH its
   session leader writes ``LOG.pid`` before the server starts);
3. ``server.launched`` {pid, pgid, ...}; watching, probing;
4. the raw result saved (``runs/RUN/EXP.result.json``) while the server still runs;
5. the stop, ``server.stopped``.

A kill between 1 and 3 leaves an intent without a launch: `resolve_intent` finds the server by its log
(adopt it), or sees that it started and died (a lost launch, recorded as launched then lost), or that it
never started (nothing to count). A kill between 4 and 5 leaves a result and a running server:
`stop_leftover` stops it before the result is reused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.transcript import Transcript
from tools.host import HostError, ProcessHandle

if TYPE_CHECKING:
    from agent.runs import PriorLaunch


def record_intent(tr: Transcript, experiment_id: str, *, log_path: str, port: int, run_dir: str) -> None:
    """Write ``server.launching`` (the launch about to happen) before the process is spawned."""
    tr.emit(
        "server.launching",
        {"experiment_id": experiment_id, "log": log_path, "port": port, "run_dir": run_dir},
        node="execute",
    )


def _find(host: Any, log_path: str) -> ProcessHandle | None:
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


def resolve_intent(tr: Transcript, host: Any, experiment_id: str, prior: PriorLaunch) -> ProcessHandle | None:
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
    handle = _find(host, log)
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
    from agent.runs import handle_from_record

    handle = handle_from_record(record) or _find(host, str(record.get("log") or ""))
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


#: Probe statuses a dropped connection can cause (the request never reached the server, or its answer
#: never came back); any other status is the server's own answer.
_TRANSPORT_STATUSES = ("connection_error", "timeout")


def probe_through_drops(
    tr: Transcript,
    host: Any,
    base_url: str,
    probe: Any,
    *,
    model: str,
    experiment_id: str,
    api_key: str | None = None,
    tries: int = 3,
) -> Any:
    """`tools.probes.run_probe`, except that a failure which coincides with a lost connection to the host
    is not the server's outcome: the connection is re-established and the probe sent again (each retry
    recorded as ``probe.retried``). A host without a connection (local) probes once.

    Raises HostUnreachable when the connection cannot be re-established or keeps dropping, HostError
    for a reconnect refused (changed host key, authentication), so the run ends in error instead of
    counting the failure as evidence.
    """
    from tools.host import HostUnreachable
    from tools.probes import run_probe

    for attempt in range(1, tries + 1):
        epoch = getattr(host, "connection_epoch", None)
        result = run_probe(base_url, probe, model=model, api_key=api_key)
        if result.status not in _TRANSPORT_STATUSES or epoch is None:
            return result
        host.check_connection()
        if host.connection_epoch == epoch:
            return result  # the connection held throughout: the server itself failed to answer
        tr.emit(
            "probe.retried",
            {
                "experiment_id": experiment_id,
                "probe_id": result.probe_id,
                "attempt": attempt,
                "discarded_status": result.status,
                "discarded_error": result.error,
                "reason": "the connection to the host was lost while the probe ran; it is not the server's "
                "answer, so the probe is sent again after reconnecting",
            },
            node="execute",
        )
    raise HostUnreachable(
        f"{getattr(host, 'name', 'the host')}: the connection dropped during probe {probe.id} {tries} times; "
        "the server's answer could not be read"
    )


def server_info_through_drops(host: Any, base_url: str, *, api_key: str | None = None) -> dict[str, Any] | None:
    """`tools.probes.get_server_info`, asked once more when no answer came and the connection dropped."""
    from tools.probes import get_server_info

    epoch = getattr(host, "connection_epoch", None)
    info = get_server_info(base_url, api_key=api_key)
    if info is None and epoch is not None:
        host.check_connection()
        if host.connection_epoch != epoch:
            info = get_server_info(base_url, api_key=api_key)
    return info


def api_key_of(flags: dict[str, Any]) -> str | None:
    """The ``--api-key`` a server is launched with (SGLang's flag; None when it has none)."""
    value = flags.get("--api-key")
    return str(value) if isinstance(value, str) and value else None


def infra_failure(rt: Any, experiment_id: str, exc: HostError) -> dict[str, Any]:
    """The state update that ends a run whose host failed under an experiment (lost connection, changed
    host key, refused authentication, no SFTP, full disk, missing launcher): status ``error`` with the
    cause in plain words. A server that cannot be reached now is left for the next run's orphan sweep."""
    from tools.host import HostUnreachable

    note = ""
    if isinstance(exc, HostUnreachable):
        rt.sessions.pop(experiment_id, None)  # it cannot be stopped now; the next run there stops it
        note = " (a server left running there is reported and stopped by the next run on that host)"
    return {
        "status": "error",
        "error": f"the host failed during experiment {experiment_id}, so the run cannot go on: {exc}{note}",
    }


def open_launches(tr: Transcript) -> dict[str, dict[str, Any]]:
    """Launch records of the transcript that no ``server.stopped`` closed, by experiment id."""
    from agent.runs import prior_launch
    from agent.transcript import read_transcript, skip_bad

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


def end_lost_run(rt: Any, graph: Any, config: dict[str, Any], values: dict[str, Any]) -> None:
    """End a run whose checkpoint has no next step and no conclusion: stop every server its transcript
    shows running (found by pid or by log), then route the graph to ``conclude`` with status ``error``."""
    from agent.case import Case

    tr: Transcript = rt.transcript
    left = open_launches(tr)
    if left:
        try:
            host = rt.host(Case.model_validate(values["case"]))
        except HostError as exc:
            tr.emit("error", {"message": f"cannot reach the host to stop this run's servers: {exc}"})
        else:
            for exp_id, record in left.items():
                if record.get("intent"):
                    handle = _find(host, str(record.get("log") or ""))
                    if handle is None:
                        continue
                    record = {**record, "pid": handle.pid, "pgid": handle.pgid}
                stop_leftover(tr, host, exp_id, record, reason="the run is ended; its server is stopped")
    graph.update_state(
        config,
        {
            "status": "error",
            "error": "the run's saved state ends without a conclusion and without a next step (the checkpoint "
            "after its last step was lost); it is ended here: its transcript has everything it did",
        },
        as_node="execute",
    )
