"""Durable runs: pause with no terminal, answer from new processes, survive kill -9, one driver per run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from clirun import HYPOLOOP, cli_env, live_processes, run_cli

from agent.domain.evidence import RawEvidence
from agent.record.runs import RunInUse, RunLock, lock_holder
from agent.record.transcript import Transcript, read_transcript
from agent.run.recovery import emit_once, prior_launch, recover, save_result
from agent.run.runtime import Runtime
from tools.host import LocalHost

CASE = "lab:glm5-nvfp4-sm120"


def _env(tmp_path: Path, scale: str = "0.004") -> dict[str, str]:
    return cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale)


def _hl(
    tmp_path: Path, *args: str, scale: str = "0.004", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """One hypoloop command in a new process, no terminal attached."""
    return run_cli(tmp_path, *args, timeout=timeout, HYPOLOOP_LAB_TIME_SCALE=scale)


def _last_json(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(r.stdout.strip().splitlines()[-1])


def _events(path: Path) -> list[dict[str, Any]]:
    return [e.model_dump() for e in read_transcript(path)]


def _lab_servers(marker: str) -> list[int]:
    """Pids of live lab servers whose command line or log file mentions ``marker`` (a run id)."""
    return sorted(live_processes(marker, only="lab.launch_server"))


def _start_paused(tmp_path: Path, scale: str = "0.004") -> dict[str, Any]:
    r = _hl(tmp_path, "run", CASE, "--json", "--transcript-dir", "tr", scale=scale)
    assert r.returncode == 3, r.stderr[-3000:]
    out = _last_json(r)
    assert out["status"] == "waiting_for_approval" and out["pending"]["purpose"] == "baseline"
    return out


# ------------------------------------------------------------------------------------------ scripted


def test_scripted_session_reaches_a_conclusion_with_a_rejection_and_an_edit(tmp_path: Path) -> None:
    first = _start_paused(tmp_path)
    run_id, baseline_id = first["run_id"], first["pending"]["experiment_id"]
    transcript = tmp_path / first["transcript"]
    shown = _hl(tmp_path, "show", run_id).stdout
    assert "waiting for approval" in shown and "approve experiment 1?" in shown and baseline_id in shown

    with RunLock(tmp_path / "home", run_id):  # another process is driving the run
        r = _hl(tmp_path, "resume", run_id, "--decision", "approve")
        assert r.returncode == 4 and "is in use by another hypoloop process" in r.stderr

    # Two processes answer at once: one drives the run, the other is told it is in use (or, if it
    # came late, that the experiment no longer waits); either way the baseline is launched once.
    procs = [
        subprocess.Popen(
            [*HYPOLOOP, "resume", run_id, "--decision", "approve", "--experiment", baseline_id, "--json"],
            cwd=tmp_path,
            env=_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) in ([3, 4], [2, 3]), outs
    winner, loser = (outs[0], outs[1]) if codes[0] == 3 else (outs[1], outs[0])
    assert "in use" in loser[1] or "not waiting for approval" in loser[1]
    proposal = json.loads(winner[0].strip().splitlines()[-1])["pending"]
    assert proposal["purpose"] == "test" and proposal["change"]

    # The same answer again (a retried script): refused, nothing launched twice.
    again = _hl(tmp_path, "resume", run_id, "--decision", "approve", "--experiment", baseline_id)
    assert again.returncode == 2 and "not waiting for approval" in again.stderr

    reason = "keep the FP8 KV cache if at all possible"
    r = _hl(tmp_path, "resume", run_id, "--decision", "reject", "--reason", reason, "--json")
    assert r.returncode == 3, r.stderr[-3000:]
    rejected, pending = proposal, _last_json(r)["pending"]
    assert pending["experiment_id"] != rejected["experiment_id"] and pending["change"] != rejected["change"]

    # A two-change edit is refused; the run keeps waiting for the same experiment.
    r = _hl(
        tmp_path,
        "resume",
        run_id,
        "--decision",
        "approve",
        "--set",
        "--kv-cache-dtype=bf16",
        "--set",
        "NCCL_P2P_DISABLE=1",
    )
    assert r.returncode == 2 and "exactly one variable" in r.stderr
    runs = json.loads(_hl(tmp_path, "runs", "--json").stdout)
    assert [(i["run_id"], i["status"]) for i in runs] == [(run_id, "waiting_for_approval")]
    assert runs[0]["pending"]["experiment"]["id"] == pending["experiment_id"]

    # The rejected value in its other spelling is the rejected change: refused, the run keeps waiting.
    other = {"bf16": "bfloat16", "bfloat16": "bf16"}.get(str(rejected["change"]["after"]))
    if rejected["change"]["name"] == "--kv-cache-dtype" and other:
        r = _hl(tmp_path, "resume", run_id, "--decision", "approve", "--set", f"--kv-cache-dtype={other}")
        assert r.returncode == 2 and "rejected earlier" in r.stderr, r.stderr

    # Edit the waiting proposal into another decode kernel than the one the failing run used.
    flag, value = "--nsa-decode-backend", "tilelang"
    r = _hl(tmp_path, "resume", run_id, "--decision", "approve", "--set", f"{flag}={value}", "--json")
    assert r.returncode == 3, r.stderr[-3000:]

    r = _hl(tmp_path, "resume", run_id, "--decision", "stop", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    result = _last_json(r)
    assert result["status"] == "stopped"
    assert [(r["experiment_id"], r["reason"]) for r in result["rejected"]] == [
        (rejected["experiment_id"], reason)
    ]
    assert result["rejected"][0]["change"].startswith(rejected["change"]["name"])
    assert result["edited"][0]["experiment_id"] == pending["experiment_id"]
    assert result["edited"][0]["change"]["name"] == flag and result["edited"][0]["change"]["after"] == value
    assert result["launches"] == 2

    events = _events(transcript)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # one file, continued
    decided = [e["data"] for e in events if e["type"] == "approval.decided"]
    assert [d["decision"] for d in decided] == ["approve", "reject", "edit", "stop"]
    assert decided[1]["reason"] == reason and decided[2]["change"]["after"] == value
    requested = [e["data"]["experiment_id"] for e in events if e["type"] == "approval.requested"]
    # Written once each, though every resume ran the approve node again from its first line.
    assert len(requested) == len(set(requested))
    launched = [e["data"]["experiment_id"] for e in events if e["type"] == "server.launched"]
    assert len(launched) == len(set(launched)) == 2 and rejected["experiment_id"] not in launched
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert conclusion["rejected"][0]["reason"] == reason and conclusion["edited"]

    done = _hl(tmp_path, "resume", run_id, "--decision", "approve")
    assert done.returncode == 2 and "has finished" in done.stderr
    assert len(_events(transcript)) == len(events)


# ------------------------------------------------------------------------------------------ kill -9


def _wait_for(path: Path, type_: str, timeout: float = 60, *, nth: int = 1) -> dict[str, Any]:
    """The ``nth`` event of ``type_`` in the transcript at ``path``, once it is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            found = [e for e in _events(path) if e["type"] == type_]
            if len(found) >= nth:
                return found[nth - 1]
        time.sleep(0.05)
    raise AssertionError(f"no {type_} #{nth} in {path}")


