"""Stand-in for `getconf _NPROCESSORS_ONLN`, answering from the lab world's hardware.

    python -m lab.cpu_query            # the world's logical CPU count ([hardware] cpu_count)

A world that gives no `cpu_count` answers with this machine's own count, as `getconf` would here.
Standard library only.
"""

from __future__ import annotations

import os
import sys

from lab.world import WorldError, load_world_from_env


def main(argv: list[str] | None = None) -> int:
    """Print the logical CPU count; exit 1 with a one-line error for a bad world file."""
    try:
        world = load_world_from_env()
    except WorldError as exc:
        print(f"cpu_query: {exc}", file=sys.stderr)
        return 1
    print(world.hardware.cpu_count or os.cpu_count() or 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
