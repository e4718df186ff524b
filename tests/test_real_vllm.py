"""hypoloop against real vLLM 0.32.0 on this host's CPU (issue 22, item 3): from a real failing command
(one wrong setting a user could make, `bench/real/vllm-*`), `hypoloop run CASE --auto --json` through the
real CLI must reach the case's right ending (its truth: the root fix, every link of a chain) within
chain length + 3 launches, and leave no engine process running.

Marked `real_engine`: they need the bed of `.ci/real-engines` (skipped with the reason where it is not
built). Each launch of vLLM takes 30-40 s here; run them alone with `pytest -m real_engine`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli
from conftest import engine_processes

from bench.real_cases import RealCase, judge, real_cases

CASES = real_cases("vllm-")


def run_case(tmp_path: Path, case: RealCase, root: Path) -> tuple[dict[str, Any], float, str]:
    """`hypoloop run` on the rendered case: (its JSON result, wall seconds, the marker of its processes)."""
    home = tmp_path / "home"
    path = case.render(tmp_path / case.name, root)
    start = time.monotonic()
    proc = run_cli(tmp_path, "run", str(path), "--auto", "--json", timeout=3600, HYPOLOOP_HOME=str(home))
    wall = time.monotonic() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no JSON result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(lines[-1]), wall, str(home)


def test_every_vllm_case_has_a_truth_and_six_or_more_exist() -> None:
    assert len(CASES) >= 6
    assert any(c.chain for c in CASES)  # a two-link chain
    for c in CASES:
        assert c.truth.get("root_cause") and (c.truth.get("fixes") or c.chain or c.expect != "isolated")


@pytest.mark.real_engine
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hypoloop_reaches_the_right_ending_on_real_vllm(tmp_path: Path, engines: Any, case: RealCase) -> None:
    result, wall, marker = run_case(tmp_path, case, engines.root)
    ok, why = judge(case, result)
    print(f"{case.name}: {why}; {result.get('launches')} launches, {wall:.0f} s wall")
    try:
        assert ok, f"{case.name}: {why}; transcript {result.get('transcript')}"
        assert result["launches"] <= case.launch_limit, (
            f"{case.name}: {result['launches']} launches, more than {case.launch_limit}"
        )
    finally:
        left = engine_processes(marker)
        assert not left, f"engine processes left running: {left}"
