"""A secret pasted into a rejection's reason never reaches a screen: the reason is kept in the run's state,
shown on the next approval screen ("its test ... was rejected (REASON)") and told to the planner, so it is
redacted once, when the answer is carried out, as the transcript redacts it."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_cli

SECRET = "sk-test1234567890abcdefghij"
TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


def test_a_secret_in_a_rejection_reason_is_not_shown_on_the_next_approval_screen(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--json", HYPOLOOP_LAB_TIME_SCALE="0.004")
    assert first.returncode == 3, first.stderr[-2000:]
    run_id = json.loads(first.stdout.strip().splitlines()[-1])["run_id"]
    test = run_cli(tmp_path, "resume", run_id, "--decision", "approve", "--json", HYPOLOOP_LAB_TIME_SCALE="0.004")
    assert test.returncode == 3, test.stderr[-2000:]
    reason = f"keep fp8 OPENAI_API_KEY={SECRET} and token {TOKEN}"
    r = run_cli(tmp_path, "resume", run_id, "--decision", "reject", "--reason", reason, HYPOLOOP_LAB_TIME_SCALE="0.004")
    assert r.returncode == 3, r.stderr[-2000:]
    assert "rejected (keep fp8 OPENAI_API_KEY=<redacted>" in r.stdout  # the screen shows the reason, redacted
    for text in (r.stdout, r.stderr):
        assert SECRET not in text and TOKEN not in text
    show = run_cli(tmp_path, "show", run_id, "--json")
    assert SECRET not in show.stdout and TOKEN not in show.stdout
