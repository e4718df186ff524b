"""The LangGraph state machine of a run (DESIGN.md, "The state machine").

    START → intake → analyze → hypothesize → design ──► approve ──► execute → analyze …
                                              │          │  reject(reason) → design
                                              │          └  stop → conclude
                                              └ nothing left worth testing / budget spent → conclude → END

Nodes are plain functions ``state -> partial update``; routing is in edges or ``Command(goto=...)``.
State is JSON-plain (``model_dump(mode="json")``), so a checkpoint can be resumed by any process. Side
effects on the host happen only in ``intake`` (read-only queries) and ``execute`` (launches), never
before the ``interrupt()`` in ``approve`` returns.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agent.approval import (
    ApprovalAnswer,
    EditError,
    apply_edit,
    build_request,
    load_risk_rules,
    must_ask,
    risky_reasons,
)
from agent.case import Case, outside_warnings
from agent.catalog import CatalogEntry, load_catalog
from agent.crashsafe import (
    api_key_of,
    infra_failure,
    probe_through_drops,
    record_intent,
    server_info_through_drops,
)
from agent.guard import GuardError, check_experiment
from agent.llm_planner import LLMPlanner, make_planner, planner_checkpoint, usage_summary
from agent.models import (
    Baseline,
    Change,
    Conclusion,
    Experiment,
    Hypothesis,
    Intervention,
    Outcome,
    Rejection,
    Stage,
    Timings,
)
from agent.planner import COST_ORDER, PlannerView, RelevantFinding, RulePlanner, model_features
from agent.redact import run_redactor
from agent.runs import emit_once, prior_launch, recover, save_result, seed_state
from agent.transcript import Transcript
from agent.values import ValueEvidence, derive
from tools.fingerprint import HostFingerprint, fingerprint
from tools.flags import FlagCatalog, FlagError
from tools.flags import load_catalog as load_flag_catalog
from tools.host import (
    FindsOrphans,
    Host,
    HostError,
    ProcessHandle,
    connect_host,
    expand_argv,
)
from tools.knowledge import KnowledgeError, read_findings, relevance
from tools.server import ServerSession, render_command
from tools.signatures import Signature, SignatureMatcher, load_signatures, scan_text
from tools.ssh import SSHOptions
from tools.stall import StallWatch

#: Keys of ``/get_server_info`` copied into an outcome's facts (SGLang ServerArgs field names).
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


class RunState(TypedDict, total=False):
    """The checkpointed state of a run (JSON-plain)."""

    run_id: str
    case: dict[str, Any]
    approval: str
    fingerprint: dict[str, Any] | None
    findings: list[dict[str, Any]]
    experiments: list[dict[str, Any]]
    outcomes: list[dict[str, Any]]
    rejections: list[dict[str, Any]]
    hypotheses: list[dict[str, Any]]
    baseline: dict[str, Any]
    pending: dict[str, Any] | None
    raw: dict[str, Any] | None
    launches: int
    host_seconds: float
    conclude_reason: str | None
    status: str | None
    error: str | None
    error_kind: str | None
    conclusion: dict[str, Any] | None
    transcript: str | None
    case_ref: str | None
    approval_seq: int
    approval_error: str | None
    edits: list[dict[str, Any]]
    #: Which planner decides, with its options and memory (agent.llm_planner.PlannerSpec; None: rules).
    planner: dict[str, Any] | None
    #: The ``--host`` the user gave on the command line (it replaced the case's host.target), if any.
    host_option: str | None


@dataclass
class Runtime:
    """The non-JSON parts of a run, rebuilt by each process: host connection, catalogs, transcript.

    ``state_dir`` holds the flag-catalog cache. Hosts are connected lazily and closed by ``close()``.
    """

    transcript: Transcript
    state_dir: Path
    _host: Host | None = None
    _flags: FlagCatalog | None = None
    _signatures: list[Signature] | None = None
    _catalog: list[CatalogEntry] | None = None
    sessions: dict[str, ServerSession] = field(default_factory=dict)  # experiment id -> running session
    #: Stop servers that earlier runs left on the host (their orchestrator is gone) without asking.
    stop_orphans: bool = False
    #: Asked (with the orphans as JSON) whether to stop them when ``stop_orphans`` is off; None: don't.
    confirm_orphans: Callable[[list[dict[str, Any]]], bool] | None = None
    #: An approval mode given when a run is continued without an answer (``resume RUN --auto``): it
    #: applies from the next approval on and is saved into the run's state there.
    approval_override: str | None = None
    unstopped: list[str] = field(default_factory=list)

    def host(self, case: Case) -> Host:
        """The case's host, connected on first use (local or ``ssh://``). Raises HostError.

        Right after an SSH host connects, servers that earlier runs left there are reported and, with
        ``stop_orphans`` or a yes from ``confirm_orphans``, stopped (this run's own are left for it).
        """
        if self._host is None:
            self._host = connect_host(
                case.host.target,
                env=case.host.env,
                local_root=str(self.state_dir / "runs"),
                ssh=ssh_options(case),
                on_event=lambda type_, data: self.transcript.emit(type_, data, node="host"),
            )
            self._handle_orphans(self._host)
        return self._host

    def _handle_orphans(self, host: Host) -> None:
        if not isinstance(host, FindsOrphans):
            return
        tr = self.transcript
        try:
            orphans = [o for o in host.find_orphans() if Path(o.pid_file).parent.name != tr.run_id]
        except HostError as exc:
            tr.emit("host.orphans", {"error": f"could not look for orphaned servers: {exc}"}, node="host")
            return
        if not orphans:
            return
        listed = [o.model_dump(mode="json") for o in orphans]
        tr.emit("host.orphans", {"orphans": listed}, node="host")
        if not (self.stop_orphans or (self.confirm_orphans is not None and self.confirm_orphans(listed))):
            tr.emit(
                "host.orphans_left",
                {"count": len(orphans), "reason": "not confirmed (run with --auto to stop them)"},
                node="host",
            )
            return
        for o in orphans:
            ok = host.stop_orphan(o)
            tr.emit(
                "host.orphan_stopped",
                {"pgid": o.pgid, "pid_file": o.pid_file, "port": o.port, "verified": ok},
                node="host",
            )

    def flags(self, case: Case, version: str | None) -> FlagCatalog:
        """The host's flag catalog from ``launch_server --help`` (cached per host + version)."""
        if self._flags is None:
            host = self.host(case)
            self._flags = load_flag_catalog(
                host,
                expand_argv(case.launcher.argv, host),
                cache_dir=self.state_dir / "flag-cache",
                version=version,
            )
        return self._flags

    @property
    def signatures(self) -> list[Signature]:
        """Log signatures from ``knowledge/signatures.toml``."""
        if self._signatures is None:
            self._signatures = load_signatures()
        return self._signatures

    @property
    def catalog(self) -> list[CatalogEntry]:
        """The hypothesis catalog from ``knowledge/hypotheses.toml``."""
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog

    def close(self) -> None:
        """Stop anything still running and close the host connection.

        Never raises HostError: a server that cannot be stopped because the host is unreachable stays
        there (the run already ended in error saying so) and the next start on that host reports it as an
        orphan; the reasons are kept in ``unstopped``.
        """
        self.stop_sessions()
        if self._host is not None:
            self._host.close()

    def stop_sessions(self) -> None:
        """Stop (and record stopping) the servers an interrupt or an error left running. Never raises."""
        for exp_id, s in self.sessions.items():
            try:
                verified = s.stop()
            except HostError as exc:
                self.unstopped.append(str(exc))
                verified = False
            if s.handle is not None:
                self.transcript.emit(
                    "server.stopped",
                    {"experiment_id": exp_id, "pid": s.handle.pid, "log": s.log_path, "verified": verified,
                     "interrupted": True,
                     "wall_s": round(time.monotonic() - s.handle.started_monotonic, 3)},
                    node="execute",
                )
        self.sessions.clear()


def ssh_options(case: Case) -> SSHOptions | None:
    """The case's SSH settings (paths relative to the case file), or None for a local host."""
    spec = case.host
    if not spec.target.startswith("ssh://"):
        return None
    return SSHOptions(
        key_path=str(case.resolve_path(spec.ssh_key)) if spec.ssh_key else None,
        known_hosts=str(case.resolve_path(spec.known_hosts)) if spec.known_hosts else None,
        insecure_accept_host_key=spec.insecure_accept_host_key,
        python=spec.remote_python or "python3",
        workdir_root=spec.remote_workdir,
        reconnect_timeout_s=spec.reconnect_timeout_s,
    )


def _case(state: RunState) -> Case:
    return Case.model_validate(state["case"])


def _view(state: RunState) -> PlannerView:
    return PlannerView(
        case=_case(state),
        fingerprint=HostFingerprint.model_validate(state["fingerprint"])
        if state.get("fingerprint")
        else None,
        findings=[RelevantFinding.model_validate(f) for f in state.get("findings", [])],
        experiments=[Experiment.model_validate(e) for e in state.get("experiments", [])],
        outcomes=[Outcome.model_validate(o) for o in state.get("outcomes", [])],
        rejections=[Rejection.model_validate(r) for r in state.get("rejections", [])],
        launches=state.get("launches", 0),
        host_seconds=state.get("host_seconds", 0.0),
    )


def build_graph(rt: Runtime, checkpointer: Any = None) -> Any:
    """Compile the run graph; the nodes close over ``rt`` for host access and the transcript."""
    tr = rt.transcript

    def planner(state: RunState) -> RulePlanner | LLMPlanner:
        case = _case(state)
        version = (state.get("fingerprint") or {}).get("sglang_version")
        return make_planner(state.get("planner"), rt.catalog, rt.flags(case, version), transcript=tr)

    # ------------------------------------------------------------------ intake
    def intake(state: RunState) -> Command[Literal["analyze", "conclude"]]:
        # LangGraph Studio starts a run from {"case_ref": "lab:WORLD"} alone; the CLI gives the full state.
        seed = seed_state(dict(state), get_config().get("configurable", {}).get("thread_id"))
        state = {**state, **seed}  # type: ignore[typeddict-item]
        case = _case(state)
        tr.redact = run_redactor(case)  # its secrets are never written (the CLI set it already; Studio not)
        tr.emit(
            "run.started",
            {
                "case": case.name,
                "case_file": case.source_path,
                "host": case.host.target,
                "approval": state.get("approval"),
                "budget": case.budget.model_dump(),
                "case_data": case.model_dump(mode="json"),  # for `replay --redecide` (secrets redacted)
            },
            node="intake",
        )
        for warning in outside_warnings(case):  # named explicitly in the case file, so used; recorded
            tr.emit("case.warning", {"message": warning}, node="intake")
        where = case.source_path or case.name
        step = "host.target"
        try:
            host = rt.host(case)
            step = "launcher.gpu_query_argv / launcher.version_argv"
            tr.emit(
                "tool.call",
                {"tool": "fingerprint", "argv": expand_argv(case.launcher.gpu_query_argv, host)},
                node="intake",
            )
            fp = fingerprint(
                host,
                gpu_query_argv=expand_argv(case.launcher.gpu_query_argv, host),
                version_argv=expand_argv(case.launcher.version_argv, host),
            )
            tr.emit("host.fingerprint", fp.model_dump(mode="json"), node="intake")
            step = "launcher.argv (its --help gives the flag catalog)"
            flags = rt.flags(case, fp.sglang_version)
            tr.emit(
                "tool.result",
                {
                    "tool": "flag_catalog",
                    "flags": len(flags.flags),
                    "version": flags.version,
                    "source": flags.source,
                    "catalog": flags.model_dump(mode="json"),  # a re-decided run checks names with it
                },
                node="intake",
            )
            step = "baseline.flags"
            baseline = Baseline(env=dict(case.baseline.env))
            for name, value in case.baseline.flags.items():
                canon, norm = flags.validate(name, value)
                baseline.flags[canon] = norm
        except (HostError, FlagError) as exc:
            # Nothing was launched: the case's host, launcher or baseline cannot be used as written.
            msg = f"{where}: {step}: {exc}"
            if step == "host.target" and state.get("host_option"):
                msg = f"--host: {exc}"  # the user's option replaced the case's host.target
            tr.emit("error", {"message": msg, "kind": "input"}, node="intake")
            return Command(goto="conclude", update={"status": "error", "error": msg, "error_kind": "input"})
        case.baseline = baseline
        findings: list[RelevantFinding] = []
        features = model_features(case)
        for p in case.knowledge:
            path = case.resolve_path(p)
            try:
                found = read_findings(path)
            except KnowledgeError as exc:
                msg = f"{case.source_path}: knowledge: {exc}"
                tr.emit("error", {"message": msg, "kind": "input"}, node="intake")
                return Command(goto="conclude", update={"status": "error", "error": msg, "error_kind": "input"})
            for f in found:
                r = relevance(f, model=case.model.path, features=features, gpu_name=fp.gpu_name)
                findings.append(RelevantFinding(finding=f, relevance=r))
            tr.emit(
                "knowledge.read",
                {
                    "path": str(path),
                    "findings": [
                        {
                            "title": f.finding.title,
                            "outcome": f.finding.outcome,
                            "relevance": round(f.relevance, 2),
                            "relevance_exact": f.relevance,
                            "finding": f.finding.model_dump(mode="json"),
                        }
                        for f in findings
                        if f.finding.source == str(path)
                    ],
                },
                node="intake",
            )
        update: dict[str, Any] = {
            **seed,
            "case": case.model_dump(mode="json"),
            "fingerprint": fp.model_dump(mode="json"),
            "findings": [f.model_dump(mode="json") for f in findings],
            "baseline": baseline.model_dump(mode="json"),
        }
        if case.observed_log:
            update["raw"], exp = _ingest_log(case, baseline, rt.signatures)
            update["experiments"] = [exp.model_dump(mode="json")]
            tr.emit("observation", {"source": case.observed_log, "experiment_id": exp.id}, node="intake")
        return Command(goto="analyze", update=update)

    # ------------------------------------------------------------------ analyze
    def analyze(state: RunState) -> dict[str, Any]:
        raw = state.get("raw")
        if not raw:
            return {}
        outcome = classify_outcome(raw)
        tr.emit("outcome", outcome.model_dump(mode="json"), node="analyze")
        experiments = [dict(e) for e in state.get("experiments", [])]
        for e in experiments:
            if e["id"] == outcome.experiment_id:
                e["status"] = "done"
        return {
            "raw": None,
            "outcomes": [*state.get("outcomes", []), outcome.model_dump(mode="json")],
            "experiments": experiments,
        }

    # ------------------------------------------------------------------ hypothesize
    def hypothesize(state: RunState) -> dict[str, Any]:
        if state.get("status") == "error":
            return {}
        hist = planner(state).history(_view(state))
        old = {h["id"]: h for h in state.get("hypotheses", [])}
        for h in hist.hypotheses:
            prev = old.get(h.id)
            if prev is None:
                tr.emit("hypothesis.added", h.model_dump(mode="json"), node="hypothesize")
            elif prev["status"] != h.status:
                tr.emit(
                    f"hypothesis.{h.status}",
                    {
                        "id": h.id,
                        "statement": h.statement,
                        "posterior": h.posterior,
                        "evidence": [e.model_dump(mode="json") for e in h.evidence[-1:]],
                    },
                    node="hypothesize",
                )
            elif abs(prev["posterior"] - h.posterior) > 1e-3:
                tr.emit(
                    "hypothesis.updated",
                    {"id": h.id, "posterior": h.posterior, "prior": h.prior, "before": prev["posterior"]},
                    node="hypothesize",
                )
        baseline = hist.baseline.model_dump(mode="json")
        if baseline != state.get("baseline"):
            tr.emit(
                "baseline.changed",
                {"baseline": baseline, "adoption": hist.adoptions[-1] if hist.adoptions else None},
                node="hypothesize",
            )
        return {"hypotheses": [h.model_dump(mode="json") for h in hist.hypotheses], "baseline": baseline}

    # ------------------------------------------------------------------ design
    def design(state: RunState) -> Command[Literal["approve", "conclude"]]:
        if state.get("status") == "error":
            return Command(goto="conclude")
        view = _view(state)
        pl = planner(state)
        hist = pl.history(view)
        proposal = pl.propose(view, hist)
        # The LLM planner's memory (its hypotheses, tokens spent) is checkpointed with the step.
        memo = planner_checkpoint(pl)
        kept: dict[str, Any] = {"planner": memo} if memo is not None else {}
        if proposal.experiment is None:
            tr.emit(
                "design.none",
                {"reason": proposal.conclude_reason, "considered": proposal.considered},
                node="design",
            )
            return Command(goto="conclude", update={**kept, "conclude_reason": proposal.conclude_reason})
        exp = proposal.experiment
        try:
            check_experiment(exp, view=view, flags=pl.flags)
        except GuardError as exc:  # a planner bug: never execute, say so, conclude
            tr.emit("error", {"message": f"planner proposal refused: {exc}"}, node="design")
            return Command(
                goto="conclude", update={**kept, "conclude_reason": f"planner proposal refused: {exc}"}
            )
        tr.step = view.launches + 1
        tr.emit(
            "experiment.proposed",
            {**exp.model_dump(mode="json"), "considered": proposal.considered[:12]},
            node="design",
        )
        return Command(goto="approve", update={**kept, "pending": exp.model_dump(mode="json")})

    # ------------------------------------------------------------------ approve
    def approve(state: RunState) -> Command[Literal["execute", "design", "conclude", "approve"]]:
        # LangGraph re-runs this node from its first line when a paused run is resumed, so nothing
        # before interrupt() may have a side effect, except the approval.requested event, which is
        # written once per request (keyed by the request's sequence number in the state).
        exp = Experiment.model_validate(state["pending"])
        seq = state.get("approval_seq", 0) + 1
        mode = rt.approval_override or state.get("approval") or "each"
        tr.step = state.get("launches", 0) + 1
        risky = risky_reasons(exp, load_risk_rules())
        if not must_ask(mode, risky):
            answer = ApprovalAnswer(decision="approve", by="auto" if mode == "auto" else "policy")
        else:
            case = _case(state)
            request = build_request(
                run_id=state["run_id"],
                exp=exp,
                hypotheses=[Hypothesis.model_validate(h) for h in state.get("hypotheses", [])],
                launches=state.get("launches", 0),
                host_seconds=state.get("host_seconds", 0.0),
                budget_launches=case.budget.experiments,
                budget_host_seconds=case.budget.host_seconds,
                mode=mode,
                risky=risky,
                error=state.get("approval_error"),
            )
            emit_once(
                tr,
                "approval.requested",
                {"experiment_id": exp.id, "request": seq, "mode": mode, "risky": risky},
                node="approve",
                key=("experiment_id", "request"),
            )
            raw_answer = interrupt(request.model_dump(mode="json"))
            # The answer is in: everything below runs once per request.
            try:
                answer = ApprovalAnswer.parse(raw_answer)
            except ValueError as exc:
                return _refuse(exp, seq, str(exc), raw_answer)
            if answer.experiment_id not in (None, exp.id):
                return _refuse(
                    exp,
                    seq,
                    f"the answer is for {answer.experiment_id}, but {exp.id} is waiting for approval",
                    raw_answer,
                )
        done: dict[str, Any] = {"pending": None, "approval_seq": seq, "approval_error": None}
        if answer.mode or rt.approval_override:
            done["approval"] = answer.mode or rt.approval_override
        decided: dict[str, Any] = {"experiment_id": exp.id, "request": seq, "by": answer.by}
        if answer.mode:
            decided["mode"] = answer.mode
        if answer.by == "policy":
            decided["why"] = "--approve risky: no rule in knowledge/risky.toml marks this change risky"
        if answer.decision == "edit":
            try:
                new = edit_experiment(rt, state, exp, answer.set, by=answer.by)
            except EditError as exc:
                return _refuse(exp, seq, f"edit refused: {exc}", answer.model_dump(exclude_none=True))
            if new.id != exp.id:
                new.status = "approved"
                assert new.change is not None
                edit = {
                    "experiment_id": exp.id,
                    "proposed": exp.change.model_dump(mode="json") if exp.change else None,
                    "edited_experiment_id": new.id,
                    "change": new.change.model_dump(mode="json"),
                    "by": answer.by,
                }
                tr.emit(
                    "approval.decided",
                    {
                        **decided,
                        "decision": "edit",
                        "set": answer.set,
                        **edit,
                        **({"reason": answer.reason} if answer.reason else {}),
                    },
                    node="approve",
                )
                done["edits"] = [*state.get("edits", []), edit]
                return Command(goto="execute", update={**done, "pending": new.model_dump(mode="json")})
            answer.decision = "approve"  # the "edit" asked for exactly what was proposed
        tr.emit(
            "approval.decided",
            {**decided, "decision": answer.decision, **({"reason": answer.reason} if answer.reason else {})},
            node="approve",
        )
        if answer.decision == "approve":
            exp.status = "approved"
            return Command(goto="execute", update={**done, "pending": exp.model_dump(mode="json")})
        if answer.decision == "reject":
            rej = Rejection(
                experiment_id=exp.id,
                change_key=exp.change.key() if exp.change else None,
                change=exp.change,
                reason=answer.reason or "no reason given",
            )
            done["rejections"] = [*state.get("rejections", []), rej.model_dump(mode="json")]
            return Command(goto="design", update=done)
        why = "stopped by the user" + (f": {answer.reason}" if answer.reason else "")
        return Command(goto="conclude", update={**done, "status": "stopped", "conclude_reason": why})

    def _refuse(exp: Experiment, seq: int, reason: str, answer: Any) -> Command[Any]:
        """Refuse an answer that cannot be carried out; the same experiment is asked about again."""
        tr.emit(
            "approval.refused",
            {"experiment_id": exp.id, "request": seq, "answer": answer, "reason": reason},
            node="approve",
        )
        return Command(goto="approve", update={"approval_seq": seq, "approval_error": reason})

    # ------------------------------------------------------------------ execute
    def execute(state: RunState) -> dict[str, Any]:
        exp = Experiment.model_validate(state["pending"])
        case = _case(state)
        if any(o["experiment_id"] == exp.id for o in state.get("outcomes", [])):
            tr.emit(
                "experiment.skipped", {"experiment_id": exp.id, "reason": "already executed"}, node="execute"
            )
            return {"pending": None}
        tr.step = state.get("launches", 0) + 1
        unreachable: dict[str, Any] = {}
        # Earlier attempts of this experiment that launched a server which was lost or stopped before
        # its outcome was read: their launches and host time count against the budget too.
        earlier, earlier_host_s = 0, 0.0
        time_scale = 1.0
        try:
            # An earlier process of this run may have finished this experiment, or left its server
            # running when it died: reuse the result or adopt the server, never launch a duplicate.
            host = rt.host(case)
            time_scale = host.time_scale
            prior = prior_launch(tr.path, exp.id)  # one read of the transcript serves both
            raw, adopt, record = recover(rt, host, state["run_id"], exp.id, prior=prior)
            if raw is None and adopt is None:  # (an adopted server keeps its first launch's clock)
                earlier, earlier_host_s = prior.attempts, prior.wall_s / host.time_scale
            if raw is None:
                raw = run_experiment(
                    rt, case, state["run_id"], exp, adopt=adopt, record=record, launch_no=prior.attempts + 1
                )
                save_result(rt.state_dir, state["run_id"], raw)
        except HostError as exc:
            tr.emit("error", {"message": str(exc), "experiment_id": exp.id}, node="execute")
            # Launches of this experiment that produced no outcome, this one included (the host failed
            # under a running server): each used the host, so each counts, with the time it was seen.
            lost = prior_launch(tr.path, exp.id)
            earlier, earlier_host_s = lost.attempts, lost.wall_s / time_scale
            # The host failed, not the server: that is no evidence about the deployment, and nothing
            # more can be learned there. The run ends in error (conclude stops what it can reach).
            unreachable = infra_failure(rt, exp.id, exc)
            raw = {
                "experiment_id": exp.id,
                "status": "infra_error",
                "error": str(exc),
                "matches": [],
                "facts": {},
                "probes": [],
                "timings": {},
                "exit_code": None,
                "log_path": None,
                "launched": False,
            }
        exp.status = "running"
        return {
            **unreachable,
            "pending": None,
            "raw": raw,
            "experiments": [*state.get("experiments", []), exp.model_dump(mode="json")],
            # Every server start counts against the budget, the lost or interrupted ones too.
            "launches": state.get("launches", 0) + (1 if raw.get("launched") else 0) + earlier,
            "host_seconds": round(
                state.get("host_seconds", 0.0) + raw["timings"].get("host_seconds", 0.0) + earlier_host_s, 3
            ),
        }

    # ------------------------------------------------------------------ conclude
    def conclude(state: RunState) -> dict[str, Any]:
        rt.stop_sessions()  # nothing outlives its run, and the stop is recorded before the run's end
        c = build_conclusion(state)
        tr.emit("conclusion", c.model_dump(mode="json"), node="conclude")
        tr.emit(
            "run.ended",
            {"status": c.status, "launches": c.launches, "host_seconds": c.host_seconds, "reason": c.reason},
            node="conclude",
        )
        return {"conclusion": c.model_dump(mode="json"), "status": c.status}

    g: StateGraph = StateGraph(RunState)
    g.add_node("intake", intake)
    g.add_node("analyze", analyze)
    g.add_node("hypothesize", hypothesize)
    g.add_node("design", design)
    g.add_node("approve", approve)
    g.add_node("execute", execute)
    g.add_node("conclude", conclude)
    g.add_edge(START, "intake")
    g.add_edge("analyze", "hypothesize")
    g.add_edge("hypothesize", "design")
    g.add_edge("execute", "analyze")
    g.add_edge("conclude", END)
    return g.compile(checkpointer=checkpointer)


def edit_experiment(
    rt: Runtime, state: RunState, exp: Experiment, items: list[str], *, by: str = "user"
) -> Experiment:
    """The experiment a person's edit of the proposal ``exp`` asks for, checked like a planner's
    proposal (one change, known flag, legal value, not run or rejected before, within budget).

    Used by the approve node and, to ask again at once, by the CLI before it answers. Raises EditError.
    """
    case = _case(state)
    version = (state.get("fingerprint") or {}).get("sglang_version")
    try:
        flags = rt.flags(case, version)
    except (HostError, FlagError) as exc:
        raise EditError(f"cannot check the edit against the host's flag catalog: {exc}") from None
    planner = RulePlanner(rt.catalog, flags)
    return apply_edit(
        exp,
        items,
        view=_view(state),
        flags=flags,
        hypotheses=[Hypothesis.model_validate(h) for h in state.get("hypotheses", [])],
        predict=planner.prediction,
        by=by,
    )


# ---------------------------------------------------------------------- execution and analysis


def run_experiment(
    rt: Runtime,
    case: Case,
    run_id: str,
    exp: Experiment,
    *,
    adopt: ProcessHandle | None = None,
    record: dict[str, Any] | None = None,
    launch_no: int = 1,
) -> dict[str, Any]:
    """Launch one experiment, watch it to ready/crash/timeout, probe it, stop it; return raw evidence.

    ``adopt``: instead of launching, take over this server, which an earlier process of the run
    launched (``record`` is its ``server.launched`` event data: port, log). ``launch_no``: which launch
    of this experiment this is (a relaunch after a lost one writes a new log, ``EXP.launchN.log``, and
    leaves the earlier log as it was). The server is stopped (and verified gone) before this returns,
    also on KeyboardInterrupt. Raises HostError when the host itself fails.
    """
    tr = rt.transcript
    host = rt.host(case)
    config = exp.config()
    port = int(record["port"]) if adopt is not None and record else host.free_port()
    argv = render_command(
        expand_argv(case.launcher.argv, host), case.model.path, config.flags, host="127.0.0.1", port=port
    )
    name = exp.id if launch_no <= 1 else f"{exp.id}.launch{launch_no}"
    log_path = adopt.log_path if adopt is not None else f"{host.workdir(run_id)}/{name}.log"
    matcher = SignatureMatcher(rt.signatures)
    # Stall = no log progress for a stage-appropriate time (tools/stall.py); the case's stall_timeout_s,
    # when given, caps it.
    stall = StallWatch(
        rt.signatures,
        time_scale=host.time_scale,
        ceiling_s=case.budget.stall_timeout_s * host.time_scale if case.budget.stall_timeout_s else None,
    )

    def on_event(ev: Any) -> None:
        stall.observe(ev)
        if ev.kind == "line" and ev.line is not None:
            return
        if ev.kind in ("ready", "fatal") and ev.line is not None:
            tr.emit(
                "observation",
                {
                    "experiment_id": exp.id,
                    "kind": ev.kind,
                    "line": ev.line.lineno,
                    "text": ev.line.text[:300],
                },
                node="execute",
            )

    session = ServerSession(
        host,
        argv,
        env=config.env,
        log_path=log_path,
        port=port,
        matcher=matcher,
        on_event=on_event,
        ready_timeout_s=case.budget.ready_timeout_s * host.time_scale,
        stall_timeout_s=stall.limit,
    )
    rt.sessions[exp.id] = session
    probes: list[dict[str, Any]] = []
    server_info: dict[str, Any] | None = None
    t0 = time.monotonic()
    with session:
        if adopt is not None:
            tr.emit(
                "server.adopted",
                {
                    "experiment_id": exp.id,
                    "pid": adopt.pid,
                    "pgid": adopt.pgid,
                    "port": port,
                    "log": log_path,
                    "started_wall": adopt.started_wall,
                    "reason": f"launched by an earlier hypoloop process (pid {(record or {}).get('orchestrator_pid')}) "
                    "that ended while the server was running; this process takes the server over "
                    "instead of launching a duplicate",
                },
                node="execute",
            )
            session.adopt(adopt)
            t0 = adopt.started_monotonic
        else:
            tr.emit(
                "tool.call",
                {"tool": "launch_server", "argv": argv, "env": config.env, "log": log_path},
                node="execute",
            )
            record_intent(tr, exp.id, log_path=log_path, port=port, run_dir=host.workdir(run_id))
            session.start()
            if session.error is not None:  # the host could not start it (missing launcher, full disk)
                raise HostError(session.error)
            # The launch record is on disk before anything waits on the server, so a process that
            # resumes this run after a crash can find the server (runs.recover) and adopt it.
            handle = session.handle
            tr.emit(
                "server.launched",
                {
                    "experiment_id": exp.id,
                    "port": port,
                    "log": log_path,
                    "pid": handle.pid if handle else None,
                    "pgid": handle.pgid if handle else None,
                    "started_wall": handle.started_wall if handle else None,
                    "orchestrator_pid": os.getpid(),
                },
                node="execute",
            )
        res = session.wait_ready()
        t_ready = res.t_ready_s
        if res.status == "ready" and res.base_url:
            tr.emit("server.ready", {"experiment_id": exp.id, "after_s": res.t_ready_s}, node="execute")
            api_key = api_key_of(config.flags)  # sent, never written (the transcript redacts it)
            server_info = server_info_through_drops(host, res.base_url, api_key=api_key)
            for probe in [*case.probes, *exp.probes]:
                pr = probe_through_drops(
                    tr, host, res.base_url, probe, model=case.model.path, experiment_id=exp.id, api_key=api_key
                )
                probes.append(pr.model_dump(mode="json"))
                tr.emit(
                    "probe.result", {"experiment_id": exp.id, **pr.model_dump(mode="json")}, node="execute"
                )
                if pr.status in ("connection_error", "timeout"):
                    break
            session.watch(2.0 if any(not p["ok"] for p in probes) else 0.2)
        else:
            tr.emit(
                "server.crashed" if res.status not in ("timeout", "stalled") else "server.timeout",
                {
                    "experiment_id": exp.id,
                    "status": res.status,
                    "exit_code": res.exit_code,
                    "after_s": res.t_end_s,
                },
                node="execute",
            )
        # The evidence is complete: saved before the stop, so a kill during the stop never costs a relaunch.
        save_result(rt.state_dir, run_id, _raw_result(exp.id, session, matcher, probes, server_info, stall,
                                                      host.time_scale, log_path, t_ready, time.monotonic() - t0))
        stopped = session.stop()
    wall = time.monotonic() - t0
    tr.emit(
        "server.stopped",
        {"experiment_id": exp.id, "verified": stopped, "wall_s": round(wall, 3)},
        node="execute",
    )
    rt.sessions.pop(exp.id, None)  # stopped and recorded; Runtime.close() handles only interrupted ones
    return _raw_result(
        exp.id, session, matcher, probes, server_info, stall, host.time_scale, log_path, t_ready, wall
    )


def _raw_result(
    exp_id: str,
    session: ServerSession,
    matcher: SignatureMatcher,
    probes: list[dict[str, Any]],
    server_info: dict[str, Any] | None,
    stall: StallWatch,
    time_scale: float,
    log_path: str,
    t_ready: float | None,
    wall: float,
) -> dict[str, Any]:
    """An experiment's raw evidence (what ``analyze`` classifies); ``wall`` in wall seconds."""
    facts = dict(matcher.facts())
    if server_info:
        for key, value in server_info.items():
            fact = SERVER_INFO_ALIASES.get(key, key)
            if fact in SERVER_INFO_FACTS and value is not None:
                facts[fact] = str(value)
    final = session.result()
    if final.status == "stalled":
        facts["stalled_after"] = stall.last_progress or "start"
        facts["stall_stage"] = stall.stage or "launch"
    delays = final.detection_delays_s
    return {
        "experiment_id": exp_id,
        "launched": True,
        "status": final.status if final.status != "ready" else "ready",
        "matches": [m.model_dump(mode="json") for m in matcher.matches()],
        "facts": facts,
        "probes": probes,
        "exit_code": final.exit_code,
        "log_path": log_path,
        "timings": {
            "to_ready_s": None if t_ready is None else round(t_ready / time_scale, 3),
            "to_end_s": None if final.t_end_s is None else round(final.t_end_s / time_scale, 3),
            "host_seconds": round(wall / time_scale, 3),
            "detection_delay_median_s": round(statistics.median(delays), 4) if delays else None,
            "detection_delay_max_s": round(max(delays), 4) if delays else None,
        },
    }


def _ingest_log(
    case: Case, baseline: Baseline, signatures: list[Signature]
) -> tuple[dict[str, Any], Experiment]:
    """Treat a crash log the user already has as the baseline's first observation (no launch)."""
    path = case.resolve_path(case.observed_log or "")
    text = path.read_text(encoding="utf-8", errors="replace")
    matches, facts = scan_text(text, signatures)
    exp = Experiment(
        id=Experiment.make_id(baseline, None, "baseline"),
        purpose="baseline",
        baseline=baseline,
        rationale=f"observed log {path}",
        status="running",
    )
    raw = {
        "experiment_id": exp.id,
        "launched": False,
        "status": "observed",
        "matches": [m.model_dump(mode="json") for m in matches],
        "facts": facts,
        "probes": [],
        "exit_code": None,
        "log_path": str(path),
        "timings": {},
    }
    return raw, exp


def classify_outcome(raw: dict[str, Any]) -> Outcome:
    """The furthest stage a launch reached, from its watch status, signatures and probe results.

    Stages (DESIGN.md, Outcome): launch_failed (argument errors, exit before loading), load_failed (exit
    or fatal before ready, CUDA-graph capture included), timeout (no ready line in time, or a stall),
    request_failed (ready, then a request failed or the server crashed), wrong_output (answers
    degenerate or wrong), ok (every probe passed and no fatal signature), infra_error (the host failed).
    """
    from tools.probes import ProbeResult
    from tools.signatures import SignatureMatch

    matches = [SignatureMatch.model_validate(m) for m in raw.get("matches", [])]
    probes = [ProbeResult.model_validate(p) for p in raw.get("probes", [])]
    status = raw.get("status")
    kinds = {m.kind for m in matches}
    stages = {m.stage for m in matches if m.kind in ("fatal", "error")}
    ready = "ready" in kinds or status == "ready"
    stage: Stage
    if status == "infra_error":
        stage = "infra_error"
    elif status in ("timeout", "stalled") and not ready:
        stage = "timeout"
    elif not ready:
        stage = (
            "launch_failed"
            if ("launch" in stages or (not stages and raw.get("exit_code") == 2))
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
                        first_line=(p.text or "")[:120],
                        facts={},
                    )
                )
    t = raw.get("timings", {})
    summary = _summary(stage, matches, probes)
    return Outcome(
        experiment_id=raw["experiment_id"],
        stage=stage,
        matches=matches,
        facts=raw.get("facts", {}),  # type: ignore[arg-type]
        probes=probes,
        timings=Timings(**{k: v for k, v in t.items() if v is not None}),
        exit_code=raw.get("exit_code"),
        log_path=raw.get("log_path"),
        summary=summary,
    )


