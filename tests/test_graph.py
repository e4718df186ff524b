"""The run graph's topology is the one docs/ARCHITECTURE.md draws: the error route and the end of the
design loop are edges, approve routes by the answer, execute always goes back to analyze."""

from __future__ import annotations

from pathlib import Path

from agent.record.transcript import Transcript
from agent.run.graph import build_graph
from agent.run.runtime import Runtime


def test_the_compiled_graph_has_the_documented_edges(tmp_path: Path) -> None:
    tr = Transcript(tmp_path / "t.jsonl", "t")
    graph = build_graph(Runtime(tr, tmp_path / "home")).get_graph()
    edges = {(e.source, e.target) for e in graph.edges}
    assert edges == {
        ("__start__", "intake"),
        ("intake", "analyze"),
        ("intake", "conclude"),  # error
        ("analyze", "hypothesize"),
        ("analyze", "conclude"),  # error
        ("hypothesize", "design"),
        ("design", "approve"),
        ("design", "conclude"),  # nothing left worth testing
        ("approve", "execute"),
        ("approve", "design"),  # rejected
        ("approve", "conclude"),  # stop
        ("approve", "approve"),  # an answer that cannot be carried out: asked again
        ("execute", "analyze"),
        ("conclude", "__end__"),
    }
    tr.close()
    for line in [
        "START → intake → analyze → hypothesize → design ──► approve ──► execute → analyze …",
        "└ error ──┴ error",
    ]:
        assert line in (Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md").read_text()
