"""`replay` shows each launch's summary line as the live run showed it: the time in each start-up step
(init, weights, KV pool, CUDA-graph capture, warm-up), and for a failed launch the step that failed and
its fatal log line."""

from __future__ import annotations

import re
from pathlib import Path

from clirun import run_cli


def _summaries(text: str) -> list[str]:
    """The ✓/✗ summary lines and the quoted fatal lines under them, whitespace squashed."""
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s+[✓✗] ", line):
            block = [line]
            for nxt in lines[i + 1 :]:  # its wrapped continuation and the fatal line under it
                if not nxt.startswith("    ") or "(exit code" in nxt or "(still running" in nxt:
                    break
                block.append(nxt)
            out.append(" ".join(" ".join(block).split()))
    return out


def test_replay_shows_the_per_stage_timing_the_live_run_showed(tmp_path: Path) -> None:
    live = run_cli(tmp_path, "run", "lab:kv-pool-no-room", "--auto", COLUMNS="100")
    assert live.returncode == 0, live.stderr[-2000:]
    shown = _summaries(live.stdout)
    assert any(s.startswith("✓ ready after") and " · " in s for s in shown), shown
    assert any(s.startswith("✗ ") and "log:" in s for s in shown), shown
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    replayed = run_cli(tmp_path, "replay", str(transcript), COLUMNS="100")
    assert replayed.returncode == 0, replayed.stderr
    assert _summaries(replayed.stdout) == shown
