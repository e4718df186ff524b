"""What one launch, or a log the user already had, produced: the typed evidence the analyze node reads.

``RawEvidence`` is built here and only here: :meth:`RawEvidence.from_launch` (the execute node, after the
server is stopped), :meth:`RawEvidence.from_log` (an observed log: the case's ``observed_log`` and
``hypoloop analyze``) and :meth:`RawEvidence.infra_error` (the host failed). It is checkpointed in the run
state (``raw``) and saved as ``runs/RUN_ID/EXP_ID.result.json`` (``agent.run.recovery``) as
``model_dump(mode="json")``; everything else reads it through this model. (Not the same thing as
``agent.domain.models.Evidence``, one entry of a hypothesis's evidence list.)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.domain.excerpt import excerpt_of_text
from agent.domain.models import LogLine, Timings
from tools.host_time import launch_host_s
from tools.probes import ProbeResult
from tools.server import LaunchResult
from tools.signatures import Signature, SignatureMatch, SignatureMatcher, scan_text
from tools.stall import StallWatch

#: How a launch ended (``tools.server.LaunchStatus``), ``observed`` for a log read from a file, or
#: ``infra_error`` when the host itself failed.
EvidenceStatus = Literal[
    "ready", "crashed", "exited", "timeout", "stalled", "launch_failed", "observed", "infra_error"
]

#: Keys of ``/get_server_info`` copied into the evidence's facts (SGLang ServerArgs field names).
SERVER_INFO_FACTS = (
    "kv_cache_dtype",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "nsa_prefill_backend",
    "nsa_decode_backend",
    "dsa_prefill_backend",
    "dsa_decode_backend",
    "fp8_gemm_backend",
    "fp4_gemm_backend",
    "moe_runner_backend",
    "mem_fraction_static",
    "quantization",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "sampling_backend",
    "tp_size",
    "max_total_num_tokens",
)
#: ``/get_server_info`` keys whose ServerArgs field name differs from the fact name (SGLang 0.5.9
#: calls the FP8 GEMM backend ``fp8_gemm_runner_backend``).
SERVER_INFO_ALIASES = {"fp8_gemm_runner_backend": "fp8_gemm_backend"}


@dataclass
class WatchedLaunch:
    """What watches one launch of experiment ``experiment_id`` and becomes its evidence: the signature
    matcher and the stall watch fed every log line, the probe results so far (in order), the server
    log's path on the host, and the host's ``time_scale`` (orchestrator seconds per host-second)."""

    experiment_id: str
    matcher: SignatureMatcher
    stall: StallWatch
    log_path: str
    time_scale: float
    probes: list[ProbeResult] = field(default_factory=list)


class RawEvidence(BaseModel):
    """The raw result of one experiment, before classification (``agent.run.nodes.analyze``).

    ``launched``: a server was started for it (it counts against the launch budget). ``matches``: log
    signatures with line numbers; ``facts``: effective-config facts read from the log and from
    ``/get_server_info``; ``probes``: request results in order; ``timings``: host-seconds (modelled) and
    wall seconds to ready/end; ``error``: why the host failed (``infra_error`` only).
    """

    experiment_id: str
    launched: bool = False
    status: EvidenceStatus | None = None
    matches: list[SignatureMatch] = Field(default_factory=list)
    facts: dict[str, str] = Field(default_factory=dict)
    probes: list[ProbeResult] = Field(default_factory=list)
    exit_code: int | None = None
    log_path: str | None = None
    timings: Timings = Field(default_factory=Timings)
    error: str | None = None
    #: The log lines kept as evidence (``agent.domain.excerpt.LogExcerpt``: tracebacks, error lines
    #: and their surroundings, warnings, the server_args line, the tail).
    log_excerpt: list[LogLine] = Field(default_factory=list)

    @classmethod
    def from_log(cls, experiment_id: str, text: str, signatures: Iterable[Signature], log_path: str) -> RawEvidence:
        """A log read from a file (no launch): its signature matches and facts."""
        matches, facts = scan_text(text, signatures)
        return cls(
            experiment_id=experiment_id,
            status="observed",
            matches=matches,
            facts=facts,
            log_path=log_path,
            log_excerpt=excerpt_of_text(text),
        )

    @classmethod
    def infra_error(cls, experiment_id: str, error: str) -> RawEvidence:
        """The host failed before the experiment gave an outcome (nothing to classify but that)."""
        return cls(experiment_id=experiment_id, status="infra_error", error=error)

    @classmethod
    def from_launch(
        cls,
        watched: WatchedLaunch,
        *,
        final: LaunchResult,
        server_info: Mapping[str, Any] | None,
        t_ready_s: float | None,
        wall_s: float,
        log_excerpt: list[LogLine] | None = None,
        queued_s: float | None = None,
    ) -> RawEvidence:
        """A launch that was watched (``watched``) and stopped. ``final``: the session's last view of it;
        ``t_ready_s`` (from the server's start to its ready line) / ``wall_s`` (the whole launch, to the
        verified stop): orchestrator wall seconds; the timings keep them as host seconds, divided by
        ``watched.time_scale``. The launch's ``host_seconds`` are ``tools.host_time.launch_host_s``: the load
        phase (to ready, or to the end of a launch never ready) divided by the time scale, the request
        phase after ready as real seconds plus the host time its probes are known to hold (timed traffic,
        unanswered requests); at time scale 1 simply the wall seconds less queue and patience.
        ``server_info``: ``/get_server_info`` if the server answered it; ``queued_s``: on a
        batch-scheduler host, the part of ``wall_s`` the job waited in the queue (queue time is not GPU
        time: host-seconds count from the job's start; ``wall_s`` and ``queued_s`` are kept beside)."""
        matcher, stall, time_scale = watched.matcher, watched.stall, watched.time_scale
        facts = dict(matcher.facts())
        for key, value in (server_info or {}).items():
            fact = SERVER_INFO_ALIASES.get(key, key)
            if fact in SERVER_INFO_FACTS and value is not None:
                facts[fact] = str(value)
        if final.status == "stalled":
            facts["stalled_after"] = stall.last_progress or "start"
            facts["stall_stage"] = stall.stage or "launch"
        delays = final.detection_delays_s
        return cls(
            experiment_id=watched.experiment_id,
            launched=True,
            status=final.status,
            matches=matcher.matches(),
            facts=facts,
            probes=list(watched.probes),
            exit_code=final.exit_code,
            log_path=watched.log_path,
            log_excerpt=list(log_excerpt or []),
            timings=Timings(
                to_ready_s=None if t_ready_s is None else round(t_ready_s / time_scale, 3),
                to_end_s=None if final.t_end_s is None else round(final.t_end_s / time_scale, 3),
                # the load phase scaled, the request phase as real seconds plus its known host time
                # (tools.host_time); the orchestrator's floor on a request's wait is not host time
                host_seconds=launch_host_s(wall_s=wall_s, time_scale=time_scale, ready_s=t_ready_s,
                                           queued_s=queued_s, probes=watched.probes),
                queued_s=None if queued_s is None else round(queued_s / time_scale, 3),
                wall_s=None if queued_s is None else round(wall_s / time_scale, 3),
                detection_delay_median_s=round(statistics.median(delays), 4) if delays else None,
                detection_delay_max_s=round(max(delays), 4) if delays else None,
            ),
        )
