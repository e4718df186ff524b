"""design: the planner proposes the next experiment (one change against the baseline), or a reason to
conclude; the proposal passes the guard (``agent.planning.guard``) before anyone is asked to approve it.

Side effects: transcript ``experiment.proposed``, ``design.none`` (nothing left worth testing) or
``error`` (the guard refused a planner's proposal: a planner bug, never executed); sets the transcript's
step to the coming launch. The planner may call its model (the LLM planner writes ``llm.*`` events).
Building the planner needs the host's flag catalog (``Runtime.flags``: cached, or read from the host's
``launch_server --help`` in a process that resumed the run).

It proposes from the ledger the hypothesize node wrote (``agent.run.state.ledger_of``); only when that is
not current (the LLM planner's memory moved since: a person rejected its proposal and design runs again)
does the planner read the history itself.

The update carries ``pending`` (the proposal) or ``conclude_reason``; the graph's edge routes on it.
"""

from __future__ import annotations

from typing import Any

from agent.planning.guard import GuardError, check_experiment
from agent.record.wire import to_payload
from agent.run.runtime import Runtime
from agent.run.state import RunState, ledger_of, planner_view


def design(state: RunState, rt: Runtime) -> dict[str, Any]:
    """The design node: see the module docstring."""
    tr = rt.transcript
    view = planner_view(state)
    pl = rt.planner(state)
    hist = ledger_of(state)  # what hypothesize read from this history, unless it is not current
    proposal = pl.propose(view, hist if hist is not None else pl.history(view))
    # The LLM planner's memory (its hypotheses, tokens spent) is checkpointed with the step.
    memo = pl.checkpoint()
    kept: dict[str, Any] = {"planner": memo} if memo is not None else {}
    if proposal.experiment is None:
        tr.emit(
            "design.none",
            {"reason": proposal.conclude_reason, "considered": proposal.considered},
            node="design",
        )
        return {**kept, "conclude_reason": proposal.conclude_reason}
    exp = proposal.experiment
    try:
        check_experiment(exp, view=view, flags=pl.flags)
    except GuardError as exc:  # a planner bug: never execute, say so, conclude
        tr.emit("error", {"message": f"planner proposal refused: {exc}"}, node="design")
        return {**kept, "conclude_reason": f"planner proposal refused: {exc}"}
    tr.step = view.next_step
    tr.emit(
        "experiment.proposed",
        to_payload("experiment.proposed", exp, considered=proposal.recorded_considered()),
        node="design",
    )
    return {**kept, "pending": exp.model_dump(mode="json")}
