"""The run a runtime keeps folded as its transcript is written (``agent.record.recorded.follow``) is what
the file says: the conclude node builds the FINDINGS.md entry from it instead of reading the file back."""

from __future__ import annotations

import json
from pathlib import Path

from agent.record.recorded import RecordedRun, follow
from agent.record.transcript import Transcript, read_transcript
from agent.review.findings import entry_for

REFERENCE = Path(__file__).resolve().parents[1] / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"


def test_the_fold_of_a_resumed_run_equals_reading_its_file(tmp_path: Path) -> None:
    events = list(read_transcript(REFERENCE))
    ended = next(i for i, ev in enumerate(events) if ev.type == "conclusion")
    half = ended // 2
    path = tmp_path / "run.jsonl"
    first = Transcript(path, events[0].run_id)  # the process that started the run, killed half-way
    for ev in events[:half]:
        first.step = ev.step
        first.emit(ev.type, ev.data, node=ev.node)
    first.close()
    second = Transcript(path, events[0].run_id)  # the process that resumes it
    live = follow(second)
    assert live is not None
    for ev in events[half:ended]:
        second.step = ev.step
        second.emit(ev.type, ev.data, node=ev.node)
    second.close()
    on_disk = RecordedRun.load(path)
    assert live == on_disk
    assert live.runs and live.launch_argv and live.hypotheses
    # what conclude writes into the conclusion: the same entry `hypoloop findings add` makes of the file
    conclusion = events[ended].data
    live.conclusion = on_disk.conclusion = json.loads(json.dumps(conclusion))
    assert entry_for(live) == entry_for(on_disk)


def test_a_damaged_transcript_gives_no_fold(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"seq": 1, "ts": 1.0, "run_id": "r", "type": "run.started", "data": {}}\nnot json\n')
    assert follow(Transcript(path, "r")) is None
