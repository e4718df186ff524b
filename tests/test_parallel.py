"""Parallel experiments (agent/run/parallel.py): a batch of one-change experiments for different hypotheses,
chosen by the real rule planner from a recorded run, and run at once as jobs on a real Slurm cluster."""

from __future__ import annotations

import datetime
import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from clirun import HYPOLOOP, cli_env, run_cli
from conftest import engine_processes

from agent.domain.case import load_case
from agent.domain.models import Baseline, Change, Experiment, Outcome
from agent.planning.planner import make_planner
from agent.record.recorded import RecordedRun
from agent.record.transcript import Transcript, read_transcript
from agent.review.redecide import recorded_case, redecide_planner, view_at
from agent.run.graph import NODE_STEPS
from agent.run.parallel import fixing_hypotheses, propose_batch, run_batch
from agent.run.runtime import Runtime

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"
CASE = "lab:glm5-nvfp4-sm120"


def _after_baseline() -> tuple[Any, Any, Any]:
    """The rule planner, its view and history at the recorded run's first test proposal."""
    run = RecordedRun.load(REFERENCE)
    planner, flags, warnings = redecide_planner("rules", run, make_planner)
    case = recorded_case(run, flags, warnings)
    point = next(dp for dp in run.design_points if dp.kind == "proposed" and dp.data.get("purpose") == "test")
    view = view_at(run, point.seq, case)
    return planner, view, planner.history(view)


def test_a_batch_tests_different_hypotheses_each_with_one_change_against_the_same_baseline() -> None:
    planner, view, hist = _after_baseline()
    single = planner.propose(view, hist).experiment
    batch, first = propose_batch(planner, view, hist, 3)
    assert first.experiment == single and batch[0] == single  # --parallel 1 is today's choice
    assert len(batch) == 3
    assert all(e.purpose == "test" and e.change is not None for e in batch)
    assert all(e.baseline == batch[0].baseline for e in batch)  # the same baseline
    assert len({e.change.key() for e in batch if e.change}) == 3  # three different changes
    tested = [fixing_hypotheses(e) for e in batch]
    assert all(tested) and not (tested[0] & tested[1] or tested[0] & tested[2] or tested[1] & tested[2])
    done = {e.id for e in view.experiments}
    assert not done & {e.id for e in batch}
    # The launch budget keeps room for the confirmation run.
    tight = view.model_copy(update={"case": view.case.model_copy(update={"budget": view.case.budget.model_copy(
        update={"experiments": view.launches + 3})})})
    assert len(propose_batch(planner, tight, planner.history(tight), 3)[0]) == 2


def test_a_baseline_or_confirmation_is_never_batched() -> None:
    run = RecordedRun.load(REFERENCE)
    planner, flags, warnings = redecide_planner("rules", run, make_planner)
    case = recorded_case(run, flags, warnings)
    first_point = run.design_points[0]
    view = view_at(run, first_point.seq, case)
    batch, _ = propose_batch(planner, view, planner.history(view), 4)
    assert [e.purpose for e in batch] == ["baseline"]


def _jobcomp_times(cluster: Any, job_id: int) -> tuple[datetime.datetime, datetime.datetime]:
    """The job's start and end as the controller recorded them (it writes the record just after the end)."""
    deadline = time.monotonic() + 30
    while True:
        rec = next((c for c in cluster.completions() if c["JobId"] == str(job_id)), None)
        if rec is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rec is not None, f"no accounting record of job {job_id}"
    parse = datetime.datetime.fromisoformat
    return parse(rec["StartTime"]), parse(rec["EndTime"])


