"""Stand-in for `python -m sglang.check_env`, answering from the lab world's hardware and release.

SGLang prints one `Key: value` line per item (python/sglang/check_env.py `BaseEnv.check_env`, 0.5.9
and 0.5.23): Python, `CUDA available` (NVIDIA) or `ROCM available` (AMD), `GPU 0,1,...: NAME`,
`GPU 0,1,... Compute Capability: X.Y` (torch.cuda.get_device_capability; 9.4 for gfx942 under ROCm),
the driver version, PyTorch and the package versions (`sglang: 0.5.23`). Standard library only.
"""

from __future__ import annotations

import os
import sys

from lab.model_files import ensure_model_files
from lab.world import WorldError, load_world_from_env, package_key


def main() -> int:
    """Entry point: 0 with the report on stdout, 1 when no world is set."""
    try:
        world = load_world_from_env()
    except WorldError as exc:
        print(f"lab.check_env: {exc}", file=sys.stderr)
        return 1
    ensure_model_files(world, os.environ)
    hw = world.hardware
    ids = ",".join(str(i) for i in range(hw.gpu_count))
    lines = [f"Python: {sys.version.split()[0]} (main) [GCC 12.2.0]"]
    if hw.vendor == "amd":
        lines += ["ROCM available: True", f"GPU {ids}: {hw.gpu_name}", f"GPU {ids} Compute Capability: "
                  f"{hw.compute_capability}", "ROCM_HOME: /opt/rocm", f"ROCM Driver Version: {hw.driver_version}"]
    elif hw.vendor == "nvidia":
        lines += ["CUDA available: True", f"GPU {ids}: {hw.gpu_name}", f"GPU {ids} Compute Capability: "
                  f"{hw.compute_capability}", "CUDA_HOME: /usr/local/cuda", f"NVCC: Cuda compilation tools, release "
                  f"{hw.cuda_version}", f"CUDA Driver Version: {hw.driver_version}"]
    else:
        lines += ["CUDA available: False"]
    # BaseEnv.check_env: PyTorch, then get_package_versions over PACKAGE_LIST (importlib.metadata.version;
    # a missing distribution prints "Module Not Found"), then the topology and ulimit
    torch = world.packages.get("torch", "2.9.1")
    lines.append(f"PyTorch: {torch}")
    listed = world.version.check_env_packages or ("sglang",)
    for name in listed:
        lines.append(f"{name}: {world.packages.get(package_key(name), 'Module Not Found')}")
    lines.append("ulimit soft: 1048576")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
