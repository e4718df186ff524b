"""``hypoloop analyze`` applies the README's 64 KiB per-line cap: a log line over 64 KiB is read as its
first 64 KiB and a note that the rest is skipped, so one giant line costs bounded memory and time, and
every other line (and its number) is read as before. The real SGLang log of tests/data with its error
line made 20 MB long."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from clirun import HYPOLOOP, cli_env

LOG = Path(__file__).parent / "data" / "logs_0.5.23" / "tp2-no-bind.log"


def _analyze(tmp_path: Path, log: Path) -> tuple[dict, int]:
    """The JSON document of ``hypoloop analyze LOG --json`` and the peak memory of that process (KiB)."""
    script = (
        "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)"
    )
    r = subprocess.run(
        [HYPOLOOP[0], "-c", script, *HYPOLOOP, "analyze", str(log), "--json"],
        cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout), int(r.stderr.strip().splitlines()[-1])


def test_a_line_over_64_kib_is_cut_with_a_note_and_costs_bounded_memory(tmp_path: Path) -> None:
    lines = LOG.read_text().split("\n")
    n = next(i for i, ln in enumerate(lines) if ln.startswith("AssertionError: SGLANG_CPU_OMP_THREADS_BIND"))
    normal, normal_rss = _analyze(tmp_path, LOG)
    lines[n] += " " + "x" * (20 << 20)
    giant = tmp_path / "giant.log"
    giant.write_text("\n".join(lines))
    doc, rss = _analyze(tmp_path, giant)
    cut = [s for s in doc["signatures"] if n + 1 in s["lines"]]
    assert cut, doc["signatures"]
    assert {s["id"] for s in cut} == {s["id"] for s in normal["signatures"] if n + 1 in s["lines"]}
    assert [h["id"] for h in doc["hypotheses"]] == [h["id"] for h in normal["hypotheses"]]
    # the 20 MB are never held (decoded, redacted, matched): a few copies would be 100 MB and more
    assert rss - normal_rss < 40 << 10, (rss, normal_rss)
