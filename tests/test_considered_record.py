"""What the transcript keeps of the changes a design step weighed (a defect the last closing note named): the
chosen change and the best-scored rivals always, each reason a candidate was skipped once, and a marker when
anything was left out, so `replay` shows why this change and not another, and says when the list is not whole.

Real parts: the rule planner with the repository's knowledge on SGLang 0.5.23's own ``--help`` and a scheduler
traceback as SGLang logs it (over a hundred candidates weighed or skipped: before, the record kept the first twelve
entries in the order they were built, which left out the chosen change); and a real lab run replayed through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_cli
from planner_steps import after_served_launch, baseline_failed_with, experiment_of, ready_with_backend
from test_intent_reader import A100, BASE, CRASH, FLAGS

from agent.domain.models import Change
from agent.planning.view import Proposal


def test_the_record_keeps_the_chosen_change_and_each_skip_once() -> None:
    _, _, prop = baseline_failed_with(A100, BASE, CRASH, FLAGS)
    assert prop.experiment is not None and prop.experiment.change is not None
    whole = prop.considered
    kept = prop.recorded_considered()
    scored = [c for c in kept if "change" in c]
    assert prop.experiment.change.describe() in [c["change"] for c in scored]  # the chosen one is on record
    assert scored[0]["change"] == prop.experiment.change.describe()  # first, whatever rule chose it
    assert [c["score"] for c in scored[1:]] == sorted((c["score"] for c in scored[1:]), reverse=True)
    skips = [c for c in kept if "skipped" in c]
    assert len(skips) == len({json.dumps(c, sort_keys=True) for c in skips})  # each reason once
    distinct_skips = {json.dumps(c, sort_keys=True) for c in whole if "change" not in c}
    left_out = len([c for c in whole if "change" in c]) + len(distinct_skips) - len(scored) - len(skips)
    assert left_out > 0 and kept[-1] == {"omitted": left_out}
    # the old record (the first twelve entries) left the chosen change out on this failure
    assert prop.experiment.change.describe() not in [c.get("change") for c in whole[:12]]


def test_the_root_fix_tried_after_a_workaround_is_on_record_with_its_rivals() -> None:
    """After a workaround served, the narrower change chosen in its place (``Chooser._alternative``) is on
    record with the changes weighed against it, not only with the skipped ones (the newcomer's finding: that
    step recorded skips alone)."""
    planner, view, _ = baseline_failed_with(A100, BASE, CRASH, FLAGS)
    revert = experiment_of(view.experiments[0].baseline,
                           Change(kind="flag", name="--speculative-eagle-topk", before="2", after=None))
    nxt = after_served_launch(planner, view, revert, ready_with_backend("flashinfer"))
    assert nxt.experiment is not None and nxt.experiment.change is not None and "workaround" in nxt.experiment.rationale
    scored = [c for c in nxt.recorded_considered() if "change" in c]
    assert scored and scored[0]["change"] == nxt.experiment.change.describe(), scored
    assert all("p_fix" in c and "score" in c for c in scored)


def test_a_short_list_is_kept_whole_without_a_marker() -> None:
    p = Proposal(considered=[{"change": "a", "score": 1.0}, {"hypothesis": "h", "skipped": "s"},
                             {"hypothesis": "h", "skipped": "s"}])
    assert p.recorded_considered() == [{"change": "a", "score": 1.0}, {"hypothesis": "h", "skipped": "s"}]


def test_replay_marks_the_chosen_change_and_says_when_the_list_is_cut(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "lab:qwen3-8b-r9700", "--auto")
    assert done.returncode == 0, done.stderr
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    events = [json.loads(x) for x in transcript.read_text().splitlines()]
    tests = [e["data"] for e in events if e["type"] == "experiment.proposed" and e["data"]["purpose"] == "test"]
    assert tests
    for d in tests:
        assert any(c.get("change") == _describe(d["change"]) for c in d["considered"]), d["considered"]
    replayed = run_cli(tmp_path, "replay", str(transcript), COLUMNS="200")
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.count("◀ chosen") >= len(tests)
    if any("omitted" in c for d in tests for c in d["considered"]):
        assert "more weighed or skipped, not recorded" in replayed.stdout


def _describe(change: dict) -> str:
    """A recorded change as ``Change.describe`` words it."""
    from agent.domain.models import Change

    return Change.model_validate(change).describe()