def test_two_experiments_run_as_two_jobs_at_once_and_a_settling_outcome_cancels_the_rest(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    case = load_case("lab:glm5-nvfp4-sm120", host_target=f"slurm://{slurm_cluster.partition}")
    case.host.env["HYPOLOOP_LAB_TIME_SCALE"] = "0.03"  # ~10 s to load: long enough to overlap visibly
    base = Baseline(flags={"--tp-size": "8", "--trust-remote-code": True, "--quantization": "modelopt_fp4"})
    fix = Change(kind="flag", name="--kv-cache-dtype", after="bf16")
    other = Change(kind="flag", name="--disable-cuda-graph", after=True)
    exps = [Experiment(id=Experiment.make_id(base, c, "test"), purpose="test", baseline=base, change=c)
            for c in (fix, other)]
    tr = Transcript(tmp_path / "tr.jsonl", "run-par")
    rt = Runtime(transcript=tr, state_dir=tmp_path / "state")
    seen: list[tuple[str, Outcome]] = []

    def on_outcome(exp: Experiment, outcome: Outcome, _raw: Any) -> bool:
        seen.append((exp.id, outcome))
        return False

    try:
        result = run_batch(rt, case, "run-par", exps, steps=NODE_STEPS, on_outcome=on_outcome)
    finally:
        rt.close()
        tr.close()
    assert not result.errors and len(result.raws) == 2 and not result.cancelled
    events = [e.model_dump() for e in read_transcript(tmp_path / "tr.jsonl")]
    jobs = [e["data"]["pid"] for e in events if e["type"] == "server.launched"]
    assert len(jobs) == 2
    (s1, e1), (s2, e2) = (_jobcomp_times(slurm_cluster, j) for j in jobs)
    assert s1 < e2 and s2 < e1, "the scheduler's own records show the two jobs running at the same time"
    stages = {i: o.stage for i, o in seen}
    assert stages[exps[0].id] == "ok"  # each outcome arrived on its own, with its own evidence
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))  # concurrent writers, one ordered transcript

    # Second batch: the fix settles the question, so the experiment still loading is cancelled (a lab
    # clock ten times slower makes this one take ~100 s if nobody stops it).
    tr = Transcript(tmp_path / "tr2.jsonl", "run-par2")
    rt = Runtime(transcript=tr, state_dir=tmp_path / "state")
    slow = Change(kind="env", name="HYPOLOOP_LAB_TIME_SCALE", after="0.3")
    exps2 = [exps[0], Experiment(id=Experiment.make_id(base, slow, "test"), purpose="test", baseline=base,
                                 change=slow)]
    t0 = time.monotonic()
    try:
        result = run_batch(rt, case, "run-par2", exps2, steps=NODE_STEPS,
                           on_outcome=lambda exp, o, _raw: o.stage == "ok")
    finally:
        rt.close()
        tr.close()
    took = time.monotonic() - t0
    events2 = [e.model_dump() for e in read_transcript(tmp_path / "tr2.jsonl")]
    assert [r.experiment_id for r in result.raws] == [exps2[0].id]
    assert [r.experiment_id for r in result.cancelled] == [exps2[1].id]
    assert result.cancelled[0].status != "ready"  # stopped while it was still loading
    assert took < 60, took
    stopped = [e["data"] for e in events2 if e["type"] == "server.stopped"]
    assert len(stopped) == 2 and all(s["verified"] for s in stopped)
    assert not slurm_cluster.command("squeue", "-h").stdout.strip()


# --- --parallel N through the command line ------------------------------------------------------------


