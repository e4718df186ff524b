"""The checkpointed state of a run (``RunState``) and the typed views the nodes read from it.

State is JSON-plain (``model_dump(mode="json")``) so that any process can resume a checkpoint; the
nodes turn it back into models with the helpers here. No side effects.
"""

from __future__ import annotations

import time
from typing import Any, Literal, TypedDict, cast

from agent.domain.case import Case, load_case
from agent.domain.models import Experiment, Hypothesis, Outcome, Rejection, RelevantFinding
from agent.planning.view import HistoryState, PlannerView
from tools.fingerprint import HostFingerprint, engine_version

#: How a run stands or ended (``agent.domain.models.Conclusion.status``).
RunStatus = Literal["isolated", "not_isolated", "stopped", "error"]


class RunState(TypedDict, total=False):
    """The checkpointed state of a run (JSON-plain)."""

    run_id: str
    case: dict[str, Any]
    #: The approval mode (``agent.run.approval.ApprovalMode``: each, risky, auto).
    approval: str
    fingerprint: dict[str, Any] | None
    findings: list[dict[str, Any]]
    experiments: list[dict[str, Any]]
    outcomes: list[dict[str, Any]]
    rejections: list[dict[str, Any]]
    hypotheses: list[dict[str, Any]]
    baseline: dict[str, Any]
    #: The planner's reading of the history beside ``hypotheses`` (``ledger_entry``), for the design node.
    ledger: dict[str, Any] | None
    pending: dict[str, Any] | None
    #: The evidence of the experiment just executed, not yet analyzed (``agent.domain.evidence.RawEvidence``).
    raw: dict[str, Any] | None
    launches: int
    host_seconds: float
    conclude_reason: str | None
    #: "error" (the host or the input failed: the graph goes to conclude) or "stopped" (a person stopped the
    #: run) before the end; the conclusion's status after it.
    status: RunStatus | None
    error: str | None
    #: "input": the case or a file it names is wrong (the CLI exits 2); None: the host failed.
    error_kind: Literal["input"] | None
    conclusion: dict[str, Any] | None
    transcript: str | None
    case_ref: str | None
    approval_seq: int
    approval_error: str | None
    edits: list[dict[str, Any]]
    #: Which planner decides, with its options and memory (agent.planning.llm_planner.PlannerSpec; None: rules).
    planner: dict[str, Any] | None
    #: The ``--host`` the user gave on the command line (it replaced the case's host.target), if any.
    host_option: str | None
    #: The knowledge folder the run reads (``--knowledge`` / $HYPOLOOP_KNOWLEDGE); `resume` keeps it.
    knowledge_dir: str | None
    #: ``--parallel N``: how many one-change experiments a batch may run at once (1: one at a time).
    parallel: int
    #: A parallel batch being approved: its members still to ask about (None: no batch in progress),
    #: the ones approved so far (run together by execute), and the ids of the whole batch in order.
    batch: list[dict[str, Any]] | None
    approved: list[dict[str, Any]]
    batch_ids: list[str]


def case_of(state: RunState) -> Case:
    """The run's case (its baseline flags canonical once intake has run)."""
    return Case.model_validate(state["case"])


def hypotheses_of(state: RunState) -> list[Hypothesis]:
    """The ledger as models."""
    return [Hypothesis.model_validate(h) for h in state.get("hypotheses", [])]


def sglang_version(state: RunState) -> str | None:
    """The host's engine version from the fingerprint (SGLang's or vLLM's, `tools.engines`; None before
    intake or when unknown). The name is kept from when SGLang was the only engine."""
    return engine_version(state.get("fingerprint"))


def next_step(state: RunState) -> int:
    """The number the next experiment is shown with (``PlannerView.next_step``): experiments run + 1."""
    return len(state.get("experiments", [])) + 1


