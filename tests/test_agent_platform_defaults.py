"""End to end on the lab (the real CLI, graph and rule planner, auto-approved, lab servers launched): what
is in play on a ROCm host, and when replacing the implementation that failed is the fix.

SGLang picks the attention backend per platform when the command does not (0.5.23
``arg_groups/model_override_base.py`` ``get_default_attn_backend``: aiter on HIP), and groups
``--attention-backend``'s choices by the hardware they run on (``arg_groups/choices.py``). An engineer on a
ROCm host never tries a CUDA-only backend; and when the backend SGLang chose for the platform has no
kernels for this GPU, choosing one that runs here is the fix, while replacing a backend the user chose
is a workaround (issue 20, points 1 and 5)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import lab_bench_env, run_auto

from bench.methods import run_agent
from bench.run import empty_catalog_knowledge
from bench.worlds import discover

#: Fast enough for CI, slow enough for the stall detector and the lab's batching window.
TIME_SCALE = "0.002"
#: A Radeon host whose default (AITER) attention has no code object for its gfx target.
WORLD = "qwen3-8b-r9700"
#: SGLang 0.5.23 arg_groups/choices.py ATTENTION_BACKEND_CHOICES, "NVIDIA specific" and "Other platforms".
NOT_ON_ROCM = {"fa3", "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla",
               "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "intel_amx",
               "ascend", "intel_xpu"}


@pytest.fixture(scope="module")
def bench_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with lab_bench_env(tmp_path_factory.mktemp("platform-defaults"), TIME_SCALE) as root:
        yield root


def _attention_values(events: list[dict]) -> list[str]:
    return [str(e["data"]["change"]["after"]) for e in events if e["type"] == "experiment.proposed"
            and (e["data"].get("change") or {}).get("name") == "--attention-backend"]


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_platform_default_with_no_kernels_for_this_gpu_is_replaced_as_the_fix(catalog: str, bench_env: Path) -> None:
    """SGLang chose aiter for the ROCm host by itself and the first prefill fails with HIP's "invalid
    device function" (no code object for the GPU's gfx target). With or without the catalog the run ends
    isolated with an attention backend that runs on ROCm as the root fix (not a workaround), and no launch
    tries a backend of another platform."""
    import json

    (world,) = discover([WORLD])
    tr = bench_env / f"tr-{catalog}"
    knowledge = empty_catalog_knowledge(bench_env) if catalog == "empty" else None
    result = run_agent(world, transcripts=tr, seed="7", knowledge=knowledge)
    events = [json.loads(line) for p in tr.glob("*.jsonl") for line in p.read_text().splitlines()]
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert conclusion["status"] == "isolated", (result.status, result.found)
    assert result.correct and not result.wrong_isolated, (result.status, result.found)
    fix = conclusion["fix"]
    assert fix["name"] == "--attention-backend" and fix["after"] not in NOT_ON_ROCM | {"aiter"}, fix
    assert not any(a.get("workaround") and a.get("change", "").startswith("--attention-backend")
                   for a in conclusion["alternatives"]), conclusion["alternatives"]
    tried = _attention_values(events)
    assert tried and not set(tried) & NOT_ON_ROCM, tried
    if catalog == "empty":
        assert not result.extra["catalog_used"]


def test_replacing_the_users_own_backend_is_a_workaround(tmp_path: Path) -> None:
    """The same host, but the user's command sets --attention-backend aiter itself. Another backend
    serves, yet it replaces what the user chose: the run reports it as a workaround, tries the user's
    setting reverted (SGLang's default on ROCm, the same aiter), and does not end isolated."""
    (world,) = discover([WORLD])
    src = world.case_path.parent
    case = tomllib.loads((src / "case.toml").read_text())
    assert "--attention-backend" not in case["baseline"]["flags"]
    dest = tmp_path / "case"
    dest.mkdir()
    (dest / "world.toml").write_text((src / "world.toml").read_text())
    text = (src / "case.toml").read_text().replace(
        '[baseline]\nflags = { ', '[baseline]\nflags = { "--attention-backend" = "aiter", ', 1)
    assert '"--attention-backend" = "aiter"' in text
    (dest / "case.toml").write_text(text)
    result, events = run_auto(tmp_path, dest / "case.toml", HYPOLOOP_LAB_TIME_SCALE=TIME_SCALE,
                              HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))
    assert result["status"] == "not_isolated", result
    assert any(w["name"] == "--attention-backend" for w in result["workarounds"]), result["workarounds"]
    tried = _attention_values(events)
    assert "None" in tried and not set(tried) & NOT_ON_ROCM, tried


def test_a_hardware_exception_with_no_frame_suspects_what_ran_and_tries_only_what_runs_here(bench_env: Path) -> None:
    """Eight MI300X ranks abort with ROCm's HSA hardware exception and no Python frame. Without the catalog
    (no symptom rule), the implementations the run used are the suspects: the implementation of the
    collectives that an environment variable selects by default on ROCm is one (knowledge/switches.toml),
    its other implementation the root fix; no launch tries an attention backend of another platform."""
    import json

    (world,) = discover(["hy3-mi300x-tp8"])
    tr = bench_env / "tr-hsa"
    result = run_agent(world, transcripts=tr, seed="7", knowledge=empty_catalog_knowledge(bench_env))
    assert result.correct and not result.wrong_isolated, (result.status, result.found)
    assert not result.extra["catalog_used"]
    events = [json.loads(line) for p in tr.glob("*.jsonl") for line in p.read_text().splitlines()]
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert conclusion["status"] == "isolated" and conclusion["fix"]["kind"] == "env", conclusion["fix"]
    assert not set(_attention_values(events)) & NOT_ON_ROCM, _attention_values(events)