def _summary(stage: str, matches: list[Any], probes: list[Any]) -> str:
    fatal = [m.signature_id for m in matches if m.kind in ("fatal", "error")]
    bits = [stage]
    if fatal:
        bits.append("signatures: " + ", ".join(dict.fromkeys(fatal)))
    if probes:
        bits.append("probes: " + ", ".join(f"{p.probe_id}={p.status}" for p in probes))
    return "; ".join(bits)


# ---------------------------------------------------------------------- conclusion


def build_conclusion(state: RunState) -> Conclusion:
    """The run's ending: root cause and fix when a confirmed fix exists, else what was ruled out."""
    hyps = [Hypothesis.model_validate(h) for h in state.get("hypotheses", [])]
    experiments = {e["id"]: Experiment.model_validate(e) for e in state.get("experiments", [])}
    outcomes = {o["experiment_id"]: Outcome.model_validate(o) for o in state.get("outcomes", [])}
    launches, host_s = state.get("launches", 0), round(state.get("host_seconds", 0.0), 1)
    refuted = [
        {
            "id": h.id,
            "statement": h.statement,
            "component": h.component,
            "evidence": [e.model_dump(mode="json") for e in h.evidence if e.effect == "refutes"],
        }
        for h in hyps
        if h.status == "refuted"
    ]
    base = Conclusion(
        status="not_isolated",
        refuted=refuted,
        launches=launches,
        host_seconds=host_s,
        rejected=[
            {
                "experiment_id": r.experiment_id,
                "change": r.change.describe() if r.change else None,
                "reason": r.reason,
            }
            for r in (Rejection.model_validate(r) for r in state.get("rejections", []))
        ],
        edited=list(state.get("edits", [])),
        llm_usage=usage_summary(state.get("planner")),
    )
    if state.get("status") == "error":
        return base.model_copy(update={"status": "error", "reason": state.get("error") or "error"})
    reason = state.get("conclude_reason") or ""
    confirm = next(
        (
            e
            for e in experiments.values()
            if e.purpose == "confirm" and outcomes.get(e.id) and outcomes[e.id].stage == "ok"
        ),
        None,
    )
    fix_exp = next(
        (
            e
            for e in reversed(list(experiments.values()))
            if e.purpose == "test" and e.change and outcomes.get(e.id) and outcomes[e.id].stage == "ok"
        ),
        None,
    )
    rejections = [Rejection.model_validate(r) for r in state.get("rejections", [])]

    def why_open(h: Hypothesis) -> str:
        for r in rejections:
            if r.change is not None and any(
                r.change.kind == iv.kind and r.change.name in iv.names for iv in h.interventions
            ):
                return f"its test ({r.change.describe()}) was rejected: {r.reason}"
        tried = [e for e in h.evidence if e.kind == "experiment" and e.experiment_id]
        if tried and tried[-1].detail.startswith("confounded: "):
            return f"not separated from the fix ({tried[-1].experiment_id}): {tried[-1].detail[12:]}"
        if tried and tried[-1].effect == "weakens":
            return f"deprioritised: {tried[-1].detail} ({tried[-1].experiment_id})"
        if tried:
            return f"tested without a verdict ({tried[-1].experiment_id}: {tried[-1].detail})"
        return "deprioritised: a confirmed fix explains the failure" if confirm else "not tested"

    untested = [
        {"id": h.id, "statement": h.statement, "posterior": h.posterior, "why": why_open(h)}
        for h in sorted(hyps, key=lambda h: -h.posterior)
        if h.status == "open"
    ]
    if fix_exp and fix_exp.change and not confirm:  # a working change the run did not get to confirm
        unconfirmed = (
            f"{fix_exp.change.describe()} served correctly in {fix_exp.id} but was not confirmed by a re-run"
        )
        reason = f"{reason}; {unconfirmed}" if reason else unconfirmed
    if state.get("status") == "stopped":
        return base.model_copy(update={"status": "stopped", "reason": reason, "untested": untested})
    if confirm and fix_exp and fix_exp.change:
        cause = max((h for h in hyps if h.status == "confirmed"), key=lambda h: h.posterior, default=None)
        original = Case.model_validate(state["case"]).baseline
        fix = fix_exp.change.model_copy(
            update={"before": original.value(fix_exp.change.kind, fix_exp.change.name)}
        )
        root = {
            "component": cause.component if cause else "unknown",
            "statement": cause.statement if cause else f"the failure goes away with {fix.describe()}",
            "hypothesis_id": cause.id if cause else None,
        }
        c = base.model_copy(
            update={
                "status": "isolated",
                "root_cause": root,
                "fix": fix,
                "fix_experiment_id": fix_exp.id,
                "confirmation_experiment_id": confirm.id,
                "reason": reason,
                "untested": untested,
                "alternatives": _alternatives(
                    cause, fix_exp, hyps, experiments, outcomes, state.get("fingerprint")
                ),
            }
        )
        c.findings_entry = findings_entry(state, c)
        return c
    return base.model_copy(update={"reason": reason or "no fix found", "untested": untested})


