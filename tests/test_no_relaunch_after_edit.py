"""After a user's edit moves the baseline, the planner never proposes a test whose configuration (flags
and env) the run already launched: undoing the edit's step can land on an earlier, failing launch."""

from __future__ import annotations

from pathlib import Path

from clirun import run_cli

from agent.domain.models import Experiment
from agent.record.recorded import RecordedRun


def _edited_run(tmp_path: Path) -> RecordedRun:
    """``kv-pool-no-room`` answered as a user does: approve the baseline, edit the first test to
    --mem-fraction-static=0.95, then approve each proposal up to the run's end; its transcript."""
    first = run_cli(tmp_path, "run", "lab:kv-pool-no-room", COLUMNS="100")
    assert first.returncode == 3, first.stderr[-2000:]
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    run_id = transcript.stem
    answers = [["--decision", "approve"], ["--decision", "edit", "--set", "--mem-fraction-static=0.95"]]
    for _ in range(8):  # then approve what the planner proposes, up to the run's end
        done = run_cli(tmp_path, "resume", run_id, *(answers.pop(0) if answers else ["--decision", "approve"]))
        assert done.returncode in (0, 3), done.stderr[-2000:]
        if done.returncode == 0:
            break
    assert done.returncode == 0, done.stdout[-3000:]
    return RecordedRun.load(transcript)


def test_no_test_relaunches_a_configuration_after_an_edit(tmp_path: Path) -> None:
    run = _edited_run(tmp_path)
    seen: dict[tuple[str, str], str] = {}
    for r in run.executed():
        exp = Experiment.model_validate(r.experiment)
        if exp.purpose != "test":  # the baseline's and the confirmation's repeats are meant
            seen.setdefault((str(exp.config().flags), str(exp.config().env)), exp.id)
            continue
        key = (str(exp.config().flags), str(exp.config().env))
        assert key not in seen, f"{exp.id} launches {seen[key]}'s configuration again: {key}"
        seen[key] = exp.id


def test_no_fraction_below_what_the_pool_was_seen_to_need(tmp_path: Path) -> None:
    """The first failure bounds the static fraction from below (free memory after the weights over the
    GPU's size); after an edit, no proposal (whatever hypothesis or finding it comes from) goes under it."""
    run = _edited_run(tmp_path)
    base = next(r for r in run.executed() if r.experiment.get("purpose") == "baseline")
    free = float((base.outcome or {})["facts"]["weights_avail_mem_gb"])
    total = float(run.fingerprint["memory_total_mib"]) / 1024
    bound = 1 - free / total
    fractions = 0
    for r in run.proposals:
        change = r.data.get("change") or {}
        if change.get("name") == "--mem-fraction-static":
            fractions += 1
            assert float(change["after"]) > bound, f"proposed {change['after']}, the pool needs more than {bound:.3f}"
    assert fractions >= 2  # the test saw the planner choose fractions before and after the edit
