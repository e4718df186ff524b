"""Payloads of transcript events, one pydantic model per event type (transcripts/README.md, format 1).

The transcript reader (``agent.record.transcript``) checks every line's ``data`` against the model of its
``type``. The models say what a reader may rely on: the fields that the writers (``agent.run.nodes``,
``agent.cli``) always set are required, everything else is optional, and unknown fields are allowed
(a newer writer may add some). Event types not listed in ``PAYLOADS`` are checked only as an envelope.

These payload models are the wire format, apart from the domain models on purpose; ``agent.record.wire``
maps one to the other (one place), and ``tests/test_wire.py`` round-trips every event type. This
module imports nothing but pydantic on purpose: ``hypoloop replay`` reads transcripts without
loading the agent's heavier machinery. ``STAGES`` and the other literals mirror ``agent.domain.models``; a
test keeps them in step.

Units: ``*_s`` fields are seconds; ``after_s``/``wall_s``/``latency_s`` are wall seconds on the
orchestrator; an outcome's ``timings`` are modelled host-seconds (docs/ARCHITECTURE.md, "Data contracts");
probabilities are in [0, 1]; log line numbers start at 1.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Stage = Literal[
    "launch_failed", "load_failed", "timeout", "ready", "request_failed", "wrong_output", "ok", "infra_error"
]
STAGES: tuple[str, ...] = (
    "launch_failed",
    "load_failed",
    "timeout",
    "ready",
    "request_failed",
    "wrong_output",
    "ok",
    "infra_error",
)
HypothesisStatus = Literal["open", "supported", "refuted", "confirmed"]
FlagValue = str | bool | None
Probability = float


class Payload(BaseModel):
    """Base of every payload model: extra fields are kept, not rejected."""

    model_config = ConfigDict(extra="allow")


class ChangeData(Payload):
    """The one variable an experiment changes (``agent.domain.models.Change``)."""

    kind: Literal["flag", "env"]
    name: str
    before: FlagValue = None
    after: FlagValue = None


class BaselineData(Payload):
    """Flags (canonical long names) and environment variables of a configuration."""

    flags: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)


class EvidenceData(Payload):
    """One reference that moved a hypothesis; ``lines`` are log line numbers of ``experiment_id``'s log."""

    kind: str
    detail: str
    experiment_id: str | None = None
    lines: list[int] = Field(default_factory=list)
    effect: str = "supports"


class RunStarted(Payload):
    """``run.started``: the case (name, file, host target, approval mode, budget) and, since this
    format's ``case_data``, the whole case as loaded (``agent.domain.case.Case``), for re-deciding."""

    case: str
    host: str
    case_file: str | None = None
    approval: str | None = None
    budget: dict[str, Any] = Field(default_factory=dict)
    case_data: dict[str, Any] | None = None
    #: The knowledge folder the run read (``--knowledge`` / ``$HYPOLOOP_KNOWLEDGE``; issue 10).
    knowledge_dir: str | None = None


class HostFingerprintData(Payload):
    """``host.fingerprint``: first GPU's name, GPU count, compute capability, MiB per GPU, driver, SGLang."""

    gpu_name: str | None = None
    gpu_count: int | None = None
    compute_capability: str | None = None
    memory_total_mib: int | None = None
    driver_version: str | None = None
    sglang_version: str | None = None
    vllm_version: str | None = None
    engine: str | None = None  # "sglang" or "vllm" (tools/engines.py); absent in older transcripts
    engine_version: str | None = None
    gpu_vendor: str | None = None  # "nvidia", "amd" or "none" (CPU only)
    gpu_arch: str | None = None  # AMD graphics target, e.g. gfx942
    check_env: dict[str, str] = Field(default_factory=dict)  # `python -m sglang.check_env`, when it ran
    notes: list[str] = Field(default_factory=list)  # what GPU tools said when they found nothing
    checkpoint: dict[str, str] = Field(default_factory=dict)  # the model's config.json, digested
    checkpoint_source: str | None = None  # where it was read, or why not
    cpu_count: int | None = None  # logical CPUs of the host
    installed: dict[str, str] = Field(default_factory=dict)  # installed packages {distribution: version}
    import_names: dict[str, list[str]] = Field(default_factory=dict)  # {import name: [distribution]}, host's Python
    import_versions: dict[str, str] = Field(default_factory=dict)  # versions of the distributions just named
    taken_port: int | None = None  # the case's own --port, already listened on before any launch
    taken_by: str | None = None  # what listens there (ss -ltnp), when the host said


