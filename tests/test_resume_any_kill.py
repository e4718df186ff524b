"""Resume after a kill at every checkpoint boundary LangGraph can leave (issue 24, point 1).

LangGraph saves two things per graph step: each finished task's writes ("pending writes", saved the
moment the task returns) and then the step's checkpoint. A process killed between the two leaves a
checkpoint whose ``next`` is empty (LangGraph leaves out tasks whose writes are saved) although the
step's task is still to be applied: the old ``resume`` took that for "nothing next" and ended a live
run in error. Here the real ``hypoloop`` kills itself with SIGKILL right after the K-th save of the
store (``HYPOLOOP_FAULT_KILL_STORE=any#K``, see ``agent/record/runs.py``), for every K over a whole run, and
after a real full disk under the checkpoint store (a small tmpfs); each run is resumed as a user would
and must reach the run's own ending, with launches counted once and no server left running.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from clirun import live_processes, run_cli, transcript_events

WORLD = "glm5-nvfp4-sm120"
SCALE = "0.002"
LAB = Path(__file__).resolve().parent.parent / "lab" / "worlds" / WORLD


def _case(tmp_path: Path) -> str:
    """The world's case with room in its host budget: on a loaded machine a few wall seconds at this lab
    time scale are thousands of host-seconds, and the sweep is about where a run goes on from, not
    about its budget."""
    case_dir = tmp_path / "case"
    case_dir.mkdir(exist_ok=True)
    (case_dir / "FINDINGS.md").write_text((LAB / "FINDINGS.md").read_text(encoding="utf-8"), encoding="utf-8")
    text = (LAB / "case.toml").read_text(encoding="utf-8")
    text = re.sub(r"(?m)^host_seconds = .*$", "host_seconds = 10000000", text)
    assert "host_seconds = 10000000" in text
    (case_dir / "case.toml").write_text(text, encoding="utf-8")
    return str(case_dir / "case.toml")
#: Saves (checkpoints + pending writes) of a full run of WORLD with --auto is about 43; a K past the
#: end runs to completion untouched, which the test also accepts (and says so). The whole sweep is 45
#: runs (about 15 minutes on an idle 2-core machine): ``HYPOLOOP_KILL_SWEEP=all`` runs every K; by default
#: (and in CI, whose 90 minutes also hold the real engines) every fifth K, spread over the whole run.
SAVES = range(1, 46) if os.environ.get("HYPOLOOP_KILL_SWEEP") == "all" else range(1, 46, 5)


_events = transcript_events


def _last_json(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check_resumed(tmp_path: Path, run_id: str, transcript: Path, result: dict[str, Any], what: str) -> None:
    """The resumed run reached the world's own ending (the fix isolated), counted each launch once and
    left no lab server running; ``runs`` lists it finished with that result."""
    left = live_processes(run_id, only="lab.launch_server")
    for pid in left:
        os.killpg(pid, signal.SIGKILL)
    assert not left, f"servers left running after {what}: {left}"
    assert result.get("status") == "isolated", f"{what}: {result}"
    assert "without a conclusion" not in json.dumps(result)
    events = _events(transcript)
    launched = Counter(e["data"]["experiment_id"] for e in events if e["type"] == "server.launched")
    assert result["launches"] == sum(launched.values()), what
    assert all(n == 1 for n in launched.values()), f"launched twice after {what}: {launched}"
    runs = {i["run_id"]: i for i in json.loads(run_cli(tmp_path, "runs", "--json").stdout)}
    assert runs[run_id]["status"] == "finished" and runs[run_id]["result"] == result["status"]


@pytest.mark.parametrize("k", SAVES)
def test_kill_after_every_save_of_the_store_then_resume_reaches_the_end(tmp_path: Path, k: int) -> None:
    first = run_cli(tmp_path, "run", _case(tmp_path), "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE,
                    HYPOLOOP_FAULT_KILL_STORE=f"any#{k}")
    transcripts = list((tmp_path / "transcripts").glob("*.jsonl"))
    assert len(transcripts) == 1, first.stderr[-2000:]
    transcript = transcripts[0]
    run_id = transcript.stem
    if first.returncode == 0:  # K is past the run's last save
        _check_resumed(tmp_path, run_id, transcript, _last_json(first), f"no kill (K={k})")
        return
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    listed = {i["run_id"]: i for i in json.loads(run_cli(tmp_path, "runs", "--json").stdout)}
    assert listed[run_id]["status"] in ("interrupted", "finished"), listed[run_id]  # listed, never lost
    r = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
    try:
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        _check_resumed(tmp_path, run_id, transcript, _last_json(r) if r.stdout.strip() else {}, f"kill at save {k}")


@pytest.mark.parametrize("kind", ["writes", "put"])
def test_kill_right_after_an_approval_is_decided_then_resume(tmp_path: Path, kind: str) -> None:
    """A run waits for the baseline's approval; the answer is given from a new process, which is killed
    right after the approve step's writes (or its checkpoint) are saved; resume goes on from there."""
    paused = run_cli(tmp_path, "run", _case(tmp_path), "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
    assert paused.returncode == 3, paused.stderr[-2000:]
    run_id = _last_json(paused)["run_id"]
    transcript = Path(_last_json(paused)["transcript"])
    answered = run_cli(tmp_path, "resume", run_id, "--decision", "approve", "--json",
                       HYPOLOOP_LAB_TIME_SCALE=SCALE, HYPOLOOP_FAULT_KILL_STORE=f"{kind}#1")
    assert answered.returncode == -signal.SIGKILL, answered.stderr[-2000:]
    r = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
    try:
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        _check_resumed(tmp_path, run_id, transcript, _last_json(r) if r.stdout.strip() else {},
                       f"kill after the approval's {kind}")
    assert any(e["type"] == "approval.decided" for e in _events(transcript))


# Saves of pending writes in a run of the world: 19 is past the last one since this session's planner
# changes (the run then ends untouched), so the store fills at 3, 8 and 14.
@pytest.mark.parametrize("k", [3, 8, 14])
def test_a_full_checkpoint_store_after_saved_writes_then_room_again_resumes(
    tmp_path: Path, small_disks: Any, k: int
) -> None:
    """The disk under the checkpoint store fills up right after a task's writes are saved (a real tmpfs
    filled to its last byte), so the step's checkpoint cannot be written: one line, exit 1; with room
    again, resume finishes the run instead of ending it as lost."""
    home = small_disks.mount(tmp_path / "home", size_mb=32)  # room for a whole run's store once freed (~6 MB)
    small_disks.mount(home / "runs", size_mb=64)  # the run folder has room: only the store is full
    first = run_cli(tmp_path, "run", _case(tmp_path), "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE,
                    HYPOLOOP_FAULT_KILL_STORE=f"writes#{k}:fill={home}")
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    run_id = transcript.stem
    try:
        assert first.returncode == 1, first.stderr[-3000:]
        assert "the disk is full" in first.stderr and "checkpoint store" in first.stderr, first.stderr[-3000:]
        assert not live_processes(run_id, only="lab.launch_server")
        small_disks.free(home)
        r = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        small_disks.free(home)
    _check_resumed(tmp_path, run_id, transcript, _last_json(r), f"a full store after writes #{k}")
