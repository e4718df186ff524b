"""One real-engine run of a bench/real case, as a user runs it (``hypoloop run CASE --auto --json`` on the
real bed), kept for the rest of the test session: tests/test_real_cases.py checks its ending against the
truth, tests/test_twins_real.py compares it with the lab twin's ending, and neither launches the real
engine twice for one case (a real run takes 2-5 minutes)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clirun import HYPOLOOP, cli_env
from conftest import engine_processes

from bench.real import RealCase, discover, holding

#: A real run's wall-clock limit: launches take 25-40 s on an idle 2-core host, minutes on a busy one.
RUN_TIMEOUT_S = 2400


@dataclass
class RealRun:
    """A finished real run: its case, JSON result line (None when it printed none), the process's exit
    code and stderr, its wall-clock seconds, and the engine processes it left running."""

    case: RealCase
    result: dict[str, Any] | None
    returncode: int
    stderr: str
    wall_s: float
    left: list[tuple[int, str]]


_RUNS: dict[str, RealRun] = {}


def real_run(name: str, engines_root: Path, workdir: Path) -> RealRun:
    """The real run of case ``name`` on the bed at ``engines_root``: the one this session already made,
    else a new one in ``workdir`` (its own HYPOLOOP_HOME; the real clock)."""
    if name in _RUNS:
        return _RUNS[name]
    workdir.mkdir(parents=True, exist_ok=True)
    case = discover(names=[name], out_dir=workdir / "cases", root=engines_root)[0]
    t0 = time.monotonic()
    env = cli_env(workdir)
    env.pop("HYPOLOOP_LAB_TIME_SCALE", None)  # real engines run on real time, as a user's do
    with holding(case.holds):  # what already listens on the host (before.toml), e.g. the case's port
        proc = subprocess.run(
            [*HYPOLOOP, "run", str(case.case_path), "--auto", "--json"], cwd=workdir, env=env,
            capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )
    wall = time.monotonic() - t0
    # Everything the run started inherited its HYPOLOOP_HOME: nothing of it may still run.
    left = engine_processes(str(workdir / "home"))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    _RUNS[name] = RealRun(case, result, proc.returncode, proc.stderr, wall, left)
    return _RUNS[name]
