"""A run whose transcript was moved away is not resumed into a new file (it held the rest of the run without
its start, and report then showed an unknown run): resume refuses in one line, naming the file, and the run
resumes as before once the file is back."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_cli


def test_resume_refuses_a_run_whose_transcript_is_gone_and_continues_once_it_is_back(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--json", "--transcript-dir", "tr")
    assert first.returncode == 3, first.stderr[-2000:]
    result = json.loads(first.stdout.strip().splitlines()[-1])
    transcript = Path(result["transcript"])
    moved = transcript.rename(tmp_path / "elsewhere.jsonl")
    r = run_cli(tmp_path, "resume", result["run_id"], "--decision", "approve")
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "is gone" in lines[0] and str(transcript) in lines[0], lines
    assert not transcript.exists()  # no new file was started
    moved.rename(transcript)
    again = run_cli(tmp_path, "resume", result["run_id"], "--decision", "approve", "--json")
    assert again.returncode == 3, again.stderr[-2000:]  # the baseline ran; the next experiment waits
