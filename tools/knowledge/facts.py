"""Effective-config facts quoted in notes (``kv_cache_dtype: fp8_e4m3``, "attention_backend was set to
triton", SGLang's own log lines); which facts, their other spellings and the sentences that state them
(the engine's log wording) are data (``knowledge/config_facts.toml``, ``tools.knowledge.data``)."""

from __future__ import annotations

from tools.knowledge.data import config_facts


def quoted_facts(text: str) -> dict[str, str]:
    """Effective-config facts quoted in ``text`` (keys as in ``config_facts.toml``, another spelling
    read as the fact it names); a later mention of a key wins. Raises KnowledgeError when the knowledge
    file cannot be read."""
    table = config_facts()
    hits: list[tuple[int, str, str]] = []
    for rx in (table.kv_re, table.prose_re):
        if rx is not None:
            hits += [(m.start(), m.group("key"), m.group("value")) for m in rx.finditer(text)]
    for rx in table.lines:
        hits += [(m.start(), k, v) for m in rx.finditer(text) for k, v in m.groupdict().items() if v]
    facts: dict[str, str] = {}
    for _, key, value in sorted(hits, key=lambda h: h[0]):
        value = value.rstrip(".-")
        if value.lower() in ("none", "null", ""):
            continue
        facts[table.aliases.get(key, key)] = value
    return facts
