"""Rates per launch, per request and per minute, seeded and reproducible (issue 21, item 6)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lab.chance import hits_request, onset_s
from lab.world import WorldError, load_world

REPO = Path(__file__).resolve().parents[1]

WORLD = """
name = "rates"
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
[timing]
init_s = 0.5
load_s = 0.5
capture_s = 0.5
warmup_s = 0.1
decode_tokens_per_s = 100000.0
prefill_tokens_per_s = 1000000.0
[memory]
weights_gb_total = 16.0
[[fault]]
id = "wrong-sometimes"
effect = "wrong_output"
at = "serving"
text = "WRONG"
{rate}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(tmp_path: Path, name: str, rate: str, seed: str, n: int, scale: str = "0.01") -> list[bool]:
    """Start the lab with the world, send `n` greedy requests one after another; which were wrong."""
    folder = tmp_path / name
    folder.mkdir()
    world = folder / "world.toml"
    world.write_text(WORLD.format(rate=rate))
    port = _port()
    env = {**os.environ, "HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": scale,
           "HYPOLOOP_LAB_SEED": seed, "HYPOLOOP_LAB_STATE": str(folder / "state"), "HF_HOME": str(folder / "hf")}
    log = folder / "log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.launch_server", "--model-path", "org/M", "--port", str(port)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "fired up" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        wrong = []
        for _ in range(n):
            body = json.dumps({"text": "2 + 3 =", "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
            req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                wrong.append("WRONG" in json.loads(resp.read())["text"])
        return wrong
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_per_request_rate_hits_some_requests_and_replays_under_its_seed(tmp_path: Path) -> None:
    first = _serve(tmp_path, "a", "per_request = 0.3", "s1", 40)
    again = _serve(tmp_path, "b", "per_request = 0.3", "s1", 40)
    other = _serve(tmp_path, "c", "per_request = 0.3", "s2", 40)
    assert first == again  # the same seed and counter: the same requests are hit
    assert first != other
    assert 4 <= sum(first) <= 22  # about 30 % of 40 (binomial; far outside is a broken rate)
    assert any(first[:10]) or any(first[10:])  # hits are spread over the launch, not one draw for its life


def test_a_per_minute_rate_starts_under_traffic(tmp_path: Path) -> None:
    # 6000 per simulated minute: the first event comes within ~0.01 simulated s: every request is hit
    assert all(_serve(tmp_path, "fast", "per_minute = 6000.0", "s1", 5))
    # 0.0001 per simulated minute: ~10^4 simulated minutes before the first event: none is hit
    assert not any(_serve(tmp_path, "slow", "per_minute = 0.0001", "s1", 5))


def test_the_onset_is_seeded_and_exponential() -> None:
    from lab.world import Condition, Fault

    fault = Fault(id="f", when=Condition(), unless=None, effect="wrong_output", at="first_decode", progress=0.0,
                  lines=(), exit_code=None, output="!", per_minute=2.0)
    draws = [onset_s(fault, f"s:{n}") for n in range(2000)]
    assert draws == [onset_s(fault, f"s:{n}") for n in range(2000)]
    assert 25.0 < sum(draws) / len(draws) < 35.0  # mean 60 / rate = 30 simulated seconds
    per = Fault(id="g", when=Condition(), unless=None, effect="wrong_output", at="first_decode", progress=0.0,
                lines=(), exit_code=None, output="!", per_request=0.25)
    hits = [hits_request(per, "s:0", n) for n in range(4000)]
    assert 0.22 < sum(hits) / len(hits) < 0.28


def test_rates_belong_to_serving_faults(tmp_path: Path) -> None:
    world = tmp_path / "world.toml"
    world.write_text(WORLD.format(rate="per_request = 1.5"))
    with pytest.raises(WorldError, match=r"fault #1\.per_request: expected a number in \(0, 1\]"):
        load_world(str(world))
    world.write_text(WORLD.format(rate="per_minute = 1.0").replace('effect = "wrong_output"\nat = "serving"\ntext = "WRONG"',
                                                                     'effect = "hang"\nat = "weights"'))
    with pytest.raises(WorldError, match=r"fault #1\.at: per_request and per_minute apply to serving faults"):
        load_world(str(world))
