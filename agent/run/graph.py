"""The run graph's topology (docs/ARCHITECTURE.md, "The graph"): which node follows which, nothing else.

    START → intake → analyze → hypothesize → design ──► approve ──► execute → analyze …
              │         │                       │          │  reject(reason) → design
              │         │                       │          └  stop → conclude
              │         │                       └ nothing left worth testing / budget spent → conclude
              └ error ──┴ error ──────────────────────────────────────────────────────► conclude → END

Each node is a plain function ``(state, rt) -> update`` in ``agent/run/nodes/`` (a module per job, whose
docstring lists its side effects); the error route is an edge. State is JSON-plain
(``agent.run.state.RunState``), so a checkpoint can be resumed by any process. Host effects happen only in
intake (read-only queries) and execute (launches), never before the ``interrupt()`` in approve returns.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph

from agent.record.transcript import Transcript, TranscriptEvent
from agent.run.nodes.analyze import analyze, classify_outcome
from agent.run.nodes.approve import approve
from agent.run.nodes.conclude import conclude
from agent.run.nodes.design import design
from agent.run.nodes.execute import JobEnded, execute, run_experiment
from agent.run.nodes.hypothesize import hypothesize
from agent.run.nodes.intake import intake
from agent.run.parallel import Steps, approve_in_batch, design_or_batch, execute_or_batch
from agent.run.runtime import Runtime
from agent.run.state import RunState

#: Where a run's nodes find their runtime: one ``Runtime`` (the CLI: one run per process), or a function
#: that returns the runtime of the run being executed (LangGraph Studio: one per thread).
RuntimeSource = Runtime | Callable[[], Runtime]

#: The plain nodes the ``--parallel`` steps (``agent.run.parallel``) hand over to when no batch is involved.
NODE_STEPS = Steps(
    design=design,
    approve=approve,
    execute=execute,
    run_experiment=run_experiment,
    classify=classify_outcome,
    job_ended=JobEnded,
)


def build_graph(runtime: RuntimeSource, checkpointer: Any = None) -> Any:
    """Compile the run graph; its nodes get their ``Runtime`` from ``runtime``."""
    runtime_of = runtime if callable(runtime) else (lambda: runtime)

    def node(fn: Callable[[RunState, Runtime], Any]) -> Any:  # (a LangGraph node: state -> update)
        def run(state: RunState) -> Any:
            return fn(state, runtime_of())

        run.__name__ = fn.__name__
        return run

    def batched(fn: Callable[[RunState, Runtime, Steps], Any]) -> Any:  # a --parallel step over NODE_STEPS
        def step(state: RunState, rt: Runtime) -> Any:
            return fn(state, rt, NODE_STEPS)

        step.__name__ = fn.__name__
        return node(step)

    g: StateGraph = StateGraph(RunState)
    g.add_node("intake", node(intake))
    g.add_node("analyze", node(analyze))
    g.add_node("hypothesize", node(hypothesize))
    # design, approve and execute hand over to agent/run/nodes/* unless a --parallel batch is involved
    g.add_node("design", batched(design_or_batch))
    g.add_node("approve", batched(approve_in_batch), destinations=("execute", "design", "conclude", "approve"))
    g.add_node("execute", batched(execute_or_batch))
    g.add_node("conclude", node(conclude))

    g.add_edge(START, "intake")
    g.add_conditional_edges("intake", _unless_error("analyze"), ["analyze", "conclude"])
    g.add_conditional_edges("analyze", _unless_error("hypothesize"), ["hypothesize", "conclude"])
    g.add_edge("hypothesize", "design")
    g.add_conditional_edges("design", _approve_if_proposed, ["approve", "conclude"])
    # approve routes by the answer (Command): execute, design (rejected), conclude (stop), approve (again)
    g.add_edge("execute", "analyze")
    g.add_edge("conclude", END)
    return g.compile(checkpointer=checkpointer)


def read_graph(home: Path, saver: Any) -> Any:
    """The run graph compiled over the checkpoint store ``saver`` with a runtime that can only read (for
    ``get_state``: ``agent.record.runs.list_runs``/``load_run``); ``home`` is the state folder."""
    return build_graph(Runtime(_ReadOnlyTranscript(), home), saver)


class _ReadOnlyTranscript(Transcript):
    """Stands in for a transcript when a graph is built only to read checkpoints (never emits)."""

    def __init__(self) -> None:
        self.path = Path(os.devnull)
        self.run_id = ""
        self.step = 0
        self.seq = 0
        self.listeners = []

    def emit(self, type: str, data: dict[str, Any] | None = None, *, node: str = "") -> TranscriptEvent:
        raise RuntimeError("a read-only runtime does not write transcripts")

    def close(self) -> None:
        return None


def _unless_error(next_node: str) -> Callable[[RunState], str]:
    """The error edge: a run whose state says ``status: "error"`` goes straight to conclude."""

    def route(state: RunState) -> str:
        return "conclude" if state.get("status") == "error" else next_node

    return route


def _approve_if_proposed(state: RunState) -> str:
    """After design: a proposal (or a batch's first member) waits for approval; no proposal means there
    is nothing left to test."""
    return "approve" if state.get("pending") else "conclude"