class ToolCall(Payload):
    """``tool.call``: a command the agent ran on the host (``argv``) or an internal tool."""

    tool: str
    argv: list[str] | None = None


class ToolResult(Payload):
    """``tool.result``; for ``flag_catalog``: ``flags`` (count), ``version``, ``source`` and ``catalog``
    (the whole ``tools.flags.FlagCatalog``)."""

    tool: str


class KnowledgeEntry(Payload):
    """One finding of a knowledge file: title, outcome, relevance rounded to 2 places, and (for
    re-deciding) ``relevance_exact`` and the whole ``finding`` (``tools.knowledge.Finding``)."""

    title: str
    outcome: str
    relevance: Probability = Field(ge=0, le=1)
    relevance_exact: float | None = None
    finding: dict[str, Any] | None = None


class KnowledgeRead(Payload):
    """``knowledge.read``: a findings file and the findings read from it."""

    path: str
    findings: list[KnowledgeEntry] = Field(default_factory=list)


class ObservationData(Payload):
    """``observation``: a ready or fatal log line as it was read (``line``, ``text``), or (intake) an
    existing log used as the baseline's observation (``source``)."""

    experiment_id: str | None = None
    kind: str | None = None
    line: int | None = Field(default=None, ge=1)
    text: str | None = None
    source: str | None = None


class HypothesisAdded(Payload):
    """``hypothesis.added``: the whole hypothesis (``agent.domain.models.Hypothesis``)."""

    id: str
    statement: str
    component: str
    prior: Probability = Field(ge=0, le=1)
    posterior: Probability = Field(ge=0, le=1)
    status: HypothesisStatus = "open"
    source: str = "catalog"
    rationale: str = ""
    evidence: list[EvidenceData] = Field(default_factory=list)
    interventions: list[dict[str, Any]] = Field(default_factory=list)


class HypothesisUpdated(Payload):
    """``hypothesis.updated``: the posterior moved from ``before`` to ``posterior``."""

    id: str
    posterior: Probability = Field(ge=0, le=1)
    before: Probability = Field(ge=0, le=1)
    prior: Probability | None = None


class HypothesisStatusChanged(Payload):
    """``hypothesis.supported`` / ``.refuted`` / ``.confirmed`` / ``.open``: the new status, with the
    evidence that moved it."""

    id: str
    posterior: Probability = Field(ge=0, le=1)
    statement: str | None = None
    evidence: list[EvidenceData] = Field(default_factory=list)


class PredictionData(Payload):
    hypothesis_id: str
    expect: Literal["fixed", "persists", "may_fix"]


class ExperimentProposed(Payload):
    """``experiment.proposed``: the experiment (``agent.domain.models.Experiment``) and ``considered``, the
    alternatives the design step weighed (``change``, ``p_fix``, ``score``) or skipped (``hypothesis``,
    ``skipped``). ``cost_estimate_s`` is modelled host-seconds."""

    id: str
    purpose: Literal["baseline", "test", "confirm"]
    baseline: BaselineData
    change: ChangeData | None = None
    predictions: list[PredictionData] = Field(default_factory=list)
    rationale: str = ""
    cost_estimate_s: float = 0.0
    considered: list[dict[str, Any]] = Field(default_factory=list)
    #: ``--parallel``: this experiment's place in its batch (``position``, ``size``, ``experiment_ids``).
    batch: dict[str, Any] | None = None


class ApprovalRequested(Payload):
    experiment_id: str
    request: int | None = None


class ApprovalDecided(Payload):
    """``approval.decided``: approve / edit (``change`` and ``edited_experiment_id`` run instead) /
    reject (with ``reason``) / stop; ``by`` is auto, policy or user."""

    experiment_id: str
    decision: Literal["approve", "edit", "reject", "stop"]
    by: str | None = None
    reason: str | None = None
    change: ChangeData | None = None
    edited_experiment_id: str | None = None


