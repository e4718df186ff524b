"""Parallel experiments (agent/parallel.py): a batch of one-change experiments for different hypotheses,
chosen by the real rule planner from a recorded run, and run at once as jobs on a real Slurm cluster."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

from agent.case import load_case
from agent.models import Baseline, Change, Experiment, Outcome
from agent.nodes.analyze import classify_outcome
from agent.parallel import fixing_hypotheses, propose_batch, run_batch
from agent.recorded import RecordedRun
from agent.replay import make_planner, recorded_case, view_at
from agent.runtime import Runtime
from agent.transcript import Transcript, read_transcript

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"


def _after_baseline() -> tuple[Any, Any, Any]:
    """The rule planner, its view and history at the recorded run's first test proposal."""
    run = RecordedRun.load(REFERENCE)
    planner, flags, warnings = make_planner("rules", run)
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
    planner, flags, warnings = make_planner("rules", run)
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

    def on_outcome(exp: Experiment, outcome: Outcome) -> bool:
        seen.append((exp.id, outcome))
        return False

    try:
        result = run_batch(rt, case, "run-par", exps, classify=classify_outcome, on_outcome=on_outcome)
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
        result = run_batch(rt, case, "run-par2", exps2, classify=classify_outcome,
                           on_outcome=lambda exp, o: o.stage == "ok")
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
