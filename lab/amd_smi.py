"""Stand-in for AMD's `amd-smi` (and `rocm-smi`), answering from the lab world's hardware.

    python -m lab.amd_smi static --asic --vram --json      # amd-smi's JSON (list of GPUs)
    python -m lab.amd_smi --showproductname --showmeminfo vram --json   # rocm-smi's JSON (card0, ...)

Field names follow the public amd-smi / rocm-smi JSON (asic.market_name, asic.target_graphics_version,
vram.size {value, unit MB}; rocm-smi "Card Series", "GFX Version", "VRAM Total Memory (B)"). On a world
whose hardware is not AMD it fails the way the tools do without the amdgpu driver. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from lab.model_files import ensure_model_files
from lab.world import WorldError, load_world_from_env


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 with JSON on stdout, 1 when no world or no AMD GPU, 2 for other arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        world = load_world_from_env()
    except WorldError as exc:
        print(f"lab.amd_smi: {exc}", file=sys.stderr)
        return 1
    ensure_model_files(world, os.environ)  # the host's files exist whichever lab tool runs first
    hw = world.hardware
    if hw.vendor != "amd":
        print("ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status", file=sys.stderr)
        return 1
    if "--json" not in args:
        print("lab.amd_smi: only the --json queries are imitated", file=sys.stderr)
        return 2
    if args and args[0] == "static":
        gpus = [
            {
                "gpu": i,
                "asic": {
                    "market_name": hw.gpu_name,
                    "vendor_id": "0x1002",
                    "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                    "target_graphics_version": hw.gfx_target or None,
                },
                "vram": {"type": "HBM3", "size": {"value": hw.memory_mib, "unit": "MB"}},
                "driver": {"name": "amdgpu", "version": hw.driver_version},
            }
            for i in range(hw.gpu_count)
        ]
        print(json.dumps(gpus, indent=4))
        return 0
    cards = {
        f"card{i}": {
            "Card Series": hw.gpu_name,
            "GFX Version": hw.gfx_target,
            "VRAM Total Memory (B)": str(hw.memory_mib << 20),
            "VRAM Total Used Memory (B)": str(hw.memory_used_mib << 20),
        }
        for i in range(hw.gpu_count)
    }
    print(json.dumps(cards))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
