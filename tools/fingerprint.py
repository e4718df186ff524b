"""Host fingerprint: which GPUs, how many, which driver, which SGLang — evidence that needs no launch."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from tools.host import Host, HostError, expand_argv

GPU_QUERY_ARGS = ["--query-gpu=name,compute_cap,memory.total,driver_version", "--format=csv,noheader,nounits"]


class HostFingerprint(BaseModel):
    """GPUs of a host as `nvidia-smi` reports them (first GPU's values; `gpu_count` = rows), plus the
    SGLang version. `compute_capability` like "12.0"; `memory_total_mib` per GPU in MiB. A field is None
    when unknown: "[N/A]" from the tool, no version command, or a partial fingerprint built by hand
    (e.g. from command-line options when analysing a log without a host)."""

    gpu_name: str | None = None
    gpu_count: int | None = None
    compute_capability: str | None = None
    memory_total_mib: int | None = None
    driver_version: str | None = None
    sglang_version: str | None = None


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _field(value: str) -> str | None:
    value = value.strip()
    return None if not value or value.startswith("[") else value  # "[N/A]", "[Not Supported]"


def parse_gpu_csv(text: str) -> list[tuple[str, str | None, int | None, str | None]]:
    """Rows of `name, compute_cap, memory.total, driver_version` from nvidia-smi CSV output.

    Accepts noheader/nounits output; a header row and "MiB" units are tolerated. Raises `HostError`
    for a row that does not have four fields.
    """
    rows: list[tuple[str, str | None, int | None, str | None]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.lower().startswith("name,"):
            continue
        parts = [p.strip() for p in line.rsplit(",", 3)]
        if len(parts) != 4:
            raise HostError(f"unexpected GPU query output line: {_one_line(line)}")
        name, cap, mem, driver = parts
        mem_value = _field(mem)
        mem_mib: int | None = None
        if mem_value is not None:
            try:
                mem_mib = int(float(mem_value.split()[0]))
            except ValueError:
                raise HostError(f"unexpected GPU memory value {mem_value!r} in: {_one_line(line)}") from None
        rows.append((name, _field(cap), mem_mib, _field(driver)))
    return rows


def fingerprint(
    host: Host, *, gpu_query_argv: Sequence[str], version_argv: Sequence[str] | None
) -> HostFingerprint:
    """Query the host's GPUs and SGLang version.

    Runs `gpu_query_argv + GPU_QUERY_ARGS` (nvidia-smi's CSV query) and `version_argv` (its stdout,
    stripped; the last non-empty line if it printed several), both with `{python}` expanded. Raises
    `HostError` (one line) if a command is missing, fails, times out, prints nothing usable or reports
    no GPU.
    """
    argv = expand_argv(list(gpu_query_argv) + GPU_QUERY_ARGS, host)
    res = host.run(argv, timeout=60.0)
    if res.returncode != 0:
        detail = _one_line(res.stderr or res.stdout) or "no output"
        raise HostError(f"GPU query {argv[0]} failed with exit code {res.returncode}: {detail}")
    rows = parse_gpu_csv(res.stdout)
    if not rows:
        raise HostError(f"GPU query {argv[0]} reported no GPU")
    name, cap, mem, driver = rows[0]

    version: str | None = None
    if version_argv:
        vargv = expand_argv(version_argv, host)
        vres = host.run(vargv, timeout=120.0)
        if vres.returncode != 0:
            detail = _one_line(vres.stderr or vres.stdout) or "no output"
            raise HostError(f"version command {vargv[0]} failed with exit code {vres.returncode}: {detail}")
        lines = [ln.strip() for ln in vres.stdout.strip().splitlines() if ln.strip()]
        if not lines:
            raise HostError(f"version command {vargv[0]} printed nothing")
        version = lines[-1]
    return HostFingerprint(
        gpu_name=name,
        gpu_count=len(rows),
        compute_capability=cap,
        memory_total_mib=mem,
        driver_version=driver,
        sglang_version=version,
    )
