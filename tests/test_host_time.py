"""A launch's host-seconds (tools/host_time.py): on a scaled host the load phase is modelled (wall / time
scale) while the request phase is real work billed as it is, plus the host time a probe is known to hold
(timed traffic, an unanswered request); on a real host (time scale 1) the bill is the wall figure.

The launch tests run a real lab stand-in server over real HTTP and build the evidence the agent builds
(`RawEvidence.from_launch`), as the execute node does."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.domain.evidence import RawEvidence, WatchedLaunch
from tools.host import LocalHost
from tools.host_time import launch_host_s
from tools.load_shapes import LoadShape
from tools.probes import (
    MIN_REQUEST_WALL_S,
    REQUEST_TIMEOUT_HOST_S,
    Probe,
    ProbeResult,
    ProbeStatus,
    request_timeout_s,
    run_probe,
)
from tools.server import ServerSession, SessionOptions
from tools.signatures import SignatureMatcher, load_signatures
from tools.stall import StallWatch

REPO = Path(__file__).resolve().parents[1]

#: A small healthy world whose load takes about 1.5 simulated seconds (so it can run at time scale 1).
WORLD = """
name = "host-time"
[sglang]
version = "0.5.9"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 81559
[model]
path = "org/m"
architecture = "Qwen3ForCausalLM"
checkpoint_shards = 2
[timing]
init_s = 0.3
load_s = 0.3
kv_pool_s = 0.2
capture_s = 0.3
warmup_s = 0.3
[memory]
weights_gb_total = 15.0
"""

BURST = Probe(id="burst", kind="generate", prompt="The capital of France is", expect="Paris", concurrency=64)


@dataclass
class Launched:
    evidence: RawEvidence
    wall_s: float
    ready_s: float


def _launch(tmp_path: Path, time_scale: float, probes: list[Probe]) -> Launched:
    """Launch the lab server at ``time_scale``, probe it with ``probes``, stop it; its evidence as the
    agent builds it (the same clocks as agent.run.nodes.execute)."""
    world = tmp_path / "world.toml"
    world.write_text(WORLD)
    host = LocalHost(env={"HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": repr(time_scale)},
                     root=str(tmp_path))
    sigs = load_signatures()
    matcher = SignatureMatcher(sigs)
    watched = WatchedLaunch("e1", matcher, StallWatch(sigs, time_scale=time_scale), str(tmp_path / "e1.log"),
                            host.time_scale)
    port = host.free_port()
    session = ServerSession(
        host,
        [sys.executable, "-m", "lab.launch_server", "--model-path", "org/m", "--port", str(port)],
        env={"PYTHONPATH": str(REPO)},
        log_path=watched.log_path,
        port=port,
        matcher=matcher,
        on_event=watched.stall.observe,
        options=SessionOptions(ready_timeout_s=max(60.0, 600 * time_scale)),
    )
    t0 = time.monotonic()
    with session:
        session.start()
        res = session.wait_ready()
        assert res.status == "ready" and res.base_url and res.t_ready_s is not None, res.status
        for probe in probes:
            watched.probes.append(run_probe(res.base_url, probe, model="org/m",
                                            timeout_s=request_timeout_s(time_scale)))
        session.watch(0.2)
        session.stop()
    wall = time.monotonic() - t0
    host.close()
    evidence = RawEvidence.from_launch(watched, final=session.result(), server_info=None, t_ready_s=res.t_ready_s,
                                       wall_s=wall)
    return Launched(evidence, wall, res.t_ready_s)


def test_a_burst_on_a_scaled_host_is_billed_as_its_real_seconds_not_multiplied_by_the_scale(tmp_path: Path) -> None:
    scale = 0.001
    run = _launch(tmp_path, scale, [BURST])
    assert [p.status for p in run.evidence.probes] == ["ok"]
    timings = run.evidence.timings
    requests_wall = run.wall_s - run.ready_s
    # Without the split the 64 requests' real seconds were multiplied by 1000: minutes to hours of host
    # time for a burst that a GPU serves in seconds.
    assert requests_wall / scale > 60
    assert timings.to_ready_s is not None and timings.to_ready_s > 1.0  # the modelled load (~1.4 host-s)
    billed_requests = timings.host_seconds - timings.to_ready_s
    assert billed_requests == pytest.approx(requests_wall, abs=0.01), (timings, requests_wall)
    assert billed_requests < 60


def test_timed_traffic_on_a_scaled_host_is_billed_at_its_duration(tmp_path: Path) -> None:
    scale = 0.001
    stream = Probe(id="stream", kind="generate", prompt="The capital of France is", expect="Paris",
                   concurrency=2, shape=LoadShape(duration_s=120))
    run = _launch(tmp_path, scale, [stream])
    [result] = run.evidence.probes
    assert result.ok and result.traffic_s == pytest.approx(120.0), result
    timings = run.evidence.timings
    assert timings.to_ready_s is not None
    billed_requests = timings.host_seconds - timings.to_ready_s
    # the 120 s the host served the stream, and the requests' real seconds on top
    assert 120.0 <= billed_requests <= 120.0 + (run.wall_s - run.ready_s) + 0.01, timings


def test_on_a_real_time_scale_the_bill_is_the_wall_time(tmp_path: Path) -> None:
    run = _launch(tmp_path, 1.0, [BURST])
    assert [p.status for p in run.evidence.probes] == ["ok"]
    assert run.evidence.timings.host_seconds == round(run.wall_s, 3)
    assert run.evidence.timings.to_ready_s == round(run.ready_s, 3)


def _result(status: ProbeStatus, latency_s: float, traffic_s: float | None = None) -> ProbeResult:
    return ProbeResult(probe_id="p", ok=status == "ok", status=status, latency_s=latency_s, traffic_s=traffic_s)


def test_the_rule_at_time_scale_1_is_wall_less_queue_whatever_the_probes() -> None:
    probes = [_result("ok", 0.7, traffic_s=30.0), _result("timeout", 60.0)]
    for wall, ready, queued in [(93.123456, 20.5, None), (400.0, 321.0, 12.25), (5.0, None, None)]:
        expected = round(max(0.0, wall - (queued or 0.0)), 3)
        assert launch_host_s(wall_s=wall, time_scale=1.0, ready_s=ready, queued_s=queued, probes=probes) == expected


def test_an_unanswered_request_on_a_scaled_host_costs_the_hosts_timeout() -> None:
    scale = 0.001
    # 2 s of load wall (2000 host-s), then one request the host never answered: the orchestrator gave up
    # after MIN_REQUEST_WALL_S of wall, of which the host's timeout is the billed part
    wall = 2.0 + MIN_REQUEST_WALL_S + 0.3
    billed = launch_host_s(wall_s=wall, time_scale=scale, ready_s=2.0, probes=[_result("timeout", MIN_REQUEST_WALL_S)])
    assert billed == pytest.approx(2000.0 + REQUEST_TIMEOUT_HOST_S + 0.3, abs=0.01)


def test_a_launch_that_never_became_ready_is_all_load_phase() -> None:
    assert launch_host_s(wall_s=3.0, time_scale=0.001, ready_s=None) == pytest.approx(3000.0)
    assert launch_host_s(wall_s=3.0, time_scale=0.001, ready_s=1.0, queued_s=0.5) == pytest.approx(1000.0 + 1.5)
    with pytest.raises(ValueError, match="time scale"):
        launch_host_s(wall_s=1.0, time_scale=0.0)
