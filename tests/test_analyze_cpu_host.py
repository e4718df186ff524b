"""``hypoloop analyze --case`` on a host with no GPU says the host is CPU-only, never "0 x None
(compute capability None)". The case's host is this machine (local), asked as a run asks it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from clirun import run_cli

LOG = Path(__file__).parent / "data" / "logs_0.5.23" / "tp2-no-bind.log"


def test_analyze_with_a_case_on_a_cpu_only_host_says_cpu_only(tmp_path: Path) -> None:
    if any(shutil.which(t) for t in ("nvidia-smi", "rocm-smi", "amd-smi")):
        pytest.skip("this machine has a GPU tool: its host is not CPU-only")
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "cpu-host"\n[host]\ntarget = "local"\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        '[model]\npath = "some/model"\n[baseline]\nflags = { "--device" = "cpu", "--tp-size" = 2 }\n'
    )
    r = run_cli(tmp_path, "analyze", str(LOG), "--case", str(case))
    assert r.returncode == 0, r.stderr[-2000:]
    host = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("host local")]
    assert host and "CPU-only" in host[0], r.stdout[:1500]
    assert "None" not in r.stdout.split("signatures")[0], r.stdout[:1500]
