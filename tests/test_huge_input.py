"""Huge input costs hypoloop a bounded time, and its own delay is never the server's stall (issue 24, 5).

- A server that writes one 10 MB log line and then goes on loading normally is not called stalled:
  an overlong line is one cut record (its first 64 KiB) and the rest is read past, and a silence is
  measured from the server's own writing (bytes in the file not read yet), not from hypoloop's reading.
- The motivating lab case, whose launcher writes a 10 MB line before the server starts, isolates its
  fix as it does without that line (the old code spent the host budget on its own reading: not_isolated).
- A findings file over the stated size is refused in one line naming the file and the limit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clirun import run_cli

from tools.host import LocalHost
from tools.knowledge import MAX_FINDINGS_BYTES
from tools.server import ServerSession, SessionOptions, WatchEvent
from tools.signatures import SignatureMatcher, load_signatures
from tools.stall import StallWatch

ROOT = Path(__file__).resolve().parent.parent
WORLD = ROOT / "lab" / "worlds" / "glm5-nvfp4-sm120"

#: A server that writes a 10 MB line, then a log line every 50 ms for 1.5 s, then SGLang's ready line.
SERVER = r"""
import sys, time
sys.stdout.write("W" * 10_000_000 + "\n"); sys.stdout.flush()
for i in range(30):
    print(f"[2026-01-01 00:00:00] Load weight step {i}", flush=True)
    time.sleep(0.05)
print("[2026-01-01 00:00:01] The server is fired up and ready to roll!", flush=True)
time.sleep(30)
"""


def test_a_10mb_line_is_not_a_stall_and_the_next_lines_are_read(tmp_path: Path) -> None:
    sigs = load_signatures()
    every = SignatureMatcher(sigs)  # what hypoloop's consumers do with every line: match all signatures
    stall = StallWatch(sigs, min_wall_s=0.5, startup_wall_s=0.5, stage_quiet_s={})
    seen: list[WatchEvent] = []

    def consume(ev: WatchEvent) -> None:
        seen.append(ev)
        stall.observe(ev)
        if ev.line is not None:
            every.feed(ev.line.line, ev.line.text)

    host = LocalHost()
    session = ServerSession(
        host, [sys.executable, "-c", SERVER], log_path=str(tmp_path / "server.log"), port=host.free_port(),
        matcher=SignatureMatcher(sigs), on_event=consume,
        options=SessionOptions(ready_timeout_s=60, stall_timeout_s=lambda: 0.5, health_poll_s=None),
    )
    with session:
        result = session.wait_ready()
    assert result.status == "ready", [e.kind for e in seen][-5:]
    lines = [e.line for e in seen if e.kind == "line" and e.line is not None]
    assert lines[0].line == 1 and len(lines[0].text) < 70_000 and "skipped" in lines[0].text
    assert [ln.line for ln in lines[1:32]] == list(range(2, 33))


def test_a_10mb_line_before_the_server_does_not_cost_the_run_its_budget(tmp_path: Path) -> None:
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    wrapper = case_dir / "launch.sh"
    wrapper.write_text(
        '#!/bin/sh\npy="$1"; shift\n"$py" -c "import sys; sys.stdout.write(\'W\' * 10_000_000 + \'\\n\')"\n'
        'exec "$py" -m lab.launch_server "$@"\n'
    )
    wrapper.chmod(0o755)
    (case_dir / "FINDINGS.md").write_text((WORLD / "FINDINGS.md").read_text(encoding="utf-8"), encoding="utf-8")
    text = (WORLD / "case.toml").read_text(encoding="utf-8")
    text = text.replace('argv = ["{python}", "-m", "lab.launch_server"]', f'argv = ["{wrapper}", "{{python}}"]')
    (case_dir / "case.toml").write_text(text, encoding="utf-8")
    r = run_cli(tmp_path, "run", str(case_dir / "case.toml"), "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.002")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "isolated", result
    events = [json.loads(line) for line in Path(result["transcript"]).read_text(encoding="utf-8").splitlines()]
    outcomes = [e["data"].get("status") or e["data"].get("stage") for e in events if e["type"] == "outcome"]
    assert not any(o in ("stalled", "timeout") for o in outcomes), outcomes


def test_a_findings_file_over_the_limit_is_one_line(tmp_path: Path) -> None:
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    entry = (WORLD / "FINDINGS.md").read_text(encoding="utf-8")
    with open(case_dir / "FINDINGS.md", "w", encoding="utf-8") as fh:
        while fh.tell() < 16_500_000:
            fh.write(entry)
    (case_dir / "case.toml").write_text((WORLD / "case.toml").read_text(encoding="utf-8"), encoding="utf-8")
    r = run_cli(tmp_path, "run", str(case_dir / "case.toml"), "--auto", "--json")
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "FINDINGS.md" in errors[0], r.stderr[-2000:]
    assert f"over {MAX_FINDINGS_BYTES >> 20} MiB" in errors[0] and "Traceback" not in r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["status"] == "error"


def test_a_long_run_of_letters_in_one_line_is_read_in_bounded_time(tmp_path: Path) -> None:
    """A log line that is one long run of letters (no space to end a word) is read once, not once from
    each letter: `analyze` answers well inside its usual time (the old pattern of the model-fallback notice
    took ~24 s on a 64 KiB run, quadratic in it; a normal log takes ~1 s)."""
    log = tmp_path / "run.log"
    log.write_text("[2026-01-01 00:00:00] " + "x" * 1_000_000 + "\n")
    r = run_cli(tmp_path, "analyze", str(log), timeout=15)
    assert r.returncode == 0, r.stderr[-2000:]
