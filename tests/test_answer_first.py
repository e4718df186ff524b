"""A finished run opens with the answer: the root fix apart from workarounds and a launch command that
works when pasted into a shell (the baseline with the fix applied, env vars included); the hypothesis
ledger after an experiment is what changed, not every hypothesis again."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from clirun import paste_until_ready, run_cli

from agent.record.recorded import RecordedRun
from agent.review.report import render

ROOT = Path(__file__).resolve().parent.parent


def _pasted_command(out: str) -> str:
    """The lines printed between the copy-paste note and the evidence panel, as a shell would join them."""
    after = out.split("(copy-paste):", 1)[1].splitlines()[1:]
    lines = []
    for line in after:
        if line.startswith("╭"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_run_opens_its_conclusion_with_a_command_that_works(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", COLUMNS="80")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    # the answer comes before the evidence panel, the root fix on its own line
    assert out.index("✓ answer") < out.index("conclusion ─")
    fix = re.search(r"root fix: (\S+) (\S+) — was", out)
    assert fix, out[-3000:]
    command = _pasted_command(out)
    argv = shlex.split(command)
    assert f"{fix.group(1)}" in argv and argv[argv.index(fix.group(1)) + 1] == fix.group(2)
    # pasted into a shell (python on PATH is this interpreter), it starts a server that comes up ready
    seen = paste_until_ready(command, ROOT)
    assert any("ready to roll" in line for line in seen), "".join(seen[-30:])


def test_new_hypotheses_are_a_few_lines_not_the_whole_ledger(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", COLUMNS="80")
    assert done.returncode == 0, done.stderr[-2000:]
    added = [line for line in done.stdout.splitlines() if line.startswith("  + hypothesis ")]
    more = re.findall(r"\+ (\d+) more hypothes[ie]s", done.stdout)
    tr = RecordedRun.load(next((tmp_path / "transcripts").glob("*.jsonl")))
    assert len(added) + sum(int(n) for n in more) == len(tr.hypotheses)
    assert len(added) <= 3 * max(1, len(more))
    verbose = run_cli(tmp_path, "replay", str(tr.path), "-v", COLUMNS="80")
    assert verbose.stdout.count("+ hypothesis ") == len(tr.hypotheses)


def test_report_opens_with_the_answer_and_the_command(tmp_path: Path) -> None:
    for transcript in sorted((ROOT / "transcripts" / "reference").glob("*.jsonl")):
        run = RecordedRun.load(transcript)
        if not (run.conclusion or {}).get("fix"):
            continue
        md = render(run, "md")
        assert md.index("## Answer") < md.index("## Summary")
        block = md.split("## Answer", 1)[1].split("## Summary", 1)[0]
        assert "```bash" in block and "--model-path" in block
        html = render(run, "html")
        assert html.index('class="box answer"') < html.index('class="box summary')
