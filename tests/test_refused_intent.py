"""A value the user chose that the engine refuses where no setting offers another way is not the user's intent
to keep (issue 20, point 5: root fix over workaround, the user's intent kept where it can be).

An FP8 KV cache the case sets is the user's intent (knowledge/served.toml role ``intent``): dropping it is a
workaround, never the fix, while another attention backend might keep it. But SGLang 0.5.23's CPU engine
refuses it outright for an MLA model ("CPU FP8 KV cache is only supported for MHA.",
srt/mem_cache/kv_cache_configurator.py) and refuses e5m2 on any CPU ("--kv-cache-dtype fp8_e5m2 is not
supported on CPU.", srt/mem_cache/kv_cache_dtype.py): the conditions named (the model's attention kind, the
platform) are no choice of any setting, so the baseline never served that cache and dropping it is the fix.
Where the condition names something a setting chooses (a backend, a flag), the value stays the user's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import changes_tested, lab_case, run_auto
from planner_steps import SGLANG_0_5_23_FLAGS

from agent.domain.models import Outcome
from agent.planning.refused import refused_here
from bench.run import empty_catalog_knowledge

WORLD = Path(__file__).parent / "data" / "worlds" / "cpu-fp8-kv-mla" / "world.toml"
MODEL = "meituan/DeepSeek-R1-Channel-INT8"


def _run(tmp_path: Path, kv: str, catalog: str, description: str) -> tuple[dict, list[dict]]:
    case = lab_case(tmp_path / "case.toml", WORLD, model=MODEL, description=description,
                    baseline=f'flags = {{ "--device" = "cpu", "--tp-size" = 4, "--kv-cache-dtype" = "{kv}", '
                    '"--quantization" = "w8a8_int8" }', budget="experiments = 6")
    env = {"HYPOLOOP_LAB_TIME_SCALE": "0.002", "HYPOLOOP_LAB_SEED": "t", "HYPOLOOP_LAB_STATE": str(tmp_path / "lab")}
    if catalog == "empty":
        env["HYPOLOOP_KNOWLEDGE"] = str(empty_catalog_knowledge(tmp_path))
    return run_auto(tmp_path, case, **env)


@pytest.mark.parametrize(("kv", "catalog"), [("fp8_e4m3", "catalog"), ("fp8_e4m3", "empty"), ("fp8_e5m2", "catalog")])
def test_an_fp8_kv_cache_the_cpu_engine_refuses_for_this_model_is_dropped_as_the_root_fix(
        kv: str, catalog: str, tmp_path: Path) -> None:
    """The flags came from a GPU script; the KV pool refuses the FP8 cache on every rank. Dropping it serves,
    and the run ends isolated on it (a root fix, not "a workaround that changes the deployment"), without
    launches spent looking for an implementation that keeps a cache the engine has none for."""
    result, events = _run(tmp_path, kv, catalog, "A DeepSeek model on our four-socket box with SGLang's CPU "
                          "engine, flags taken from our GPU launch script plus --device cpu; it exits before ready.")
    assert result["status"] == "isolated", result.get("reason")
    fix = result["root_cause"]["fix"]
    assert fix["name"] == "--kv-cache-dtype" and fix["after"] in (None, "auto", "bf16", "bfloat16"), fix
    assert len(changes_tested(events)) <= 2, changes_tested(events)


def test_an_fp8_kv_cache_the_user_says_they_need_stays_a_workaround(tmp_path: Path) -> None:
    """The same refusal, but the description says the FP8 cache is needed: dropping it still serves, and is
    reported as what it is, a workaround that changes the deployment (not_isolated)."""
    result, _ = _run(tmp_path, "fp8_e4m3", "catalog", "A DeepSeek model on our four-socket box with SGLang's CPU "
                     "engine; we need --kv-cache-dtype fp8_e4m3 to fit our long contexts. It exits before ready.")
    assert result["status"] == "not_isolated", result.get("reason")


def _failed(what: str, when: str) -> Outcome:
    return Outcome(experiment_id="e1", stage="load_failed", facts={"unsupported_what": what, "unsupported_when": when})


def test_a_condition_naming_a_setting_choice_keeps_the_value_the_users() -> None:
    """On SGLang 0.5.23's own --help: a refusal whose condition names an attention backend, a flag or an
    argparse dest leaves another way to keep the value; the platform and the model's attention kind do not."""
    flags = SGLANG_0_5_23_FLAGS
    assert refused_here("--kv-cache-dtype", "fp8_e4m3", [_failed("CPU FP8 KV cache", "MHA")], flags, "--device")
    assert refused_here("--kv-cache-dtype", "fp8_e5m2", [_failed("--kv-cache-dtype fp8_e5m2", "CPU")], flags, "--device")
    assert not refused_here("--kv-cache-dtype", "fp8_e4m3", [_failed("FP8 KV cache", "the flashinfer backend")], flags, "--device")
    assert not refused_here("--kv-cache-dtype", "fp8_e4m3", [_failed("FP8 KV cache", "ep_size == 1")], flags, "--device")
    assert not refused_here("--kv-cache-dtype", "fp8_e4m3", [_failed("FP8 KV cache", "--page-size 1")], flags, "--device")
    assert not refused_here("--kv-cache-dtype", "fp8_e4m3", [_failed("NVFP4 custom KV indices", "MHA")], flags, "--device")
    assert not refused_here("--kv-cache-dtype", "fp8_e4m3", [_failed("CPU FP8 KV cache", "MHA")], None, "--device")
    ok = Outcome(experiment_id="e2", stage="ok", facts={"unsupported_what": "CPU FP8 KV cache", "unsupported_when": "MHA"})
    assert not refused_here("--kv-cache-dtype", "fp8_e4m3", [ok], flags, "--device")
