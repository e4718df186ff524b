"""Every stage a fault can sit in, in each release's order and words (issue 21, item 4): init, weights,
KV pool, prefill (piecewise) and decode graph capture, the speculative draft worker, warm-up, ready,
serving and shutdown, with the release's real SIGTERM sequence."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

WORLD = """
name = "stages"
description = "d"
[sglang]
version = "{version}"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 81559
[model]
path = "org/M"
architecture = "LlamaForCausalLM"
checkpoint_shards = 2
features = ["dense"]
[timing]
init_s = 1.0
load_s = 1.0
capture_s = 1.0
warmup_s = 0.5
piecewise_s = 1.0
draft_s = 1.0
[memory]
weights_gb_total = 16.0
{faults}
"""

#: (release, argv turning the prefill graphs and the draft worker on, prefill graphs captured first)
RELEASES = [
    ("0.5.9", ["--enable-piecewise-cuda-graph", "--speculative-algorithm", "EAGLE"], False),
    ("0.5.17", ["--cuda-graph-backend-prefill", "full", "--speculative-algorithm", "EAGLE"], True),
    ("0.5.23", ["--cuda-graph-backend-prefill", "full", "--speculative-algorithm", "EAGLE"], True),
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, tmp_path: Path, version: str, argv: list[str], faults: str = "") -> None:
        world = tmp_path / "world.toml"
        world.write_text(WORLD.format(version=version, faults=faults))
        self.log = tmp_path / "server.log"
        env = {**os.environ, "HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": "0.01",
               "HF_HOME": str(tmp_path / "hf")}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lab.launch_server", "--model-path", "org/M", "--port", str(_port()), *argv],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text or self.proc.poll() is not None:
                return text
            time.sleep(0.05)
        return self.text()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def servers() -> list[_Server]:
    started: list[_Server] = []
    yield started
    for server in started:
        server.close()


def _index(text: str, needle: str) -> int:
    assert needle in text, f"{needle!r} not in the log:\n{text[-3000:]}"
    return text.index(needle)


@pytest.mark.parametrize(("version", "argv", "prefill_first"), RELEASES)
def test_the_stages_come_in_the_release_order_and_sigterm_ends_it_the_release_way(
    tmp_path: Path, servers: list[_Server], version: str, argv: list[str], prefill_first: bool
) -> None:
    server = _Server(tmp_path, version, argv)
    servers.append(server)
    text = server.wait_for("The server is fired up and ready to roll!")
    load = _index(text, "Load weight end.")
    kv = _index(text, "KV Cache is allocated.")
    prefill = _index(text, "Capture target prefill CUDA graph begin." if prefill_first else "Capture piecewise CUDA graph begin.")
    decode = _index(text, "Capture target decode CUDA graph begin." if version != "0.5.9" else "Capture cuda graph begin.")
    draft = _index(text, "Capture draft decode CUDA graph begin." if version != "0.5.9" else "Capture draft cuda graph begin.")
    ready = _index(text, "The server is fired up and ready to roll!")
    assert load < kv < min(prefill, decode) and max(prefill, decode) < draft < ready
    assert (prefill < decode) == prefill_first
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout=30)
    tail = server.text()[ready:]
    assert "SIGTERM received. signum=None frame=None. Draining requests and shutting down..." in tail
    if version == "0.5.9":
        assert code == 0 and "Finished server process" in tail
    else:  # utils/watchdog.py: the scheduler died of the SIGTERM; the launcher SIGQUITs and kills its tree
        assert "Subprocess scheduler_0 (pid=" in tail and "crashed with exit code -15. Triggering SIGQUIT for cleanup..." in tail
        assert _index(tail, "Triggering SIGQUIT") < _index(tail, "SIGQUIT received. signum=None, frame=None.")
        assert code == -signal.SIGKILL


FAULT = """
[[fault]]
id = "f"
effect = "{effect}"
at = "{at}"
progress = {progress}
lines = ["FAULT-LINE at {at}"]
"""


@pytest.mark.parametrize(
    ("effect", "at", "progress", "after", "before"),
    [
        ("capture_error", "piecewise_capture", 0.0, "Capture target prefill CUDA graph begin.", "Capture target decode CUDA graph begin."),
        ("capture_error", "decode_capture", 0.0, "Capture target decode CUDA graph begin.", "Capture draft decode"),
        ("load_error", "draft_worker", 0.0, "Capture target decode CUDA graph end.", "Capture draft decode"),
        ("capture_error", "draft_worker", 1.0, "Capture draft decode CUDA graph end.", "fired up"),
    ],
)
def test_a_fault_fires_in_its_stage(
    tmp_path: Path, servers: list[_Server], effect: str, at: str, progress: float, after: str, before: str
) -> None:
    server = _Server(tmp_path, "0.5.23", RELEASES[2][1], FAULT.format(effect=effect, at=at, progress=progress))
    servers.append(server)
    assert server.proc.wait(timeout=60) != 0
    text = server.text()
    line = _index(text, f"FAULT-LINE at {at}")
    assert _index(text, after) < line and before not in text


def test_a_shutdown_that_hangs_needs_sigkill(tmp_path: Path, servers: list[_Server]) -> None:
    server = _Server(tmp_path, "0.5.23", [], FAULT.format(effect="hang", at="shutdown", progress=0.0))
    servers.append(server)
    server.wait_for("fired up")
    server.proc.send_signal(signal.SIGTERM)
    text = server.wait_for("FAULT-LINE at shutdown")
    assert _index(text, "SIGTERM received.") < _index(text, "FAULT-LINE at shutdown")
    with pytest.raises(subprocess.TimeoutExpired):
        server.proc.wait(timeout=2)
    assert "Triggering SIGQUIT" not in server.text()


def test_hypoloop_does_not_take_the_shutdown_it_caused_for_a_crash(tmp_path: Path) -> None:
    """0.5.23 logs its scheduler's death by the SIGTERM hypoloop sends and SIGQUITs itself (137): those
    lines are the shutdown, kept apart from the experiment's evidence (tools/server.py)."""
    from tools.host import LocalHost, terminate_all
    from tools.server import ServerSession, SessionOptions, render_command
    from tools.signatures import SignatureMatcher, load_signatures

    world = tmp_path / "world.toml"
    world.write_text(WORLD.format(version="0.5.23", faults=""))
    host = LocalHost(env={"HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": "0.01",
                          "HF_HOME": str(tmp_path / "hf")})
    port = host.free_port()
    argv = render_command(["{python}", "-m", "lab.launch_server"], "org/M", {}, host="127.0.0.1", port=port)
    try:
        with ServerSession(host, argv, log_path=str(tmp_path / "lab.log"), port=port,
                           matcher=SignatureMatcher(load_signatures()),
                           options=SessionOptions(ready_timeout_s=60.0)) as s:
            assert s.wait_ready().status == "ready"
            assert s.stop() is True
            result = s.result()
            assert result.status == "ready"
            assert not any("SIGQUIT" in line.text for line in result.lines)
            assert not [m for m in result.matches if m.kind == "fatal"]
            assert any("Triggering SIGQUIT for cleanup" in line.text for line in s.shutdown_lines)
    finally:
        host.close()
        assert terminate_all() == []
