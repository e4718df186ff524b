"""Platform deaths as the platform dies (issue 21, item 7): the scheduler killed by a signal (ROCm's HSA
runtime aborts on a GPU memory fault), faulthandler's text, and each release's launcher reaction."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROCM = REPO / "tests" / "data" / "worlds" / "rocm-ep-memory-fault" / "world.toml"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(tmp_path: Path, world: Path, *argv: str) -> tuple[subprocess.Popen[bytes], Path, int]:
    port = _port()
    log = tmp_path / "log"
    env = {**os.environ, "HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": "0.01",
           "HF_HOME": str(tmp_path / "hf")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp-size", "8",
             "--port", str(port), *argv],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    return proc, log, port


def _wait(proc: subprocess.Popen[bytes], log: Path, needle: str) -> str:
    deadline = time.monotonic() + 60
    while needle not in log.read_text(errors="replace") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return log.read_text(errors="replace")


def test_rocm_abort_at_the_first_decode_with_0_5_23s_reaction(tmp_path: Path) -> None:
    proc, log, port = _launch(tmp_path, ROCM, "--ep-size", "8", "--skip-server-warmup")
    try:
        _wait(proc, log, "fired up")
        body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                     headers={"Content-Type": "application/json"})
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(req, timeout=30).read()
        assert proc.wait(timeout=30) == -signal.SIGKILL  # kill_process_tree of the launcher: 137
        text = log.read_text(errors="replace")
        order = [
            "Memory access fault by GPU node-2 (Agent handle: 0x56468ab3bb50)",
            "Fatal Python error: Aborted",
            "<no Python frame>",
            "Subprocess scheduler_0 (pid=",
            "crashed with exit code -6. Triggering SIGQUIT for cleanup...",
            "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        ]
        positions = [text.index(n) for n in order]
        assert positions == sorted(positions), text[-3000:]
        fault_line = next(line for line in text.splitlines() if "Memory access fault" in line)
        assert fault_line.startswith("Memory access fault")  # the HSA runtime writes it raw, no log prefix
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_without_expert_parallelism_it_serves(tmp_path: Path) -> None:
    proc, log, port = _launch(tmp_path, ROCM)
    try:
        text = _wait(proc, log, "fired up")
        assert "fired up" in text and "Fatal Python error" not in text  # the warm-up decoded fine
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.parametrize(("version", "expected"), [
    ("0.5.9", "Rank 0 scheduler is dead. Please check if there are relevant logs.\nExit code: -11"),
    ("0.5.23", "RuntimeError: Rank 0 scheduler died during initialization (exit code: -11)."),
])
def test_a_segfault_while_loading_ends_the_launch_the_release_way(tmp_path: Path, version: str, expected: str) -> None:
    world = tmp_path / "world.toml"
    text = ROCM.read_text().replace('version = "0.5.23"', f'version = "{version}"')
    text = text.replace('signal = "SIGABRT"\nat = "serving"', 'signal = "SIGSEGV"\nat = "weights"\nprogress = 0.5')
    world.write_text(text)
    proc, log, _ = _launch(tmp_path, world, "--ep-size", "8")
    try:
        assert proc.wait(timeout=60) == 1
        out = log.read_text(errors="replace")
        assert "Fatal Python error: Segmentation fault" in out and expected in out
        assert "Load weight begin" in out and "Load weight end" not in out  # it died while loading
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
