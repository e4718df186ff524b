"""The served model's own ``config.json``, read from the host before anything is launched.

An engineer opens the checkpoint's configuration before proposing a change: whether the model is a
mixture of experts, whether it has a vision tower or linear-attention layers, its quantization method,
dtype, maximum positions and rope scaling. hypoloop reads the same file through the ``Host`` interface,
where ``--model-path`` points: a local folder (``PATH/config.json``), or a Hugging Face repository id in
the host's Hugging Face cache (``$HF_HOME/hub/models--ORG--NAME/snapshots/*/config.json``, default
``HF_HOME`` ``~/.cache/huggingface``; huggingface_hub's cache layout). Nothing is downloaded.

The digest (``checkpoint_facts``) is a flat ``str -> str`` map (``architecture``, ``quant_method``,
``torch_dtype``, ``max_position_embeddings``, ``num_attention_heads``, ``num_key_value_heads``,
``num_hidden_layers``, ``head_dim``, ``hidden_size`` (what one token's KV cache takes,
``agent.planning.budgets``), ``rope_scaling``, ``model_type``) plus the raw key names
found at the top level and in nested ``text_config``/``language_config`` (``keys``: space-separated),
so that which keys make a model MoE, multimodal or linear-attention is data (``knowledge/subsystems.toml``,
``[[model_trait]]``), not code.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from tools.host import Host, HostError

__all__ = ["checkpoint_facts", "read_model_config"]

#: Sub-configurations whose keys describe the language model of a multimodal checkpoint.
_NESTED = ("text_config", "language_config", "llm_config", "thinker_config")


def read_model_config(host: Host, model_path: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any] | None, str]:
    """(parsed config.json, where it was read) for ``model_path`` on ``host``; (None, why) when there is
    none to read (not a folder, not in the cache, unreadable or not JSON). Never raises."""
    path = model_path.rstrip("/")
    candidates = [f"{path}/config.json"]
    text = None
    where = ""
    for c in candidates:
        text = host.read_text(c, max_bytes=1 << 20)
        if text is not None:
            where = c
            break
    if text is None and path.count("/") == 1 and not path.startswith((".", "~")):
        # a repository id: look in the host's Hugging Face cache (no download)
        repo = "models--" + path.replace("/", "--")
        hf_home = (env or {}).get("HF_HOME")
        base = shlex.quote(hf_home) if hf_home else '"${HF_HOME:-$HOME/.cache/huggingface}"'
        cmd = f"cat {base}/hub/{shlex.quote(repo)}/snapshots/*/config.json 2>/dev/null | head -c 1048576"
        try:
            res = host.run(["sh", "-c", cmd], timeout=30.0)
        except HostError as exc:
            return None, f"cannot look in the Hugging Face cache: {exc}"
        if res.returncode == 0 and res.stdout.strip():
            text, where = res.stdout, f"Hugging Face cache ({repo})"
    if text is None:
        return None, f"no config.json at {path} or in the Hugging Face cache"
    try:
        data = json.loads(text)
    except ValueError:
        # several snapshots concatenated: the first document
        try:
            data, _ = json.JSONDecoder().raw_decode(text.lstrip())
        except ValueError:
            return None, f"{where}: not JSON"
    if not isinstance(data, dict):
        return None, f"{where}: not a JSON object"
    return data, where


def checkpoint_facts(config: dict[str, Any]) -> dict[str, str]:
    """The digest of a parsed config.json (see module docstring)."""
    nested = [config] + [config[k] for k in _NESTED if isinstance(config.get(k), dict)]
    out: dict[str, str] = {}

    def first(key: str) -> Any:
        for c in nested:
            if c.get(key) is not None:
                return c[key]
        return None

    archs = config.get("architectures")
    if isinstance(archs, list) and archs:
        out["architecture"] = str(archs[0])
    for key in ("model_type", "torch_dtype", "dtype", "max_position_embeddings", "num_attention_heads",
                "num_key_value_heads", "num_hidden_layers", "head_dim", "hidden_size"):
        v = first(key)
        if v is not None and not isinstance(v, dict | list):
            out["torch_dtype" if key == "dtype" else key] = str(v)
    keys_extra: set[str] = set()
    q = first("quantization_config")
    if isinstance(q, dict):
        method = q.get("quant_method") or q.get("quant_algo")
        if method:
            out["quant_method"] = str(method)
            keys_extra = {f"quant_method:{method}"}
    rope = first("rope_scaling")
    if isinstance(rope, dict):
        out["rope_scaling"] = str(rope.get("rope_type") or rope.get("type") or "set")
    keys: set[str] = set(keys_extra)
    for c in nested:
        for k, v in c.items():
            if v is None or v is False or v == 0 or v == [] or v == {}:
                continue  # a key present but empty says the feature is absent
            keys.add(k)
            if k == "layer_types" and isinstance(v, list):
                keys |= {f"layer_type:{t}" for t in v if isinstance(t, str)}
    out["keys"] = " ".join(sorted(keys))
    return out
