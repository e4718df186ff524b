"""A third round of things a newcomer met at the command line, each run as a user runs it (the real
``hypoloop`` command, the lab world as the host, a real terminal where the run asks at one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clirun import run_cli

REPO = Path(__file__).resolve().parents[1]
WORLD = "lab:glm5-nvfp4-sm120"


def _paused(tmp_path: Path) -> dict[str, Any]:
    """``hypoloop run WORLD --json`` with no terminal: the run waits for approval of its baseline (exit 3)."""
    r = run_cli(tmp_path, "run", WORLD, "--json", "--transcript-dir", "tr")
    assert r.returncode == 3, r.stderr[-3000:]
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "waiting_for_approval"
    return out


def test_a_reason_without_a_decision_is_refused_in_one_line_and_nothing_is_decided(tmp_path: Path) -> None:
    """`resume RUN --reason TEXT` with no --decision left the run waiting as if no reason had been given
    (exit 3): the reason was dropped without a word."""
    run_id = _paused(tmp_path)["run_id"]
    r = run_cli(tmp_path, "resume", run_id, "--reason", "the baseline takes too long")
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[-1000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--reason" in lines[0] and "--decision" in lines[0], r.stderr
    assert "nothing was decided" in lines[0]
    shown = run_cli(tmp_path, "show", run_id, "--json")
    assert json.loads(shown.stdout)["status"] == "waiting_for_approval"
    events = [json.loads(x) for x in next((tmp_path / "tr").glob("*.jsonl")).read_text().splitlines()]
    assert not [e for e in events if e["type"] in ("approval.decided", "run.resumed")]
    # with the decision it explains, the same reason is taken and recorded
    rejected = run_cli(tmp_path, "resume", run_id, "--decision", "stop", "--reason", "the baseline takes too long")
    assert rejected.returncode == 0, rejected.stderr[-2000:]
    events = [json.loads(x) for x in next((tmp_path / "tr").glob("*.jsonl")).read_text().splitlines()]
    decided = [e["data"] for e in events if e["type"] == "approval.decided"]
    assert decided and decided[0]["reason"] == "the baseline takes too long"
