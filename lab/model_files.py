"""The model's files on the simulated host: a `config.json` where the real one would be.

A world's `[model]` facts become a Hugging Face `config.json` (`architectures`, `model_type`,
`torch_dtype`, `max_position_embeddings`, MoE expert counts, `quantization_config`, `rope_scaling`, …);
a `[model.config]` table is merged over it verbatim, so a world written from a report can copy the
fields the reporter's model really has. The server writes it when it starts, where `--model-path`
resolves on a real host:

- a Hugging Face repo id (`org/name`): the hub cache of the server's environment,
  `$HF_HUB_CACHE` or `$HF_HOME/hub` or `~/.cache/huggingface/hub`, as
  `models--org--name/snapshots/<revision>/config.json` with `refs/main` naming the revision
  (huggingface_hub's cache layout, `file_download.py`);
- a local folder (an absolute alias such as `/models/Qwen3-8B`): `<folder>/config.json`, only when the
  folder already exists (the lab never creates folders outside a cache).

Existing files that the lab did not write are never touched (a real cached model stays as it is).
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: A file beside config.json that marks it as the lab's (the config itself stays as a real one reads).
LAB_MARK = ".lab-model"

_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32"}

#: quantization_config.quant_method for a model's `quantization` fact or its features
#: (the methods transformers/SGLang read from config.json: fp8, compressed-tensors, modelopt, mxfp4, awq, gptq).
_QUANT_FEATURES = {"fp8": "fp8", "nvfp4": "modelopt", "mxfp4": "mxfp4", "awq": "awq", "gptq": "gptq"}

#: The sub-configuration a multimodal checkpoint's config.json carries for its encoder tower, by feature: a
#: vision tower is `vision_config` (transformers Qwen2VLConfig / Qwen3VLConfig / LlavaConfig ...; SGLang
#: 0.5.23 srt/configs/model_config.py keys image understanding on `vision_config` being set), an audio one
#: `audio_config` (Qwen2AudioConfig). The figures are a ViT's of that size (Qwen3-VL's vision_config: depth
#: 27, hidden_size 1152, 16 heads, patch 16); `[model.config]` overrides them with the reporter's own.
_TOWERS = {
    "vision": ("vision_config", {"depth": 27, "hidden_size": 1152, "num_heads": 16, "patch_size": 16}),
    "audio": ("audio_config", {"num_hidden_layers": 32, "d_model": 1280}),
}


#: The DSA lightning indexer's keys a sparse-attention checkpoint's config.json carries (DeepSeek-V3.2-Exp
#: config.json: index_topk 2048, index_n_heads 64, index_head_dim 128; GLM-5's glm_moe_dsa config carries the
#: same keys). SGLang 0.5.23 srt/configs/model_config.py `is_deepseek_dsa` keys the sparse-attention path on
#: `index_topk` being set; `[model.config]` overrides the figures with the reporter's own.
_DSA_INDEXER = {"index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128}


def config_json(model: Any) -> dict[str, Any]:
    """The `config.json` of a world's model (`lab.world.Model`): facts first, `[model.config]` over them."""
    fields: Mapping[str, Any] = model.fields
    cfg: dict[str, Any] = {
        "architectures": [model.architecture],
        "model_type": model.model_type,
        "torch_dtype": _DTYPES.get(model.dtype, model.dtype.removeprefix("torch.")),
        "max_position_embeddings": int(model.context_length),
    }
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size"):
        if key in fields:
            cfg[key] = fields[key]
    features = set(model.features)
    if "moe" in features:
        cfg["num_experts"] = int(fields.get("num_experts", 128))
        cfg["num_experts_per_tok"] = int(fields.get("num_experts_per_tok", 8))
    for feature, (key, tower) in _TOWERS.items():
        if feature in features:
            cfg[key] = dict(tower)
    if "dsa" in features or fields.get("sparse_attention"):
        cfg.update(_DSA_INDEXER)
    quant = fields.get("quantization")
    if not quant:
        quant = next((q for f, q in _QUANT_FEATURES.items() if f in features), None)
    if quant:
        cfg["quantization_config"] = {"quant_method": str(quant)}
    if "rope_scaling" in fields:
        cfg["rope_scaling"] = fields["rope_scaling"]
    extra = fields.get("config")
    if isinstance(extra, Mapping):
        cfg.update(dict(extra))
    return cfg


def hub_cache(env: Mapping[str, str]) -> Path:
    """The Hugging Face hub cache a process with environment `env` uses (huggingface_hub constants.py)."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache" / "huggingface")
    return Path(home).expanduser() / "hub"


def model_dir(model_path: str, env: Mapping[str, str], cfg: Mapping[str, Any]) -> Path | None:
    """Where the model named by `--model-path` lives on the host, or None when the lab writes nothing
    there (an absolute folder that does not exist, or a path that is neither a folder nor `org/name`)."""
    if model_path.startswith(("/", "~", ".")):
        folder = Path(model_path).expanduser()
        return folder if folder.is_dir() else None
    parts = model_path.split("/")
    if len(parts) != 2 or not all(parts):
        return None
    revision = hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()
    repo = hub_cache(env) / f"models--{parts[0]}--{parts[1]}"
    return repo / "snapshots" / revision


def write_model_files(model: Any, model_path: str, env: Mapping[str, str]) -> Path | None:
    """Write the model's `config.json` where `model_path` resolves (see the module text); return its
    path, or None when nothing was written (no place for it, or a file the lab did not write is there).
    Never raises for file-system errors (a read-only cache leaves the host without the file)."""
    cfg = config_json(model)
    folder = model_dir(model_path, env, cfg)
    if folder is None:
        return None
    target = folder / "config.json"
    try:
        if target.exists() and not _lab_written(target):
            return None
        if folder.parent.name == "snapshots":
            repo = folder.parent.parent
            other = [p for p in (repo / "snapshots").glob("*") if p != folder] if repo.is_dir() else []
            if any(not _lab_written(p / "config.json") for p in other):
                return None  # a real download of this repo is cached: leave it alone
            folder.mkdir(parents=True, exist_ok=True)
            (repo / "refs").mkdir(exist_ok=True)
            (repo / "refs" / "main").write_text(folder.name, encoding="utf-8")
        (folder / LAB_MARK).write_text("written by the lab's stand-in server\n", encoding="utf-8")
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        tmp.replace(target)
    except (OSError, ValueError):
        return None
    return target


def _lab_written(path: Path) -> bool:
    """Whether the config.json at `path` is the lab's (its folder has the mark) or absent."""
    return not path.exists() or (path.parent / LAB_MARK).is_file()


def ensure_model_files(world: Any, env: Mapping[str, str], model_path: str | None = None) -> list[Path]:
    """Put the world's model files on the host: under its repo id in the hub cache, in every alias folder
    that exists, and where `model_path` (the `--model-path` given) resolves. Every lab entry point calls
    this, so the files are there before the first launch, as a downloaded model is. Returns the files
    written or refreshed."""
    paths = [world.model.path, *world.model.aliases]
    if model_path and model_path not in paths:
        paths.append(model_path)
    written = [write_model_files(world.model, p, env) for p in paths]
    return [p for p in written if p is not None]
