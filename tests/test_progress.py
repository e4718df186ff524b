"""Progress while a server loads: the stage read from the log, the expected time, the live display in a
real terminal session (pexpect), and plain stage lines when no terminal is attached."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pexpect
from clirun import HYPOLOOP, cli_env, live_processes, run_cli
from rich.console import Console

from agent.run.progress import LoadHistory, LoadProgress, StageReader
from tools.logwatch import LogLine
from tools.server import WatchEvent
from tools.signatures import load_signatures

# SGLang 0.5.9 start-up lines (model_runner.py, weight_utils.py, memory_pool.py, cuda_graph_runner.py,
# http_server.py), with the two tqdm bars as a log file holds them.
START_UP = [
    ("[2026-02-16 10:00:01] server_args=ServerArgs(model_path='m', tp_size=8)", "init", None),
    ("[2026-02-16 10:00:09 TP0] Init torch distributed begin.", "init", None),
    ("[2026-02-16 10:00:10 TP0] Load weight begin. avail mem=94.21 GB", "weights", None),
    (
        "Loading safetensors checkpoint shards:   0% Completed | 0/83 [00:00<?, ?it/s]\r"
        "Loading safetensors checkpoint shards:  33% Completed | 28/83 [01:42<03:21,  3.66s/it]",
        "weights",
        0.33,
    ),
    (
        "[2026-02-16 10:05:10 TP0] Load weight end. elapsed=300.12 s, type=GlmMoeDsaForCausalLM, "
        "avail mem=38.64 GB, mem usage=55.69 GB.",  # the 0.5.23 wording
        "weights",
        None,
    ),
    ("[2026-02-16 10:05:11 TP0] KV Cache is allocated. #tokens: 1030144, K size: 10.2 GB", "KV pool", None),
    ("[2026-02-16 10:05:12 TP0] Capture cuda graph begin. This can take up to several minutes.", "CUDA-graph capture", None),
    (
        "Capturing batches (bs=272 avail_mem=14.03 GB):  30%|███       | 16/52 [00:19<00:42,  1.19s/it]",
        "CUDA-graph capture",
        16 / 52,
    ),
    ("[2026-02-16 10:06:30] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)", "warm-up", None),
    ("[2026-02-16 10:06:40] The server is fired up and ready to roll!", "ready", None),
]


def test_stage_is_read_from_the_log_lines() -> None:
    reader = StageReader(load_signatures())
    for text, stage, fraction in START_UP:
        step = reader.read(text)
        got = (step.stage, step.fraction) if step else ("init", None)
        assert got[0] == stage, text
        assert (got[1] is None) == (fraction is None) and abs((got[1] or 0) - (fraction or 0)) < 0.01, text
    assert reader.read("[2026-02-16 10:06:41] Decode batch. #running-req: 1") is None


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _feed(p: LoadProgress, clock: _Clock, lines: list[tuple[float, str]]) -> None:
    for n, (t, text) in enumerate(lines, start=1):
        clock.t = t
        p.observe(WatchEvent(kind="line", line=LogLine(line=n, text=text, seen_monotonic=t), at_monotonic=t))


def test_expected_time_comes_from_the_stage_rhythm_then_from_earlier_launches() -> None:
    reader, history, clock = StageReader(load_signatures()), LoadHistory(), _Clock()
    console = Console(file=open("/dev/null", "w"), width=100)  # noqa: SIM115 - closed with the test
    lines = [(t, text) for t, (text, _, _) in zip([1, 5, 10, 40, 100, 101, 102, 130, 170, 175], START_UP, strict=True)]
    first = LoadProgress(console, "exp-1", reader, history, live=False, now=clock)
    with first:
        _feed(first, clock, lines[:4])  # weights 33% after 30 s of weights
        total, how = first.expected()
        assert total is None and how == "weights done in ~1:01"  # 30 s for a third: about 60 s more
        _feed(first, clock, lines[4:])
        first.finish("ready")
    assert history.ready_launches() and history.launches[0]["ready"] == 175
    # A second launch that is twice as slow to reach the capture: the earlier capture (101 → 130) and
    # warm-up (130 → 175) remain after it, measured from where this launch is.
    clock.t = 0.0
    second = LoadProgress(console, "exp-2", reader, history, live=False, now=clock)
    with second:
        _feed(second, clock, [(t * 2, text) for t, text in lines[:7]])
        total, how = second.expected()
        assert how == "from 1 earlier launch"
        assert total is not None and abs(total - (204 + (130 - 102) + (175 - 130))) < 1.0
        second.finish("crashed")
    assert len(history.ready_launches()) == 1  # a crash is no measure of a load
    console.file.close()


def test_without_a_terminal_each_stage_change_is_one_plain_line(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", COLUMNS="120")
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stdout
    changes = re.findall(r"^\s+(exp-\w+) loading: (.+?) at [\d.:]+(?: s)?$", done.stdout, re.M)
    launches = re.findall(r"⏵ server launched", done.stdout)
    per_launch: dict[str, list[str]] = {}
    for exp, stage in changes:
        per_launch.setdefault(exp, []).append(stage)
    assert len(per_launch) == len(launches) == 3
    for stages in per_launch.values():
        assert stages == ["weights", "KV pool", "CUDA-graph capture", "warm-up"]
    summaries = re.findall(r"✓ ready after [\d.]+ s — init .* warm-up [\d.]+ s", done.stdout)
    assert len(summaries) == 3
    assert "✓ ready after" in done.stdout and done.stdout.count("ready after") == 3


def test_live_display_in_a_terminal_follows_the_load(tmp_path: Path) -> None:
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE="0.015", COLUMNS="110", LINES="40", TERM="xterm-256color")
    child = pexpect.spawn(
        HYPOLOOP[0], [*HYPOLOOP[1:], "run", "lab:glm5-nvfp4-sm120", "--auto"],
        cwd=str(tmp_path), env=env, encoding="utf-8", timeout=90, dimensions=(40, 110),
    )
    child.logfile_read = sys.stdout if "-s" in sys.argv else None
    try:
        child.expect(r"⏳ loading .*exp-\w+")
        child.expect(r"weights \d+%")
        seen = [int(child.match.group(0).split()[1].rstrip("%"))]
        child.expect(r"weights (\d+)%")
        seen.append(int(child.match.group(1)))
        child.expect(r"elapsed \d+\.\d s")
        child.expect(r"CUDA-graph capture (\d+) of (\d+)")
        assert int(child.match.group(1)) <= int(child.match.group(2))
        # The display's latest log line: its label and number are styled apart, so escape codes may sit
        # between them (a bare "log:\d+" matched only the renderer's ready line, which is missing when
        # GET /health answers first, and then the test fell a launch behind).
        child.expect(r"log:(?:\x1b\[[\d;]*m)*\d+(?:\x1b\[[\d;]*m)* +\S")
        child.expect(r"✓ ready.{0,20}after [\d.]+ s")  # the baseline's summary line
        # The second launch: an expected time from the first one.
        child.expect(r"expected ~[\d.:]+( s)?.{0,40}from 1 earlier launch")
        child.sendintr()  # Ctrl-C while the display is live: the server is stopped, the display ends
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert seen[0] <= seen[1]
    assert child.exitstatus == 130
    assert not live_processes(str(tmp_path), only="lab.launch_server")
    # Ctrl-C reached the second launch while it loaded (not a later step, not after the run ended).
    (transcript,) = (tmp_path / "transcripts").glob("*.jsonl")
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    launched = [e["data"]["experiment_id"] for e in events if e["type"] == "server.launched"]
    ready = [e["data"]["experiment_id"] for e in events if e["type"] == "server.ready"]
    assert len(launched) == 2 and ready == launched[:1]
    assert events[-1]["type"] == "run.ended" and events[-1]["data"]["status"] == "interrupted"


def test_a_launch_that_crashes_while_loading_ends_in_one_line_naming_the_stage(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "lab:cuda-graph-oom", "--auto", COLUMNS="200")
    assert done.returncode == 0, done.stderr
    crashed = re.findall(r"✗ (\w+) during CUDA-graph capture (\d+) of (\d+) after [\d.:]+(?: s)? — init", done.stdout)
    assert len(crashed) == 1 and crashed[0][0] == "crashed"  # the baseline, cut off mid-capture
    assert 0 < int(crashed[0][1]) < int(crashed[0][2])
    assert done.stdout.count("✗") == 1 and "(exit code" in done.stdout
    # Each failure line is shown once (as it came), not again under the crash's summary line; nor in replay.
    (transcript,) = (tmp_path / "transcripts").glob("*.jsonl")
    replayed = run_cli(tmp_path, "replay", str(transcript), COLUMNS="200")
    for out in (done.stdout, replayed.stdout):
        shown = re.findall(r"^\s+log:(\d+) ", out.split("✓ ready")[0], re.M)
        assert shown and len(shown) == len(set(shown)), shown


def test_the_live_display_shows_the_latest_log_line_redacted() -> None:
    """A terminal's live display shows the latest log line: a secret in it (an api key the server prints
    in its arguments) is redacted with the run's redaction, as the transcript and plain output are."""
    from io import StringIO

    from agent.record.redact import run_redactor

    key = "sk-proj-Zx81hQ2mW0aLt5Rq9NvB"
    out = StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    reader = StageReader(load_signatures())
    progress = LoadProgress(console, "exp-1", reader, LoadHistory(), live=True, redact=run_redactor())
    with progress:
        progress.observe(WatchEvent(kind="line", line=LogLine(line=1, text=(
            f"[2026-02-16 10:00:01] server_args=ServerArgs(model_path='m', api_key='{key}', tp_size=8)")),
            at_monotonic=0.0))
        assert progress.last_line is not None and key not in progress.last_line[1]
        progress.finish("ready")
    assert key not in out.getvalue()
