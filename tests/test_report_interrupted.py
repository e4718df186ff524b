"""``hypoloop report`` on a run stopped mid-experiment counts every server the run launched, the one whose
experiment never concluded too: Ctrl-C (the run ends ``interrupted``) and ``kill -9`` (the transcript just
stops). A lab world's run, as a user runs it, on a slow lab clock so the stop lands inside a launch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from clirun import HYPOLOOP, cli_env, run_cli, transcript_events


def _run_until_second_launch(tmp_path: Path, sig: signal.Signals) -> Path:
    """Start ``hypoloop run --auto``, send ``sig`` to its process group once its second server is
    launched (that experiment not yet concluded), and return its transcript."""
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE="0.05")
    p = subprocess.Popen(
        [*HYPOLOOP, "run", "lab:glm5-nvfp4-sm120", "--auto", "--transcript-dir", "tr"], cwd=tmp_path, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            found = list((tmp_path / "tr").glob("*.jsonl"))
            events = transcript_events(found[0]) if found else []
            launched = [e for e in events if e["type"] == "server.launched"]
            if len(launched) >= 2:
                done = {e["data"]["experiment_id"] for e in events if e["type"] == "outcome"}
                assert launched[-1]["data"]["experiment_id"] not in done, "the second experiment ended already"
                break
            time.sleep(0.1)
        else:
            pytest.fail("the run never launched a second server")
        os.killpg(p.pid, sig)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if sig == signal.SIGKILL:  # its server is in a group of its own: stop it as a user would have to
        for e in transcript_events(found[0]):
            if e["type"] == "server.launched" and e["data"].get("pgid"):
                try:
                    os.killpg(int(e["data"]["pgid"]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    return found[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_report_counts_the_launch_of_an_experiment_that_never_concluded(tmp_path: Path, sig: signal.Signals) -> None:
    transcript = _run_until_second_launch(tmp_path, sig)
    launched = {e["data"]["experiment_id"] for e in transcript_events(transcript) if e["type"] == "server.launched"}
    r = run_cli(tmp_path, "report", str(transcript))
    assert r.returncode == 0, r.stderr[-2000:]
    cost = next(ln for ln in r.stdout.splitlines() if ln.startswith("- **cost**"))
    m = re.search(r"(\d+) launch", cost)
    assert m is not None and int(m[1]) == len(launched) >= 2, (cost, launched)


def _table_rows(report: str) -> list[str]:
    """The rows of the report's experiment table (Markdown)."""
    lines = report.splitlines()
    start = lines.index("## Experiments")
    return [ln for ln in lines[start:] if re.match(r"\| \d+ \|", ln)]


def test_the_experiment_table_lists_the_interrupted_launch_its_totals_count(tmp_path: Path) -> None:
    """Ctrl-C mid-launch, then ``resume``: the launch that gave no outcome counts in the report's totals,
    so the experiment table lists it too, marked interrupted, before the launch that ran it again."""
    transcript = _run_until_second_launch(tmp_path, signal.SIGINT)
    run_id = transcript.stem
    resumed = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.05")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    r = run_cli(tmp_path, "report", run_id)
    assert r.returncode == 0, r.stderr[-2000:]
    cost = next(ln for ln in r.stdout.splitlines() if ln.startswith("- **cost**"))
    m = re.search(r"(\d+) launch", cost)
    rows = _table_rows(r.stdout)
    assert m is not None and len(rows) == int(m[1]), (cost, rows)
    interrupted = [ln for ln in rows if "| interrupted |" in ln]
    assert len(interrupted) == 1, rows
    again = rows[rows.index(interrupted[0]) + 1]
    assert again.split("|")[2] == interrupted[0].split("|")[2]  # the same change, launched again
