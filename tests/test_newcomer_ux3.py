"""A third round of things a newcomer met at the command line, each run as a user runs it (the real
``hypoloop`` command, the lab world as the host, a real terminal where the run asks at one)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pexpect
from clirun import HYPOLOOP, cli_env, run_cli

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


def test_analyze_of_a_file_that_is_no_server_log_says_so_instead_of_a_failed_load(tmp_path: Path) -> None:
    """A README (which quotes error messages in its prose) and a few lines of plain text were reported as
    ``stage reached load_failed`` (the README's even with a hypothesis and an experiment)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\neggs, milk\nremember to call the landlord\n")
    for path in (REPO / "README.md", notes):
        for args in ((), ("--json",)):
            r = run_cli(tmp_path, "analyze", str(path), *args)
            assert r.returncode == 2, (path, args, r.stdout[-1000:])
            # with --json the one line on stdout is the error's (a script reads the last line)
            assert r.stdout == "" if not args else json.loads(r.stdout)["status"] == "error", r.stdout[-1000:]
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and "does not look like a server log" in lines[0], r.stderr
            assert "load_failed" not in r.stderr and "SGLang" in lines[0] and "vLLM" in lines[0]
    # a real log, even one of a server that never spoke (its argparse error only), is still read
    log = REPO / "tests" / "data" / "logs_0.5.23" / "argparse-int-suffix.log"
    r = run_cli(tmp_path, "analyze", str(log), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["signatures"]


def test_a_run_killed_at_the_approval_prompt_waits_for_approval_in_every_view(tmp_path: Path) -> None:
    """Killed (kill -9) while its terminal showed the approval question: `runs` and `show` said "waiting for
    approval", `replay` and `report` that the run was unfinished (still going, waiting or dead). The
    checkpoint holds the question and `resume` asks it again: every view says the run waits for approval."""
    env = cli_env(tmp_path, COLUMNS="130", LINES="60", TERM="xterm-256color")
    child = pexpect.spawn(HYPOLOOP[0], [*HYPOLOOP[1:], "run", WORLD, "--transcript-dir", "tr"], cwd=str(tmp_path),
                          env=env, encoding="utf-8", timeout=120, dimensions=(60, 130))
    try:
        child.expect(r"approve experiment 1\?")
        child.expect(r"\[s\]top: ")
        os.kill(child.pid, signal.SIGKILL)
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    transcript = next((tmp_path / "tr").glob("*.jsonl"))
    run_id = transcript.stem
    listed = json.loads(run_cli(tmp_path, "runs", "--json").stdout)
    assert [(r["run_id"], r["status"]) for r in listed] == [(run_id, "waiting_for_approval")]
    exp = listed[0]["pending"]["experiment"]["id"]
    shown = " ".join(run_cli(tmp_path, "show", run_id).stdout.split())
    assert "waiting for approval" in shown
    for view in (("replay", run_id), ("replay", str(transcript)), ("report", run_id),
                 ("report", run_id, "--format", "html")):
        r = run_cli(tmp_path, *view)
        assert r.returncode == 0, r.stderr[-2000:]
        out = " ".join(r.stdout.split())
        said = re.search(rf"waiting for approval(?:\*\*:|:</b>)? (?:of )?(?:experiment )?{exp}", out, re.IGNORECASE)
        assert said, (view, out[-1500:])
        assert f"hypoloop resume {run_id}" in out, view
        assert "unfinished" not in out.lower() and "interrupted" not in out.lower(), view
    report = " ".join(run_cli(tmp_path, "report", run_id).stdout.split())
    assert f"**status**: waiting for approval — experiment {exp}" in report
    # and resume acts on that status: with no terminal it leaves the run waiting on the same question
    resumed = run_cli(tmp_path, "resume", run_id, "--json")
    assert resumed.returncode == 3, resumed.stderr[-2000:]
    out = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert out["status"] == "waiting_for_approval" and out["pending"]["experiment_id"] == exp


def test_follow_of_a_run_that_waits_with_no_process_to_drive_it_ends(tmp_path: Path) -> None:
    """`replay --follow` on a run saved while it waits for approval (no process holds it) showed "waiting for
    approval" and then waited for lines nobody would write, until Ctrl-C (found by a newcomer): it now ends
    there, saying how the run continues."""
    run_id = _paused(tmp_path)["run_id"]
    transcript = tmp_path / "tr" / f"{run_id}.jsonl"
    r = run_cli(tmp_path, "replay", str(transcript), "--follow", timeout=60, COLUMNS="250")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "waiting for approval" in r.stdout and f"hypoloop resume {run_id}" in r.stdout, r.stdout[-2000:]