def _resume_and_kill(
    tmp_path: Path, run_id: str, transcript: Path, scale: str, *, decision: bool = True, nth: int = 1
) -> dict[str, Any]:
    """`resume` (with `--decision approve` unless ``decision`` is False: nothing waits for one) in the
    background; kill -9 it while the ``nth`` server of the run loads."""
    proc = subprocess.Popen(
        [*HYPOLOOP, "resume", run_id, *(["--decision", "approve"] if decision else [])],
        cwd=tmp_path,
        env=_env(tmp_path, scale),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        launched = _wait_for(transcript, "server.launched", nth=nth)
        # Kill it once the server has written its first log lines (not after a fixed pause: on a loaded
        # machine 0.3 s was sometimes before the first line, and the lost launch's log was empty).
        log, deadline = Path(launched["data"]["log"]), time.monotonic() + 30
        while not (log.exists() and log.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None
        assert not any(e["type"] == "server.ready" for e in _events(transcript)), "kill it while loading"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return launched["data"]


def test_resume_after_kill_adopts_the_loading_server_and_does_not_relaunch(tmp_path: Path) -> None:
    first = _start_paused(tmp_path)
    run_id, transcript = first["run_id"], tmp_path / first["transcript"]
    launched = _resume_and_kill(tmp_path, run_id, transcript, scale="0.012")  # loading takes ~5 s
    try:
        assert _lab_servers(run_id) == [launched["pid"]]  # the orphan keeps loading
        listed = {i["run_id"]: i for i in json.loads(_hl(tmp_path, "runs", "--json").stdout)}
        assert listed[run_id]["status"] == "interrupted"
        assert listed[run_id]["launches"] == 1  # launched after the last checkpoint: from the transcript

        r = _hl(tmp_path, "resume", run_id, "--json", scale="0.012")
        assert r.returncode == 3, r.stderr[-3000:]  # the baseline finished; the next proposal waits
        assert "server adopted" in r.stderr
    finally:
        for pid in _lab_servers(run_id):
            os.killpg(pid, signal.SIGKILL)
    events = _events(transcript)
    exp_id = launched["experiment_id"]
    adopted = [e["data"] for e in events if e["type"] == "server.adopted"]
    assert (
        len(adopted) == 1 and adopted[0]["pid"] == launched["pid"] and adopted[0]["experiment_id"] == exp_id
    )
    assert "instead of launching a duplicate" in adopted[0]["reason"]
    assert [e["data"]["experiment_id"] for e in events if e["type"] == "server.launched"] == [exp_id]
    assert not any(e["type"] == "experiment.relaunched" for e in events)
    stopped = [e["data"] for e in events if e["type"] == "server.stopped"]
    assert [s["experiment_id"] for s in stopped] == [exp_id] and stopped[0]["verified"]
    outcome = next(e["data"] for e in events if e["type"] == "outcome")
    assert outcome["experiment_id"] == exp_id and outcome["stage"] == "request_failed"
    assert _last_json(r)["launches"] == 1
    assert not _lab_servers(run_id)


def test_resume_after_kill_says_so_when_it_launches_again(tmp_path: Path) -> None:
    first = _start_paused(tmp_path)
    run_id, transcript = first["run_id"], tmp_path / first["transcript"]
    launched = _resume_and_kill(tmp_path, run_id, transcript, scale="0.01")
    os.killpg(launched["pgid"], signal.SIGKILL)  # the server dies too while nobody watches
    r = _hl(tmp_path, "resume", run_id, "--json", scale="0.004")
    assert r.returncode == 3, r.stderr[-3000:]
    events = _events(transcript)
    types = [e["type"] for e in events]
    assert "server.lost" in types and "experiment.relaunched" in types
    assert types.index("experiment.relaunched") < max(
        i for i, t in enumerate(types) if t == "server.launched"
    )
    relaunch = next(e["data"] for e in events if e["type"] == "experiment.relaunched")
    assert relaunch["experiment_id"] == launched["experiment_id"] and relaunch["earlier_launches"] == 1
    logs = [e["data"]["log"] for e in events if e["type"] == "server.launched"]
    assert len(logs) == 2 and logs[1].endswith(".launch2.log")  # the lost launch's log is kept as it was
    assert Path(logs[0]).read_text() and Path(logs[0]).stat().st_size < Path(logs[1]).stat().st_size
    # The lost launch produced no evidence, but it used the host: it counts as a launch (its host time is
    # what the transcript saw of it; killed 0.3 s after its launch, that is next to nothing here).
    result = _last_json(r)
    outcome = next(e["data"] for e in events if e["type"] == "outcome")
    # the run keeps its figure to the ms (rounded once, when shown): at least the relaunch's own seconds
    assert result["launches"] == 2 and result["host_seconds"] >= outcome["timings"]["host_seconds"] - 0.001
    assert not _lab_servers(run_id)


# ------------------------------------------------------------------------------------------ one driver


def test_run_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with RunLock(home, "r1"):
        assert lock_holder(home, "r1") == os.getpid()
        with pytest.raises(
            RunInUse, match=f"run r1 is in use by another hypoloop process \\(pid {os.getpid()}\\)"
        ):
            RunLock(home, "r1").acquire()
        with RunLock(home, "r2"):  # other runs are not affected
            pass
    assert lock_holder(home, "r1") is None
    RunLock(home, "r1").acquire().release()


def test_concurrent_commands_share_one_state_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `resume`s answering one run start together; neither may fail on the other's start-up check."""
    from concurrent.futures import ThreadPoolExecutor

    from agent.cli import state_dir

    monkeypatch.setenv("HYPOLOOP_HOME", str(tmp_path / "home"))

    def open_many(_: int) -> int:
        return sum(state_dir() == tmp_path / "home" for _ in range(300))

    with ThreadPoolExecutor(16) as pool:  # raises typer.Exit(2) if any start-up check fails
        assert sum(pool.map(open_many, range(16))) == 16 * 300
    assert not [p.name for p in (tmp_path / "home").iterdir()]  # no probe left behind


# ------------------------------------------------------------------------------------------ pieces


def test_emit_once_writes_an_event_once_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    for _ in range(2):  # two processes resuming the same node
        tr = Transcript(path, "r")
        emit_once(
            tr,
            "approval.requested",
            {"experiment_id": "e1", "request": 1},
            node="approve",
            key=("experiment_id", "request"),
        )
        tr.close()
    tr = Transcript(path, "r")
    emit_once(
        tr,
        "approval.requested",
        {"experiment_id": "e1", "request": 2},
        node="approve",
        key=("experiment_id", "request"),
    )
    tr.close()
    assert [(e.seq, e.data["request"]) for e in read_transcript(path)] == [(1, 1), (2, 2)]


def test_transcript_continues_after_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tr = Transcript(path, "r")
    tr.emit("run.paused", {"waiting_for": "exp-a"})
    tr.close()
    with open(path, "a") as fh:
        fh.write('{"v": 1, "seq": 2, "ts"')  # kill -9 in the middle of a write
    tr = Transcript(path, "r")
    tr.emit("run.resumed", {})
    tr.close()
    assert [(e.seq, e.type) for e in read_transcript(path)] == [(1, "run.paused"), (2, "run.resumed")]


def test_prior_launch_counts_the_time_lost_launches_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From each launch to its server.stopped, or to the last event seen while it was watched; the gap
    until a later process noticed the loss is not host time the server was seen to use."""
    clock = iter([100.0, 130.0, 160.0, 500.0, 501.0, 600.0, 900.0, 901.0])
    monkeypatch.setattr("agent.record.transcript.time.time", lambda: next(clock))
    tr = Transcript(tmp_path / "t.jsonl", "r")
    tr.emit("server.launched", {"experiment_id": "e", "pid": 1, "started_wall": 90.0})  # ts 100
    tr.emit("server.ready", {"experiment_id": "e", "after_s": 30.0})  # 130
    tr.emit("server.stopped", {"experiment_id": "e", "verified": True})  # 160: 70 s since 90
    tr.emit("server.launched", {"experiment_id": "e", "pid": 2, "started_wall": 500.0})  # 500
    tr.emit("server.launched", {"experiment_id": "other", "pid": 3, "started_wall": 501.0})  # another experiment
    tr.emit("server.ready", {"experiment_id": "e", "after_s": 100.0})  # 600: then its process died
    tr.emit("server.lost", {"experiment_id": "e", "pid": 2})  # 900, by the next process
    tr.emit("experiment.relaunched", {"experiment_id": "e", "earlier_launches": 2})  # 901
    tr.close()
    prior = prior_launch(tr.path, "e")
    assert prior.attempts == 2 and prior.wall_s == 170.0 and prior.open is not None and prior.open["pid"] == 2


def test_recover_reuses_a_saved_result_and_finds_a_live_server(tmp_path: Path) -> None:
    tr = Transcript(tmp_path / "t.jsonl", "run1")
    rt = Runtime(tr, tmp_path / "home")
    host = LocalHost()
    save_result(rt.state_dir, "run1", RawEvidence(experiment_id="exp-a", launched=True))
    raw, adopt, _ = recover(rt, host, "run1", "exp-a")
    assert raw is not None and adopt is None
    handle = host.spawn(
        [sys.executable, "-c", "import time; time.sleep(30)"], log_path=str(tmp_path / "s.log")
    )
    try:
        tr.emit(
            "server.launched",
            {
                "experiment_id": "exp-b",
                "pid": handle.pid,
                "pgid": handle.pgid,
                "port": 1,
                "log": handle.log_path,
                "started_wall": handle.started_wall,
            },
        )
        raw, adopt, record = recover(rt, host, "run1", "exp-b")
        assert (
            raw is None and adopt is not None and adopt.pid == handle.pid and record and record["port"] == 1
        )
        assert prior_launch(tr.path, "exp-b").attempts == 1
    finally:
        host.terminate(handle, grace_s=0.5)
    raw, adopt, _ = recover(rt, host, "run1", "exp-b")  # now it is gone: launch again, and say so
    assert raw is None and adopt is None
    types = [e.type for e in read_transcript(tr.path)]
    assert types[-2:] == ["server.lost", "experiment.relaunched"] and "experiment.recovered" in types
    tr.close()


def test_rejecting_the_confirmation_still_names_the_change_that_served(tmp_path: Path) -> None:
    first = _start_paused(tmp_path)
    run_id = first["run_id"]
    for _ in range(2):  # the baseline, then the planner's first change
        assert _hl(tmp_path, "resume", run_id, "--decision", "approve", "--json").returncode == 3
    r = _hl(tmp_path, "resume", run_id, "--decision", "reject", "--reason", "no time to confirm", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = _last_json(r)
    assert out["status"] == "not_isolated" and out["root_cause"] is None
    assert "confirmation run was rejected" in out["reason"]
    assert "--kv-cache-dtype: (unset) → bf16 served correctly in exp-" in out["reason"]
    assert "not confirmed" in out["reason"] and "not confirmed" in r.stderr


def test_an_interrupted_run_continues_with_auto_approval(tmp_path: Path) -> None:
    """`resume RUN --auto` on a run cut off in the middle of a step: no answer is pending, the mode applies
    from the next approval on, and the run goes to its end."""
    first = _start_paused(tmp_path)
    run_id, transcript = first["run_id"], tmp_path / first["transcript"]
    _resume_and_kill(tmp_path, run_id, transcript, scale="0.01")
    try:
        r = _hl(tmp_path, "resume", run_id, "--auto", "--json", scale="0.004")
    finally:
        for pid in _lab_servers(run_id):
            os.killpg(pid, signal.SIGKILL)
    assert r.returncode == 0, r.stderr[-3000:]
    out = _last_json(r)
    assert out["status"] == "isolated" and out["root_cause"]["fix"]["name"] == "--kv-cache-dtype"
    decided = [e["data"] for e in _events(transcript) if e["type"] == "approval.decided"]
    assert decided[-1]["by"] == "auto"


def test_a_relaunch_adopted_after_a_second_kill_counts_both_launches(tmp_path: Path) -> None:
    """Killed while loading, the server lost too; resumed (a relaunch) and killed again while that one
    loads; resumed: the relaunched server is adopted. Two servers ran for the experiment: both count."""
    first = _start_paused(tmp_path)
    run_id, transcript = first["run_id"], tmp_path / first["transcript"]
    launched = _resume_and_kill(tmp_path, run_id, transcript, scale="0.012")
    os.killpg(launched["pgid"], signal.SIGKILL)
    try:
        again = _resume_and_kill(tmp_path, run_id, transcript, "0.012", decision=False, nth=2)
        assert _lab_servers(run_id) == [again["pid"]]
        r = _hl(tmp_path, "resume", run_id, "--json", scale="0.012")
        assert r.returncode == 3, r.stderr[-3000:]
        assert "server adopted" in r.stderr
    finally:
        for pid in _lab_servers(run_id):
            os.killpg(pid, signal.SIGKILL)
    events = _events(transcript)
    assert len([e for e in events if e["type"] == "server.launched"]) == 2
    assert [e["data"]["pid"] for e in events if e["type"] == "server.adopted"] == [again["pid"]]
    assert _last_json(r)["launches"] == 2

