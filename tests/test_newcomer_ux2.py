"""More things a newcomer met at the command line, each run as a user runs it (the real ``hypoloop``
command, or the lab as a real process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_cli

REPO = Path(__file__).resolve().parents[1]
GLM5 = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"


@pytest.mark.parametrize("speed", ["nan", "inf", "-2"])
def test_replay_refuses_a_speed_that_is_not_a_positive_finite_number_in_one_line(tmp_path: Path, speed: str) -> None:
    r = run_cli(tmp_path, "replay", str(GLM5), "--speed", speed)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[-500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--speed" in lines[0] and "positive finite number" in lines[0], r.stderr
