"""analyze: turn an experiment's evidence into an Outcome (the furthest stage reached, and why).

Side effects: transcript ``outcome``. Nothing else: classification is a pure function of the evidence
(``classify_outcome``, also used by ``hypoloop analyze``).
"""

from __future__ import annotations

from typing import Any

from agent.evidence import RawEvidence
from agent.models import Outcome, Stage
from agent.runtime import Runtime
from agent.state import RunState
from agent.wire import to_payload
from tools.probes import ProbeResult
from tools.signatures import SignatureMatch


def analyze(state: RunState, rt: Runtime) -> dict[str, Any]:
    """The analyze node: classify the pending evidence (``raw``), mark its experiment done."""
    raw = state.get("raw")
    if not raw:
        return {}
    outcome = classify_outcome(RawEvidence.model_validate(raw))
    rt.transcript.emit("outcome", to_payload("outcome", outcome), node="analyze")
    experiments = [dict(e) for e in state.get("experiments", [])]
    for e in experiments:
        if e["id"] == outcome.experiment_id:
            e["status"] = "done"
    return {
        "raw": None,
        "outcomes": [*state.get("outcomes", []), outcome.model_dump(mode="json")],
        "experiments": experiments,
    }


def classify_outcome(evidence: RawEvidence) -> Outcome:
    """The furthest stage a launch reached, from its watch status, signatures and probe results.

    Stages (docs/ARCHITECTURE.md, "Data contracts"): launch_failed (argument errors, exit before
    loading), load_failed (exit or fatal before ready, CUDA-graph capture included), timeout (no ready line in time, or a stall),
    request_failed (ready, then a request failed or the server crashed), wrong_output (answers
    degenerate or wrong), ok (every probe passed and no fatal signature), infra_error (the host failed).
    """
    matches = list(evidence.matches)
    probes = evidence.probes
    status = evidence.status
    kinds = {m.kind for m in matches}
    stages = {m.stage for m in matches if m.kind in ("fatal", "error")}
    ready = "ready" in kinds or status == "ready"
    stage: Stage
    if status == "infra_error":
        stage = "infra_error"
    elif status in ("timeout", "stalled") and not ready:
        stage = "timeout"
    elif not ready:
        # A launch-stage error after loading began (a ValueError raised while sizing the KV pool) is a
        # load failure: the arguments were accepted.
        loading = any(m.kind == "progress" and m.stage in ("load", "capture") for m in matches)
        stage = (
            "launch_failed"
            if (("launch" in stages and not loading) or (not stages and evidence.exit_code == 2))
            else "load_failed"
        )
    elif any(p.status in ("connection_error", "http_error", "timeout") for p in probes) or "fatal" in kinds:
        stage = "request_failed"
    elif any(p.status in ("empty", "degenerate", "wrong_answer") for p in probes):
        stage = "wrong_output"
    elif probes and all(p.ok for p in probes):
        stage = "ok"
    else:
        stage = "ready"
    # Probe findings become pseudo-signatures so that hypotheses can be triggered by them.
    for p in probes:
        if p.status in ("degenerate", "empty", "wrong_answer"):
            sig = {
                "degenerate": "degenerate_output",
                "empty": "degenerate_output",
                "wrong_answer": "wrong_answer",
            }[p.status]
            if sig not in {m.signature_id for m in matches}:
                matches.append(
                    SignatureMatch(
                        signature_id=sig,
                        kind="error",
                        severity="error",
                        stage="request",
                        components=["output"],
                        meaning=f"probe {p.probe_id}: {p.status}",
                        line_numbers=[],
                        first_line=p.text or "",
                        facts={},
                    )
                )
    return Outcome(
        experiment_id=evidence.experiment_id,
        stage=stage,
        matches=matches,
        facts=dict(evidence.facts),
        probes=list(probes),
        timings=evidence.timings.model_copy(),
        exit_code=evidence.exit_code,
        log_path=evidence.log_path,
        summary=_summary(stage, matches, probes),
    )


def _summary(stage: str, matches: list[SignatureMatch], probes: list[ProbeResult]) -> str:
    fatal = [m.signature_id for m in matches if m.kind in ("fatal", "error")]
    bits = [stage]
    if fatal:
        bits.append("signatures: " + ", ".join(dict.fromkeys(fatal)))
    if probes:
        bits.append("probes: " + ", ".join(f"{p.probe_id}={p.status}" for p in probes))
    return "; ".join(bits)