class SlurmJobData(Payload):
    """A Slurm job as the scheduler reported it (``tools.slurm.SlurmHost.job_info``): wall-clock times in
    Unix seconds, ``queued_s`` in seconds."""

    job_id: int
    partition: str | None = None
    node: str | None = None
    state: str | None = None
    reason: str | None = None
    submitted_wall: float | None = None
    started_wall: float | None = None
    ended_wall: float | None = None
    queued_s: float | None = None
    exit_code: int | None = None


class ServerLaunched(Payload):
    """``server.launched``; on a Slurm host ``pid``/``pgid`` are the job id and ``job`` the job."""

    experiment_id: str
    port: int | None = None
    log: str | None = None
    pid: int | None = None
    job: SlurmJobData | None = None
    #: The host's time scale (``tools.host.parse_time_scale``): wall seconds over it are host-seconds.
    time_scale: float | None = None


class ServerReady(Payload):
    experiment_id: str
    after_s: float | None = None
    #: Wall seconds in each start-up step as the live display measured them (init, weights, KV pool,
    #: CUDA-graph capture, warm-up); absent when no display watched the launch.
    stages: dict[str, float] | None = None


class ServerEnded(Payload):
    """``server.crashed`` / ``server.timeout``: how the watch ended before ready."""

    experiment_id: str
    status: str | None = None
    exit_code: int | None = None
    #: As for ``server.ready``; and the step the failure line says failed, and that line (number, text).
    stages: dict[str, float] | None = None
    failed_at: str | None = None
    fatal_line: int | None = None
    fatal_text: str | None = None
    after_s: float | None = None


class ServerStopped(Payload):
    """``server.stopped``: ``log_line_at_stop`` is how many log lines had been read when hypoloop asked
    the server to stop; ``shutdown_lines`` how many it wrote after (its shutdown, not evidence)."""

    experiment_id: str
    verified: bool
    wall_s: float | None = None
    log_line_at_stop: int | None = None
    shutdown_lines: int | None = None
    job: SlurmJobData | None = None


class ExperimentCancelled(Payload):
    """``experiment.cancelled`` (``--parallel``): stopped because an outcome settled the question; no
    evidence, its modelled ``host_seconds`` still spent."""

    experiment_id: str
    host_seconds: float | None = None
    reason: str = ""


class LedgerUpdated(Payload):
    """``ledger.updated`` (``--parallel``): the ledger after the batch outcomes ``after`` arrived."""

    after: list[str] = Field(default_factory=list)
    hypotheses: list[dict[str, Any]] = Field(default_factory=list)


class ProbeResultData(Payload):
    experiment_id: str | None = None
    probe_id: str
    ok: bool
    status: str
    http_status: int | None = None
    text: str | None = None
    latency_s: float | None = None
    error: str | None = None
    #: A timed probe's seconds of traffic on the host's clock (``tools.probes.ProbeResult.traffic_s``).
    traffic_s: float | None = None


class SignatureMatchData(Payload):
    """Hits of one log signature: every matching line number and the first matching line's text."""

    signature_id: str
    kind: str
    stage: str
    line_numbers: list[int] = Field(default_factory=list)
    first_line: str = ""
    components: list[str] = Field(default_factory=list)
    meaning: str = ""
    facts: dict[str, str] = Field(default_factory=dict)


class TimingsData(Payload):
    """Modelled host-seconds from launch: to ready, to the end (crash or exit), in total; on a Slurm host
    also the queue time and the wall-clock from submission (``host_seconds`` counts from the job's start)."""

    to_ready_s: float | None = None
    to_end_s: float | None = None
    host_seconds: float = 0.0
    queued_s: float | None = None
    wall_s: float | None = None
    detection_delay_median_s: float | None = None
    detection_delay_max_s: float | None = None


