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


def test_a_traceback_failure_quotes_its_exception_line_not_its_header(tmp_path: Path) -> None:
    """The log opens with a bare ``Traceback (most recent call last):`` (a chained one: the error raised
    while handling another); the summary quotes the exception that propagated, the traceback's last line,
    live and in ``replay`` alike."""
    done = run_cli(tmp_path, "run", "lab:gemma4-e2b-xeon", "--auto", "--transcript-dir", "tr", COLUMNS="400")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    failed = next(i for i, ln in enumerate(lines) if ln.startswith("  ✗ "))
    quoted = re.match(r"\s+log:(\d+) (.*)", lines[failed + 1])
    assert quoted is not None, lines[failed : failed + 3]
    assert "Traceback (most recent call last)" not in quoted.group(2), quoted.group(0)
    log = Path(next(m.group(1) for ln in lines[:failed] if (m := re.search(r"\(log (\S+?)\)?$", ln))))
    text = log.read_text().rstrip("\n").split("\n")
    assert text[0].startswith("Traceback (most recent call last)")  # the case this test is about
    last = max(i for i, ln in enumerate(text) if ln and not ln[:1].isspace() and ":" in ln and "Error" in ln)
    assert (int(quoted.group(1)), quoted.group(2)) == (last + 1, text[last].strip())  # the traceback's last line
    replayed = run_cli(tmp_path, "replay", next((tmp_path / "tr").glob("*.jsonl")).as_posix(), COLUMNS="400")
    assert quoted.group(0).strip() in replayed.stdout, replayed.stdout[-3000:]
