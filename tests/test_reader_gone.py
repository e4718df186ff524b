"""`hypoloop run CASE | head`: when the reader of a run's output goes away, the run stops as after Ctrl-C
(its server stopped, the transcript ended with the reason, exit 130) instead of running on unread to the
end. Real process, real pipe, real lab server."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clirun import HYPOLOOP, cli_env, live_processes, transcript_events


def test_a_run_whose_reader_goes_away_stops_cleanly(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*HYPOLOOP, "run", "lab:glm5-nvfp4-sm120", "--auto"], cwd=tmp_path, env=cli_env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    seen: list[str] = []
    for line in proc.stdout:  # read until the baseline's server is up, then go away as `head` does
        seen.append(line)
        if "server launched" in line:
            break
    proc.stdout.close()
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert any("server launched" in line for line in seen), "".join(seen)
    assert code == 130, err[-2000:]
    assert "the reader of its output went away" in err and "Traceback" not in err
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    events = transcript_events(transcript)
    assert events[-1]["type"] == "run.ended" and events[-1]["data"]["status"] == "interrupted"
    assert "broken pipe" in events[-1]["data"]["reason"]
    launched = [e for e in events if e["type"] == "server.launched"]
    stopped = [e for e in events if e["type"] == "server.stopped"]
    assert launched and len(stopped) == len(launched)
    assert not [e for e in events if e["type"] == "conclusion"]  # it did not run on to the end
    assert not live_processes(transcript.stem, only="lab.launch_server")
