"""A failed launch's summary line names the step that failed as the failure line says it (a KV-pool
failure is "KV pool", not the "weights" step the last progress line showed) and says which log line is
the failure: quoted under it, or, when several fatal lines were already shown as they came, pointed at
("the failure: log:N (above)") rather than printed twice; on the real command against the lab."""

from __future__ import annotations

import re
from pathlib import Path

from clirun import run_cli


def test_failed_launch_names_the_step_and_quotes_the_fatal_line(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "lab:kv-pool-no-room", "--auto", COLUMNS="400")  # log paths on one line
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    failed = [i for i, ln in enumerate(lines) if ln.startswith("  ✗ ")]
    assert failed, done.stdout[-3000:]
    first = lines[failed[0]]
    assert " during KV pool after " in first, first
    quoted = re.match(r"\s+log:(\d+) (.*)", lines[failed[0] + 1])
    pointed = re.match(r"\s+the failure: log:(\d+) \(above\)", lines[failed[0] + 1])
    assert quoted or pointed, lines[failed[0] : failed[0] + 3]
    if pointed:  # shown once, as it came, above the summary
        lineno = int(pointed.group(1))
        earlier = [m.group(1) for ln in lines[: failed[0]] if (m := re.match(rf"\s+log:{lineno} (.*)", ln))]
        assert len(earlier) == 1, lines[: failed[0]][-8:]
        text = earlier[0]
    else:
        assert quoted is not None
        lineno, text = int(quoted.group(1)), quoted.group(2)
    launched = [m.group(1) for ln in lines[: failed[0]] if (m := re.search(r"\(log (\S+?)\)?$", ln))]
    log = Path(launched[-1]) if launched else None
    assert log is not None and log.is_file(), (launched, lines[: failed[0]][-12:])
    line = log.read_bytes().decode().split("\n")[lineno - 1]  # progress bars redraw with \r inside one line
    assert text.split()[0] in line, (launched, lineno, text)  # the line it quotes is that line of the launch log
    assert "memory" in line.lower()  # the failure itself, not the dying scheduler's echo
