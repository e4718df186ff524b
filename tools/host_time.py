"""Host-seconds: how much of the scarce GPU host one launch used, from the orchestrator's wall clock.

On a real host (time scale 1) a launch's host-seconds are its wall seconds from the server's start to its
verified stop, less the time a batch job waited in the queue (queue time is not GPU time) and the
orchestrator's patience beyond a request's host-time timeout (``tools.probes.patience_beyond_host_s``).

On a scaled host (the lab: ``HYPOLOOP_LAB_TIME_SCALE`` < 1, orchestrator seconds per host-second) the two
phases of a launch do not scale alike, so they are billed apart:

- the **load phase**, from the start to the ready line (or to the crash, stall or timeout of a launch that
  never became ready): the host models it by sleeping ``modelled seconds × scale``, so its wall seconds
  divided by the scale are the modelled host-seconds;
- the **request phase**, after the ready line (``/get_server_info``, the probes, the short watch for a crash
  they caused, the stop): its wall time is mostly real work that does not scale (the orchestrator's HTTP
  client, the server's HTTP stack, a loaded machine), which divided by a scale of 0.001 billed a burst of
  128 requests taking 8 s of wall as 8,000 host-seconds. It is billed as its wall seconds counted as real
  seconds (unscaled), plus, for a probe whose host time is known apart from its wall time, that host time
  less the scaled part of it already in the wall: a timed stream (a shape's ``duration_s``,
  ``ProbeResult.traffic_s``) holds the host for its duration, a request that never answered for
  ``REQUEST_TIMEOUT_HOST_S`` (the orchestrator's patience beyond that is left out, as before).

The modelled decode time of a request without a duration is not known to the orchestrator; its scaled
wall stands for it (on the lab, a short probe's decode is well under a host-second per request at once).
At time scale 1 the rule gives exactly ``wall - queued - patience``: both corrections are multiplied by 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.probes import REQUEST_TIMEOUT_HOST_S, ProbeResult, patience_beyond_host_s


def known_host_s(results: Sequence[ProbeResult]) -> float:
    """Host-seconds the probes of ``results`` used that their wall time does not show on a scaled host:
    each probe's timed traffic (``traffic_s``) and ``REQUEST_TIMEOUT_HOST_S`` for each that ended
    ``timeout`` (a request the host never answered holds it that long). Host seconds, >= 0."""
    total = 0.0
    for r in results:
        total += max(0.0, r.traffic_s or 0.0)
        if r.status == "timeout":
            total += REQUEST_TIMEOUT_HOST_S
    return total


def launch_host_s(
    *,
    wall_s: float,
    time_scale: float,
    ready_s: float | None = None,
    queued_s: float | None = None,
    probes: Sequence[ProbeResult] = (),
) -> float:
    """The host-seconds of one launch (see the module docstring), rounded to the millisecond.

    ``wall_s``: orchestrator wall seconds from the launch (submission, on a batch host) to the verified
    stop; ``queued_s``: the part of it a batch job waited in the queue; ``ready_s``: wall seconds from the
    server's start to its ready line (None: it never became ready, and the whole launch is load phase);
    ``probes``: the request results of the launch, in order; ``time_scale``: the host's orchestrator
    seconds per host-second (1.0 on a real host). Never negative. Raises ValueError for a time scale that
    is not positive."""
    if not time_scale > 0:
        raise ValueError(f"time scale must be positive, got {time_scale!r}")
    patience = patience_beyond_host_s(probes, time_scale)
    billed = max(0.0, wall_s - (queued_s or 0.0) - patience) / time_scale
    if ready_s is not None:
        # The request phase's real seconds come back from "divided by the scale" to "as they are", and
        # what the host spent beyond its scaled wall (timed traffic, unanswered requests) is added.
        # Both factors are 0 at time scale 1, so a real host's bill is the wall figure exactly.
        requests_real = max(0.0, wall_s - (queued_s or 0.0) - max(0.0, ready_s) - patience)
        billed += -requests_real * (1.0 / time_scale - 1.0) + known_host_s(probes) * (1.0 - time_scale)
    return round(max(0.0, billed), 3)


def on_host_clock(at_s: float, ready_s: float | None, time_scale: float) -> float:
    """A moment of a launch, given in modelled seconds from its start (wall seconds over the time scale, as
    ``Timings.to_end_s``), on the clock ``launch_host_s`` bills by: before the ready line (``ready_s``,
    modelled; None: never ready) unchanged, after it the request phase counted as real seconds (its
    modelled seconds times the scale). At time scale 1 it is ``at_s``. Seconds, rounded to the millisecond.
    Raises ValueError for a time scale that is not positive."""
    if not time_scale > 0:
        raise ValueError(f"time scale must be positive, got {time_scale!r}")
    if ready_s is None or at_s <= ready_s:
        return round(at_s, 3)
    return round(ready_s + (at_s - ready_s) * time_scale, 3)
