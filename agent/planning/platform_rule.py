"""The rule that names a host's platform (knowledge/subsystems.toml ``[[platform]]``): a leaf the planner's
``in_play.platform_of`` and the ending's ``platform_change.host_platform_id`` share (no agent import)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["platform_id"]


def platform_id(platforms: Iterable[Mapping[str, Any]], device: str | None, vendor: str | None) -> str | None:
    """The platform id (cuda, rocm, cpu, ...) of ``platforms`` (the ``[[platform]]`` tables): the one whose
    ``device`` the effective ``--device`` names (``cuda`` is shared by CUDA and ROCm builds, so it names
    none), else the one whose ``gpu_vendor`` is the fingerprint's; None when neither tells."""
    table = list(platforms)
    dev = str(device or "").split(":")[0].strip().lower()
    if dev and dev != "cuda":
        for p in table:
            if str(p.get("device", "")).lower() == dev:
                return str(p["id"])
    if vendor:
        for p in table:
            if p.get("gpu_vendor") == vendor:
                return str(p["id"])
    return None
