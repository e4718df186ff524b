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


#: What may start at column 0 of a run's story: the run's and each experiment's header, the end, a panel's
#: border, the lines after the story. Anything else there is a wrapped line that lost its indentation.
TOP_LEVEL = ("▶", "experiment ", "■ run ended", "╭", "│", "╰", "run ", "transcript:", "interrupted")


def _unindented(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip() and not x.startswith(" ") and not x.startswith(TOP_LEVEL)]


def test_a_wrapped_line_keeps_its_indentation(crashed_run: tuple[Path, str, str, str]) -> None:
    """On a narrow terminal a long line of the story (the log path, the outcome, a hypothesis, a log line)
    continues under its own indentation, so the story keeps its shape: live, in `show` and in `replay`."""
    tmp, run_id, out, _ = crashed_run
    shown = run_cli(tmp, "show", run_id, **NARROW)
    replayed = run_cli(tmp, "replay", f"transcripts/{run_id}.jsonl", **NARROW)
    for name, text in (("run", out), ("show", shown.stdout), ("replay", replayed.stdout)):
        assert _unindented(text) == [], f"{name}: {_unindented(text)[:5]}"
        assert max(len(x) for x in text.splitlines()) <= 70, name
    analyzed = run_cli(tmp, "analyze", "fatal.log", **NARROW)
    assert analyzed.returncode == 0, analyzed.stderr
    sections = ("fatal.log:", "signatures", "effective config", "hypotheses", "first experiment:", "alternatives",
                "SGLang's own", "no experiment")
    loose = [x for x in analyzed.stdout.splitlines() if x.strip() and not x.startswith((" ", *sections))]
    assert loose == [], f"analyze: {loose[:5]}"


def test_the_story_says_each_thing_once(crashed_run: tuple[Path, str, str, str]) -> None:
    """The outcome names its stage once; an evidence line names its kind once and counts its log lines
    right; the conclusion lists the open hypotheses left for one reason in one row, the reason once."""
    tmp, run_id, out, _ = crashed_run
    flat = " ".join(out.split())
    assert re.search(r"outcome: request_failed; signatures: probability_tensor_nan", flat)
    assert "request_failed request_failed" not in flat and "outcome: ok ok" not in flat
    replayed = " ".join(run_cli(tmp, "replay", f"transcripts/{run_id}.jsonl", **NARROW).stdout.split())
    assert "signature: signature" not in replayed
    assert not re.search(r"log lines \d+ of", replayed) and re.search(r"\(log line \d+ of exp-", replayed)
    events = [json.loads(x) for x in (tmp / "transcripts" / f"{run_id}.jsonl").read_text().splitlines()]
    untested = next(e["data"] for e in events if e["type"] == "conclusion")["untested"]
    reasons = {u["why"] for u in untested}
    assert len(reasons) < len(untested)  # the case this is about: several left for the same reason
    panel = _squash(out[out.index("conclusion") :])
    for why in reasons:
        # a reason shared by several reads in the plural in their one row
        shared = sum(u["why"] == why for u in untested) > 1
        shown = why.replace("which this hypothesis does not explain", "which none of them explains") if shared else why
        assert panel.count(_squash(shown)) == 1, shown
    for u in untested:
        assert _squash(u["id"]) in panel


def test_the_approval_screen_cuts_nothing_at_80_columns(tmp_path: Path) -> None:
    """`show -v` of a run waiting for its second experiment, at 80 and 60 columns: every open hypothesis's
    id on a line of its own and whole, its statement whole (wrapped), no '…' anywhere; plain `show` prints
    the compact screen (the likeliest few and one line for the rest)."""
    started = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--json")
    run_id = json.loads(started.stdout.strip().splitlines()[-1])["run_id"]
    assert run_cli(tmp_path, "resume", run_id, "--decision", "approve").returncode == 3
    pending = json.loads(run_cli(tmp_path, "show", run_id, "--json").stdout)["pending"]
    assert len(pending["hypotheses"]) > 5
    for columns in ("80", "60"):
        shown = run_cli(tmp_path, "show", run_id, "-v", COLUMNS=columns)  # -v: every open hypothesis
        assert shown.returncode == 0, shown.stderr
        screen = shown.stdout[shown.stdout.index("approve experiment") :]
        assert "…" not in screen, screen
        words = set(re.sub(r"[│╭╮╰╯─]", " ", screen).split())
        for h in pending["hypotheses"]:
            assert h["id"] in words, f"{columns} columns: {h['id']} is not on one line"
            assert _squash(h["statement"]) in _squash(screen)
    compact = run_cli(tmp_path, "show", run_id, COLUMNS="80").stdout
    # no key is read here: the line names the command that lists the rest, never "press h"
    box = compact[compact.index("approve experiment") :]
    assert "press h" not in box and _squash(f"more: hypoloop show {run_id} -v lists them") in _squash(box), box
