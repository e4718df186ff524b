"""After a user's edit moves the baseline, the planner never proposes a test whose configuration (flags
and env) the run already launched: undoing the edit's step can land on an earlier, failing launch."""

from __future__ import annotations

from pathlib import Path

from clirun import run_cli

from agent.domain.models import Experiment
from agent.record.recorded import RecordedRun


def test_no_test_relaunches_a_configuration_after_an_edit(tmp_path: Path) -> None:
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
    run = RecordedRun.load(transcript)
    seen: dict[tuple[str, str], str] = {}
    for r in run.executed():
        exp = Experiment.model_validate(r.experiment)
        if exp.purpose != "test":  # the baseline's and the confirmation's repeats are meant
            seen.setdefault((str(exp.config().flags), str(exp.config().env)), exp.id)
            continue
        key = (str(exp.config().flags), str(exp.config().env))
        assert key not in seen, f"{exp.id} launches {seen[key]}'s configuration again: {key}"
        seen[key] = exp.id
