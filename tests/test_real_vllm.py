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

from bench.real_cases import RealCase, engines_root, judge, real_cases

CASES = real_cases("vllm-")


class Bed:
    """The real-engine bed of `.ci/real-engines` (its folder; `bin/vllm` and the tiny model in it)."""

    def __init__(self, root: Path) -> None:
        self.root = root


@pytest.fixture(scope="session")
def engines() -> Bed:
    """The bed, or a skip naming what is missing (build it with `.ci/real-engines`)."""
    root = engines_root()
    for need in ("bin/vllm", "tiny-llama/config.json", "tiny-llama/model.safetensors"):
        if not (root / need).is_file():
            pytest.skip(f"no real-engine bed at {root} ({need} missing): build it with .ci/real-engines")
    return Bed(root)


def engine_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of live processes whose environment holds `marker` (the run's HYPOLOOP_HOME,
    inherited by the engine and every child it starts, whatever they rename themselves to)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if marker in environ and state not in ("Z", "X"):
            found.append((int(entry.name), cmd.strip()))
    return found


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
