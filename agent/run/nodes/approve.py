"""approve: ask for the go-ahead to launch the pending experiment (``interrupt()``), or approve it by
policy (``--approve risky`` / ``auto``); carry out the answer: approve, edit (one other change, checked
like a planner's proposal), reject with a reason (back to design) or stop (conclude).

Side effects: transcript ``approval.requested`` (once per request, also when LangGraph re-runs this node
from its first line on resume: nothing before ``interrupt()`` has any other effect),
``approval.decided`` and ``approval.refused`` (an answer that cannot be carried out: asked again);
sets the transcript's step. An edit may read the host's flag catalog (``Runtime.flags``: a
``--help`` query on the host the first time in a process). Nothing is launched here.

Routing is the answer's: ``Command(goto=execute | design | conclude | approve)``.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.types import Command, interrupt

from agent.domain.models import Experiment, Rejection
from agent.run.approval.edit import EditError, apply_edit
from agent.run.approval.policy import load_risk_rules, must_ask, risky_reasons
from agent.run.approval.request import (
    ApprovalAnswer,
    LeadBlocked,
    RequestContext,
    build_request,
    lead_blocked,
)
from agent.run.recovery import emit_once
from agent.run.runtime import Runtime
from agent.run.state import (
    RunState,
    batch_lines,
    case_of,
    hypotheses_of,
    next_step,
    planner_view,
    sglang_version,
)
from tools.flags import FlagError
from tools.host import HostError

Route = Literal["execute", "design", "conclude", "approve"]


def approve(state: RunState, rt: Runtime) -> Command[Route]:
    """The approve node: see the module docstring."""
    # LangGraph re-runs this node from its first line when a paused run is resumed, so nothing
    # before interrupt() may have a side effect, except the approval.requested event, which is
    # written once per request (keyed by the request's sequence number in the state).
    exp = Experiment.model_validate(state["pending"])
    seq = state.get("approval_seq", 0) + 1
    mode = rt.approval_override or state.get("approval") or "each"
    rt.transcript.step = next_step(state)
    risky = risky_reasons(exp, load_risk_rules())
    if not must_ask(mode, risky):
        answer = ApprovalAnswer(decision="approve", by="auto" if mode == "auto" else "policy")
    else:
        asked = _ask(state, rt, exp, seq, mode, risky)
        if isinstance(asked, Command):
            return asked
        answer = asked
    return _carry_out(state, rt, exp, seq, answer)


def _ask(
    state: RunState, rt: Runtime, exp: Experiment, seq: int, mode: str, risky: list[str]
) -> ApprovalAnswer | Command[Route]:
    """Interrupt with the approval request; the parsed answer, or a refusal asking again."""
    case = case_of(state)
    request = build_request(
        exp,
        hypotheses_of(state),
        RequestContext(
            run_id=state["run_id"],
            launches=state.get("launches", 0),
            step=next_step(state),
            host_seconds=state.get("host_seconds", 0.0),
            budget_launches=case.budget.experiments,
            budget_host_seconds=case.budget.host_seconds,
            mode=mode,
            risky=risky,
            error=state.get("approval_error"),
            batch=batch_lines(state, exp),
            lead_blocked=_lead_blocked(state, rt, exp),
        ),
    )
    emit_once(
        rt.transcript,
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
        return _refuse(rt, exp, seq, str(exc), raw_answer)
    if answer.experiment_id not in (None, exp.id):
        return _refuse(
            rt,
            exp,
            seq,
            f"the answer is for {answer.experiment_id}, but {exp.id} is waiting for approval",
            raw_answer,
        )
    return answer


def _carry_out(state: RunState, rt: Runtime, exp: Experiment, seq: int, answer: ApprovalAnswer) -> Command[Route]:
    """Record the decision and route: execute (approved or edited), design (rejected), conclude (stop)."""
    tr = rt.transcript
    if answer.reason:  # kept in the run's state, shown on later screens, told to the planner: never a secret
        answer.reason = tr.redact(answer.reason)
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
            return _refuse(rt, exp, seq, f"edit refused: {exc}", answer.model_dump(exclude_none=True))
        if new.id != exp.id:
            return _edited(state, rt, exp, new, answer, decided, done)
        answer.decision = "approve"  # the "edit" asked for exactly what was proposed
    reason = {"reason": answer.reason} if answer.reason else {}
    tr.emit("approval.decided", {**decided, "decision": answer.decision, **reason}, node="approve")
    if answer.decision == "approve":
        exp.status = "approved"
        if answer.all:
            done["approve_batch"] = True  # agent.run.parallel.approve_in_batch approves the rest of the batch
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


def _edited(
    state: RunState,
    rt: Runtime,
    exp: Experiment,
    new: Experiment,
    answer: ApprovalAnswer,
    decided: dict[str, Any],
    done: dict[str, Any],
) -> Command[Route]:
    """An edit that changes the experiment: record it and execute the edited experiment."""
    new.status = "approved"
    assert new.change is not None
    edit = {
        "experiment_id": exp.id,
        "proposed": exp.change.model_dump(mode="json") if exp.change else None,
        "edited_experiment_id": new.id,
        "change": new.change.model_dump(mode="json"),
        "by": answer.by,
    }
    rt.transcript.emit(
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


def _refuse(rt: Runtime, exp: Experiment, seq: int, reason: str, answer: Any) -> Command[Route]:
    """Refuse an answer that cannot be carried out; the same experiment is asked about again."""
    rt.transcript.emit(
        "approval.refused",
        {"experiment_id": exp.id, "request": seq, "answer": answer, "reason": reason},
        node="approve",
    )
    return Command(goto="approve", update={"approval_seq": seq, "approval_error": reason})


def _lead_blocked(state: RunState, rt: Runtime, exp: Experiment) -> LeadBlocked | None:
    """The note on a leading hypothesis whose test was rejected (``agent.run.approval.lead_blocked``). The
    flag catalog is the run's cached one; when it cannot be read the note offers no edits."""
    try:
        flags = rt.flags(case_of(state), sglang_version(state))
    except (HostError, FlagError):
        flags = None
    return lead_blocked(
        exp, hypotheses_of(state), planner_view(state), flags=flags, predict=rt.planner(state).prediction
    )


def edit_experiment(rt: Runtime, state: RunState, exp: Experiment, items: list[str], *, by: str = "user") -> Experiment:
    """The experiment a person's edit of the proposal ``exp`` asks for, checked like a planner's
    proposal (one change, known flag, legal value, not run or rejected before, within budget).

    Used by the approve node and, to ask again at once, by the CLI before it answers. Raises EditError.
    """
    try:
        flags = rt.flags(case_of(state), sglang_version(state))
    except (HostError, FlagError) as exc:
        raise EditError(f"cannot check the edit against the host's flag catalog: {exc}") from None
    return apply_edit(
        exp,
        items,
        view=planner_view(state),
        flags=flags,
        hypotheses=hypotheses_of(state),
        predict=rt.planner(state).prediction,
        by=by,
    )
