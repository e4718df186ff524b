"""Stand-in for asking the host's Python which distribution provides each import name, from the world's
installed packages.

| real host | lab |
|---|---|
| `python -c "...importlib.metadata.packages_distributions()..."` (hypoloop's `tools.installed.IMPORT_NAMES_CODE`) | `python -m lab.metadata` |

It prints what that code prints on a real host: one JSON object, ``{"import_names": {import name:
[distribution, ...]}, "versions": {distribution: version}}``, over the world's installed packages (the
release's pins with the world's `[packages]` over them, as `lab.pip` lists them). The import names a
distribution installs are declared in `lab/import_names.toml` (from the wheels' layouts), else derived from
its name (`flashinfer-cubin` -> `flashinfer_cubin`). Standard library only.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from lab.world import WorldError, load_world_from_env, package_key

TABLE = Path(__file__).resolve().parent / "import_names.toml"


def _table() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``(import_names, prefixes)`` of `lab/import_names.toml`, keys as PEP 503 names."""
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    names = {package_key(k): list(v) for k, v in data.get("import_names", {}).items()}
    prefixes = {package_key(k): list(v) for k, v in data.get("prefixes", {}).items()}
    return names, prefixes


def import_names(packages: Mapping[str, str]) -> dict[str, list[str]]:
    """``{import name: [distribution, ...]}`` for installed ``packages`` (``{distribution: version}``, PEP 503
    names), as ``importlib.metadata.packages_distributions()`` maps them: each distribution's declared names
    (`lab/import_names.toml`, an exact name first, then a prefix), else its name with ``-`` as ``_``."""
    declared, prefixes = _table()
    out: dict[str, list[str]] = {}
    for dist in sorted(packages):
        key = package_key(dist)
        tops = declared.get(key) or next((v for p, v in prefixes.items() if key.startswith(p)), None)
        for top in tops or [key.replace("-", "_")]:
            out.setdefault(top, []).append(dist)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 with the JSON object on stdout, 1 when no world is set, 2 for an argument (it takes none)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        print(f"lab.metadata: unexpected argument {args[0]!r} (it takes none)", file=sys.stderr)
        return 2
    try:
        world = load_world_from_env()
    except WorldError as exc:
        print(f"lab.metadata: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"import_names": import_names(world.packages), "versions": dict(world.packages)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
