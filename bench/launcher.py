"""Launch one configuration of a world the way the agent does, through ``tools``: ServerSession with the
stall watch, then the case's probes; success means every probe passed and no fatal line appeared.

Host-seconds are modelled like the agent's (``tools.host_time.launch_host_s``: the load phase's wall seconds
divided by the lab's time scale, the request phase's as real seconds plus the host time its probes are known
to hold), and each request waits as long as the agent's (``request_timeout_s`` of the time scale), so all
methods are measured with the same clock.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.domain.case import Case
from agent.domain.models import FlagValue
from tools.host import LocalHost, expand_argv
from tools.host_time import launch_host_s
from tools.probes import Probe, ProbeResult, request_timeout_s, run_probe
from tools.server import ServerSession, SessionOptions, render_command
from tools.signatures import Signature, SignatureMatcher
from tools.stall import StallWatch


@dataclass
class LaunchRecord:
    """One launch: did it serve correctly, how far it got, what it cost."""

    ok: bool
    status: str
    host_s: float
    wall_s: float
    signatures: list[str] = field(default_factory=list)
    replayed: bool = False


def probes_for(case: Case) -> list[Probe]:
    """The case's probes, plus a burst of the first one at the case's reproduction concurrency
    (``[reproduce] concurrency``) when the failure needs several requests at once."""
    probes = list(case.probes)
    n = case.reproduce.concurrency
    if n > 1 and probes:
        probes.append(probes[0].model_copy(update={"id": f"{probes[0].id}-x{n}", "concurrency": n}))
    return probes


class Launcher:
    """Launches configurations of one case on the local (lab) host. ``workdir`` receives the logs."""

    def __init__(self, case: Case, signatures: list[Signature], workdir: Path) -> None:
        self.case = case
        self.signatures = signatures
        self.workdir = workdir
        self.host = LocalHost(env=case.host.env, root=str(workdir))
        self.count = 0

    def launch(self, flags: Mapping[str, FlagValue], env: dict[str, str]) -> LaunchRecord:
        """Start the server with ``flags``/``env``, wait for ready/crash/stall, probe, stop."""
        host, case = self.host, self.case
        self.count += 1
        port = host.free_port()
        engine = case.launcher.engine_impl()  # vLLM: the model positional, no /generate
        argv = render_command(
            expand_argv(case.launcher.argv, host), case.model.path, flags, host="127.0.0.1", port=port,
            engine=engine,
        )
        matcher = SignatureMatcher(self.signatures)
        stall = StallWatch(
            self.signatures,
            time_scale=host.time_scale,
            ceiling_s=case.budget.stall_timeout_s * host.time_scale if case.budget.stall_timeout_s else None,
        )
        log = self.workdir / f"launch-{self.count:04d}.log"
        session = ServerSession(
            host,
            argv,
            env=env,
            log_path=str(log),
            port=port,
            matcher=matcher,
            on_event=stall.observe,
            options=SessionOptions(
                ready_timeout_s=case.budget.ready_timeout_s * host.time_scale, stall_timeout_s=stall.limit
            ),
        )
        t0 = time.monotonic()
        ok = False
        results: list[ProbeResult] = []
        with session:
            res = session.wait_ready()
            status: str = res.status
            if res.status == "ready" and res.base_url:
                for probe in probes_for(case):
                    pr = run_probe(res.base_url, probe, model=case.model.path, generate_api=engine.data.generate_api,
                                   timeout_s=request_timeout_s(host.time_scale))
                    results.append(pr)
                    if pr.status in ("connection_error", "timeout"):
                        break
                session.watch(2.0 if any(not r.ok for r in results) else 0.2)
                ok = bool(results) and all(r.ok for r in results) and not session.fatal_seen
                status = "ok" if ok else "request_failed"
            session.stop()
        wall = time.monotonic() - t0
        return LaunchRecord(
            ok=ok,
            status=status,
            host_s=launch_host_s(wall_s=wall, time_scale=host.time_scale, ready_s=res.t_ready_s, probes=results),
            wall_s=wall,
            signatures=[m.signature_id for m in matcher.matches() if m.kind in ("fatal", "error")],
        )

    def close(self) -> None:
        """Stop anything still running."""
        self.host.close()
