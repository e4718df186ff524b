"""A run stopped before its confirmation names no root cause; its report's "leading hypothesis" is the
likeliest one the evidence left standing (supported but not confirmed counts), not the likeliest of the
merely open ones."""

from __future__ import annotations

import re
from pathlib import Path

from clirun import run_cli

from agent.record.recorded import RecordedRun


def test_a_stopped_runs_report_leads_with_the_supported_hypothesis(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "run", "lab:cuda-graph-oom", COLUMNS="100")
    assert first.returncode == 3, first.stderr[-2000:]
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    for answer in (
        ["--decision", "approve"],
        ["--decision", "reject", "--reason", "not this one"],
        ["--decision", "edit", "--set", "--mem-fraction-static=0.85"],
        ["--decision", "stop"],
    ):
        done = run_cli(tmp_path, "resume", transcript.stem, *answer)
        assert done.returncode in (0, 3), done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-3000:]
    run = RecordedRun.load(transcript)
    assert not (run.conclusion or {}).get("root_cause")
    standing = [h for h in run.hypotheses.values() if h.status in ("open", "supported")]
    best = max(standing, key=lambda h: h.posterior)
    assert best.status == "supported"  # the edit served: the evidence supports it, unconfirmed
    report = run_cli(tmp_path, "report", str(transcript))
    assert report.returncode == 0, report.stderr[-2000:]
    lead = re.search(r"\*\*leading hypothesis\*\*: (\S+) \(p=([\d.]+)", report.stdout)
    assert lead, report.stdout[:3000]
    assert lead.group(1) == best.id and float(lead.group(2)) == round(best.posterior, 2)
