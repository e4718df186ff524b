"""analyze: turn an experiment's evidence into an Outcome (the furthest stage reached, and why).

Side effects: transcript ``outcome``; for a failure with a Python traceback (or a failed import), the
installed source at its innermost SGLang / kernel-package frames is read on the host (read-only, no
launch; ``tools.source_guards``) and what it found rides on the outcome (``Outcome.source_reading``),
with a ``tool.call``/``tool.result`` pair (tool ``installed_source``) in the transcript. Classification
itself is a pure function of the evidence (``classify_outcome``, also used by ``hypoloop analyze``).
"""

from __future__ import annotations

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Outcome, Stage
from agent.record.wire import to_payload
from agent.run.runtime import Runtime
from agent.run.state import RunState
from tools.fingerprint import engine_version
from tools.flags import FlagCatalog, FlagError
from tools.host import HostError
from tools.probes import ProbeResult
from tools.signatures import SignatureMatch
from tools.source_guards import SourceReading, read_guards
from tools.tracebacks import missing_import

#: Stages whose evidence is not a failure: nothing to read the source for.
_NOT_FAILED = frozenset({"ok", "ready", "infra_error"})


def analyze(state: RunState, rt: Runtime) -> RunState:
    """The analyze node: classify the pending evidence (``raw``), mark its experiment done."""
    raw = state.get("raw")
    if not raw:
        return {}
    outcome = classify_outcome(RawEvidence.model_validate(raw))
    outcome.source_reading = read_installed_source(state, rt, outcome)
    if outcome.source_reading is not None and outcome.source_reading.missing is not None:
        missing = outcome.source_reading.missing
        outcome.facts.setdefault("missing_module", missing.module)
        outcome.facts.setdefault("missing_package", missing.package)
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


def read_installed_source(state: RunState, rt: Runtime, outcome: Outcome) -> SourceReading | None:
    """Read the installed source on the host at the tracebacks of a failed launch (zero launches).

    The traceback text is the outcome's log excerpt (tracebacks are kept whole there); the files are
    read through the host (``Host.read_text``: locally or over SFTP), names resolved to flags through
    the host's ``--help`` catalog. None when the launch did not fail, printed no traceback and no failed
    import, or the host could not be asked (a ``tool.result`` with the error says so).
    """
    if outcome.stage in _NOT_FAILED or not outcome.log_excerpt:
        return None
    text = "\n".join(line.text for line in outcome.log_excerpt)
    if "Traceback (most recent call last)" not in text and missing_import(text, []) is None:
        return None
    case = Case.model_validate(state["case"])
    tr = rt.transcript
    tr.emit("tool.call", {"tool": "installed_source", "experiment_id": outcome.experiment_id}, node="analyze")
    try:
        host = rt.host(case)
        if not callable(getattr(host, "read_text", None)):  # a Host written before read_text existed
            raise HostError(f"{type(host).__name__} cannot read files (no read_text)")
        flags: FlagCatalog | None
        try:
            flags = rt.flags(case, engine_version(state.get("fingerprint")))
        except FlagError:
            flags = None
        try:
            reading = read_guards(host.read_text, text, flags)
        except HostError:
            raise
        except Exception as exc:  # noqa: BLE001 - optional evidence: an odd file never ends the run
            raise HostError(f"the installed source could not be read: {type(exc).__name__}: {exc}") from None
    except HostError as exc:
        tr.emit(
            "tool.result",
            {"tool": "installed_source", "experiment_id": outcome.experiment_id, "error": str(exc)},
            node="analyze",
        )
        return None
    tr.emit(
        "tool.result",
        {
            "tool": "installed_source",
            "experiment_id": outcome.experiment_id,
            "files_read": reading.files_read,
            "frames": [f"{f.path}:{f.located or f.line} ({f.status})" for f in reading.frames],
            "leads": [f"{ld.kind} {ld.name} {ld.flip_text()} at {ld.where()}" for ld in reading.leads],
            "missing": reading.missing.package if reading.missing else None,
        },
        node="analyze",
    )
    return reading


