"""SlurmHost and `hypoloop ... --host slurm://` against a real one-node Slurm cluster (no mocks).

The `slurm_cluster` fixture (tests/conftest.py, .ci/slurm.py) runs Debian's slurmctld and slurmd on
loopback ports with their own config; the jobs run the lab server on this machine. The scheduler's own
record of every finished job (jobcomp/filetxt) is what the tests read back.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from clirun import HYPOLOOP, cli_env, live_processes, run_cli

from agent.record.transcript import read_transcript
from tools.host import HostError, SchedulerError
from tools.slurm import JobPending, SlurmHost, SlurmOptions, parse_slurm_target

REPO = Path(__file__).resolve().parent.parent
CASE = "lab:glm5-nvfp4-sm120"


def _events(path: Path) -> list[dict[str, Any]]:
    return [e.model_dump() for e in read_transcript(path)]


def _last_json(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(r.stdout.strip().splitlines()[-1])


def _queue(cluster: Any) -> list[str]:
    """Jobs the controller still has queued or running (id|name|state)."""
    r = cluster.command("squeue", "-h", "-o", "%i|%j|%T")
    return [line for line in r.stdout.splitlines() if line.strip()]


def _wait_for(path: Path, type_: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for e in _events(path):
                if e["type"] == type_:
                    return e
        time.sleep(0.05)
    raise AssertionError(f"no {type_} in {path}")


def _completed(cluster: Any, run_id: str, count: int | None = None) -> list[dict[str, str]]:
    """The scheduler's records of the finished jobs of one run (waiting up to 30 s for `count` of them:
    the controller writes a record just after the job ends)."""
    deadline = time.monotonic() + 30
    while True:
        found = [c for c in cluster.completions() if c.get("Name", "").startswith(f"hypoloop.{run_id}.")]
        if count is None or len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


# --- targets and options ------------------------------------------------------------------------------


def test_targets_and_job_options_are_checked_with_one_line_errors() -> None:
    assert parse_slurm_target("slurm://gpu").partition == "gpu"
    t = parse_slurm_target("slurm+ssh://me@login1:2222/a100")
    assert (t.partition, t.login) == ("a100", "ssh://me@login1:2222")
    for bad in ("slurm://", "slurm://gp u", "slurm+ssh://login1", "slurm+ssh://me:pw@login1/gpu"):
        with pytest.raises(HostError) as info:
            parse_slurm_target(bad)
        shown = bad.replace("me:pw@", "me@")  # a password is never echoed
        assert "\n" not in str(info.value) and shown in str(info.value) and ":pw@" not in str(info.value)
    opts = SlurmOptions(
        gpus=8,
        gpu_type="h100",
        nodes=1,
        time_limit="02:00:00",
        account="proj",
        extra_args=["--qos=high", "--exclusive"],
    )
    assert opts.sbatch_args() == [
        "--nodes=1",
        "--gres=gpu:h100:8",
        "--time=02:00:00",
        "--account=proj",
        "--qos=high",
        "--exclusive",
    ]
    for field, value, says in (
        ("extra_args", ["--output=/tmp/x"], "--output is set by hypoloop"),
        ("extra_args", ["-J", "x"], "--job-name is set by hypoloop"),
        ("extra_args", ["qos high"], "one sbatch option starting with '-'"),
        ("time_limit", "two hours", "Slurm time limit"),
        ("account", "a;rm -rf /", "one word"),
    ):
        with pytest.raises(ValueError, match=says):
            SlurmOptions(**{field: value})


def test_bad_slurm_options_in_a_case_file_are_one_line_naming_the_field(tmp_path: Path) -> None:
    src = (REPO / "lab" / "worlds" / "glm5-nvfp4-sm120").resolve()
    case = tmp_path / "case.toml"
    text = (
        (src / "case.toml")
        .read_text()
        .replace('knowledge = ["FINDINGS.md"]', f'knowledge = ["{src}/FINDINGS.md"]')
    )
    case.write_text(text.replace("[launcher]", '[host.slurm]\nextra_args = "--qos high"\n\n[launcher]'))
    r = run_cli(tmp_path, "run", str(case), "--auto", "--host", "slurm://debug", "--json")
    assert r.returncode == 2, r.stderr[-2000:]
    err = _last_json(r)["error"]
    assert "host.slurm.extra_args" in err and "Traceback" not in r.stderr
    r = run_cli(tmp_path, "run", CASE, "--auto", "--host", "slurm://", "--json")
    assert r.returncode == 2 and "slurm://PARTITION" in _last_json(r)["error"]


def test_an_unknown_partition_is_named_with_the_ones_that_exist(slurm_cluster: Any) -> None:
    with pytest.raises(HostError, match=rf"no partition 'nosuch' \(partitions: {slurm_cluster.partition}\)"):
        SlurmHost("slurm://nosuch")


# --- one job per experiment ----------------------------------------------------------------------------


def test_run_over_slurm_reaches_the_same_fix_as_locally(slurm_cluster: Any, tmp_path: Path) -> None:
    r = run_cli(
        tmp_path,
        "run",
        CASE,
        "--auto",
        "--host",
        f"slurm://{slurm_cluster.partition}",
        "--json",
        "--transcript-dir",
        "tr",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = _last_json(r)
    local = run_cli(tmp_path, "run", CASE, "--auto", "--json", "--transcript-dir", "tr-local")
    assert local.returncode == 0, local.stderr[-3000:]
    expected = _last_json(local)
    # The same root cause and fix as the local run, with the same number of launches.
    assert result["status"] == expected["status"] == "isolated"
    assert result["root_cause"] == expected["root_cause"]
    assert result["launches"] == expected["launches"]

    run_id = result["run_id"]
    events = _events(Path(result["transcript"]))
    launched = [e["data"] for e in events if e["type"] == "server.launched"]
    stopped = [e["data"] for e in events if e["type"] == "server.stopped"]
    assert len(launched) == len(stopped) == result["launches"] and all(s["verified"] for s in stopped)
    # Each experiment was one job, tagged with the run, and the scheduler recorded each one's end.
    jobs = {int(c["JobId"]): c for c in _completed(slurm_cluster, run_id, len(launched))}
    assert sorted(jobs) == sorted(d["pid"] for d in launched)
    for d in stopped:
        job = d["job"]
        assert job["submitted_wall"] <= job["started_wall"] <= job["ended_wall"]
        assert job["state"] in ("COMPLETED", "CANCELLED", "FAILED") and job["node"] == slurm_cluster.node
    for type_ in ("slurm.job_submitted", "slurm.job_started", "slurm.job_ended"):
        assert sorted(e["data"]["job_id"] for e in events if e["type"] == type_) == sorted(jobs)
    # Queue time is not GPU time: each outcome's host-seconds start at its job's start. A launch that never
    # became ready is all load phase (wall / time scale); one that did bills its request phase in real seconds
    # on the lab (tools/host_time.py), so it holds at least its load phase and no more than the scaled wall.
    outcomes = [e["data"] for e in events if e["type"] == "outcome"]
    for o in outcomes:
        t = o["timings"]
        if t["to_ready_s"] is None:
            assert t["host_seconds"] == pytest.approx(t["wall_s"] - t["queued_s"], abs=0.01)
        else:
            assert t["to_ready_s"] - 0.01 <= t["host_seconds"] <= t["wall_s"] - t["queued_s"] + 0.01, t
    assert not _queue(slurm_cluster)
    assert not live_processes(run_id, only="lab.launch_server")


def test_job_resources_reach_the_scheduler_and_stop_is_verified(slurm_cluster: Any, tmp_path: Path) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    host = SlurmHost(
        f"slurm://{slurm_cluster.partition}",
        options=SlurmOptions(gpus=2, time_limit="10", extra_args=["--cpus-per-task=1"]),
        local_root=str(tmp_path / "runs"),
        on_event=lambda t, d: events.append((t, d)),
    )
    try:
        log = f"{host.workdir('run-a')}/exp-1.log"
        # A value with shell metacharacters arrives as one literal argument: no shell parses the command.
        handle = host.spawn(
            [
                sys.executable,
                "-c",
                "import sys, time; print(sys.argv[1], flush=True); time.sleep(600)",
                "$(touch /tmp/pwned) 'x' ; y",
            ],
            log_path=log,
        )
        handle = host.wait_started(handle)
        info = slurm_cluster.command("scontrol", "show", "job", "-o", str(handle.pid)).stdout
        assert "TresPerNode=gres:gpu:2" in info and "TimeLimit=00:10:00" in info
        assert "JobName=hypoloop.run-a.exp-1" in info
        deadline = time.monotonic() + 30
        while b"x" not in host.read_from(log, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.read_from(log, 0) == b"$(touch /tmp/pwned) 'x' ; y\n"
        assert host.read_from(log, 2) == b"touch /tmp/pwned) 'x' ; y\n"  # by byte offset
        assert host.is_alive(handle)
        assert host.terminate(handle, grace_s=5.0) is True
        assert not host.is_alive(handle) and host.job_failure(handle) is None  # our own cancel: no failure
        assert [t for t, _ in events] == ["slurm.job_submitted", "slurm.job_started", "slurm.job_ended"] or (
            "slurm.job_pending" in [t for t, _ in events]
        )
        assert str(handle.pid) not in " ".join(_queue(slurm_cluster))
    finally:
        host.close()


def test_a_job_is_reached_on_its_last_port_flag_the_one_its_server_listens_on(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    """A launcher that carries a --port of its own before the session's (a parser keeps the last one) is
    reached on the port its server listens on, not on the first --port of the command."""
    host = SlurmHost(f"slurm://{slurm_cluster.partition}", local_root=str(tmp_path / "runs"))
    server = (
        "import argparse, http.server; a = argparse.ArgumentParser(); a.add_argument('--port', type=int); "
        "p = a.parse_args().port; s = http.server.HTTPServer(('127.0.0.1', p), http.server.BaseHTTPRequestHandler); "
        "print('listening', p, flush=True); s.serve_forever()"
    )
    try:
        first, port = host.free_port(), host.free_port()
        log = f"{host.workdir('run-p')}/exp-1.log"
        handle = host.spawn([sys.executable, "-c", server, "--port", str(first), "--port", str(port)], log_path=log)
        host.wait_started(handle)
        deadline = time.monotonic() + 60
        while b"listening" not in host.read_from(log, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.read_from(log, 0) == f"listening {port}\n".encode()
        local = host.forward_port(port)
        with socket.create_connection(("127.0.0.1", local), timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert conn.recv(64).startswith(b"HTTP/1.0 501")  # the server answered (it serves no GET)
        assert host.terminate(handle, grace_s=5.0) is True
    finally:
        host.close()


def test_a_job_pending_past_its_limit_is_cancelled_and_reported_with_partition_and_reason(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    host = SlurmHost(
        f"slurm://{slurm_cluster.partition}",
        options=SlurmOptions(extra_args=["--begin=now+3600"], pending_limit_s=1.5),
        local_root=str(tmp_path / "runs"),
    )
    try:
        handle = host.spawn(["sleep", "60"], log_path=f"{host.workdir('run-p')}/exp-p.log")
        with pytest.raises(JobPending) as info:
            host.wait_started(handle)
        msg = str(info.value)
        assert f"job {handle.pid} pending" in msg and f"partition {slurm_cluster.partition}" in msg
        assert "reason: BeginTime" in msg and "cancelled" in msg
        assert str(handle.pid) not in " ".join(_queue(slurm_cluster))
        # A job the scheduler cannot run at all is refused at submission: an infrastructure error.
        greedy = SlurmHost(
            f"slurm://{slurm_cluster.partition}",
            options=SlurmOptions(gpus=slurm_cluster.gpus + 1),
            local_root=str(tmp_path / "runs"),
        )
        try:
            with pytest.raises(SchedulerError, match="sbatch refused the job"):
                greedy.spawn(["sleep", "1"], log_path=f"{greedy.workdir('run-p')}/exp-q.log")
        finally:
            greedy.close()
    finally:
        host.close()


def test_a_job_cancelled_by_someone_else_is_an_infrastructure_error_not_evidence(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE="0.02")  # loading takes ~10 s
    proc = subprocess.Popen(
        [
            *HYPOLOOP,
            "run",
            CASE,
            "--auto",
            "--host",
            f"slurm://{slurm_cluster.partition}",
            "--json",
            "--transcript-dir",
            "tr",
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        transcript = None
        while transcript is None and time.monotonic() < deadline:
            found = list((tmp_path / "tr").glob("*.jsonl")) if (tmp_path / "tr").is_dir() else []
            transcript = found[0] if found else None
            time.sleep(0.05)
        assert transcript is not None
        started = _wait_for(transcript, "slurm.job_started")["data"]
        # An administrator (or a preemption) cancels the baseline's job while the server loads.
        assert slurm_cluster.command("scancel", str(started["job_id"])).returncode == 0
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = _events(transcript)
    first = next(e["data"] for e in events if e["type"] == "outcome")
    assert first["stage"] == "infra_error", first
    error = next(e["data"] for e in events if e["type"] == "error")
    assert f"job {started['job_id']} ended CANCELLED" in error["message"]
    assert "no evidence" in error["message"]
    # The cancelled launch moved no hypothesis: the ledger after it is the ledger before it.
    ledgers = [e["data"] for e in events if e["type"] == "ledger"]
    if len(ledgers) >= 2:
        assert ledgers[0] == ledgers[1] or all(
            h.get("status") != "refuted" for h in ledgers[1].get("hypotheses", [])
        )
    assert not _queue(slurm_cluster)


def test_kill_9_then_resume_adopts_the_running_job(slurm_cluster: Any, tmp_path: Path) -> None:
    scale = "0.012"  # loading takes ~5 s
    r = run_cli(
        tmp_path,
        "run",
        CASE,
        "--host",
        f"slurm://{slurm_cluster.partition}",
        "--json",
        "--transcript-dir",
        "tr",
        HYPOLOOP_LAB_TIME_SCALE=scale,
    )
    assert r.returncode == 3, r.stderr[-3000:]  # waits for the baseline's approval
    first = _last_json(r)
    run_id, transcript = first["run_id"], tmp_path / first["transcript"]
    proc = subprocess.Popen(
        [*HYPOLOOP, "resume", run_id, "--decision", "approve"],
        cwd=tmp_path,
        env=cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(transcript, "slurm.job_started")
        launched = _wait_for(transcript, "server.launched")["data"]
        assert not any(e["type"] == "server.ready" for e in _events(transcript)), "kill it while loading"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    job_id = launched["pid"]
    assert any(line.startswith(f"{job_id}|") and "RUNNING" in line for line in _queue(slurm_cluster))
    r = run_cli(tmp_path, "resume", run_id, "--json", HYPOLOOP_LAB_TIME_SCALE=scale)
    assert r.returncode == 3, r.stderr[-3000:]  # the baseline finished; the next proposal waits
    events = _events(transcript)
    adopted = [e["data"] for e in events if e["type"] == "server.adopted"]
    assert len(adopted) == 1 and adopted[0]["pid"] == job_id
    assert [e["data"]["pid"] for e in events if e["type"] == "server.launched"] == [job_id]  # no duplicate
    outcome = next(e["data"] for e in events if e["type"] == "outcome")
    assert outcome["stage"] == "request_failed"
    assert [int(c["JobId"]) for c in _completed(slurm_cluster, run_id, 1)] == [job_id]
    assert not _queue(slurm_cluster)


def test_jobs_a_killed_run_left_are_found_and_cancelled_at_the_next_start(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    scale = "0.02"
    proc = subprocess.Popen(
        [
            *HYPOLOOP,
            "run",
            CASE,
            "--auto",
            "--host",
            f"slurm://{slurm_cluster.partition}",
            "--transcript-dir",
            "tr",
        ],
        cwd=tmp_path,
        env=cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "tr").glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        transcript = next((tmp_path / "tr").glob("*.jsonl"))
        job_id = _wait_for(transcript, "slurm.job_started")["data"]["job_id"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert any(line.startswith(f"{job_id}|") for line in _queue(slurm_cluster))  # left behind
    r = run_cli(
        tmp_path,
        "run",
        CASE,
        "--auto",
        "--host",
        f"slurm://{slurm_cluster.partition}",
        "--json",
        "--transcript-dir",
        "tr2",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    events = _events(Path(_last_json(r)["transcript"]))
    listed = next(e["data"]["orphans"] for e in events if e["type"] == "host.orphans")
    assert [o["job_id"] for o in listed] == [job_id] and "is gone" in listed[0]["why"]
    stopped = next(e["data"] for e in events if e["type"] == "host.orphan_stopped")
    assert stopped["job_id"] == job_id and stopped["verified"]
    assert "orphaned server" in r.stderr
    assert not _queue(slurm_cluster)


def test_run_over_slurm_through_a_login_node(slurm_cluster: Any, sshd: Any, tmp_path: Path) -> None:
    src = (REPO / "lab" / "worlds" / "glm5-nvfp4-sm120").resolve()
    case = tmp_path / "case.toml"
    text = (
        (src / "case.toml")
        .read_text()
        .replace('knowledge = ["FINDINGS.md"]', f'knowledge = ["{src}/FINDINGS.md"]')
    )
    # The login node's shell needs to find the cluster: SLURM_CONF is part of the host environment.
    text = text.replace(
        "env = { HYPOLOOP_LAB_WORLD", f'env = {{ SLURM_CONF = "{slurm_cluster.conf}", HYPOLOOP_LAB_WORLD'
    )
    case.write_text(text)
    login = sshd.target.removeprefix("ssh://")
    r = run_cli(
        tmp_path,
        "run",
        str(case),
        "--auto",
        "--host",
        f"slurm+ssh://{login}/{slurm_cluster.partition}",
        "--ssh-key",
        str(sshd.key),
        "--known-hosts",
        str(sshd.known_hosts),
        "--remote-python",
        sys.executable,
        "--json",
        "--transcript-dir",
        "tr",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = _last_json(r)
    assert result["status"] == "isolated"
    assert (result["root_cause"]["fix"]["name"], result["root_cause"]["component"]) == (
        "--kv-cache-dtype",
        "attention.dsa_decode",
    )
    events = _events(Path(result["transcript"]))
    assert any(e["type"] == "host.connected" for e in events)
    assert len(_completed(slurm_cluster, result["run_id"], result["launches"])) == result["launches"]
    assert not _queue(slurm_cluster)
