"""Crash safety of a run beyond its launch records (those are in ``agent.run.recovery``): infrastructure
failures are not evidence, and a run whose checkpoint lost its next step is ended honestly.

- `probe_through_drops`: a probe whose failure coincides with a lost connection to the host is sent
  again after reconnecting (``probe.retried``), never counted as the server's answer.
- `infra_failure`: any host failure during an experiment ends the run with status ``error`` and the
  cause in plain words (never an ``infra_error`` outcome followed by more experiments).
- `end_lost_run`: stop the servers a lost run's transcript shows running, then conclude it in error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.domain.case import Case
from agent.record.transcript import Transcript
from agent.review.wording import count
from agent.run.recovery import find_launch, open_launches, stop_leftover
from tools.host import HostError, HostUnreachable
from tools.probes import get_server_info, request_timeout_s, run_probe

if TYPE_CHECKING:
    from agent.run.state import RunState

#: Probe statuses a dropped connection can cause (the request never reached the server, or its answer
#: never came back); any other status is the server's own answer.
_TRANSPORT_STATUSES = ("connection_error", "timeout")
#: How many times a probe is sent when each failure coincides with a dropped connection.
PROBE_TRIES = 3


def probe_through_drops(
    tr: Transcript,
    host: Any,
    base_url: str,
    probe: Any,
    *,
    model: str,
    experiment_id: str,
    api_key: str | None = None,
    generate_api: Any = "native",
) -> Any:
    """`tools.probes.run_probe`, except that a failure which coincides with a lost connection to the host
    is not the server's outcome: the connection is re-established and the probe sent again (each retry
    recorded as ``probe.retried``), up to ``PROBE_TRIES`` sends in all. A host without a connection (local)
    probes once. Each request waits ``tools.probes.request_timeout_s`` of the host's time scale.

    Raises HostUnreachable when the connection cannot be re-established or keeps dropping, HostError
    for a reconnect refused (changed host key, authentication), so the run ends in error instead of
    counting the failure as evidence.
    """
    timeout = request_timeout_s(getattr(host, "time_scale", 1.0))
    for attempt in range(1, PROBE_TRIES + 1):
        epoch = getattr(host, "connection_epoch", None)
        result = run_probe(base_url, probe, model=model, api_key=api_key, generate_api=generate_api,
                           timeout_s=timeout)
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
        f"{getattr(host, 'name', 'the host')}: the connection dropped during probe {probe.id} {count(PROBE_TRIES, 'time')}; "
        "the server's answer could not be read"
    )


def server_info_through_drops(
    host: Any, base_url: str, *, api_key: str | None = None, paths: Any = ("/get_server_info", "/server_info")
) -> dict[str, Any] | None:
    """`tools.probes.get_server_info` (at the engine's `paths`), asked once more when no answer came and
    the connection dropped."""
    epoch = getattr(host, "connection_epoch", None)
    info = get_server_info(base_url, api_key=api_key, paths=paths)
    if info is None and epoch is not None and paths:
        host.check_connection()
        if host.connection_epoch != epoch:
            info = get_server_info(base_url, api_key=api_key, paths=paths)
    return info


def infra_failure(rt: Any, experiment_id: str, exc: HostError) -> RunState:
    """The state update that ends a run whose host failed under an experiment (lost connection, changed
    host key, refused authentication, no SFTP, full disk, missing launcher): status ``error`` with the
    cause in plain words. A server that cannot be reached now is left for the next run's orphan sweep."""
    note = ""
    if isinstance(exc, HostUnreachable):
        rt.sessions.pop(experiment_id, None)  # it cannot be stopped now; the next run there stops it
        note = " (a server left running there is reported and stopped by the next run on that host)"
    return {
        "status": "error",
        "error": f"the host failed during experiment {experiment_id}, so the run cannot go on: {exc}{note}",
    }




def end_lost_run(rt: Any, graph: Any, config: dict[str, Any], values: dict[str, Any]) -> None:
    """End a run whose checkpoint has no next step and no conclusion: stop every server its transcript
    shows running (found by pid or by log), then route the graph to ``conclude`` with status ``error``."""
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
                    handle = find_launch(host, str(record.get("log") or ""))
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
