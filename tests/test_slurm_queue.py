"""Slurm with a full queue (issue 24, point 4), on the real one-node cluster the suite starts.

Every scheduler command, short ``srun`` ones included (the version and GPU queries), obeys
``pending_limit_s``, says what it waits for while it waits (the scheduler's reason, its place in the
queue) and cancels what it submitted when it gives up or is interrupted; a run whose cluster cannot
give it a node ends in error naming the cluster, never the case file. The queue is filled by holding
every GPU of the node with a job of another user's kind (``sbatch --gres=gpu:ALL sleep``), or by a
job that may not start yet (``--begin=now+1hour``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clirun import HYPOLOOP, cli_env, transcript_events

from tools.slurm import JobPending, SlurmHost, SlurmOptions

ROOT = Path(__file__).resolve().parent.parent
WORLD = ROOT / "lab" / "worlds" / "glm5-nvfp4-sm120"


def _ours(cluster: Any) -> list[str]:
    r = cluster.command("squeue", "-h", "-o", "%i|%j|%T")
    return [line for line in r.stdout.splitlines() if "|hypoloop." in line]


@pytest.fixture
def full_node(slurm_cluster: Any, tmp_path: Path) -> Iterator[str]:
    """Every GPU of the node held by another job for the length of the test; yields its job id."""
    r = slurm_cluster.command(
        "sbatch", "--parsable", f"--partition={slurm_cluster.partition}", f"--gres=gpu:{slurm_cluster.gpus}",
        "--job-name=someone-else", f"--output={tmp_path / 'other.out'}", "--wrap", "sleep 600",
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 30
    while "RUNNING" not in slurm_cluster.command("squeue", "-h", "-j", job, "-o", "%T").stdout:
        assert time.monotonic() < deadline, "the filler job never started"
        time.sleep(0.1)
    try:
        yield job
    finally:
        slurm_cluster.command("scancel", job)
        slurm_cluster.wait_idle()


def test_a_short_srun_obeys_the_pending_limit_says_why_and_leaves_nothing(
    slurm_cluster: Any, full_node: str, tmp_path: Path
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    host = SlurmHost(
        f"slurm://{slurm_cluster.partition}",
        options=SlurmOptions(gpus=1, pending_limit_s=3),
        local_root=str(tmp_path / "runs"),
        on_event=lambda t, d: events.append((t, d)),
    )
    try:
        t0 = time.monotonic()
        with pytest.raises(JobPending) as info:
            host.run(["nvidia-smi"], timeout=120)
        took = time.monotonic() - t0
    finally:
        host.close()
    msg = str(info.value)
    assert took < 30, f"the srun waited {took:.0f} s past a 3 s pending limit"
    assert "pending" in msg and f"partition {slurm_cluster.partition}" in msg and "cancelled" in msg
    pending = [d for t, d in events if t == "slurm.job_pending"]
    assert pending and pending[0]["reason"] and pending[0]["position"] == 1, events
    assert not _ours(slurm_cluster), "a cancelled srun left its allocation queued"


def _slurm_case(tmp_path: Path, limit: float) -> Path:
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    (case_dir / "FINDINGS.md").write_text((WORLD / "FINDINGS.md").read_text(encoding="utf-8"), encoding="utf-8")
    text = (WORLD / "case.toml").read_text(encoding="utf-8")
    text = text.replace("[launcher]", f"[host.slurm]\ngpus = 1\npending_limit_s = {limit}\n\n[launcher]")
    (case_dir / "case.toml").write_text(text, encoding="utf-8")
    return case_dir / "case.toml"


def test_a_run_on_a_full_cluster_ends_naming_the_cluster_not_the_case(
    slurm_cluster: Any, full_node: str, tmp_path: Path
) -> None:
    case = _slurm_case(tmp_path, 3)
    t0 = time.monotonic()
    r = subprocess.run(
        [*HYPOLOOP, "run", str(case), "--auto", "--json", "--host", f"slurm://{slurm_cluster.partition}"],
        cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )
    assert time.monotonic() - t0 < 90
    assert r.returncode in (1, 2), r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "error" and "pending" in result["error"], result
    assert "case" not in result["error"].split("pending")[0].lower(), result["error"]  # not blamed on the case
    assert f"partition {slurm_cluster.partition}" in result["error"]
    assert "Slurm job" in r.stderr and "pending in partition" in r.stderr  # said while it waited
    assert not _ours(slurm_cluster)


def test_an_interrupted_run_cancels_the_allocation_it_waits_for(
    slurm_cluster: Any, full_node: str, tmp_path: Path
) -> None:
    case = _slurm_case(tmp_path, 600)
    proc = subprocess.Popen(
        [*HYPOLOOP, "run", str(case), "--auto", "--json", "--transcript-dir", "tr",
         "--host", f"slurm://{slurm_cluster.partition}"],
        cwd=tmp_path, env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not _ours(slurm_cluster) or not list((tmp_path / "tr").glob("*.jsonl")):
            assert time.monotonic() < deadline and proc.poll() is None, "nothing queued"
            time.sleep(0.2)
        transcript = next((tmp_path / "tr").glob("*.jsonl"))
        while not any(e["type"] == "slurm.job_pending" for e in transcript_events(transcript)):
            assert time.monotonic() < deadline, "no pending note"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-3000:]
    deadline = time.monotonic() + 15
    while _ours(slurm_cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ours(slurm_cluster), "an interrupted run left its allocation queued"
