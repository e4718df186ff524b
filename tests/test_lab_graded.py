"""Graded wrong output, the lab's side (issue 21, item 5): a world's model answers the graded questions
(the probe set's arithmetic) right at its healthy accuracy, the same ones on every launch; a
`degrade_accuracy` fault lowers that share under its conditions, with fluent wrong answers, seeded and
reproducible. Real lab servers, asked the built-in probe set over HTTP through tools/probe_set.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import pytest

from agent.domain.accuracy import judge
from lab.world import WorldError, load_world
from tools.probe_set import SetRun, load_probe_set, run_probe_set, score_reply
from tools.probes import Probe, ProbeResult, run_probe

REPO = Path(__file__).resolve().parents[1]

WORLD = """
name = "graded"
description = "d"
[sglang]
version = "0.5.23"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 81559
[model]
path = "org/M"
architecture = "LlamaForCausalLM"
checkpoint_shards = 1
features = ["dense"]
{model}
[timing]
init_s = 0.5
load_s = 0.5
capture_s = 0.5
warmup_s = 0.1
decode_tokens_per_s = 100000.0
prefill_tokens_per_s = 1000000.0
[memory]
weights_gb_total = 16.0
{fault}
"""

DROP = """
[[fault]]
id = "fp8-kv-drop"
effect = "degrade_accuracy"
{amount}
when = {{ kv_cache_dtype = "fp8_e4m3" }}
lines = ["accuracy drops here"]
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _lab(folder: Path, world: str, flags: list[str], seed: str = "s") -> Iterator[tuple[str, Path]]:
    """A lab server of `world` (TOML text) launched with `flags`; its base URL and log."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "world.toml").write_text(world)
    port = _port()
    env = {**os.environ, "HYPOLOOP_LAB_WORLD": str(folder / "world.toml"), "HYPOLOOP_LAB_TIME_SCALE": "0.01",
           "HYPOLOOP_LAB_SEED": seed, "HYPOLOOP_LAB_STATE": str(folder.parent / "state"),
           "HF_HOME": str(folder / "hf")}
    log = folder / "log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.launch_server", "--model-path", "org/M", "--port", str(port), *flags],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "fired up" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", log
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _ask(base: str, api: Literal["native", "completions"] = "native") -> tuple[SetRun, list[ProbeResult]]:
    """The built-in probe set asked of the server at `base` (SGLang's /generate, or /v1/completions as for
    an engine without it); the count and every reply."""
    replies: list[ProbeResult] = []

    def send(probe: Probe) -> ProbeResult:
        replies.append(run_probe(base, probe, model="org/M", timeout_s=30, generate_api=api))
        return replies[-1]

    return run_probe_set(load_probe_set(), send), replies


def _wrong(run: SetRun, replies: list[ProbeResult]) -> list[str]:
    """The ids of the questions answered wrongly (the run stopped at none: every question has a reply)."""
    ps = load_probe_set()
    assert run.failure is None and len(replies) == len(ps.item)
    return [i.id for i, r in zip(ps.item, replies, strict=True) if not score_reply(r.text, i.answer)]


def test_a_healthy_model_misses_the_same_questions_on_every_launch(tmp_path: Path) -> None:
    world = WORLD.format(model="accuracy = 0.8", fault="")
    with _lab(tmp_path / "a", world, [], seed="s1") as (base, _):
        first, replies_a = _ask(base)
    with _lab(tmp_path / "b", world, [], seed="s2") as (base, _):
        again, replies_b = _ask(base, "completions")
    assert first.asked == again.asked == len(load_probe_set().item)
    assert first.correct == again.correct < first.asked  # some wrong: accuracy 0.8
    assert _wrong(first, replies_a) == _wrong(again, replies_b)
    assert all(r.status in ("ok", "wrong_answer") for r in replies_a)  # never garbage, never an error
    perfect = WORLD.format(model="", fault="")  # no [model] accuracy: every graded question right
    with _lab(tmp_path / "c", perfect, []) as (base, _):
        assert _ask(base)[0].correct == first.asked


def test_a_degrade_fault_lowers_accuracy_only_under_its_condition(tmp_path: Path) -> None:
    world = WORLD.format(model="accuracy = 0.95", fault=DROP.format(amount="accuracy = 0.5"))
    with _lab(tmp_path / "bf16", world, ["--kv-cache-dtype", "bf16"]) as (base, log):
        healthy, _ = _ask(base)
        assert "accuracy drops here" not in log.read_text()
    with _lab(tmp_path / "fp8", world, ["--kv-cache-dtype", "fp8_e4m3"]) as (base, log):
        low, replies = _ask(base)
        lines = [ln for ln in log.read_text().splitlines() if "accuracy drops here" in ln]
    assert len(lines) == 1  # the fault's lines print once
    assert judge(low.correct, low.asked, healthy.correct / healthy.asked).below, (low, healthy)
    # the wrong answers are fluent: "a + b = N. The answer is N." with the wrong N, never garbage
    for item_id in _wrong(low, replies):
        reply = next(r for r in replies if r.probe_id == f"probe-set:{item_id}")
        assert reply.status == "ok" and "The answer is" in (reply.text or ""), reply


def test_a_drop_is_seeded_and_reproducible(tmp_path: Path) -> None:
    world = WORLD.format(model="accuracy = 0.9", fault=DROP.format(amount="drop = 0.4"))
    runs = []
    for name in ("a", "b"):  # the same seed, a fresh launch counter: the same launches replay
        folder = tmp_path / name
        with _lab(folder / "w", world, ["--kv-cache-dtype", "fp8_e4m3"], seed="same") as (base, _):
            runs.append(_wrong(*_ask(base)))
    assert runs[0] == runs[1] and len(runs[0]) > 4


@pytest.mark.parametrize(
    ("model", "fault", "message"),
    [
        ("", DROP.format(amount=""), r"fault #1: a degrade_accuracy fault needs exactly one of accuracy"),
        ("", DROP.format(amount="accuracy = 0.5\ndrop = 0.1"), r"fault #1: a degrade_accuracy fault needs exactly one"),
        ("", DROP.format(amount="drop = 1.5"), r"fault #1\.drop: expected a number between 0 and 1"),
        ("", '[[fault]]\neffect = "warning"\nat = "serving"\naccuracy = 0.5\nlines = ["x"]\n',
         r"fault #1\.accuracy: only a degrade_accuracy fault has an accuracy or a drop"),
        ('accuracy = "high"', "", r"model\.accuracy: expected a number between 0 and 1"),
        ("", DROP.format(amount="accuracy = 0.5").replace("effect =", 'at = "weights"\neffect ='),
         r"fault #1\.at: effect degrade_accuracy can happen at: first_decode, serving"),
    ],
)
def test_a_bad_graded_fault_is_one_line_naming_the_field(tmp_path: Path, model: str, fault: str, message: str) -> None:
    path = tmp_path / "world.toml"
    path.write_text(WORLD.format(model=model, fault=fault))
    with pytest.raises(WorldError, match=message) as err:
        load_world(str(path))
    assert "\n" not in str(err.value)


def test_a_drop_that_needs_concurrent_requests_shows_when_the_set_is_asked_as_a_burst(tmp_path: Path) -> None:
    """A drop the user sees only under a burst (a fault that needs 4 requests running at once): the set asked
    one question at a time scores the healthy level, asked 16 at a time (the case's `[reproduce]
    concurrency`, `tools.probe_set.run_probe_set`) it is below it with 95% confidence. Real lab server, real
    concurrent HTTP requests."""
    burst = DROP.format(amount="accuracy = 0.5").replace('kv_cache_dtype = "fp8_e4m3"', "running_requests = { ge = 4 }")
    world = WORLD.format(model="accuracy = 0.95", fault=burst)

    def send_to(base: str) -> Callable[[Probe], ProbeResult]:
        return lambda probe: run_probe(base, probe, model="org/M", timeout_s=30)

    with _lab(tmp_path / "w", world, []) as (base, _):
        alone = run_probe_set(load_probe_set(), send_to(base))
        together = run_probe_set(load_probe_set(), send_to(base), concurrency=16)
    n = len(load_probe_set().item)
    assert alone.asked == together.asked == n
    assert not judge(alone.correct, n, 0.95).below
    assert judge(together.correct, n, 0.95).below, together