class OutcomeData(Payload):
    """``outcome``: the furthest stage reached and the evidence for it (``agent.domain.models.Outcome``)."""

    experiment_id: str
    stage: Stage
    matches: list[SignatureMatchData] = Field(default_factory=list)
    facts: dict[str, str] = Field(default_factory=dict)
    probes: list[ProbeResultData] = Field(default_factory=list)
    timings: TimingsData = Field(default_factory=TimingsData)
    exit_code: int | None = None
    log_path: str | None = None
    summary: str = ""
    #: Log lines kept as evidence: [{line, text}] (tracebacks, error lines and their surroundings,
    #: warnings, the tail); absent in transcripts written before it was added.
    log_excerpt: list[dict[str, Any]] = Field(default_factory=list)
    #: The installed source read at the failure's traceback frames (``tools.source_guards.SourceReading``):
    #: {exception, frames: [{path, line, function, status, located}], leads: [{kind, name, dest, value,
    #: unset, avoid, polarity, path, line, condition, guard, via, frame, function}], missing: {kind,
    #: module, package, text, log_line} | null, files_read}; absent or null when nothing was read.
    source_reading: dict[str, Any] | None = None


class BaselineChanged(Payload):
    baseline: BaselineData
    adoption: dict[str, Any] | None = None


class DesignNone(Payload):
    reason: str | None = None
    considered: list[dict[str, Any]] = Field(default_factory=list)


class ExperimentSkipped(Payload):
    experiment_id: str
    reason: str = ""


class ConclusionData(Payload):
    """``conclusion``: ``agent.domain.models.Conclusion``."""

    status: Literal["isolated", "not_isolated", "stopped", "error"]
    root_cause: dict[str, Any] | None = None
    fix: ChangeData | None = None
    fix_experiment_id: str | None = None
    confirmation_experiment_id: str | None = None
    refuted: list[dict[str, Any]] = Field(default_factory=list)
    untested: list[dict[str, Any]] = Field(default_factory=list)
    launches: int = 0
    host_seconds: float = 0.0
    reason: str = ""
    findings_entry: str = ""
    alternatives: list[dict[str, Any]] = Field(default_factory=list)
    #: not_isolated: the component and package the failure points at (``Conclusion.implicated``).
    implicated: dict[str, Any] | None = None
    #: isolated: the blockers passed on the way (``Conclusion.blockers``).
    blockers: list[dict[str, Any]] = Field(default_factory=list)


class RunEnded(Payload):
    status: Literal["isolated", "not_isolated", "stopped", "error", "interrupted"]
    launches: int | None = None
    host_seconds: float | None = None
    reason: str | None = None


class ErrorData(Payload):
    message: str


class RunPaused(Payload):
    waiting_for: str | None = None
    reason: str | None = None


#: Event type -> payload model. Types not listed are checked as an envelope only.
PAYLOADS: dict[str, type[Payload]] = {
    "slurm.job_submitted": SlurmJobData,
    "slurm.job_pending": SlurmJobData,
    "slurm.job_started": SlurmJobData,
    "slurm.job_ended": SlurmJobData,
    "experiment.cancelled": ExperimentCancelled,
    "ledger.updated": LedgerUpdated,
    "run.started": RunStarted,
    "host.fingerprint": HostFingerprintData,
    "tool.call": ToolCall,
    "tool.result": ToolResult,
    "knowledge.read": KnowledgeRead,
    "observation": ObservationData,
    "hypothesis.added": HypothesisAdded,
    "hypothesis.updated": HypothesisUpdated,
    "hypothesis.supported": HypothesisStatusChanged,
    "hypothesis.refuted": HypothesisStatusChanged,
    "hypothesis.confirmed": HypothesisStatusChanged,
    "hypothesis.open": HypothesisStatusChanged,
    "experiment.proposed": ExperimentProposed,
    "approval.requested": ApprovalRequested,
    "approval.decided": ApprovalDecided,
    "server.launched": ServerLaunched,
    "server.ready": ServerReady,
    "server.crashed": ServerEnded,
    "server.timeout": ServerEnded,
    "server.stopped": ServerStopped,
    "probe.result": ProbeResultData,
    "outcome": OutcomeData,
    "baseline.changed": BaselineChanged,
    "design.none": DesignNone,
    "experiment.skipped": ExperimentSkipped,
    "conclusion": ConclusionData,
    "run.ended": RunEnded,
    "error": ErrorData,
    "run.paused": RunPaused,
}


def validate_payload(type: str, data: dict[str, Any]) -> None:
    """Check ``data`` against the model of event ``type``; raises pydantic.ValidationError."""
    model = PAYLOADS.get(type)
    if model is not None:
        model.model_validate(data)
