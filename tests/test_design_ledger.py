"""The design node proposes from the ledger the hypothesize node wrote; it reads the history itself only
when that ledger is not current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.domain.case import load_case
from agent.planning.planner import HistoryState, PlannerView, RulePlanner, make_planner
from agent.record.transcript import Transcript
from agent.run.nodes.design import design
from agent.run.nodes.hypothesize import hypothesize
from agent.run.runtime import Runtime
from agent.run.state import RunState, initial_state, ledger_of


def _step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **extra: Any) -> tuple[RunState, dict[str, Any], int]:
    """hypothesize then design on a new run of a lab world (the lab's launcher answers --help); the state
    after hypothesize, design's update, and how often design read the history."""
    reads: list[str] = []
    history = RulePlanner.history

    def counted(self: RulePlanner, view: PlannerView) -> HistoryState:
        reads.append("read")
        return history(self, view)

    monkeypatch.setattr(RulePlanner, "history", counted)
    case = load_case("lab:triton-ptxas-sm120")
    state: RunState = initial_state("run-ledger", case.model_dump(mode="json"), approval="auto")  # type: ignore[assignment]
    tr = Transcript(tmp_path / "tr.jsonl", "run-ledger")
    rt = Runtime(transcript=tr, state_dir=tmp_path / "state", make_planner=make_planner)
    try:
        state.update(hypothesize(state, rt))  # type: ignore[typeddict-item]
        after_hypothesize = len(reads)
        state.update(extra)  # type: ignore[typeddict-item]
        update = design(state, rt)
    finally:
        rt.close()
        tr.close()
    return state, update, len(reads) - after_hypothesize


def test_design_consumes_the_ledger_hypothesize_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, update, reads = _step(tmp_path, monkeypatch)
    assert reads == 0
    kept = ledger_of(state)
    assert kept is not None and kept.reference is None and kept.baseline.model_dump(mode="json") == state["baseline"]
    assert update["pending"]["purpose"] == "baseline"  # the first launch reproduces the failure


def test_design_reads_the_history_when_the_planner_memory_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a planner memory other than the one hypothesize read with (an LLM planner's answer, then a rejection)
    state, update, reads = _step(tmp_path, monkeypatch, planner={"kind": "rules"})
    assert ledger_of(state) is None and reads == 1
    assert update["pending"]["purpose"] == "baseline"
