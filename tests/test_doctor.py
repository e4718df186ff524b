"""`hypoloop doctor`: the host fingerprint in one screen and as JSON, from the host's own tools
(nvidia-smi or amd-smi, `python -m sglang.check_env`, the version command), launching nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clirun import run_cli

from lab.world import load_world


@pytest.mark.parametrize("world", ["glm5-nvfp4-sm120", "mi300x-no-kv-room"])
def test_doctor_reports_the_hosts_gpus_runtime_and_packages(world: str, tmp_path: Path) -> None:
    hw = load_world(world).hardware
    done = run_cli(tmp_path, "doctor", "--case", f"lab:{world}", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["gpu_vendor"] == hw.vendor
    assert got["gpus"]["name"] == hw.gpu_name and got["gpus"]["count"] == hw.gpu_count
    assert got["driver_version"] == hw.driver_version
    assert got["sglang_version"] == load_world(world).version.version
    assert got["packages"].get("sglang") == got["sglang_version"] and got["check_env"]
    assert any(hw.driver_version in v for v in got["runtime"].values())  # the CUDA or ROCm driver line
    screen = run_cli(tmp_path, "doctor", "--case", f"lab:{world}", COLUMNS="80").stdout.splitlines()
    assert len(screen) <= 24 and max(len(ln.rstrip()) for ln in screen) <= 80
    assert any(ln.startswith("GPUs") and hw.gpu_name.split()[-1] in " ".join(screen) for ln in screen)


def test_doctor_on_a_host_without_sglang_says_what_is_missing_in_one_screen(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "doctor", "--host", "local", COLUMNS="80")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= 24 and "Traceback" not in done.stdout
    if shutil.which("nvidia-smi") is None and shutil.which("amd-smi") is None and shutil.which("rocm-smi") is None:
        assert any("CPU-only" in ln for ln in lines)
    got = json.loads(run_cli(tmp_path, "doctor", "--host", "local", "--json").stdout)
    assert set(got) >= {"gpu_vendor", "gpus", "driver_version", "runtime", "sglang_version", "packages", "check_env"}


def test_doctor_without_sglang_says_so_in_one_line_not_its_snippet(tmp_path: Path) -> None:
    """The note on the failed version command printed hypoloop's own multi-line Python snippet; it is one
    line saying SGLang is not installed in that Python."""
    import subprocess

    if subprocess.run(["python", "-c", "import sglang"], capture_output=True).returncode == 0:
        pytest.skip("this machine's python has SGLang")
    got = json.loads(run_cli(tmp_path, "doctor", "--host", "local", "--json").stdout)
    notes = [n for n in got["notes"] if n.startswith("no SGLang version")]
    assert len(notes) == 1 and "\n" not in notes[0], got["notes"]
    assert "SGLang is not installed in python" in notes[0]
    screen = run_cli(tmp_path, "doctor", "--host", "local", COLUMNS="80").stdout
    assert "importlib.metadata" not in screen and "for d in" not in screen and "sys.exit" not in screen


def test_doctor_with_a_launcher_the_host_lacks_fails_in_one_line(tmp_path: Path) -> None:
    """``--launcher`` naming a command the host does not have is a failed check: the screen says so, the
    error is one line naming the option and the command, and the exit is non-zero (as JSON too)."""
    missing = "no-such-launcher-cmd"
    for extra in ([], ["--json"]):
        done = run_cli(tmp_path, "doctor", "--launcher", f"{missing} --port 1", *extra)
        assert done.returncode == 1, (done.returncode, done.stderr)
        err = done.stderr.strip().splitlines()
        assert len(err) == 1 and "--launcher" in err[0] and missing in err[0] and "not found" in err[0], err
        assert "Traceback" not in done.stderr
        assert missing in done.stdout  # the screen (or the JSON's notes) names it too
    found = run_cli(tmp_path, "doctor", "--launcher", f"{shutil.which('python3') or 'python3'} -m sglang.launch_server")
    assert found.returncode == 0, found.stderr  # a launcher the host has passes the check
