"""The model's config.json is on the lab host where the real one would be (issue 21, item 2), and
hypoloop reads it through the host like on a real one (`tools.model_files`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.world import load_world
from tools.host import LocalHost
from tools.model_files import model_config_facts, read_model_config

REPO = Path(__file__).resolve().parents[1]
WORLDS = sorted(p.name for p in (REPO / "lab" / "worlds").iterdir() if (p / "world.toml").is_file())


def _host(tmp_path: Path, world: str) -> tuple[LocalHost, dict[str, str]]:
    env = {"HYPOLOOP_LAB_WORLD": world, "HF_HOME": str(tmp_path / "hf"), "HYPOLOOP_LAB_TIME_SCALE": "0.001"}
    return LocalHost(env=env), env


@pytest.mark.parametrize("name", WORLDS)
def test_every_world_has_its_model_config_where_hypoloop_reads_it(tmp_path: Path, name: str) -> None:
    host, env = _host(tmp_path, name)
    assert read_model_config(host, load_world(name).model.path, env) is None  # nothing before the host ran
    r = host.run([sys.executable, "-m", "lab.check_env"], env=env)
    assert r.returncode == 0, r.stderr
    world = load_world(name)
    cfg = read_model_config(host, world.model.path, env)
    assert cfg is not None
    facts = model_config_facts(cfg)
    assert facts["architecture"] == world.model.architecture
    assert facts["model_type"] == world.model.model_type
    assert facts["max_position_embeddings"] == str(world.model.context_length)
    assert facts["torch_dtype"] == world.model.dtype.removeprefix("torch.")
    assert facts["moe"] == ("true" if "moe" in world.model.features else "false")
    # a multimodal checkpoint carries its encoder tower's sub-configuration, as a real one does
    assert bool(cfg.get("vision_config")) == ("vision" in world.model.features)
    # a sparse-attention checkpoint carries its DSA indexer's keys: SGLang 0.5.23 keys that path on
    # index_topk (srt/configs/model_config.py is_deepseek_dsa), and so does hypoloop's in-play reading
    sparse = "dsa" in world.model.features or bool(world.model.fields.get("sparse_attention"))
    assert (cfg.get("index_topk") is not None) == sparse
    quant = world.model.fields.get("quantization")
    if quant:
        # a ModelOpt checkpoint names its method "modelopt" and its algorithm apart, as NVIDIA's do; SGLang
        # 0.5.23 reads NVFP4/FP4 as modelopt_fp4 and FP8 as modelopt_fp8 (srt/configs/model_config.py
        # _parse_modelopt_quant_config)
        algo = str((cfg.get("quantization_config") or {}).get("quant_algo", "")).upper()
        modelopt = {"modelopt_fp4": "FP4" in algo, "modelopt_fp8": algo == "FP8"}
        assert facts["quant_method"] == quant or (facts["quant_method"] == "modelopt" and modelopt.get(quant)), quant


WORLD = """
name = "cfg"
description = "d"
[sglang]
version = "0.5.23"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 81559
[model]
path = "org/Long-Model"
aliases = ["{alias}"]
architecture = "Qwen3ForCausalLM"
model_type = "qwen3"
dtype = "torch.bfloat16"
context_length = 32768
checkpoint_shards = 1
features = ["dense"]
[model.config]
max_position_embeddings = 131072
rope_scaling = {{ rope_type = "yarn", factor = 4.0, original_max_position_embeddings = 32768 }}
[timing]
init_s = 1.0
load_s = 1.0
[memory]
weights_gb_total = 10.0
[truth]
root_cause = "none"
component = "none"
expect = "not_reproduced"
fixes = []
"""


def test_a_world_copies_the_reported_config_fields_and_a_local_folder_gets_its_file(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "Long-Model"
    folder.mkdir(parents=True)
    world = tmp_path / "world.toml"
    world.write_text(WORLD.format(alias=folder))
    host, env = _host(tmp_path, str(world))
    r = host.run([sys.executable, "-m", "lab.check_env"], env=env)
    assert r.returncode == 0, r.stderr
    for path in ("org/Long-Model", str(folder)):
        facts = model_config_facts(read_model_config(host, path, env) or {})
        assert facts["rope_scaling_type"] == "yarn" and facts["rope_scaling_factor"] == "4.0"
        assert facts["max_position_embeddings"] == "131072" and facts["moe"] == "false"


def test_a_real_cached_model_is_never_touched(tmp_path: Path) -> None:
    repo = tmp_path / "hf" / "hub" / "models--Qwen--Qwen3-8B"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    real = json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936})
    (repo / "snapshots" / "abc123" / "config.json").write_text(real)
    host, env = _host(tmp_path, "triton-ptxas-sm120")
    assert host.run([sys.executable, "-m", "lab.check_env"], env=env).returncode == 0
    assert (repo / "refs" / "main").read_text() == "abc123"
    assert sorted(p.name for p in (repo / "snapshots").iterdir()) == ["abc123"]
    assert (repo / "snapshots" / "abc123" / "config.json").read_text() == real


def test_the_launched_server_writes_the_config_of_the_path_it_was_given(tmp_path: Path) -> None:
    """`--model-path` with an alias folder that exists: the server leaves config.json there, as a
    downloaded model folder has one (and exits at once on --version, so the launch needs no wait)."""
    folder = tmp_path / "m"
    folder.mkdir()
    world = tmp_path / "world.toml"
    world.write_text(WORLD.format(alias=folder))
    env = {**os.environ, "HYPOLOOP_LAB_WORLD": str(world), "HF_HOME": str(tmp_path / "hf"),
           "HYPOLOOP_LAB_TIME_SCALE": "0.001"}
    proc = subprocess.run(
        [sys.executable, "-m", "lab.launch_server", "--model-path", str(folder), "--port", "1", "--tp-size", "4"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode != 0  # 4 GPUs asked on a 1-GPU world: it stops in init, after reading the config
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
