"""Transcript reading, `hypoloop replay` (step, speed, follow) and `replay --redecide` against the
reference transcripts in transcripts/reference/ (regenerate them with `python -m bench.make_reference`)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, get_args

import pytest
from clirun import HYPOLOOP, run_cli
from rich.console import Console

from agent.domain.models import Change, Experiment, Stage
from agent.planning.planner import PlannerView, Proposal, RulePlanner, make_planner
from agent.record.events import STAGES
from agent.record.recorded import RecordedRun
from agent.record.transcript import TranscriptError, read_transcript
from agent.review.redecide import redecide, redecide_planner
from agent.review.replay import follow_events, replay

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "transcripts" / "reference"
GLM5 = REFERENCE / "glm5-nvfp4-sm120.jsonl"
REJECTED = REFERENCE / "glm5-nvfp4-sm120-reject-kv.jsonl"


def _hypoloop(tmp_path: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """``hypoloop ARGS`` as a user runs it (tests/clirun.py), 200 columns wide."""
    return run_cli(tmp_path, *args, timeout=timeout, **{"COLUMNS": "200", **env})


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=200, color_system=None), buf


# ---------------------------------------------------------------------------------- reading


def test_reference_transcripts_exist() -> None:
    assert GLM5.is_file() and REJECTED.is_file()


def test_reader_skips_a_truncated_last_line(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines) + lines[10][: len(lines[10]) // 2], encoding="utf-8")
    events = list(read_transcript(path))
    assert len(events) == len(lines)
    assert RecordedRun.load(path).truncated_tail


def test_malformed_middle_line_names_the_line(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    lines[9] = lines[9][:40] + "\n"  # cut short, but followed by more lines: not a crash mid-write
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"t\.jsonl: line 10: not JSON"):
        list(read_transcript(path))
    r = _hypoloop(tmp_path, "replay", str(path))  # the replay reads past it, and says so
    assert r.returncode == 0 and "run ended: isolated" in r.stdout, r.stderr
    assert len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith(f"warning: {path}: line 10: not JSON (") and "; skipped it, read the rest" in r.stderr


@pytest.mark.parametrize("damage", ["torn last line", "damaged middle line", "two damaged lines"])
def test_every_reader_reads_past_a_damaged_line_and_says_which(tmp_path: Path, damage: str) -> None:
    """A transcript with a line a crash tore (or an edit broke) was refused whole by report and findings,
    or read with no word of what was left out (found by a newcomer): each reader shows what is whole
    and says in one line on stderr which line it skipped."""
    lines = _lines(GLM5)
    path = tmp_path / "t.jsonl"
    if damage == "torn last line":  # a kill in the middle of a write: no newline after it
        path.write_text("".join(lines) + lines[-1][:50], encoding="utf-8")
        told = rf"{re.escape(str(path))}: line {len(lines) + 1}: the last line is incomplete \(a write cut short\); skipped it, read the rest"
    elif damage == "damaged middle line":
        lines[9] = lines[9][:40] + "\n"
        path.write_text("".join(lines), encoding="utf-8")
        told = rf"{re.escape(str(path))}: line 10: not JSON \(.+\); skipped it, read the rest"
    else:
        lines[9], lines[19] = lines[9][:40] + "\n", "{}\n"
        path.write_text("".join(lines), encoding="utf-8")
        told = rf"{re.escape(str(path))}: line 10: not JSON \(.+\); skipped it and 1 more damaged line \(line 20\), read the rest"
    for args in (("report", str(path)), ("findings", "add", str(path), "--dry-run", "--to", "F.md"),
                 ("replay", str(path)), ("replay", str(path), "--redecide")):
        r = _hypoloop(tmp_path, *args)
        assert r.returncode == 0, (args, r.stderr)
        said = [ln for ln in r.stderr.splitlines() if ln.startswith(("warning:", "error:"))]
        assert len(said) == 1 and re.fullmatch(f"warning: {told}", said[0]), (args, r.stderr)
    report = _hypoloop(tmp_path, "report", str(path))
    assert "--kv-cache-dtype" in report.stdout and "Root cause" in report.stdout
    # a file in which no line is whole is still refused, naming its first line
    (tmp_path / "junk.jsonl").write_text('{"a": 1}\nnot json\n')
    for command in ("report", "replay"):
        r = _hypoloop(tmp_path, command, "junk.jsonl")
        assert r.returncode == 2 and r.stderr.splitlines() == [
            "error: junk.jsonl: line 1: not a transcript event: field 'seq': Field required (no line of the file is "
            "a whole transcript event)"
        ], r.stderr


def test_payload_error_names_the_line_and_field(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    n = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "outcome")
    ev = json.loads(lines[n])
    ev["data"]["stage"] = "exploded"
    lines[n] = json.dumps(ev) + "\n"
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(TranscriptError) as info:
        list(read_transcript(path))
    msg = str(info.value)
    assert f"line {n + 1}:" in msg and "outcome event" in msg and "'data.stage'" in msg and "exploded" in msg
    # The envelope alone is still readable (a resumed run only needs the last seq).
    assert len(list(read_transcript(path, payloads=False))) == len(lines)


def test_missing_envelope_field_is_named(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    ev = json.loads(lines[3])
    del ev["seq"]
    lines[3] = json.dumps(ev) + "\n"
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"line 4: not a transcript event: field 'seq': Field required"):
        list(read_transcript(path))


def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    ev = json.loads(_lines(GLM5)[0])
    ev["v"] = 2
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(ev) + "\n", encoding="utf-8")
    with pytest.raises(TranscriptError, match="format version 2 is newer"):
        list(read_transcript(path))


def test_payload_literals_follow_the_models() -> None:
    assert set(STAGES) == set(get_args(Stage))


def test_a_fresh_run_validates_against_the_payload_models() -> None:
    types = {ev.type for ev in read_transcript(GLM5)}
    assert {"run.started", "host.fingerprint", "knowledge.read", "outcome", "experiment.proposed"} <= types
    started = next(read_transcript(GLM5)).data
    assert started["case_data"]["model"]["path"] == "zai-org/GLM-5-NVFP4"


# ---------------------------------------------------------------------------------- replay


def test_replay_shows_evidence_and_alternatives(tmp_path: Path) -> None:
    r = _hypoloop(tmp_path, "replay", str(GLM5))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # The live view's lines ...
    assert "experiment 2" in out and "server launched" in out and "conclusion" in out
    # ... plus why each hypothesis weighs what it does (signatures with log lines, boosts, findings) ...
    nan_lines = next(
        m["line_numbers"]
        for line in GLM5.read_text().splitlines()
        if (e := json.loads(line))["type"] == "outcome"
        for m in e["data"]["matches"]
        if m["signature_id"] == "probability_tensor_nan"
    )
    assert f"log lines {', '.join(map(str, nan_lines))} of exp-" in " ".join(out.split())
    assert "(x3)" in out and "known-good" in out
    # ... and the alternatives the design step weighed, with the chosen one marked.
    assert "alternatives weighed" in out
    assert "--fp8-gemm-backend" in out and "◀ chosen" in out
    assert "run ended: isolated" in out
    assert "unfinished" not in out


def test_replay_jumps_to_a_step(tmp_path: Path) -> None:
    r = _hypoloop(tmp_path, "replay", str(GLM5), "--step", "2")
    assert r.returncode == 0, r.stderr
    assert "jumped to step 2" in r.stdout.splitlines()[0]
    assert "experiment 1 " not in r.stdout and "experiment 2 " in r.stdout
    # a step past the end is an error like the others: one `error:` line on stderr, exit 2
    steps = max(json.loads(line)["step"] for line in _lines(GLM5))
    r = _hypoloop(tmp_path, "replay", str(GLM5), "--step", "99")
    assert r.returncode == 2 and "no step" not in r.stdout
    assert r.stderr.splitlines() == [f"error: no step 99: the transcript has steps 0 to {steps}"], r.stderr


def test_unfinished_run_is_marked(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "server.ready")
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:cut]) + lines[cut][:30], encoding="utf-8")
    r = _hypoloop(tmp_path, "replay", str(path))
    assert r.returncode == 0, r.stderr
    assert "unfinished" in r.stdout and "incomplete" in r.stdout


def test_speed_scales_the_recorded_gaps() -> None:
    events = list(read_transcript(GLM5))
    naps: list[float] = []
    console, _ = _console()
    replay(GLM5, console, speed=4.0, sleep=naps.append)
    expected = [
        min((b.ts - a.ts) / 4.0, 3.0) for a, b in zip(events, events[1:], strict=False) if b.ts > a.ts
    ]
    assert naps == pytest.approx(expected)


def _write_slowly(src: list[str], dest: Path, delay: float) -> None:
    with open(dest, "a", encoding="utf-8") as fh:
        for line in src:
            half = len(line) // 2  # a line arrives in two writes: the reader must wait for the newline
            fh.write(line[:half])
            fh.flush()
            time.sleep(delay)
            fh.write(line[half:])
            fh.flush()


def test_follow_tails_a_growing_transcript(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    path = tmp_path / "live.jsonl"
    writer = threading.Thread(target=_write_slowly, args=(lines, path, 0.002))
    writer.start()
    try:
        seen = [ev.seq for ev in follow_events(path, poll_s=0.01)]
    finally:
        writer.join()
    assert seen == [json.loads(line)["seq"] for line in lines]  # every event once, ending at run.ended


def test_follow_rereads_after_a_torn_line_is_cut(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    path = tmp_path / "live.jsonl"
    path.write_text("".join(lines[:5]) + lines[5][:20], encoding="utf-8")

    def resume_later() -> None:
        time.sleep(0.1)
        with open(path, "rb+") as fh:  # what a resumed run does (Transcript._drop_torn_line) ...
            data = fh.read()
            fh.truncate(data.rfind(b"\n") + 1)
        with open(path, "a", encoding="utf-8") as fh:  # ... before it appends whole lines again
            fh.writelines(lines[5:])

    t = threading.Thread(target=resume_later)
    t.start()
    try:
        seen = [ev.seq for ev in follow_events(path, poll_s=0.01)]
    finally:
        t.join()
    assert seen == [json.loads(line)["seq"] for line in lines]


def test_follow_command_stops_at_run_ended(tmp_path: Path) -> None:
    lines = _lines(GLM5)
    path = tmp_path / "live.jsonl"
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen(
        [*HYPOLOOP, "replay", str(path), "--follow"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.3)
        _write_slowly(lines, path, 0.001)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "run ended: isolated" in out


# ---------------------------------------------------------------------------------- re-decide


@pytest.mark.parametrize("path", sorted(REFERENCE.glob("*.jsonl")), ids=lambda p: p.stem)
def test_reference_transcript_redecides_identically(tmp_path: Path, path: Path) -> None:
    """A planner change that alters a decision on a recorded run fails here: regenerate the references
    (python -m bench.make_reference) only if the new decisions are the intended ones."""
    r = _hypoloop(tmp_path, "replay", str(path), "--redecide")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "decisions match" in r.stdout
    assert "warning" not in r.stderr  # the reference holds everything a re-decision needs


def test_redecide_replays_a_rejection() -> None:
    run = RecordedRun.load(REJECTED)
    assert run.rejections and run.rejections[0]["change"]["name"] == "--kv-cache-dtype"
    planner, flags, warnings = redecide_planner("rules", run, make_planner)
    result = redecide(run, planner, flags, warnings=warnings)
    assert result.matched
    # After the rejection the planner moves on to the next idea, as recorded.
    props = [d for d in result.decisions if d.what == "proposal"]
    assert "--kv-cache-dtype" in props[1].recorded and "--kv-cache-dtype" not in props[2].decided


class _PrefersAttentionBackend(RulePlanner):
    """Deliberately different: tests the attention backend instead of whatever the rules pick."""

    name = "diverging"

    def propose(self, view: PlannerView, state: Any) -> Proposal:
        p = super().propose(view, state)
        if p.experiment is None or p.experiment.purpose != "test":
            return p
        change = Change(kind="flag", name="--attention-backend", before=None, after="flashinfer")
        exp = Experiment(
            id=Experiment.make_id(state.baseline, change, "test"),
            purpose="test",
            baseline=state.baseline,
            change=change,
        )
        return Proposal(experiment=exp)


def test_a_diverging_planner_stops_at_the_first_divergence() -> None:
    run = RecordedRun.load(GLM5)
    rules, flags, _ = redecide_planner("rules", run, make_planner)
    result = redecide(run, _PrefersAttentionBackend(rules.catalog, flags), flags)
    assert not result.matched
    last = result.decisions[-1]
    assert not last.match and last.what == "proposal" and last.step == 2
    assert "--kv-cache-dtype" in last.recorded and "--attention-backend" in last.decided
    assert result.stopped_at == last.seq
    assert all(d.match for d in result.decisions[:-1])  # nothing after the divergence was compared


def test_redecide_exits_nonzero_when_the_recording_differs(tmp_path: Path) -> None:
    # The same divergence seen from the command line: the recorded step-2 proposal is not what the
    # current planner proposes.
    lines = _lines(GLM5)
    for i, line in enumerate(lines):
        ev = json.loads(line)
        if ev["type"] == "experiment.proposed" and ev["data"]["purpose"] == "test":
            ev["data"]["change"] = {
                "kind": "flag",
                "name": "--attention-backend",
                "before": None,
                "after": "flashinfer",
            }
            ev["data"]["id"] = "exp-0000000000"
            lines[i] = json.dumps(ev) + "\n"
            break
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    r = _hypoloop(tmp_path, "replay", str(path), "--redecide")
    assert r.returncode == 1
    assert "diverges" in r.stdout


def test_llm_planner_needs_recorded_model_answers(tmp_path: Path) -> None:
    r = _hypoloop(tmp_path, "replay", str(GLM5), "--redecide", "--planner", "llm")
    assert r.returncode == 2
    assert "holds no llm.request events" in r.stderr


def _scripted_openai() -> Any:
    name = "hypoloop_fake_openai"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "fakes" / "openai_server.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].ScriptedOpenAI


def _model_says(name: str, value: str, tests: str) -> dict[str, Any]:
    experiment = {
        "change": {"kind": "flag", "name": name, "value": value},
        "tests": [tests],
        "rationale": "scripted",
    }
    return {
        "json": {
            "reasoning": "scripted",
            "new_hypotheses": [],
            "notes": [],
            "action": "experiment",
            "experiment": experiment,
            "conclusion": None,
        }
    }


def test_redecide_an_llm_run_from_its_recorded_answers(tmp_path: Path) -> None:
    # The model tries the FP8 GEMM backend first (refuted), then the KV-cache dtype (the fix).
    script = [
        _model_says("--fp8-gemm-backend", "cutlass", "fp8-gemm-scale-format"),
        _model_says("--kv-cache-dtype", "bf16", "lowprec-kv-cache-attention-numerics"),
    ]
    with _scripted_openai()(script) as server:
        r = _hypoloop(
            tmp_path,
            "run",
            "lab:glm5-nvfp4-sm120",
            "--auto",
            "--json",
            "--transcript-dir",
            str(tmp_path / "tr"),
            "--planner",
            "llm",
            "--model",
            "scripted",
            "--base-url",
            server.base_url,
            timeout=240,
            OPENAI_API_KEY="sk-test-0123456789abcdefghij",
        )
    assert r.returncode == 0, r.stderr[-3000:]
    transcript = json.loads(r.stdout.strip().splitlines()[-1])["transcript"]
    # No network from here on: the recorded answers decide again, the same way.
    llm = _hypoloop(tmp_path, "replay", transcript, "--redecide", "--planner", "llm")
    assert llm.returncode == 0, llm.stdout[-4000:] + llm.stderr[-2000:]
    # The rule planner would have tested the KV-cache dtype first: it diverges at step 2.
    rules = _hypoloop(tmp_path, "replay", transcript, "--redecide", "--planner", "rules")
    assert rules.returncode == 1
    assert "diverges" in rules.stdout and "--fp8-gemm-backend" in rules.stdout


def test_module_entry_point_replays_without_the_cli(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "agent.review.replay", str(GLM5), "--step", "3"],
        cwd=tmp_path,
        env=dict(os.environ, COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "jumped to step 3" in r.stdout and "run ended: isolated" in r.stdout
    r = subprocess.run([sys.executable, "-m", "agent.review.replay", str(GLM5), "--step", "99"], cwd=tmp_path,
                       env=dict(os.environ, COLUMNS="200"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: no step 99: the transcript has steps 0 to "), r.stderr
