"""The log line that matters is never cut: live output, `show`, `replay` and both report formats show it
whole (wrapped at the terminal's width, not truncated), on a real lab run at a narrow terminal."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from clirun import run_cli

NARROW = {"COLUMNS": "70"}


def _squash(text: str) -> str:
    """Text with wrapping undone: no whitespace, no panel borders (a wrapped line still contains this)."""
    return re.sub(r"[\s│╭╮╰╯─]+", "", text)


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, str]:
    """One lab run whose baseline crashes with a long assertion line: (dir, run id, live output, line);
    the line's experiment log is ``dir/fatal.log`` (a link)."""
    tmp = tmp_path_factory.mktemp("whole")
    done = run_cli(tmp, "run", "lab:glm5-nvfp4-sm120", "--auto", **NARROW)
    assert done.returncode == 0, done.stderr
    transcript = next((tmp / "transcripts").glob("*.jsonl"))
    events = [json.loads(x) for x in transcript.read_text().splitlines()]
    fatal = next(e["data"] for e in events if e["type"] == "observation" and e["data"]["kind"] == "fatal")
    (tmp / "fatal.log").symlink_to(next((tmp / "home" / "runs").rglob(f"{fatal['experiment_id']}.log")))
    return tmp, transcript.stem, done.stdout, fatal["text"]


def test_the_fatal_line_is_recorded_whole(crashed_run: tuple[Path, str, str, str]) -> None:
    tmp, run_id, _, line = crashed_run
    logged = (tmp / "fatal.log").read_text(errors="replace").splitlines()
    assert line in logged
    assert len(line) > 150 and line.endswith("failed.")


def test_live_output_wraps_the_fatal_line(crashed_run: tuple[Path, str, str, str]) -> None:
    _, _, out, line = crashed_run
    assert max(len(x) for x in out.splitlines()) <= 70
    assert _squash(line) in _squash(out)


def test_show_and_replay_wrap_the_fatal_line(crashed_run: tuple[Path, str, str, str]) -> None:
    tmp, run_id, _, line = crashed_run
    shown = run_cli(tmp, "show", run_id, **NARROW)
    assert shown.returncode == 0, shown.stderr
    assert _squash(line) in _squash(shown.stdout)
    replayed = run_cli(tmp, "replay", f"transcripts/{run_id}.jsonl", **NARROW)
    assert replayed.returncode == 0, replayed.stderr
    assert _squash(line) in _squash(replayed.stdout)


def test_reports_quote_the_fatal_line_whole(crashed_run: tuple[Path, str, str, str]) -> None:
    tmp, run_id, _, line = crashed_run
    for fmt in ("md", "html"):
        out = tmp / f"report.{fmt}"
        done = run_cli(tmp, "report", f"transcripts/{run_id}.jsonl", "--format", fmt, "-o", str(out))
        assert done.returncode == 0, done.stderr
        text = out.read_text()
        assert (html.escape(line, quote=False) if fmt == "html" else line) in text


def test_replay_on_a_narrow_terminal_cuts_no_hypothesis_or_change(tmp_path: Path) -> None:
    """At 60 columns the ledger's hypothesis ids and the alternatives' changes wrap; nothing is cut to an
    ellipsis (every reference run, replayed whole)."""
    refs = sorted((Path(__file__).resolve().parent.parent / "transcripts" / "reference").glob("*.jsonl"))
    assert refs
    for ref in refs:
        r = run_cli(tmp_path, "replay", str(ref), COLUMNS="60")
        assert r.returncode == 0, r.stderr[-2000:]
        cut = [line for line in (r.stdout + r.stderr).splitlines() if "…" in line]
        assert not cut, f"{ref.name}: {cut[:3]}"
