"""A stand-in for `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` (standard library only).

Env FAKE_SMI_MODE: "ok" (default: 2 x RTX PRO 6000, SM120), "fail" (exit 9 with an NVML error), "empty".
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    mode = os.environ.get("FAKE_SMI_MODE", "ok")
    if mode == "fail":
        sys.stderr.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
        return 9
    if mode == "empty":
        return 0
    if not any(a.startswith("--query-gpu=") for a in sys.argv[1:]):
        sys.stderr.write("fake nvidia-smi: expected --query-gpu\n")
        return 2
    for _ in range(2):
        print("NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 580.95.05")
    return 0


if __name__ == "__main__":
    sys.exit(main())
