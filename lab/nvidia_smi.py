"""Stand-in for `nvidia-smi`, answering from the lab world's hardware.

    python -m lab.nvidia_smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv
    python -m lab.nvidia_smi -L
    python -m lab.nvidia_smi            # small status table

CSV output follows nvidia-smi: a header with units in brackets (`memory.total [MiB]`), values with
units (`97887 MiB`); `noheader` drops the header, `nounits` drops the units from the values.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lab.model_files import ensure_model_files
from lab.world import WorldError, load_world_from_env
from lab.world_types import Hardware

# field -> (header unit or "", value(hw, index) -> (number-or-text, unit or ""))
_Field = Callable[[Hardware, int], tuple[str, str]]


def _uuid(hw: Hardware, index: int) -> str:
    h = hashlib.sha1(f"{hw.gpu_name}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _bus_id(index: int) -> str:
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


_FIELDS: dict[str, tuple[str, _Field]] = {
    "index": ("", lambda hw, i: (str(i), "")),
    "name": ("", lambda hw, i: (hw.gpu_name, "")),
    "gpu_name": ("", lambda hw, i: (hw.gpu_name, "")),
    "uuid": ("", lambda hw, i: (_uuid(hw, i), "")),
    "gpu_uuid": ("", lambda hw, i: (_uuid(hw, i), "")),
    "pci.bus_id": ("", lambda hw, i: (_bus_id(i), "")),
    "count": ("", lambda hw, i: (str(hw.gpu_count), "")),
    "compute_cap": ("", lambda hw, i: (hw.compute_capability, "")),
    "driver_version": ("", lambda hw, i: (hw.driver_version, "")),
    "memory.total": ("MiB", lambda hw, i: (str(hw.memory_mib), "MiB")),
    "memory.used": ("MiB", lambda hw, i: (str(hw.memory_used_mib), "MiB")),
    "memory.free": ("MiB", lambda hw, i: (str(hw.memory_mib - hw.memory_used_mib), "MiB")),
    "utilization.gpu": ("%", lambda hw, i: ("0", "%")),
    "utilization.memory": ("%", lambda hw, i: ("0", "%")),
    "temperature.gpu": ("", lambda hw, i: (str(31 + (i * 3) % 7), "")),
    "power.draw": ("W", lambda hw, i: (f"{34.5 + i * 1.25:.2f}", "W")),
    "power.limit": ("W", lambda hw, i: (f"{hw.power_limit_w:.2f}", "W")),
    "persistence_mode": ("", lambda hw, i: ("Enabled", "")),
    "pstate": ("", lambda hw, i: ("P8", "")),
}


def _usage_error() -> int:
    print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", file=sys.stderr)
    return 2


def query(hw: Hardware, fields: list[str], fmt: set[str], ids: list[int] | None = None) -> tuple[int, str]:
    """Answer `--query-gpu`. Returns (exit code, output text)."""
    for name in fields:
        if name not in _FIELDS:
            return 2, f'Field "{name}" is not a valid field to query.\n\n'
    lines: list[str] = []
    if "noheader" not in fmt:
        heads = []
        for name in fields:
            unit = _FIELDS[name][0]
            heads.append(f"{name} [{unit}]" if unit else name)
        lines.append(", ".join(heads))
    indices = ids if ids is not None else list(range(hw.gpu_count))
    for i in indices:
        values = []
        for name in fields:
            value, unit = _FIELDS[name][1](hw, i)
            values.append(f"{value} {unit}" if unit and "nounits" not in fmt else value)
        lines.append(", ".join(values))
    return 0, "\n".join(lines) + "\n"


def table(hw: Hardware) -> str:
    """A small version of nvidia-smi's default status table."""
    width = 89
    sep = "+" + "-" * 41 + "+" + "-" * 22 + "+" + "-" * 22 + "+"
    eq = "|" + "=" * 41 + "+" + "=" * 22 + "+" + "=" * 22 + "|"
    out = [
        time.strftime("%a %b %d %H:%M:%S %Y"),
        "+" + "-" * (width - 2) + "+",
        f"| NVIDIA-SMI {hw.driver_version:<21} Driver Version: {hw.driver_version:<14} "
        f"CUDA Version: {hw.cuda_version:<8}|",
        sep,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        eq,
    ]
    short = hw.gpu_name.replace("NVIDIA ", "")
    short = short if len(short) <= 28 else short[:25] + "..."
    for i in range(hw.gpu_count):
        mem = f"{hw.memory_used_mib}MiB / {hw.memory_mib}MiB"
        out.append(f"| {i:>3}  {short:<28}       On | {_bus_id(i)[4:]:<16} Off |                  Off |")
        out.append(
            f"| N/A   {31 + (i * 3) % 7}C    P8  {34 + i:>10}W / {int(hw.power_limit_w)}W |"
            f" {mem:>22} |      0%      Default |"
        )
        out.append(sep)
    out += [
        "",
        "+" + "-" * (width - 2) + "+",
        "| Processes:" + " " * (width - 13) + "|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * (width - 2) + "|",
        "|  No running processes found" + " " * (width - 30) + "|",
        "+" + "-" * (width - 2) + "+",
    ]
    return "\n".join(out) + "\n"


