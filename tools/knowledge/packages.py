"""The package versions a note records: a ``packages:`` line (``- Packages: torch==2.9.1, sgl-kernel
0.3.21``), what was installed when the noted deployment ran. A known-good note's versions, compared with
the host's installed versions, say what changed since it worked (``agent/planning/generators/changed.py``)."""

from __future__ import annotations

import re

from tools.installed import dist_key

__all__ = ["packages_in"]

#: ``packages:`` at the start of a prose line, after an optional list bullet and bold markers.
_LINE = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*)?packages(?:\*\*)?\s*:\s*(?:\*\*)?\s*(?P<rest>.+)$", re.I | re.M)
#: One item: ``name==version``, ``name=version``, ``name version`` or ``name (version)``.
_ITEM = re.compile(r"^`?(?P<name>[A-Za-z0-9][A-Za-z0-9._\-]*)\s*(?:==|=|\s)\s*\(?v?(?P<ver>\d[0-9A-Za-z.+\-_]*)\)?`?$")


def packages_in(prose: str) -> dict[str, str]:
    """``{distribution: version}`` (PEP 503 names) from the ``packages:`` lines of a note's prose (fenced
    code left out by the caller); items are separated by commas or semicolons, an item that is not
    ``name==version`` (or ``name version``) is skipped. ``{}`` without such a line."""
    out: dict[str, str] = {}
    for m in _LINE.finditer(prose):
        for item in re.split(r"[,;]", m.group("rest")):
            hit = _ITEM.match(item.strip().strip("`").strip())
            if hit:
                out[dist_key(hit.group("name"))] = hit.group("ver").rstrip(".")
    return out
