"""The benchmark runs end to end on one world (the real agent, the baselines, the lab server) and reports
a table and JSON with the targets; ddmin and the human sequence behave as described."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agent.catalog import load_catalog
from agent.models import Baseline
from bench.methods import plausible_changes
from bench.run import run_bench
from bench.worlds import discover, is_root_fix
from tools.flags import parse_help

REPO = Path(__file__).resolve().parents[1]
HELP = parse_help((REPO / "tests" / "data" / "help_sglang_0.5.9.txt").read_text(), source="fixture")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_")}
    env["COLUMNS"] = "160"
    return env


def test_bench_runs_on_one_world_and_prints_json_with_targets(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--worlds",
            "triton-ptxas-sm120",
            "--seeds",
            "2",
            "--json",
            "--quiet",
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    world = out["worlds"]["triton-ptxas-sm120"]
    agent, rnd = world["agent"], world["random"]
    assert (
        agent["correct_root_cause"] is True
        and agent["found"] == "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas"
    )
    assert agent["launches"] == 3 and agent["host_seconds"] > 0 and agent["wall_seconds"] > 0
    assert rnd["launches"] > agent["launches"] and rnd["seeds"] == 2 and len(rnd["runs"]) == 2
    assert "human" not in world and "ddmin" not in world  # no human session and no known-good finding here
    assert out["agent_detection_delay_s"]["median"] < 0.2
    assert out["agent_overhead_per_step_ms"]["steps"] == 3
    names = [t["target"] for t in out["targets"]]
    assert "triton-ptxas-sm120: agent launches <= 1/2 of random's mean" in names
    assert any(n.startswith("agent overhead per step") for n in names)


def test_human_sequence_and_ddmin_on_the_worlds_that_have_them(tmp_path: Path) -> None:
    res = run_bench(["glm5-nvfp4-sm120", "cuda-graph-oom"], methods=("human", "ddmin"), workdir=tmp_path)
    glm = {w.world: w for w in res.worlds}["glm5-nvfp4-sm120"].methods
    human = glm["human"]
    assert human.launches == 6 and human.correct and human.found == "--kv-cache-dtype bf16"
    assert glm["ddmin"].correct is False  # the known-good Kimi settings do not fix GLM-5
    ddmin = {w.world: w for w in res.worlds}["cuda-graph-oom"].methods["ddmin"]
    assert ddmin.correct and ddmin.found == "--mem-fraction-static 0.85"
    assert ddmin.extra["minimal"] == ["--mem-fraction-static: 0.9 → 0.85"]


def test_random_baseline_draws_from_catalog_values_flag_choices_and_findings() -> None:
    changes = plausible_changes(
        Baseline(flags={"--attention-backend": "triton"}), load_catalog(), HELP, findings=[]
    )
    keys = {c.key() for c in changes}
    assert 'env:TRITON_PTXAS_PATH="/usr/local/cuda/bin/ptxas"' in keys
    assert 'flag:--attention-backend="flashinfer"' in keys and 'flag:--attention-backend="triton"' not in keys
    assert not any("ascend" in k or "intel" in k for k in keys)  # other vendors' backends are not plausible
    assert len(keys) == len(changes) > 30


def test_scoring_tells_root_fixes_from_workarounds() -> None:
    world = next(
        w for w in discover(["triton-ptxas-sm120", "kv-pool-no-room"]) if w.name == "triton-ptxas-sm120"
    )
    assert is_root_fix(world, "env", "TRITON_PTXAS_PATH", "/usr/local/cuda/bin/ptxas")
    assert not is_root_fix(world, "flag", "--disable-cuda-graph", True)
    kv = discover(["kv-pool-no-room"])[0]
    assert is_root_fix(kv, "flag", "--mem-fraction-static", "0.93")  # any working value of a numeric fix