@dataclass
class _Request:
    """What a command line asks nvidia-smi for."""

    fields: list[str] | None = None  # --query-gpu
    fmt: set[str] = field(default_factory=set)  # --format
    ids: list[int] | None = None  # -i/--id
    list_gpus: bool = False  # -L/--list-gpus
    version: bool = False  # --version (the arguments after it are not read)


def _parse_args(args: list[str]) -> _Request | None:
    """The request of a command line, None for an argument nvidia-smi would reject (a usage error)."""
    request = _Request()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--query-gpu="):
            request.fields = [f.strip() for f in arg.split("=", 1)[1].split(",") if f.strip()]
        elif arg == "--query-gpu" and i + 1 < len(args):
            i += 1
            request.fields = [f.strip() for f in args[i].split(",") if f.strip()]
        elif arg.startswith("--format="):
            request.fmt = {f.strip() for f in arg.split("=", 1)[1].split(",")}
        elif arg == "--format" and i + 1 < len(args):
            i += 1
            request.fmt = {f.strip() for f in args[i].split(",")}
        elif arg.startswith("--id="):
            request.ids = [int(x) for x in arg.split("=", 1)[1].split(",")]
        elif arg in ("-i", "--id") and i + 1 < len(args):
            i += 1
            request.ids = [int(x) for x in args[i].split(",")]
        elif arg in ("-L", "--list-gpus"):
            request.list_gpus = True
        elif arg == "--version":
            request.version = True
            return request
        else:
            return None
        i += 1
    return request


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit codes follow nvidia-smi (0 ok, 2 bad arguments/field), 1 if no world."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        world = load_world_from_env()
    except WorldError as exc:
        print(f"lab.nvidia_smi: {exc}", file=sys.stderr)
        return 1
    ensure_model_files(world, os.environ)  # the host's files exist whichever lab tool runs first
    hw = world.hardware
    if hw.vendor != "nvidia":
        # what nvidia-smi says where the NVIDIA driver is not loaded (an AMD or CPU-only host)
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
            "latest NVIDIA driver is installed and running.",
        )
        return 9
    request = _parse_args(args)
    if request is None:
        return _usage_error()
    fields, fmt, ids = request.fields, request.fmt, request.ids
    if request.version:
        print(
            f"NVIDIA-SMI version  : {hw.driver_version}\nNVML version        : {hw.driver_version.split('.')[0]}."
            f"{hw.driver_version.split('.', 1)[1]}\nDRIVER version      : {hw.driver_version}\n"
            f"CUDA Version        : {hw.cuda_version}"
        )
        return 0
    if ids is not None and any(x < 0 or x >= hw.gpu_count for x in ids):
        print("No devices were found", file=sys.stderr)
        return 6
    if request.list_gpus:
        for idx in ids if ids is not None else range(hw.gpu_count):
            print(f"GPU {idx}: {hw.gpu_name} (UUID: {_uuid(hw, idx)})")
        return 0
    if fields is not None:
        if "csv" not in fmt:
            return _usage_error()
        code, text = query(hw, fields, fmt, ids)
        sys.stdout.write(text)
        return code
    if fmt:
        return _usage_error()
    sys.stdout.write(table(hw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
