"""Model features (MoE, MLA, DSA, quantization formats) and model names in notes; which families, words
and names is data (``knowledge/model_families.toml``, ``tools.knowledge.data``)."""

from __future__ import annotations

import re

from tools.knowledge.data import model_families

_NEGATION_RE = re.compile(
    r"\b(?:no|not|without|non|none of the|isn't|is not)[\s-]*(?:\w+[\s-]+)?$", re.IGNORECASE
)


def infer_features(text: str) -> set[str]:
    """Model features named or implied in ``text``: subset of moe, mla, dsa, nvfp4, mxfp4, fp8, dense
    (the features ``knowledge/model_families.toml`` names).

    From explicit words (``MoE``, ``MLA``, ``DSA``/``NSA``/"sparse attention", ``NVFP4``), flags that
    only exist for such models (``--moe-runner-backend``, ``--nsa-decode-backend``), quantization names
    (``modelopt_fp4`` -> nvfp4, ``--quantization fp8`` -> fp8) and known model families
    (``Kimi-K2`` -> moe+mla, ``DeepSeek-V3.2`` -> moe+mla+dsa, ``...-A22B`` -> moe). A mention right
    after a negation ("no DSA", "without MoE") does not count. ``dense`` is dropped when moe is found.
    Raises KnowledgeError when the knowledge file cannot be read.
    """
    table = model_families()
    found: set[str] = set()
    for feature, rx in table.words:
        for m in rx.finditer(text):
            if not _NEGATION_RE.search(text[max(0, m.start() - 24) : m.start()]):
                found.add(feature)
                break
    lowered = text.lower()
    for rx, features in table.families:
        if rx.search(lowered):
            found |= features
    if "moe" in found:
        found.discard("dense")
    return found


def model_from_text(text: str) -> str | None:
    """The first model name in ``text`` (``org/Name-...`` whose name starts with a prefix of
    ``model_families.toml``), trailing ``.``/``-`` removed; None when there is none."""
    rx = model_families().model_re
    m = rx.search(text) if rx is not None else None
    return m.group(1).rstrip(".-") if m else None