def _last_json(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(r.stdout.strip().splitlines()[-1])


def _events(path: Path) -> list[dict[str, Any]]:
    return [e.model_dump() for e in read_transcript(path)]


def _wait_for_n(path: Path, type_: str, n: int, timeout: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            found = [e for e in _events(path) if e["type"] == type_]
            if len(found) >= n:
                return found
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} {type_} in {path}")


def test_parallel_2_over_slurm_reaches_the_local_answer_with_two_jobs_at_once(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    scale = "0.02"  # ~10 s per load: the scheduler's one-second times show the overlap plainly
    r = run_cli(tmp_path, "run", CASE, "--auto", "--parallel", "2", "--host", f"slurm://{slurm_cluster.partition}",
                "--json", "--transcript-dir", "tr", HYPOLOOP_LAB_TIME_SCALE=scale, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    result = _last_json(r)
    local = run_cli(tmp_path, "run", CASE, "--auto", "--json", "--transcript-dir", "tr-local")
    assert local.returncode == 0, local.stderr[-3000:]
    assert result["root_cause"] == _last_json(local)["root_cause"]
    events = _events(Path(result["transcript"]))
    batch = [e["data"] for e in events if e["type"] == "experiment.proposed" and e["data"].get("batch")]
    assert len(batch) == 2 and batch[0]["batch"]["experiment_ids"] == [b["id"] for b in batch]
    assert batch[0]["change"]["name"] != batch[1]["change"]["name"]
    jobs = {e["data"]["experiment_id"]: e["data"]["pid"] for e in events if e["type"] == "server.launched"}
    (s1, e1), (s2, e2) = (_jobcomp_times(slurm_cluster, jobs[b["id"]]) for b in batch)
    assert s1 < e2 and s2 < e1, "the scheduler's own records show the batch's two jobs running at the same time"
    # Each outcome updated the ledger as it arrived; the confirmation ran alone, after the batch.
    assert len([e for e in events if e["type"] == "ledger.updated"]) >= 1
    confirm = next(e["data"] for e in events if e["type"] == "experiment.proposed" and e["data"]["purpose"] == "confirm")
    assert not confirm.get("batch")
    assert result["launches"] == len(jobs)
    assert not slurm_cluster.command("squeue", "-h").stdout.strip()


def test_kill_9_during_a_batch_then_resume_adopts_both_jobs(slurm_cluster: Any, tmp_path: Path) -> None:
    scale = "0.02"
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale)
    proc = subprocess.Popen(
        [*HYPOLOOP, "run", CASE, "--auto", "--parallel", "2", "--host", f"slurm://{slurm_cluster.partition}",
         "--transcript-dir", "tr"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "tr").glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        transcript = next((tmp_path / "tr").glob("*.jsonl"))
        launched = _wait_for_n(transcript, "server.launched", 3)  # the baseline, then the batch of two
        _wait_for_n(transcript, "slurm.job_started", 3)
        assert not any(e["type"] == "outcome" and e["data"]["experiment_id"] == launched[1]["data"]["experiment_id"]
                       for e in _events(transcript)), "kill it while the batch loads"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    batch_jobs = sorted(e["data"]["pid"] for e in launched[1:])
    running = slurm_cluster.command("squeue", "-h", "-o", "%i").stdout.split()
    assert sorted(int(j) for j in running) == batch_jobs  # both still running with nobody watching
    run_id = transcript.stem
    r = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=scale, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _last_json(r)["status"] == "isolated"
    events = _events(transcript)
    adopted = sorted(e["data"]["pid"] for e in events if e["type"] == "server.adopted")
    assert adopted == batch_jobs
    launched_after = [e["data"]["pid"] for e in events if e["type"] == "server.launched"]
    assert len(launched_after) == len(set(launched_after))  # no job launched twice
    assert not set(batch_jobs) & set(launched_after[3:])
    assert not slurm_cluster.command("squeue", "-h").stdout.strip()


def test_a_job_of_a_batch_cancelled_by_an_operator_keeps_its_siblings_result_and_the_run_goes_on(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    scale = "0.02"  # ~10 s per load: time to cancel one job while both run
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale)
    proc = subprocess.Popen(
        [*HYPOLOOP, "run", CASE, "--auto", "--parallel", "2", "--host", f"slurm://{slurm_cluster.partition}",
         "--json", "--transcript-dir", "tr"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "tr").glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        transcript = next((tmp_path / "tr").glob("*.jsonl"))
        launched = _wait_for_n(transcript, "server.launched", 3)  # the baseline, then the batch of two
        _wait_for_n(transcript, "slurm.job_started", 3)
        (kept, kept_job), (gone, gone_job) = ((e["data"]["experiment_id"], e["data"]["pid"]) for e in launched[1:])
        assert not any(e["type"] == "outcome" and e["data"]["experiment_id"] in (kept, gone)
                       for e in _events(transcript)), "cancel while both load"
        # An operator (or a preemption) ends one job of the batch while both run.
        assert slurm_cluster.command("scancel", str(gone_job)).returncode == 0
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] in ("isolated", "not_isolated"), result  # the run reached its ending, not an error
    events = _events(transcript)
    outcome = {e["data"]["experiment_id"]: e["data"] for e in events if e["type"] == "outcome"}
    assert outcome[gone]["stage"] == "infra_error"  # the cancelled job: an infrastructure outcome of its own
    assert outcome[kept]["stage"] != "infra_error"  # the sibling's result is kept...
    ledgers = [e["data"] for e in events if e["type"] == "ledger.updated"]
    assert any(kept in d["after"] for d in ledgers)  # ...and used: the ledger moved on it
    error = next(e["data"] for e in events if e["type"] == "error" and e["data"].get("experiment_id") == gone)
    assert f"job {gone_job} ended CANCELLED" in error["message"]
    # The run went on after the batch, and no launch is lost from the count (the cancelled job used the host).
    jobs = [e["data"]["pid"] for e in events if e["type"] == "server.launched"]
    assert len(jobs) > 3 and len(jobs) == len(set(jobs))
    assert result["launches"] == len(jobs)
    assert kept_job in jobs and not any(
        e["type"] == "server.launched" and e["data"]["experiment_id"] == kept for e in events[events.index(
            next(e for e in events if e["type"] == "outcome" and e["data"]["experiment_id"] == kept)):]
    )  # the sibling was never launched again
    assert not slurm_cluster.command("squeue", "-h").stdout.strip()
    assert not engine_processes(str(tmp_path))


def test_a_run_killed_after_one_job_of_its_batch_was_cancelled_resumes_with_the_siblings_result(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    scale = "0.02"
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale)
    proc = subprocess.Popen(
        [*HYPOLOOP, "run", CASE, "--auto", "--parallel", "2", "--host", f"slurm://{slurm_cluster.partition}",
         "--transcript-dir", "tr"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "tr").glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        transcript = next((tmp_path / "tr").glob("*.jsonl"))
        launched = _wait_for_n(transcript, "server.launched", 3)
        _wait_for_n(transcript, "slurm.job_started", 3)
        (kept, kept_job), (gone, gone_job) = ((e["data"]["experiment_id"], e["data"]["pid"]) for e in launched[1:])
        assert slurm_cluster.command("scancel", str(gone_job)).returncode == 0
        stopped = len(_wait_for_n(transcript, "server.stopped", 1))  # the baseline's
        deadline = time.monotonic() + 90
        while not any(e["type"] == "server.stopped" and e["data"]["experiment_id"] == gone
                      for e in _events(transcript)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stopped and not any(e["type"] == "outcome" and e["data"]["experiment_id"] == kept
                                   for e in _events(transcript)), "kill it while the sibling still loads"
        proc.send_signal(signal.SIGKILL)  # hypoloop dies with the sibling's job running, nobody watching
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [int(j) for j in slurm_cluster.command("squeue", "-h", "-o", "%i").stdout.split()] == [kept_job]
    r = run_cli(tmp_path, "resume", transcript.stem, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=scale, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    result = _last_json(r)
    assert result["status"] in ("isolated", "not_isolated"), result
    events = _events(transcript)
    # The sibling's job was adopted and its result used; the cancelled one was not launched again and
    # its infrastructure outcome (saved before the kill) moved no hypothesis.
    assert [e["data"]["pid"] for e in events if e["type"] == "server.adopted"] == [kept_job]
    recovered = [e["data"] for e in events if e["type"] == "experiment.recovered"]
    assert [d["experiment_id"] for d in recovered] == [gone] and recovered[0]["reason"]
    outcome = {e["data"]["experiment_id"]: e["data"] for e in events if e["type"] == "outcome"}
    assert outcome[gone]["stage"] == "infra_error" and outcome[kept]["stage"] != "infra_error"
    assert any(kept in e["data"]["after"] for e in events if e["type"] == "ledger.updated")
    by_exp = [e["data"]["experiment_id"] for e in events if e["type"] == "server.launched"]
    assert by_exp.count(kept) == 1 and by_exp.count(gone) == 1
    assert result["launches"] == len(by_exp)  # the cancelled job counted once, nothing counted twice
    assert not slurm_cluster.command("squeue", "-h").stdout.strip()
    assert not engine_processes(str(tmp_path))


def test_each_member_of_a_batch_is_approved_rejected_or_edited_on_its_own(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "run", CASE, "--parallel", "3", "--json", "--transcript-dir", "tr")
    assert r.returncode == 3, r.stderr[-3000:]
    run_id = _last_json(r)["run_id"]
    r = run_cli(tmp_path, "resume", run_id, "--decision", "approve", "--json")  # the baseline
    assert r.returncode == 3, r.stderr[-3000:]
    first = _last_json(r)["pending"]
    shown = run_cli(tmp_path, "show", run_id)
    # a batch of up to 3: the candidates worth a launch (knowledge/planner.toml choice.min_test_p), at least 2
    size = next(n for n in (3, 2) if f"1/{n}" in shown.stdout)
    assert all(f"{i}/{size}" in shown.stdout for i in range(1, size + 1)) and "(this one)" in shown.stdout
    r = run_cli(tmp_path, "resume", run_id, "--decision", "reject", "--reason", "not this one", "--json")
    assert r.returncode == 3, r.stderr[-3000:]
    second = _last_json(r)["pending"]
    assert second["experiment_id"] != first["experiment_id"]
    r = run_cli(tmp_path, "resume", run_id, "--decision", "approve-all", "--json")
    # the batch ran; then the next proposal waits (3), or the run ends because no untested change is likely
    # enough once the leading hypothesis's test was rejected (0): either way not a crash (1) or a bad input (2)
    assert r.returncode in (0, 3), r.stderr[-3000:]
    events = _events(Path(_last_json(r)["transcript"]))
    proposed = next(e["data"]["batch"]["experiment_ids"] for e in events if e["data"].get("batch"))
    ran = [e["data"]["experiment_id"] for e in events if e["type"] == "server.launched"][1:]
    assert sorted(ran) == sorted(proposed[1:])  # the rejected one never ran; the other two ran together
    decided = [e["data"] for e in events if e["type"] == "approval.decided"]
    assert all(any(d["experiment_id"] == e for d in decided) for e in proposed[1:])  # each decided on its own
    if size == 3:  # the member after the one in view is approved with the batch
        assert any(d["experiment_id"] == proposed[2] and d["by"] == "batch" for d in decided)
    assert any(e["type"] == "rejection" or (e["type"] == "approval.decided" and e["data"]["decision"] == "reject")
               for e in events)


def test_an_outcome_that_settles_the_question_stops_the_rest_and_one_that_does_not_waits() -> None:
    from agent.run.parallel import _settled

    planner, view, hist = _after_baseline()
    batch, _ = propose_batch(planner, view, hist, 3)
    run = RecordedRun.load(REFERENCE)
    fixed = next(r.outcome for r in run.runs if r.outcome and r.outcome.get("stage") == "ok"
                 and r.experiment.get("id") == batch[0].id)

    class Quiet:
        def emit(self, *a: Any, **k: Any) -> None:
            pass

    rt = type("RT", (), {"transcript": Quiet()})()
    assert _settled(rt, planner, view, batch, [fixed]) is True  # the planner would confirm the fix now
    other = {**fixed, "experiment_id": batch[1].id, "stage": "request_failed"}
    other.update(matches=next(r.outcome for r in run.runs if r.outcome and r.outcome.get("stage") == "request_failed")["matches"])
    assert _settled(rt, planner, view, batch, [other]) is False  # the question is still open


def test_the_members_of_a_batch_are_numbered_as_their_launches_in_the_story_and_the_report(tmp_path: Path) -> None:
    """Two members run at once are experiments n and n+1, live, in the report's table and in replay (they
    were both "experiment 2", and the confirmation after them "experiment 4")."""
    r = run_cli(tmp_path, "run", "lab:cuda-graph-oom", "--auto", "--parallel", "2", "--transcript-dir", "tr")
    assert r.returncode == 0, r.stderr[-3000:]
    (transcript,) = (tmp_path / "tr").glob("*.jsonl")
    batch = [e for e in _events(transcript) if e["type"] == "experiment.proposed" and e["data"].get("batch")]
    assert len(batch) >= 2, "no batch was proposed"
    replayed = run_cli(tmp_path, "replay", str(transcript))
    assert replayed.returncode == 0, replayed.stderr
    for out in (r.stdout, replayed.stdout):
        numbers = [int(n) for n in re.findall(r"^experiment (\d+) ", out, re.M)]
        assert numbers == list(range(1, len(numbers) + 1)), numbers
    report = tmp_path / "r.md"
    assert run_cli(tmp_path, "report", str(transcript), "--format", "md", "-o", str(report)).returncode == 0
    rows = [int(n) for n in re.findall(r"^\| (\d+) \|", report.read_text(), re.M)]
    assert rows == list(range(1, len(rows) + 1)), rows
