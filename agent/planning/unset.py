"""The value an engine gives a flag that is not given, where the knowledge says so with its source.

``knowledge/served.toml``'s ``default`` of a setting is the value the engine resolves when the flag is left
out (SGLang 0.5.23 srt/arg_groups/fields/model.py: ``kv_cache_dtype ... = "auto"``; the ``server_args`` line
prints ``tp_size=1`` when ``--tp-size`` is not given). Setting the flag to that value explicitly launches
the same server as leaving it out, so it changes no variable (``agent.planning.guard.changes_nothing``).
Only the flags the file names count: for others ``auto`` may well differ from unset (a ``None`` default
resolved from the host), and the host's ``--help`` often states no default at all.

A leaf (it imports nothing of ``agent/``), so the guard can read it within the import-depth limit.
"""

from __future__ import annotations

from pathlib import Path

from tools.knowledge_files import KnowledgeFile, KnowledgeFileError, read_toml

__all__ = ["at_unset_value", "unset_values"]


def _load(path: Path) -> dict[str, str]:
    """Every spelling (name and aliases) of a flag setting with a ``default`` -> that value, lower-cased.
    Raises KnowledgeFileError (one line, naming the file and item) for a default that is not a string."""
    data = read_toml(path, KnowledgeFileError)
    out: dict[str, str] = {}
    settings = data.get("setting", [])
    for i, s in enumerate(settings if isinstance(settings, list) else []):
        if not isinstance(s, dict) or "default" not in s or s.get("kind", "flag") != "flag":
            continue
        if not isinstance(s["default"], str):
            raise KnowledgeFileError(f"{path}: field 'setting #{i + 1}.default': expected the value as a string")
        for name in [s.get("name"), *s.get("aliases", [])]:
            if isinstance(name, str):
                out[name] = s["default"].strip().lower()
    return out


_UNSET: KnowledgeFile[dict[str, str]] = KnowledgeFile("served.toml", _load, absent=dict)


def unset_values() -> dict[str, str]:
    """Flag (any spelling served.toml lists) -> the value the engine resolves when it is not given (lower
    case), from the knowledge folder in force. Raises KnowledgeFileError (one line) for a broken file."""
    return _UNSET()


def at_unset_value(name: str, value: object, values: dict[str, str] | None = None) -> bool:
    """Whether flag ``name`` set to ``value`` is what the engine resolves when the flag is left out
    (``values``, default ``unset_values()``): ``--kv-cache-dtype auto``, ``--tp-size 1``. A switch's
    ``True`` never is."""
    unset = (unset_values() if values is None else values).get(name)
    if unset is None or value is None or isinstance(value, bool):
        return False
    text = str(value).strip().lower()
    if text == unset:
        return True
    try:
        return float(text) == float(unset)
    except ValueError:
        return False
