"""After a rejection: when a person rejects the test of the leading hypothesis, the next approval screen
says that hypothesis can no longer be tested as proposed and offers edits that test it another way;
one of them, typed at the edit prompt, runs (a real terminal session with pexpect, and `show`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pexpect
from clirun import HYPOLOOP, cli_env, live_processes, run_cli

WORLD = "lab:glm5-nvfp4-sm120"
REASON = "a bf16 KV cache halves the tokens that fit"


#: The answer prompt; a baseline or confirmation run, which changes nothing, offers no edit.
PROMPT = r"\[a\]pprove / (?:\[e\]dit / )?\[r\]eject / \[h\]ypotheses / \[s\]top: "


def _screen(child: pexpect.spawn) -> str:
    """What the terminal showed up to the next answer prompt, as plain text: no colour codes, no panel
    borders, whitespace (line wrapping included) squashed to single spaces."""
    child.expect(PROMPT)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _events(tmp_path: Path) -> list[dict]:
    path = next((tmp_path / "transcripts").glob("*.jsonl"))
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_rejecting_the_leading_test_offers_another_way_at_the_terminal(tmp_path: Path) -> None:
    env = cli_env(tmp_path, COLUMNS="130", LINES="60", TERM="xterm-256color")
    child = pexpect.spawn(
        HYPOLOOP[0], [*HYPOLOOP[1:], "run", WORLD], cwd=str(tmp_path), env=env, encoding="utf-8",
        timeout=120, dimensions=(60, 130),
    )  # fmt: skip
    child.logfile_read = sys.stdout if "-s" in sys.argv else None
    try:
        screen = _screen(child)
        assert "approve experiment 1?" in screen
        child.sendline("a")
        screen = _screen(child)
        assert "approve experiment 2?" in screen
        assert "change --kv-cache-dtype: (unset) → bf16" in screen  # the leading hypothesis's test
        assert "can no longer be tested" not in screen
        child.sendline("r")
        child.expect("reason")
        child.sendline(REASON)
        screen = _screen(child)
        assert "approve experiment 2?" in screen and "--kv-cache-dtype: (unset) → bf16" not in screen.split("change", 1)[1][:60]
        assert re.search(
            r"the leading hypothesis lowprec-kv-cache-attention-numerics \(p=0\.\d\d\) can no longer be tested "
            r"as proposed: its test --kv-cache-dtype: \(unset\) → bf16 was rejected \(" + re.escape(REASON),
            screen,
        ), screen
        offers = re.findall(r"--kv-cache-dtype=[\w.]+", screen.split("to test it another way, [e]dit with one of:")[1])
        assert offers, screen
        offered = offers[0]
        child.sendline("e")
        child.expect("one change")
        child.sendline(offered)
        screen = _screen(child)
        assert "edited: --kv-cache-dtype: (unset) → " + offered.split("=", 1)[1] in screen
        assert "approval: edit (user)" in screen and "approve experiment 3?" in screen
        child.sendline("s")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert offered not in ("--kv-cache-dtype=bf16", "--kv-cache-dtype=bfloat16", "--kv-cache-dtype=auto")
    events = _events(tmp_path)
    decided = [e["data"] for e in events if e["type"] == "approval.decided"]
    assert [d["decision"] for d in decided] == ["approve", "reject", "edit", "stop"]
    assert decided[1]["reason"] == REASON
    assert decided[2]["change"]["name"] == "--kv-cache-dtype" and decided[2]["change"]["after"] == offered.split("=")[1]
    assert not live_processes(str(tmp_path), only="lab.launch_server")


def test_show_gives_the_same_note_to_a_run_waiting_without_a_terminal(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "run", WORLD)
    assert first.returncode == 3, first.stderr
    run_id = next((tmp_path / "transcripts").glob("*.jsonl")).stem
    assert run_cli(tmp_path, "resume", run_id, "--decision", "approve").returncode == 3
    waiting = run_cli(tmp_path, "show", run_id)
    assert "can no longer be tested" not in waiting.stdout  # the leading test is proposed: nothing to say
    rejected = run_cli(tmp_path, "resume", run_id, "--decision", "reject", "--reason", REASON)
    assert rejected.returncode == 3, rejected.stderr
    shown = run_cli(tmp_path, "show", run_id, "--json")
    note = json.loads(shown.stdout.strip().splitlines()[-1])["pending"]["lead_blocked"]
    assert note["hypothesis_id"] == "lowprec-kv-cache-attention-numerics" and note["reason"] == REASON
    assert "--kv-cache-dtype=fp8_e5m2" in {o["set"] for o in note["edits"]}
    text = " ".join(run_cli(tmp_path, "show", run_id).stdout.replace("│", " ").split())
    assert re.search(r"lowprec-kv-cache-attention-numerics \(p=0\.\d\d\) can no longer be tested", text), text
    assert "--kv-cache-dtype=fp8_e5m2" in text


def _panel_rows(child: pexpect.spawn) -> list[str]:
    """The approval panel's rows as the terminal showed them before the next answer prompt."""
    child.expect(PROMPT)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)
    top = text.rfind("╭")
    return text[top:].split("╰")[0].splitlines() if top >= 0 else []


def test_the_screen_after_a_rejection_fits_80_by_24(tmp_path: Path) -> None:
    """After a rejection the screen adds the note on the leading hypothesis and its offered edits, and
    still fits an 80 × 24 terminal with the prompt (it was 32 rows); ``h`` gives the why of each edit."""
    env = cli_env(tmp_path, COLUMNS="80", LINES="24", TERM="xterm-256color")
    child = pexpect.spawn(
        HYPOLOOP[0], [*HYPOLOOP[1:], "run", WORLD], cwd=str(tmp_path), env=env, encoding="utf-8",
        timeout=120, dimensions=(24, 80),
    )  # fmt: skip
    try:
        first = _panel_rows(child)
        child.sendline("a")
        second = _panel_rows(child)
        child.sendline("r")
        child.expect("reason")
        child.sendline(REASON)
        after = _panel_rows(child)
        child.sendline("h")
        full = " ".join(re.sub(r"[│╭╮╰╯─]", " ", "\n".join(_panel_rows(child))).split())
        child.sendline("s")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert first and second
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", "\n".join(after)).split())
    assert "can no longer be tested as proposed" in text and re.search(r"--kv-cache-dtype=\w+", text), text
    assert len(after) + 1 <= 24, "\n".join(after)  # the panel and the prompt line
    assert max(len(r) for r in after) <= 80
    assert "another value than the failing run's" in full  # the why of each offered edit
