"""The model's `config.json` read through the host, where the server itself reads it.

`--model-path` is a local folder (`<folder>/config.json`) or a Hugging Face repo id, resolved in the hub
cache of the server's environment: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
`~/.cache/huggingface/hub`; the file is `models--<org>--<name>/snapshots/<refs/main>/config.json`
(huggingface_hub's cache layout: `constants.py`, `file_download.py`). Nothing is downloaded: a model not
cached on the host reads as None, as for an engineer who looks before the first launch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["model_config_facts", "read_model_config"]


class _ReadsFiles(Protocol):
    def run(self, argv: Any, *, timeout: float = ..., env: Mapping[str, str] | None = ...) -> Any: ...

    def read_text(self, path: str, max_bytes: int = ...) -> str | None: ...


def _hub_cache(host: _ReadsFiles, env: Mapping[str, str] | None) -> str | None:
    script = 'printf %s "${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"'
    try:
        done = host.run(["sh", "-c", script], timeout=30.0, env=dict(env or {}))
    except Exception:  # an unreachable host has no readable cache; the caller sees None
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def read_model_config(
    host: _ReadsFiles, model_path: str, env: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The parsed `config.json` of `model_path` on `host` (environment `env`, e.g. the case's host env
    with `HF_HOME`), or None when it is not there or not a JSON object. Never raises for a missing file
    or an unreachable host."""
    if model_path.startswith(("/", "~")):
        text = host.read_text(model_path.rstrip("/") + "/config.json")
    else:
        parts = model_path.split("/")
        cache = _hub_cache(host, env) if len(parts) == 2 and all(parts) else None
        if cache is None:
            return None
        repo = f"{cache}/models--{parts[0]}--{parts[1]}"
        revision = (host.read_text(f"{repo}/refs/main") or "").strip()
        if not revision or "/" in revision or revision.startswith("."):
            return None
        text = host.read_text(f"{repo}/snapshots/{revision}/config.json")
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def model_config_facts(cfg: Mapping[str, Any]) -> dict[str, str]:
    """The facts a diagnosis uses, as strings: `architecture`, `model_type`, `torch_dtype`,
    `max_position_embeddings`, `moe` ("true"/"false", from the expert-count keys transformers configs
    use: num_experts, n_routed_experts, num_local_experts), `num_experts`, `quant_method`
    (`quantization_config.quant_method`), `rope_scaling_type`/`rope_scaling_factor`. Absent keys are left out."""
    facts: dict[str, str] = {}
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs:
        facts["architecture"] = str(archs[0])
    for key in ("model_type", "torch_dtype", "max_position_embeddings"):
        if cfg.get(key) is not None:
            facts[key] = str(cfg[key])
    experts = next((cfg[k] for k in ("num_experts", "n_routed_experts", "num_local_experts") if cfg.get(k)), None)
    facts["moe"] = "true" if experts else "false"
    if experts:
        facts["num_experts"] = str(experts)
    quant = cfg.get("quantization_config")
    if isinstance(quant, Mapping) and quant.get("quant_method"):
        facts["quant_method"] = str(quant["quant_method"])
    rope = cfg.get("rope_scaling")
    if isinstance(rope, Mapping):
        kind = rope.get("rope_type") or rope.get("type")
        if kind:
            facts["rope_scaling_type"] = str(kind)
        if rope.get("factor") is not None:
            facts["rope_scaling_factor"] = str(rope["factor"])
    return facts
