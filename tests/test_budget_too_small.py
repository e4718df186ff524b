"""A host-second budget that cannot hold the first launch says so; it is not "spent (0 of 10 s)" when
nothing was spent (found by a newcomer)."""

from __future__ import annotations

from pathlib import Path

from clirun import run_case_copy

REPO = Path(__file__).resolve().parents[1]


def test_a_budget_too_small_for_one_launch_says_so(tmp_path: Path) -> None:
    result, _ = run_case_copy(tmp_path, REPO / "lab" / "worlds" / "glm5-nvfp4-sm120",
                              **{"host_seconds = 14400": "host_seconds = 10"})
    assert result["launches"] == 0
    assert "too small" in result["reason"] and "the next launch needs" in result["reason"], result["reason"]
    assert "spent (0 of" not in result["reason"]