def classify_outcome(evidence: RawEvidence) -> Outcome:
    """The furthest stage a launch reached, from its watch status, signatures and probe results.

    Stages (docs/ARCHITECTURE.md, "Data contracts"): launch_failed (argument errors, exit before
    loading), load_failed (exit or fatal before ready, CUDA-graph capture included), timeout (no ready line in time, or a stall),
    request_failed (ready, then a request failed or the server crashed), wrong_output (answers
    degenerate or wrong), ok (every probe passed and no fatal signature), infra_error (the host failed).
    """
    probes = evidence.probes
    matches = _matches_before_shutdown(evidence)
    stage = _stage(evidence, matches)
    matches += _probe_signatures(probes, {m.signature_id for m in matches})
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
        log_excerpt=list(evidence.log_excerpt),
    )



def _matches_before_shutdown(evidence: RawEvidence) -> list[SignatureMatch]:
    """The launch's signature matches; once every probe passed, without the fatal and error lines the
    server logged after it was asked to stop (its own shutdown: SGLang 0.5.23's detokenizer "crashed
    with exit code -15. Triggering SIGQUIT"; vLLM 0.32.0's "EngineDeadError" from the output handler the
    shutdown tore down), which are not the failure under test. A log read alone (``observed``: no
    probes) is read the same way when it reached ready and logged no failure before it was asked to
    stop: what it logs from there is its shutdown."""
    matches = list(evidence.matches)
    probes = evidence.probes
    stop = min((n for m in matches if m.signature_id == "server_stopping" for n in m.line_numbers), default=None)
    if stop is not None and evidence.status == "observed" and not probes:
        before = [m for m in matches if m.line_numbers and min(m.line_numbers) < stop]
        served = any(m.kind == "ready" for m in before) and not any(m.kind in ("fatal", "error") for m in before)
    else:
        served = bool(probes) and all(p.ok for p in probes)
    if stop is not None and served:
        matches = [m for m in matches
                   if m.kind not in ("fatal", "error") or not m.line_numbers or min(m.line_numbers) < stop]
    return matches


def _stage(evidence: RawEvidence, matches: list[SignatureMatch]) -> Stage:
    """The furthest stage the launch reached (see ``classify_outcome``)."""
    probes, status = evidence.probes, evidence.status
    kinds = {m.kind for m in matches}
    stages = {m.stage for m in matches if m.kind in ("fatal", "error")}
    ready = "ready" in kinds or status == "ready"
    if status == "infra_error":
        return "infra_error"
    if status in ("timeout", "stalled") and not ready:
        return "timeout"
    if not ready:
        # A launch-stage error after loading began (a ValueError raised while sizing the KV pool) is a
        # load failure: the arguments were accepted. Any error before loading began is a launch failure,
        # whatever its exception's class (an AssertionError and a ValueError of the same argument check).
        loading = any(m.kind == "progress" and m.stage in ("load", "capture") for m in matches)
        launch_failed = (bool(stages) and not loading) or (not stages and evidence.exit_code == 2)
        return "launch_failed" if launch_failed else "load_failed"
    if any(p.status in ("connection_error", "http_error", "timeout") for p in probes) or "fatal" in kinds:
        return "request_failed"
    if any(p.status in ("empty", "degenerate", "wrong_answer") for p in probes):
        return "wrong_output"
    if probes and all(p.ok for p in probes):
        return "ok"
    return "ready"


#: The pseudo-signature a probe finding becomes, so that hypotheses can be triggered by it.
_PROBE_SIGNATURE = {"degenerate": "degenerate_output", "empty": "degenerate_output", "wrong_answer": "wrong_answer"}


def _probe_signatures(probes: list[ProbeResult], present: set[str]) -> list[SignatureMatch]:
    """Probe findings as pseudo-signatures (each once, none already in ``present``)."""
    added: list[SignatureMatch] = []
    for p in probes:
        sig = _PROBE_SIGNATURE.get(p.status)
        if sig is None or sig in present:
            continue
        present.add(sig)
        added.append(
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
    return added

def _summary(stage: str, matches: list[SignatureMatch], probes: list[ProbeResult]) -> str:
    fatal = [m.signature_id for m in matches if m.kind in ("fatal", "error")]
    bits = [stage]
    if fatal:
        bits.append("signatures: " + ", ".join(dict.fromkeys(fatal)))
    if probes:
        bits.append("probes: " + ", ".join(f"{p.probe_id}={p.status}" for p in probes))
    return "; ".join(bits)
