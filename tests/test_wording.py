"""Counts read as English wherever a person sees them: a run stopped after its one launch says "1 launch"
in `run`/`resume` output, `runs`, `show`, `replay` and both report formats, never "1 launches"."""

from __future__ import annotations

import json
import re
from pathlib import Path

from clirun import run_cli

from agent.review.wording import count, plural

#: "1" followed by a plural a reader would stumble on (the nouns the outputs count).
ONE_PLURAL = re.compile(
    r"(?<![\d.,/])1 (?:launches|host-seconds|experiments|flags|decisions|requests|tokens|errors|steps|times|"
    r"servers|orphaned servers|findings|candidate changes|batch sizes|proposals)\b"
)


def test_count_agrees_with_the_number_as_shown() -> None:
    assert count(1, "launch") == "1 launch"
    assert count(0, "launch") == "0 launches"
    assert count(3, "launch") == "3 launches"
    assert count(1.4, "host-second", fmt=".0f") == "1 host-second"  # shown as 1: singular
    assert count(1.0, "launch", fmt="g") == "1 launch"
    assert count(1.5, "launch", fmt=".1f") == "1.5 launches"
    assert count(None, "flag") == "? flags"
    assert count(1, "hypothesis", "hypotheses") == "1 hypothesis"
    assert count(2, "hypothesis", "hypotheses") == "2 hypotheses"
    assert plural("batch size") == "batch sizes" and plural("match") == "matches"


def test_a_one_launch_run_says_1_launch_everywhere(tmp_path: Path) -> None:
    """Approve the baseline only, look at the waiting run, stop it: every view of the run counts one launch."""
    started = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--json")
    assert started.returncode == 3, started.stderr
    run_id = json.loads(started.stdout.strip().splitlines()[-1])["run_id"]
    waiting = run_cli(tmp_path, "resume", run_id, "--decision", "approve", "--json")
    assert waiting.returncode == 3, waiting.stderr
    assert json.loads(waiting.stdout.strip().splitlines()[-1])["launches"] == 1

    runs = run_cli(tmp_path, "runs", COLUMNS="80")  # a narrow terminal: the count is a phrase
    show = run_cli(tmp_path, "show", run_id)
    stopped = run_cli(tmp_path, "resume", run_id, "--decision", "stop", "--reason", "out of time")
    assert stopped.returncode == 0, stopped.stderr
    transcript = tmp_path / "transcripts" / f"{run_id}.jsonl"
    replay = run_cli(tmp_path, "replay", str(transcript))
    report_md = run_cli(tmp_path, "report", str(transcript))
    report_html = run_cli(tmp_path, "report", str(transcript), "--format", "html")
    seen = {
        "runs": runs,
        "show": show,
        "resume (stop)": stopped,
        "replay": replay,
        "report md": report_md,
        "report html": report_html,
    }
    for name, r in seen.items():
        assert r.returncode == 0, f"{name}: {r.stderr}"
        text = " ".join((r.stdout + r.stderr).split())  # lines joined: a wrapped count is still one phrase
        assert ONE_PLURAL.findall(text) == [], f"{name} says {ONE_PLURAL.findall(text)}"
    assert re.search(rf"{run_id}\s+waiting for approval\s+1 launch\b", runs.stdout)
    assert re.search(r"waiting for approval, 1 launch,", " ".join(show.stdout.split()))
    assert re.search(r"cost\s+1 launch,", stopped.stdout)
    assert re.search(r"run ended:\s+stopped \(1 launch,", " ".join(replay.stdout.split()))
    assert re.search(r"1 launch, \d+ host-seconds", report_md.stdout)
    assert re.search(r"1 launch, \d+ host-seconds", report_html.stdout)
