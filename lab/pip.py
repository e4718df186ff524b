"""Stand-in for `pip` on the lab host: `list`, `freeze` and `show` answer from the world's installed packages.

| real host | lab |
|---|---|
| `pip list` / `python -m pip list` | `python -m lab.pip list` |
| `pip freeze` | `python -m lab.pip freeze` |
| `pip show NAME ...` | `python -m lab.pip show NAME ...` |

The installed set is the release's pins (`[installed]` of the version file: the wheel's METADATA) with
the world's `[packages]` over them. Output follows pip 25 (`pip/_internal/commands/list.py` columns
`Package`/`Version`, `show.py` fields, `WARNING: Package(s) not found: x` and exit 1). `pip` keeps no
history: a world's `[[package_change]]` is what the user tells, not something pip prints. Standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lab.world import WorldError, load_world_from_env, package_key

_LOCATION = "/usr/local/lib/python3.12/dist-packages"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 with pip's output on stdout, 1 for a package not found or no world, 2 for usage."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        world = load_world_from_env()
    except WorldError as exc:
        print(f"lab.pip: {exc}", file=sys.stderr)
        return 1
    packages = world.packages
    if not args or args[0] not in ("list", "freeze", "show"):
        print("ERROR: unknown command (the lab's pip answers list, freeze and show)", file=sys.stderr)
        return 2
    command, rest = args[0], [a for a in args[1:] if not a.startswith("-")]
    names = sorted(packages, key=str.lower)
    if command == "list":
        width = max([len("Package"), *(len(n) for n in names)])
        vwidth = max([len("Version"), *(len(packages[n]) for n in names)])
        print(f"{'Package':<{width}} {'Version':<{vwidth}}".rstrip())
        print(f"{'-' * width} {'-' * vwidth}")
        for name in names:
            print(f"{name:<{width}} {packages[name]}")
        return 0
    if command == "freeze":
        for name in names:
            print(f"{name}=={packages[name]}")
        return 0
    if not rest:
        print("ERROR: Please provide a package name or names.", file=sys.stderr)
        return 1
    found = [n for n in rest if package_key(n) in packages]
    missing = [n for n in rest if package_key(n) not in packages]
    blocks = []
    for name in found:
        key = package_key(name)
        blocks.append(
            "\n".join([
                f"Name: {key}", f"Version: {packages[key]}", "Summary: ", "Home-page: ", "Author: ",
                "Author-email: ", "License: ", f"Location: {_LOCATION}", "Requires: ", "Required-by: ",
            ])
        )
    if blocks:
        print("\n---\n".join(blocks))
    if missing:
        print(f"WARNING: Package(s) not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
