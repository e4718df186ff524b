"""hypothesize: the planner rebuilds the hypothesis ledger and the current baseline from the outcomes.

The update carries the ledger (``hypotheses``), the baseline, and the rest of the planner's reading of
the history (``ledger``: reference run, fixes, confirmations, load probe; ``agent.run.state.ledger_of``),
which the design node consumes instead of reading the history again.

Side effects: transcript ``hypothesis.added``, ``hypothesis.<status>`` (a status changed),
``hypothesis.updated`` (a posterior moved by more than 0.001) and ``baseline.changed``. The planner may
call its model (the LLM planner writes its ``llm.*`` events); the rule planner has none. Building the
planner needs the host's flag catalog (``Runtime.flags``): in a process that resumed the run, that is
the cached catalog or, failing that, a connection to the host and its ``launch_server --help``.
"""

from __future__ import annotations

from typing import Any

from agent.domain.models import Hypothesis
from agent.record.transcript import Transcript
from agent.record.wire import to_payload
from agent.run.runtime import Runtime
from agent.run.state import RunState, ledger_entry, planner_view


def hypothesize(state: RunState, rt: Runtime) -> dict[str, Any]:
    """The hypothesize node: the ledger and baseline the planner derives from the run so far."""
    hist = rt.planner(state).history(planner_view(state))
    _record_changes(rt.transcript, state.get("hypotheses", []), hist.hypotheses)
    baseline = hist.baseline.model_dump(mode="json")
    if baseline != state.get("baseline"):
        rt.transcript.emit(
            "baseline.changed",
            {"baseline": baseline, "adoption": hist.adoptions[-1] if hist.adoptions else None},
            node="hypothesize",
        )
    return {
        "hypotheses": [h.model_dump(mode="json") for h in hist.hypotheses],
        "baseline": baseline,
        "ledger": ledger_entry(state, hist),
    }


def _record_changes(tr: Transcript, before: list[dict[str, Any]], after: list[Hypothesis]) -> None:
    """Write what changed in the ledger: new hypotheses, new statuses, moved posteriors."""
    old = {h["id"]: h for h in before}
    for h in after:
        prev = old.get(h.id)
        if prev is None:
            tr.emit("hypothesis.added", to_payload("hypothesis.added", h), node="hypothesize")
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
