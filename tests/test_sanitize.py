"""Bytes from outside never act on the terminal or a report (issue 24, point 2).

A hostile server log (OSC window title, clear screen, cursor moves, OSC 8 hyperlinks, C1 CSI, bidi
override) and a hostile FINDINGS.md title (the same, plus ``<script>``) go through the real CLI: the
live display on a real pseudo-terminal (pexpect), ``analyze``, the run's stderr, ``replay``, ``show``
and both reports. Each must show the sequences visibly (``␛]0;...``) and never pass them raw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pexpect
from clirun import HYPOLOOP, cli_env, run_cli

from tools.sanitize import md_text, visible

ROOT = Path(__file__).resolve().parent.parent
WORLD = ROOT / "lab" / "worlds" / "glm5-nvfp4-sm120"
#: What a hostile log line or title carries: set the window title, clear the screen, move the cursor
#: home, a hidden hyperlink (OSC 8), a C1 CSI (0x9b) and a right-to-left override.
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\x1b[H\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\x9b31m\u202eLIVE"
RAW = ["\x1b]0;PWNED", "\x1b[2J", "\x1b]8;;", "\x9b", "\u202e"]


def _hostile_case(tmp_path: Path) -> Path:
    """The motivating lab case, whose launcher prints a hostile line first (then runs the lab server)
    and whose FINDINGS.md has a hostile, relevant entry title."""
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    wrapper = case_dir / "launch.sh"
    printf = HOSTILE.encode().decode("latin-1")  # bytes printf writes back as they are
    octal = "".join(c if c.isalnum() or c in " ;:/." else f"\\{ord(c):03o}" for c in printf)
    wrapper.write_text(f'#!/bin/sh\npy="$1"; shift\nprintf \'boot{octal}\\n\'\nexec "$py" -m lab.launch_server "$@"\n')
    wrapper.chmod(0o755)
    notes = (WORLD / "FINDINGS.md").read_text(encoding="utf-8")
    notes += (
        f"\n## 2026-01-03 — GLM-5-NVFP4 NaN on RTX PRO 6000 sm120 <script>alert(1)</script> {HOSTILE}\n\n"
        "Outcome: works\n\nGLM-5-NVFP4 on 8 × RTX PRO 6000 Blackwell, NaN at first decode; bf16 KV cache fixed it.\n\n"
        "```bash\npython -m sglang.launch_server --model-path zai-org/GLM-5-NVFP4 --tp-size 8 --kv-cache-dtype bf16\n```\n"
    )
    (case_dir / "FINDINGS.md").write_text(notes, encoding="utf-8")
    text = (WORLD / "case.toml").read_text(encoding="utf-8")
    text = text.replace('argv = ["{python}", "-m", "lab.launch_server"]', f'argv = ["{wrapper}", "{{python}}"]')
    assert str(wrapper) in text
    (case_dir / "case.toml").write_text(text, encoding="utf-8")
    return case_dir / "case.toml"


def _no_raw(text: str, where: str) -> None:
    for seq in RAW:
        assert seq not in text, f"{where} passes {seq!r} raw"


def test_sanitiser_shows_every_control_visibly() -> None:
    shown = visible(HOSTILE + "\x00\x7f\x85")
    _no_raw(shown, "visible()")
    assert "\x1b" not in shown and "\x00" not in shown and "\x07" not in shown
    assert "␛]0;PWNED␇␛[2J␛[H" in shown and "⟨U+202E⟩" in shown and "⟨U+009B⟩" in shown and "␀" in shown
    assert visible(shown) == shown and visible("plain text\twith tab\n") == "plain text\twith tab\n"
    assert md_text("<script>alert(1)</script> & co") == "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"


def test_hostile_log_in_analyze_is_shown_visibly(tmp_path: Path) -> None:
    log = ROOT / "tests" / "data" / "logs_0.5.23" / "capture_oom.log"
    hostile = tmp_path / "hostile.log"
    hostile.write_text("".join(line + HOSTILE + "\n" for line in log.read_text().splitlines()), encoding="utf-8")
    r = run_cli(tmp_path, "analyze", str(hostile))
    assert r.returncode == 0, r.stderr[-2000:]
    _no_raw(r.stdout + r.stderr, "analyze")
    assert "␛]0;PWNED" in r.stdout


def test_hostile_log_and_findings_through_a_real_run_replay_show_and_reports(tmp_path: Path) -> None:
    case = _hostile_case(tmp_path)
    # The live display, on a real terminal: every frame is captured.
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE="0.002", COLUMNS="150", LINES="50", TERM="xterm-256color")
    child = pexpect.spawn(sys.executable, [*HYPOLOOP[1:], "run", str(case), "--auto"], cwd=str(tmp_path),
                          env=env, encoding="utf-8", codec_errors="replace", timeout=240, dimensions=(50, 150))
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    screen = child.before or ""
    assert child.exitstatus == 0, screen[-3000:]
    _no_raw(screen, "the live run on a terminal")
    assert "␛]0;PWNED" in screen  # the log line and the FINDINGS title, shown as text
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    run_id = transcript.stem
    # The same run without a terminal (stderr and the --json line), replay, show and the reports.
    again = run_cli(tmp_path, "run", str(case), "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.002")
    assert again.returncode == 0, again.stderr[-2000:]
    _no_raw(again.stderr, "run's stderr")
    assert "␛]0;PWNED" in again.stderr
    for args in (["replay", str(transcript)], ["replay", str(transcript), "-v"], ["show", run_id, "-v"]):
        r = run_cli(tmp_path, *args)
        assert r.returncode == 0, r.stderr[-2000:]
        _no_raw(r.stdout + r.stderr, " ".join(args[:1]))
    md = run_cli(tmp_path, "report", str(transcript), "--format", "md", "-o", str(tmp_path / "r.md"))
    html = run_cli(tmp_path, "report", str(transcript), "--format", "html", "-o", str(tmp_path / "r.html"))
    assert md.returncode == 0 and html.returncode == 0, md.stderr + html.stderr
    for path in (tmp_path / "r.md", tmp_path / "r.html"):
        text = path.read_text(encoding="utf-8")
        _no_raw(text, path.name)
        assert "<script>" not in text, f"{path.name} keeps a raw <script> from a FINDINGS title"
        assert "PWNED" in text and "alert(1)" in text  # shown, escaped, not dropped
    assert json.loads(again.stdout.strip().splitlines()[-1])["status"] == "isolated"


def test_a_wrapped_line_loses_no_character_and_shows_every_control(tmp_path: Path) -> None:
    """A long error line with a bidi override and a BEL, wrapped at 80 columns: every word is printed,
    the override as ``⟨U+202E⟩`` and the BEL as ``␇`` (rich drops a raw BEL from text; the override,
    made visible after wrapping, widened the line past the terminal, which cropped it)."""
    words = " ".join(f"word{i}" for i in range(40))
    log = tmp_path / "wrap.log"
    log.write_text('Traceback (most recent call last):\n  File "/x/sglang/srt/a.py", line 1, in f\n    g()\n'
                   f"ValueError: bad value in {'x' * 40} \u202e here and a bell \x07 end. {words}\n", encoding="utf-8")
    r = run_cli(tmp_path, "analyze", str(log), COLUMNS="80")
    assert r.returncode == 0, r.stderr[-2000:]
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    flat = " ".join(r.stdout.split())
    assert f"⟨U+202E⟩ here and a bell ␇ end. {words}" in flat, r.stdout


def test_runs_shows_a_control_in_a_case_name(tmp_path: Path) -> None:
    """``hypoloop runs`` lists a run whose case name carries a BEL with it shown as ``␇`` (it was dropped)."""
    text = (WORLD / "case.toml").read_text(encoding="utf-8")
    text = text.replace('name = "glm5-nvfp4-sm120"', 'name = "ring\\u0007bell"')
    assert "ring\\u0007bell" in text
    case = tmp_path / "case.toml"
    case.write_text(text, encoding="utf-8")
    for src in WORLD.iterdir():  # the knowledge files the case names
        if src.name != "case.toml" and src.is_file():
            (tmp_path / src.name).write_bytes(src.read_bytes())
    waiting = run_cli(tmp_path, "run", str(case))  # no terminal: it waits for approval (exit 3)
    assert waiting.returncode == 3, waiting.stderr[-2000:]
    for columns in ("160", "60"):
        r = run_cli(tmp_path, "runs", COLUMNS=columns)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "ring␇bell" in " ".join(r.stdout.split()) or "ring␇" in r.stdout, r.stdout
        assert "\x07" not in r.stdout
