"""Lab and reality cannot drift apart unseen (issue 22, item 5): for each real SGLang case that has a lab
twin (lab/worlds-twins), the real run (tests/realrun.py: the one tests/test_real_cases.py already made in
this session, else a new one) and the twin's lab run must end the same way: the same status, a fix named
in both or in neither, and the same fix (kind and name; the value may differ where the truth accepts
several). Marked ``real_engine``; ``HYPOLOOP_REAL_CASES`` picks the cases as for test_real_cases.py (CI runs
sglang-cpu-engine; a developer runs all). vLLM cases have no twin (the lab speaks SGLang only).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EnginesBed
from realrun import real_run
from test_real_cases import CASES
from test_twins import TWINS, scored, twin_ending

from bench.real import twins

pytestmark = pytest.mark.real_engine

PAIRS = [n for n in CASES if n in TWINS]


@pytest.mark.parametrize("name", PAIRS)
def test_the_lab_twin_ends_as_the_real_case_ends(name: str, engines: EnginesBed, tmp_path: Path) -> None:
    run = real_run(name, engines.root, tmp_path / "real")
    assert run.result is not None, f"the real run printed no result (exit {run.returncode}): {run.stderr[-2000:]}"
    real = scored(run.case, run.result)
    (twin_case,) = twins([name])
    twin = twin_ending(twin_case, tmp_path / "twin")
    print(f"{name}: real {real['ending']} ({real['score'].why}), twin {twin['ending']} ({twin['score'].why})")
    assert twin["ending"] == real["ending"], (
        f"{name}: the lab twin ended {twin['ending']} ({twin['reason']}), the real engine {real['ending']} "
        f"({real['reason']}): lab/worlds-twins/world.toml no longer behaves as the real bed"
    )
    assert twin["score"].correct == real["score"].correct, (real["score"].why, twin["score"].why)