def planner_view(state: RunState) -> PlannerView:
    """What a planner sees of the run: case, host, findings, experiments, outcomes, budget spent."""
    return PlannerView(
        case=case_of(state),
        fingerprint=HostFingerprint.model_validate(state["fingerprint"]) if state.get("fingerprint") else None,
        findings=[RelevantFinding.model_validate(f) for f in state.get("findings", [])],
        experiments=[Experiment.model_validate(e) for e in state.get("experiments", [])],
        outcomes=[Outcome.model_validate(o) for o in state.get("outcomes", [])],
        rejections=[Rejection.model_validate(r) for r in state.get("rejections", [])],
        launches=state.get("launches", 0),
        host_seconds=state.get("host_seconds", 0.0),
    )


def initial_state(run_id: str, case: dict[str, Any], *, approval: str, **extra: Any) -> RunState:
    """The state a new run starts from (one shape for the CLI and LangGraph Studio); ``extra`` adds keys
    such as the transcript path and the planner spec (``RunState`` keys)."""
    state: dict[str, Any] = {
        "run_id": run_id,
        "case": case,
        "approval": approval,
        "launches": 0,
        "host_seconds": 0.0,
        "experiments": [],
        "outcomes": [],
        "rejections": [],
        "hypotheses": [],
        "edits": [],
        "approval_seq": 0,
        **extra,
    }
    return cast(RunState, state)


def _history_key(state: RunState) -> dict[str, Any]:
    """What a planner's reading of the history depends on beyond the case: the launches done with their
    outcomes, and the planner's memory (an LLM planner's hypotheses)."""
    return {
        "done": [e["id"] for e in state.get("experiments", []) if e.get("status") == "done"],
        "outcomes": [o["experiment_id"] for o in state.get("outcomes", [])],
        "planner": state.get("planner"),
    }


def ledger_entry(state: RunState, hist: HistoryState) -> dict[str, Any]:
    """The state's ``ledger`` for ``hist``, read from ``state``'s history: ``hist`` without its
    hypotheses (they are ``state["hypotheses"]``), and the key of the history it was read from."""
    return {"history": hist.model_dump(mode="json", exclude={"hypotheses"}), "key": _history_key(state)}


def ledger_of(state: RunState) -> HistoryState | None:
    """The planner's reading of the history that the hypothesize node wrote (``ledger_entry``), with the
    ledger's hypotheses; None when there is none or the history or planner memory changed since."""
    kept = state.get("ledger")
    if not kept or kept.get("key") != _history_key(state):
        return None
    return HistoryState.model_validate({**kept["history"], "hypotheses": state.get("hypotheses", [])})


def seed_state(state: RunState, thread_id: str | None) -> RunState:
    """The initial state of a run started with only ``{"case_ref": "lab:WORLD"}`` (LangGraph Studio).

    Empty when the state already holds a case. Raises CaseError for a bad reference.
    """
    if state.get("case") or not state.get("case_ref"):
        return {}
    case = load_case(str(state["case_ref"]))
    return initial_state(
        state.get("run_id") or thread_id or time.strftime("%Y%m%d-%H%M%S"),
        case.model_dump(mode="json"),
        approval=state.get("approval") or case.approval,
    )


def batch_lines(state: RunState, current: Experiment) -> list[str]:
    """The approval screen's view of the parallel batch ``current`` (an Experiment) belongs to: one line
    per member with its change, marking this one and those approved already; empty outside a batch."""
    ids = state.get("batch_ids") or []
    if state.get("batch") is None or not ids:
        return []
    approved = {e["id"] for e in state.get("approved") or []}
    known = {e["id"]: e for e in [*(state.get("approved") or []), *(state.get("batch") or [])]}
    known[current.id] = current.model_dump(mode="json")
    out = []
    for i, exp_id in enumerate(ids, 1):
        data = known.get(exp_id)
        change = Experiment.model_validate(data).change if data else None
        what = change.describe() if change else "(rejected, or replaced by an edit)"
        tag = " (this one)" if exp_id == current.id else (" (approved)" if exp_id in approved else "")
        out.append(f"{i}/{len(ids)} {what}{tag}")
    return out
