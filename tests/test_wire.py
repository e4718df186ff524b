"""Every transcript event type survives the round trip: written by ``Transcript.emit`` (through
``agent.record.wire`` where the payload carries a domain object), read back by ``read_transcript`` (which
checks it against its payload model in ``agent.record.events``), and mapped back to the same domain object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent.domain.case import Case, load_case
from agent.domain.models import (
    Baseline,
    Change,
    Conclusion,
    Evidence,
    Experiment,
    Hypothesis,
    Intervention,
    Outcome,
    Prediction,
    Timings,
)
from agent.record.events import PAYLOADS
from agent.record.transcript import Transcript, read_transcript
from agent.record.wire import DOMAIN_EVENTS, DOMAIN_FIELDS, field_of, from_payload, to_payload
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.knowledge import Finding, read_findings
from tools.probes import ProbeResult
from tools.signatures import load_signatures, scan_text

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"

BASELINE = Baseline(flags={"--tp-size": "8", "--trust-remote-code": True}, env={"NCCL_DEBUG": "INFO"})
CHANGE = Change(kind="flag", name="--kv-cache-dtype", before=None, after="bfloat16")
EXPERIMENT = Experiment(
    id=Experiment.make_id(BASELINE, CHANGE, "test"),
    purpose="test",
    baseline=BASELINE,
    change=CHANGE,
    predictions=[Prediction(hypothesis_id="kv", expect="fixed")],
    rationale="a bf16 KV cache avoids the FP8 decode kernels",
    cost_estimate_s=412.5,
    status="done",
)
PROBE = ProbeResult(probe_id="chat-capital", ok=False, status="connection_error", latency_s=0.42, error="reset")
HYPOTHESIS = Hypothesis(
    id="kv",
    statement="The FP8 KV cache is read incorrectly on compute capability 12.0",
    component="attention.decode",
    prior=0.3,
    posterior=0.62,
    status="supported",
    evidence=[Evidence(kind="signature", detail="NaN at decode", lines=[412], experiment_id="exp-1")],
    interventions=[Intervention(kind="flag", names=["--kv-cache-dtype"], values=["bfloat16"], cost="medium")],
)


def _outcome() -> Outcome:
    log = "Load weight end. avail mem=40.00 GB, mem usage=54.00 GB.\nScheduler hit an exception: NaN\n"
    matches, facts = scan_text(log, load_signatures())
    return Outcome(
        experiment_id=EXPERIMENT.id,
        stage="request_failed",
        matches=matches,
        facts=facts,
        probes=[PROBE],
        timings=Timings(to_ready_s=301.2, host_seconds=355.0, detection_delay_median_s=0.05),
        exit_code=1,
        log_path="/tmp/exp.log",
        summary="request_failed; signatures: scheduler_exception",
    )


def _domain_samples() -> dict[str, tuple[BaseModel, dict[str, Any]]]:
    """Event type -> (the domain object it carries, the event's own fields)."""
    return {
        "host.fingerprint": (
            HostFingerprint(
                gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                gpu_count=8,
                compute_capability="12.0",
                memory_total_mib=97887,
                driver_version="580.65.06",
                sglang_version="0.5.9",
            ),
            {},
        ),
        "hypothesis.added": (HYPOTHESIS, {}),
        "experiment.proposed": (EXPERIMENT, {"considered": [{"change": "--kv-cache-dtype=bfloat16", "p_fix": 0.5}]}),
        "probe.result": (PROBE, {"experiment_id": EXPERIMENT.id}),
        "outcome": (_outcome(), {}),
        "conclusion": (
            Conclusion(
                status="isolated",
                root_cause={"component": "attention.decode", "statement": "FP8 KV", "hypothesis_id": "kv"},
                fix=CHANGE,
                fix_experiment_id=EXPERIMENT.id,
                confirmation_experiment_id="exp-2",
                launches=3,
                host_seconds=1021.5,
                alternatives=[{"change": "--attention-backend: (unset) → triton", "result": "not tested"}],
            ),
            {},
        ),
    }


def _field_samples() -> dict[tuple[str, str], tuple[BaseModel, dict[str, Any]]]:
    """(event type, field) -> (the domain object in that field, the rest of the payload)."""
    case: Case = load_case("lab:glm5-nvfp4-sm120")
    catalog: FlagCatalog = parse_help((DATA / "help_sglang_0.5.9.txt").read_text(), source="help_sglang_0.5.9.txt")
    finding: Finding = read_findings(REPO / "lab" / "worlds" / "glm5-nvfp4-sm120" / "FINDINGS.md")[0]
    return {
        ("run.started", "case_data"): (case, {"case": case.name, "host": case.host.target, "approval": "each"}),
        ("tool.result", "catalog"): (catalog, {"tool": "flag_catalog", "flags": len(catalog.flags)}),
        ("baseline.changed", "baseline"): (BASELINE, {"adoption": {"experiment_id": "exp-1", "why": "got further"}}),
        ("approval.decided", "change"): (
            CHANGE,
            {"experiment_id": "exp-1", "decision": "edit", "by": "user", "edited_experiment_id": EXPERIMENT.id},
        ),
        ("knowledge.read", "findings[].finding"): (finding, {"path": finding.source}),
    }


#: Events whose payload is wire data only (no domain object): a typical payload of each.
PLAIN: dict[str, dict[str, Any]] = {
    "tool.call": {"tool": "launch_server", "argv": ["python3", "-m", "sglang.launch_server"], "env": {}},
    "observation": {"experiment_id": "exp-1", "kind": "fatal", "line": 412, "text": "NaN detected"},
    "hypothesis.updated": {"id": "kv", "posterior": 0.4, "prior": 0.3, "before": 0.35},
    "hypothesis.supported": {"id": "kv", "posterior": 0.7, "statement": "FP8 KV", "evidence": []},
    "hypothesis.refuted": {
        "id": "kv",
        "posterior": 0.0,
        "evidence": [{"kind": "experiment", "detail": "still NaN", "experiment_id": "exp-1", "effect": "refutes"}],
    },
    "hypothesis.confirmed": {"id": "kv", "posterior": 0.9},
    "hypothesis.open": {"id": "kv", "posterior": 0.2},
    "approval.requested": {"experiment_id": "exp-1", "request": 1, "mode": "each", "risky": []},
    "server.launched": {"experiment_id": "exp-1", "port": 30001, "log": "/tmp/exp-1.log", "pid": 4242, "pgid": 4242},
    "server.ready": {"experiment_id": "exp-1", "after_s": 12.5},
    "server.crashed": {"experiment_id": "exp-1", "status": "crashed", "exit_code": 1, "after_s": 3.0},
    "server.timeout": {"experiment_id": "exp-1", "status": "stalled", "exit_code": None, "after_s": 900.0},
    "server.stopped": {"experiment_id": "exp-1", "verified": True, "wall_s": 20.1},
    "design.none": {"reason": "fix found and confirmed", "considered": []},
    "experiment.skipped": {"experiment_id": "exp-1", "reason": "already executed"},
    "run.ended": {"status": "isolated", "launches": 3, "host_seconds": 1021.5},
    "error": {"message": "host unreachable", "kind": "input"},
    "run.paused": {"waiting_for": "approval", "reason": "no terminal is attached"},
    "slurm.job_submitted": {"job_id": 7, "partition": "gpu", "log": "/tmp/exp-1.log", "submitted_wall": 1.0e9},
    "slurm.job_pending": {"job_id": 7, "partition": "gpu", "reason": "Resources", "waited_s": 3.0},
    "slurm.job_started": {"job_id": 7, "partition": "gpu", "node": "n1", "submitted_wall": 1.0e9,
                          "started_wall": 1.0e9 + 4, "queued_s": 4.0},
    "slurm.job_ended": {"job_id": 7, "partition": "gpu", "node": "n1", "state": "COMPLETED", "reason": "None",
                        "submitted_wall": 1.0e9, "started_wall": 1.0e9 + 4, "ended_wall": 1.0e9 + 60,
                        "queued_s": 4.0, "exit_code": 0},
    "experiment.cancelled": {"experiment_id": "exp-2", "host_seconds": 120.0, "reason": "settled"},
    "ledger.updated": {"after": ["exp-1"], "hypotheses": [{"id": "kv", "status": "supported", "posterior": 0.8}]},
}


def _field_payload(field: str, obj: BaseModel, rest: dict[str, Any]) -> dict[str, Any]:
    dump = obj.model_dump(mode="json")
    if field == "findings[].finding":
        return {**rest, "findings": [{"title": "t", "outcome": "works", "relevance": 0.8, "finding": dump}]}
    return {**rest, field: dump}


def _field_value(field: str, data: dict[str, Any]) -> Any:
    return data["findings"][0]["finding"] if field == "findings[].finding" else data[field]


def _round_trip(tmp_path: Path, type_: str, data: dict[str, Any]) -> dict[str, Any]:
    tr = Transcript(tmp_path / "t.jsonl", "run-1")
    tr.emit(type_, data, node="test")
    tr.close()
    events = list(read_transcript(tmp_path / "t.jsonl"))
    assert [e.type for e in events] == [type_]
    return events[0].data


def test_every_event_type_has_a_round_trip_case() -> None:
    covered = set(_domain_samples()) | {t for t, _ in _field_samples()} | set(PLAIN)
    assert covered == set(PAYLOADS), f"missing: {set(PAYLOADS) - covered}; unknown: {covered - set(PAYLOADS)}"
    assert set(DOMAIN_EVENTS) <= set(PAYLOADS) and set(_field_samples()) == set(DOMAIN_FIELDS)


@pytest.mark.parametrize("type_", sorted(DOMAIN_EVENTS))
def test_a_domain_event_reads_back_as_the_same_object(tmp_path: Path, type_: str) -> None:
    obj, own = _domain_samples()[type_]
    data = _round_trip(tmp_path, type_, to_payload(type_, obj, **own))
    assert from_payload(type_, data, type(obj)) == obj
    assert {k: data[k] for k in own} == own


@pytest.mark.parametrize("key", sorted(DOMAIN_FIELDS), ids=lambda k: f"{k[0]}.{k[1]}")
def test_a_domain_field_reads_back_as_the_same_object(tmp_path: Path, key: tuple[str, str]) -> None:
    type_, field = key
    obj, rest = _field_samples()[key]
    data = _round_trip(tmp_path, type_, _field_payload(field, obj, rest))
    assert field_of(type_, field, _field_value(field, data), type(obj)) == obj


@pytest.mark.parametrize("type_", sorted(PLAIN))
def test_a_wire_only_event_reads_back_unchanged(tmp_path: Path, type_: str) -> None:
    data = _round_trip(tmp_path, type_, PLAIN[type_])
    assert data == PLAIN[type_]
    assert PAYLOADS[type_].model_validate(data) == PAYLOADS[type_].model_validate(PLAIN[type_])


def test_the_mapping_refuses_the_wrong_model_or_field() -> None:
    with pytest.raises(TypeError, match="carries Outcome"):
        to_payload("outcome", EXPERIMENT)
    with pytest.raises(TypeError, match="no field considered"):
        to_payload("outcome", _outcome(), considered=[])
    with pytest.raises(TypeError, match="carries Experiment"):
        from_payload("experiment.proposed", {}, Outcome)