def _alternatives(
    cause: Hypothesis | None,
    fix_exp: Experiment,
    hyps: list[Hypothesis],
    experiments: dict[str, Experiment],
    outcomes: dict[str, Outcome],
    fingerprint: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Other changes that avoid the failure, for the conclusion (see ``Conclusion.alternatives``).

    From the root cause's catalog interventions other than the fix (with what this run saw of them; an
    untested one's value derived from the failing run's evidence, as the planner would choose it) and
    from other tested changes that also fixed the failure. ``decisive`` False marks a change the catalog
    says may help, not must. Sorted root fix first, then by performance cost.
    """
    assert fix_exp.change is not None
    fixed = fix_exp.change
    # The failing run of the fix's baseline: the evidence a derived value is computed from.
    failing = next(
        (
            outcomes[e.id]
            for e in experiments.values()
            if e.baseline == fix_exp.baseline and e.id in outcomes and outcomes[e.id].stage != "ok"
        ),
        None,
    )
    mib = (fingerprint or {}).get("memory_total_mib")
    evidence = ValueEvidence(
        facts=dict(failing.facts) if failing else {},
        total_gib=float(mib) / 1024 if mib else None,
        flags=dict(fix_exp.baseline.flags),
    )

    def intervention_of(kind: str, name: str) -> Intervention | None:
        for h in ([cause] if cause else []) + hyps:
            for iv in h.interventions:
                if iv.kind == kind and name in iv.names:
                    return iv
        return None

    def tried(kind: str, names: list[str]) -> tuple[Experiment, Outcome] | None:
        """The last test of this variable from the same baseline as the fix (comparable), with its outcome."""
        found = None
        for e in experiments.values():
            o = outcomes.get(e.id)
            if e.purpose == "test" and e.change and e.change.kind == kind and e.change.name in names and o:
                if e.baseline == fix_exp.baseline:
                    found = (e, o)
        return found

    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = {(fixed.kind, fixed.name)}
    for iv in cause.interventions if cause else []:
        if any((iv.kind, n) in seen for n in iv.names):
            continue
        seen.update((iv.kind, n) for n in iv.names)
        hit = tried(iv.kind, iv.names)
        if hit:
            e, o = hit
            assert e.change is not None
            change, result, eid = e.change.describe(), ("fixed" if o.stage == "ok" else "did not fix"), e.id
        else:
            before = fix_exp.baseline.value(iv.kind, iv.names[0])
            after = iv.values[0] if iv.values else True
            if iv.derive:
                derived, _ = derive(iv.derive, evidence)
                after = derived if derived is not None else after
            change = Change(kind=iv.kind, name=iv.names[0], before=before, after=after).describe()
            result, eid = "not tested", None
        if result == "did not fix":
            continue  # a change that left the failure in place is no alternative
        out.append(
            {
                "change": change,
                "kind": iv.kind,
                "name": iv.names[0],
                "workaround": iv.workaround,
                "cost": iv.cost,
                "note": iv.note,
                "decisive": iv.decisive,
                "experiment_id": eid,
                "result": result,
            }
        )
    for e in experiments.values():
        ran = outcomes.get(e.id)
        if e.purpose != "test" or not e.change or e.id == fix_exp.id or not ran or ran.stage != "ok":
            continue
        if e.baseline != fix_exp.baseline:  # fixed a different configuration: not a like-for-like alternative
            continue
        if (e.change.kind, e.change.name) in seen:
            continue
        seen.add((e.change.kind, e.change.name))
        known = intervention_of(e.change.kind, e.change.name)
        out.append(
            {
                "change": e.change.describe(),
                "kind": e.change.kind,
                "name": e.change.name,
                "workaround": bool(known and known.workaround),
                "cost": known.cost if known else "low",
                "note": known.note if known else "",
                "decisive": True,  # it did fix it here
                "experiment_id": e.id,
                "result": "fixed",
            }
        )
    out.sort(key=lambda a: (a["workaround"], COST_ORDER.get(a["cost"], 1)))
    return out


def findings_entry(state: RunState, c: Conclusion) -> str:
    """The FINDINGS.md entry of an isolated run: the one ``hypoloop findings add`` appends
    (``agent.findings.entry_for``), built from the run's transcript with this conclusion. ``""`` when the
    transcript cannot be read (e.g. a state assembled without one)."""
    from agent.findings import FindingsWriteError, entry_for
    from agent.recorded import RecordedRun
    from agent.transcript import TranscriptError

    path = state.get("transcript")
    if not path:
        return ""
    try:
        run = RecordedRun.load(Path(path))
        run.conclusion = c.model_dump(mode="json")
        return entry_for(run)
    except (OSError, TranscriptError, FindingsWriteError):
        return ""
