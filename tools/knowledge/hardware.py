"""GPUs named in notes and their architectures; which GPUs and architectures is data
(``knowledge/hardware.toml``, ``tools.knowledge.data``)."""

from __future__ import annotations

import re

from tools.knowledge.data import hardware


def _canonical_gpu(raw: str) -> str | None:
    for name, rx, _ in hardware().gpus:
        if rx.fullmatch(raw):
            return name
    return None


def gpu_mentions(text: str) -> list[tuple[str, int | None]]:
    """Canonical GPU names in order of first mention, each with a count if one was written next to it
    (``8x H200``). Raises KnowledgeError when ``hardware.toml`` cannot be read."""
    table = hardware()
    hits: list[tuple[int, str, int | None]] = []
    for m in table.gpu_re.finditer(text) if table.gpu_re is not None else ():
        name = _canonical_gpu(m.group(2))
        if name:
            hits.append((m.start(2), name, int(m.group(1)) if m.group(1) else None))
    for m in table.rtx_re.finditer(text) if table.rtx_re is not None else ():
        before = re.search(
            r"(?<![\w.])(\d{1,3})\s*(?:x|×|\*)\s*(?:NVIDIA\s+)?(?:GeForce\s+)?$", text[: m.start()]
        )
        name = f"RTX {m.group(1)}" + (" Ti" if m.group(2) else "")
        hits.append((m.start(), name, int(before.group(1)) if before else None))
    hits.sort(key=lambda h: h[0])
    out: dict[str, int | None] = {}
    for _, name, count in hits:
        if name not in out or (out[name] is None and count):
            out[name] = count
    return list(out.items())


def gpu_names(text: str) -> list[str]:
    """Canonical GPU names mentioned in ``text`` (e.g. ``"NVIDIA RTX PRO 6000 Blackwell Server Edition"``
    -> ``["RTX PRO 6000"]``, ``"NVIDIA GeForce RTX 5090"`` -> ``["RTX 5090"]``), in order of mention.
    Names follow ``nvidia-smi --query-gpu=name`` output and common shorthand in notes
    (``knowledge/hardware.toml``). Raises KnowledgeError when that file cannot be read.
    """
    return [name for name, _ in gpu_mentions(text)]


def gpu_arch(name: str) -> str | None:
    """The architecture of a canonical GPU name (``sm120``, ``gfx942``; ``hardware.toml``), else None."""
    table = hardware()
    for canonical, _, arch in table.gpus:
        if canonical == name:
            return arch
    m = re.match(r"RTX (\d)0\d0", name)
    return table.rtx_arch.get(m.group(1)) if m else None
