"""The report's symptom line quotes the failure's error line, never the header of the traceback that leads
to it ("Scheduler hit an exception: Traceback (most recent call last):" says nothing of what failed). A
lab world's run as a user runs it, then ``hypoloop report`` and ``findings`` on its transcript."""

from __future__ import annotations

import re
from pathlib import Path

from clirun import run_auto, run_cli


def test_the_symptom_line_quotes_the_error_not_the_traceback_header(tmp_path: Path) -> None:
    result, events = run_auto(tmp_path, Path("lab:dsv4-flash-h100x4-ep"), HYPOLOOP_LAB_TIME_SCALE="0.004")
    fatal = [m["first_line"] for ev in events if ev["type"] == "outcome" for m in ev["data"]["matches"]
             if m["kind"] == "fatal"]
    assert any("most recent call last" in f for f in fatal), "the world's first fatal line is no traceback header"
    r = run_cli(tmp_path, "report", result["transcript"])
    assert r.returncode == 0, r.stderr[-2000:]
    symptom = next(ln for ln in r.stdout.splitlines() if ln.startswith("- **symptom**"))
    assert "most recent call last" not in symptom, symptom
    m = re.search(r"(\w+(?:Error|Exception)): .* \(log line (\d+) of", symptom)
    assert m is not None, symptom
    log = Path(next(ev["data"]["log_path"] for ev in events if ev["type"] == "outcome")).read_bytes().decode().split("\n")
    assert m[1] in log[int(m[2]) - 1], (symptom, log[int(m[2]) - 1])  # the line number is the error's own
