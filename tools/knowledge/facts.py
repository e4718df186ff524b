"""Effective-config facts quoted in notes (``kv_cache_dtype: fp8_e4m3``, "attention_backend was set to
triton", SGLang's own log lines); which facts and their other spellings are data
(``knowledge/config_facts.toml``, ``tools.knowledge.data``)."""

from __future__ import annotations

import re

from tools.knowledge.data import config_facts

_KV_PROSE_RE = re.compile(
    r"KV[- ]cache(?:\s+dtype)?\s+(?:resolved|was set|is set|defaulted|fell back|was auto-set|auto-resolved)\s+to\s+"
    r"`?(?P<value>auto|bf16|bfloat16|fp8_e4m3|fp8_e5m2|fp4_e2m1|mxfp8|nvfp4)\b",
    re.IGNORECASE,
)
# SGLang's own log wording (0.5.x): "Setting KV cache dtype to fp8_e4m3 for DeepSeek NSA." and
# "Setting NSA backend to flashmla_auto for prefill and flashmla_kv for decode ...".
_KV_LOG_RE = re.compile(r"Setting KV cache dtype to (?P<value>[A-Za-z0-9_]+)")
_NSA_LOG_RE = re.compile(
    r"Setting (?:NSA|DSA) backends? to (?P<prefill>[A-Za-z0-9_]+) for prefill and (?P<decode>[A-Za-z0-9_]+) for decode"
)


def quoted_facts(text: str) -> dict[str, str]:
    """Effective-config facts quoted in ``text`` (keys as in ``config_facts.toml``, another spelling
    read as the fact it names); a later mention of a key wins. Raises KnowledgeError when the knowledge
    file cannot be read."""
    table = config_facts()
    hits: list[tuple[int, str, str]] = []
    for rx in (table.kv_re, table.prose_re):
        if rx is not None:
            hits += [(m.start(), m.group("key"), m.group("value")) for m in rx.finditer(text)]
    for m in _KV_PROSE_RE.finditer(text):
        hits.append((m.start(), "kv_cache_dtype", m.group("value")))
    for m in _KV_LOG_RE.finditer(text):
        hits.append((m.start(), "kv_cache_dtype", m.group("value")))
    for m in _NSA_LOG_RE.finditer(text):
        hits.append((m.start(), "nsa_prefill_backend", m.group("prefill")))
        hits.append((m.start(), "nsa_decode_backend", m.group("decode")))
    facts: dict[str, str] = {}
    for _, key, value in sorted(hits, key=lambda h: h[0]):
        value = value.rstrip(".-")
        if value.lower() in ("none", "null", ""):
            continue
        facts[table.aliases.get(key, key)] = value
    return facts
