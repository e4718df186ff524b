"""Host fingerprint: which GPUs, how many, which driver, which SGLang — evidence that needs no launch.

Hosts of every kind: NVIDIA (`nvidia-smi`), AMD (`amd-smi`, else `rocm-smi`) and none (CPU only) are
all hosts; a missing GPU tool is evidence, never an error. Where `python -m sglang.check_env` runs, its
`Key: value` report (GPU names, compute capability, `CUDA available` / `ROCM available`, package
versions; SGLang 0.5.9 and 0.5.23 python/sglang/check_env.py) is kept as evidence too, and its package
versions as the host's installed packages (``HostFingerprint.installed``, ``tools.installed``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from tools.engines import Engine, get_engine
from tools.host import Host, HostError, expand_argv
from tools.installed import installed_from_check_env, read_import_names

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
    #: vLLM's installed version when the launcher runs vLLM (`tools.engines`).
    vllm_version: str | None = None
    #: The engine the launcher runs ("sglang", "vllm") and its version (one of the two fields above).
    engine: str | None = None
    engine_version: str | None = None
    #: "nvidia", "amd", or "none" (no GPU tool answered: a CPU-only host); None when not asked.
    gpu_vendor: str | None = None
    #: AMD's graphics target (gfx942 for MI300X), which stands where NVIDIA has a compute capability.
    gpu_arch: str | None = None
    #: `python -m sglang.check_env` as `key: value` pairs, when it ran.
    check_env: dict[str, str] = Field(default_factory=dict)
    #: What the GPU queries said when they found nothing (for the transcript).
    notes: list[str] = Field(default_factory=list)
    #: The host's spelling of each flag role (knowledge/flag_roles.toml), read from its --help by the
    #: agent once the flag catalog is loaded; empty until then.
    flag_roles: dict[str, str] = Field(default_factory=dict)
    #: The served model's config.json digested (``tools.model_config.checkpoint_facts``); empty when
    #: it could not be read from the host (then nothing about the model is assumed).
    checkpoint: dict[str, str] = Field(default_factory=dict)
    #: Where the config.json was read, or why it could not be.
    checkpoint_source: str | None = None
    #: Logical CPUs of the host (``getconf _NPROCESSORS_ONLN``), when known.
    cpu_count: int | None = None
    #: The host's installed packages as ``{distribution: version}`` (PEP 503 names), read by its own
    #: Python through check_env (``tools.installed``); empty when check_env did not run.
    installed: dict[str, str] = Field(default_factory=dict)
    #: Which distributions provide a top-level import name, as the host's own Python says
    #: (``tools.installed.read_import_names``: ``{"sgl_kernel": ["sglang-kernel"]}``), only the names spelled
    #: otherwise than their distribution; empty when it was not asked or could not tell.
    import_names: dict[str, list[str]] = Field(default_factory=dict)
    #: The installed versions of the distributions ``import_names`` names (``{distribution: version}``).
    import_versions: dict[str, str] = Field(default_factory=dict)
    #: The case's own ``--port`` when, before any launch, something on the host already listened there
    #: (`port_holder`); None when the case names no port, the port was free or the host could not tell.
    #: hypoloop launches on a port of its own, so such a conflict never shows in its launches.
    taken_port: int | None = None
    #: What listens on ``taken_port`` (``ss -ltnp``: a process name and pid), when the host says.
    taken_by: str | None = None


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


#: AMD tools tried when the case's GPU query finds nothing: amd-smi (ROCm 6+), then the older rocm-smi.
AMD_QUERIES: tuple[tuple[str, ...], ...] = (
    ("amd-smi", "static", "--asic", "--vram", "--json"),
    ("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"),
)


def _tool_kind(argv: Sequence[str]) -> str:
    text = " ".join(argv).lower().replace("_", "-")
    if "amd-smi" in text:
        return "amd-smi"
    if "rocm-smi" in text:
        return "rocm-smi"
    return "nvidia-smi"


def _amd_args(kind: str) -> list[str]:
    return list(next(q for q in AMD_QUERIES if q[0] == kind)[1:])


def parse_amd_json(text: str) -> list[tuple[str, str | None, int | None, str | None]]:
    """Rows of (name, gfx target, VRAM MiB, driver) from `amd-smi static --asic --vram --json` (a list,
    or {"gpu_data": [...]}; VRAM as {"size": {"value", "unit"}}, "vram_size" or "vram_total" in MB) or
    from `rocm-smi --showproductname --showmeminfo vram --json` ({"card0": {"Card Series", "GFX Version",
    "VRAM Total Memory (B)"}}). [] for output that is neither (public amd-smi / rocm-smi formats)."""
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return []
    rows: list[tuple[str, str | None, int | None, str | None]] = []
    if isinstance(data, dict) and isinstance(data.get("gpu_data"), list):
        data = data["gpu_data"]
    if isinstance(data, list):
        for gpu in data:
            if not isinstance(gpu, dict):
                continue
            asic = gpu.get("asic") or {}
            vram = gpu.get("vram") or {}
            size = vram.get("size")
            mib: int | None = None
            if isinstance(size, dict) and isinstance(size.get("value"), int | float):
                mib = int(size["value"] * (1024 if str(size.get("unit", "MB")).upper().startswith("G") else 1))
            elif isinstance(vram.get("vram_size"), int | float):
                mib = int(vram["vram_size"])
            elif isinstance(vram.get("vram_total"), int | float):
                mib = int(vram["vram_total"])
            driver = gpu.get("driver") or {}
            rows.append(
                (
                    str(asic.get("market_name") or "AMD GPU"),
                    asic.get("target_graphics_version"),
                    mib,
                    driver.get("version") or driver.get("driver_version"),
                )
            )
        return rows
    if isinstance(data, dict):
        for key, card in data.items():
            if not key.startswith("card") or not isinstance(card, dict):
                continue
            total = card.get("VRAM Total Memory (B)")
            mib = int(str(total)) >> 20 if str(total or "").isdigit() else None
            name = card.get("Card Series") or card.get("Card Model") or "AMD GPU"
            rows.append((str(name), card.get("GFX Version"), mib, None))
    return rows


def parse_check_env(text: str) -> dict[str, str]:
    """`python -m sglang.check_env` output as a dict: one `Key: value` per line (check_env.py prints
    `f"{k}: {v}"`); lines without ": " are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.strip() and not key.startswith(" "):
            out[key.strip()] = value.strip()
    return out


def _run_query(host: Host, argv: list[str]) -> tuple[str | None, str]:
    """(stdout, "") when the command ran and exited 0, else (None, why)."""
    try:
        res = host.run(argv, timeout=60.0)
    except HostError as exc:
        return None, str(exc)
    if res.returncode != 0:
        return None, f"{argv[0]} exited with {res.returncode}: {_one_line(res.stderr or res.stdout) or 'no output'}"
    return res.stdout, ""


def fingerprint(
    host: Host,
    *,
    gpu_query_argv: Sequence[str],
    version_argv: Sequence[str] | None,
    check_env_argv: Sequence[str] | None = None,
    engine: Engine | None = None,
    import_names_argv: Sequence[str] | None = None,
) -> HostFingerprint:
    """Query the host's GPUs and the engine's version (`engine`, default SGLang: `engine_version` and
    the engine's own field, `sglang_version` or `vllm_version`).

    The GPU query is `gpu_query_argv` (nvidia-smi's CSV query, `GPU_QUERY_ARGS` appended; or, when the
    argv names amd-smi / rocm-smi, that tool's JSON query), then, when it is missing or finds nothing,
    the AMD tools of `AMD_QUERIES`; when none answers the host is CPU-only (`gpu_vendor` "none",
    `gpu_count` 0), which is not an error. `check_env_argv` (e.g. `python -m sglang.check_env`) is run
    when given; its report is evidence, and a failure of it is only a note. `version_argv`'s stdout
    (stripped; the last non-empty line if several) is the SGLang version; all with `{python}` expanded.
    Raises `HostError` (one line) if the version command fails or prints nothing, or a GPU tool's output
    cannot be read. `import_names_argv` (``tools.installed.import_names_argv``) asks the host's Python which
    distribution provides each import name (``import_names``); a failure of it is only a note.
    """
    eng = engine or get_engine()
    fp = _query_gpus(host, gpu_query_argv, HostFingerprint(engine=eng.name))
    if check_env_argv:
        cargv = expand_argv(list(check_env_argv), host)
        out, why = _run_query(host, cargv)
        if out is None:
            fp.notes.append(f"check_env: {why}")
        else:
            fp.check_env = parse_check_env(out)
            _fill_from_check_env(fp)
            fp.installed = installed_from_check_env(fp.check_env)
    if import_names_argv:
        names, versions, why = read_import_names(host, expand_argv(list(import_names_argv), host))
        fp.import_names, fp.import_versions = names, versions
        fp.notes += [why] if why else []
    if version_argv:
        _set_version(fp, eng, _read_version(host, version_argv))
    return fp


def _query_gpus(host: Host, gpu_query_argv: Sequence[str], fp: HostFingerprint) -> HostFingerprint:
    """`fp` with the GPUs of the first GPU tool that finds any (see `fingerprint`), else a CPU-only host
    (`gpu_vendor` "none", `gpu_count` 0); each tool that found nothing leaves a note."""
    queries: list[tuple[str, list[str]]] = []
    kind = _tool_kind(gpu_query_argv)
    base = expand_argv(list(gpu_query_argv), host)
    queries.append((kind, base + (GPU_QUERY_ARGS if kind == "nvidia-smi" else _amd_args(kind))))
    queries += [(q[0], list(q)) for q in AMD_QUERIES if q[0] != kind]
    for tool, argv in queries:
        out, why = _run_query(host, argv)
        if out is None:
            fp.notes.append(why)
            continue
        if tool == "nvidia-smi":
            rows = parse_gpu_csv(out)
            if not rows:
                fp.notes.append(f"{argv[0]} reported no GPU")
                continue
            name, cap, mem, driver = rows[0]
            return fp.model_copy(
                update={"gpu_vendor": "nvidia", "gpu_name": name, "gpu_count": len(rows), "compute_capability": cap,
                        "memory_total_mib": mem, "driver_version": driver}
            )
        amd = parse_amd_json(out)
        if not amd:
            fp.notes.append(f"{argv[0]} reported no GPU")
            continue
        name, arch, mem, driver = amd[0]
        return fp.model_copy(
            update={"gpu_vendor": "amd", "gpu_name": name, "gpu_count": len(amd), "gpu_arch": arch,
                    "memory_total_mib": mem, "driver_version": driver}
        )
    fp.gpu_vendor, fp.gpu_count = "none", 0
    return fp


def _read_version(host: Host, version_argv: Sequence[str]) -> str:
    """The last non-empty stdout line of `version_argv` run on `host` (`{python}` expanded); HostError
    (one line) when it fails or prints nothing."""
    vargv = expand_argv(version_argv, host)
    vres = host.run(vargv, timeout=120.0)
    if vres.returncode != 0:
        detail = _one_line(vres.stderr or vres.stdout) or "no output"
        raise HostError(f"version command {vargv[0]} failed with exit code {vres.returncode}: {detail}")
    lines = [ln.strip() for ln in vres.stdout.strip().splitlines() if ln.strip()]
    if not lines:
        raise HostError(f"version command {vargv[0]} printed nothing")
    return lines[-1]


def _set_version(fp: HostFingerprint, eng: Engine, version: str) -> None:
    fp.engine_version = version
    field = f"{eng.name}_version"
    if field in HostFingerprint.model_fields:
        setattr(fp, field, version)


def engine_label(fp: Mapping[str, Any] | None) -> str:
    """``SGLang 0.5.23`` / ``vLLM 0.32.0`` for a fingerprint dict (``?`` for an unknown version)."""
    name = (fp or {}).get("engine") or "sglang"
    return f"{get_engine(name).display} {engine_version(fp) or '?'}"


def arch_label(fp: Mapping[str, Any] | None) -> str:
    """How a person names the GPU's architecture, from a fingerprint dict: an AMD GPU by its gfx name
    (``arch gfx942``; the compute capability PyTorch reports for it, 9.4, is no AMD term), any other by its
    compute capability (``compute capability 12.0``); ``compute capability ?`` when neither is known."""
    fp = fp or {}
    if fp.get("gpu_arch") and (fp.get("gpu_vendor") == "amd" or not fp.get("compute_capability")):
        return f"arch {fp['gpu_arch']}"
    return f"compute capability {fp.get('compute_capability') or '?'}"


def engine_version(fp: Mapping[str, Any] | None) -> str | None:
    """The launcher's engine version in a fingerprint dict (`engine_version`, else `sglang_version` of
    transcripts written before vLLM was known); None when unknown."""
    if not fp:
        return None
    return fp.get("engine_version") or fp.get("sglang_version")


def _fill_from_check_env(fp: HostFingerprint) -> None:
    """Fill what the GPU tools left unknown from check_env's report ("GPU 0,1: NAME", "GPU 0,1 Compute
    Capability: 9.0", "CUDA available" / "ROCM available")."""
    env = fp.check_env
    for key, value in env.items():
        if key.startswith("GPU ") and key.endswith("Compute Capability") and fp.compute_capability is None:
            fp.compute_capability = value
        elif key.startswith("GPU ") and key[4:].replace(",", "").isdigit() and fp.gpu_name is None:
            fp.gpu_name = value
            fp.gpu_count = len(key[4:].split(","))
    if fp.gpu_vendor in (None, "none"):
        if env.get("ROCM available") == "True":
            fp.gpu_vendor = "amd"
        elif env.get("CUDA available") == "True":
            fp.gpu_vendor = "nvidia"
    # check_env lists package versions by distribution name; the engine's own is its version.
    name = fp.engine or "sglang"
    if env.get(name) and fp.engine_version is None:
        _set_version(fp, get_engine(name), env[name])


#: check_env keys that name the GPU runtime (SGLang's check_env.py: NVCC, CUDA_HOME, CUDA Driver Version
#: on NVIDIA; ROCM_HOME, ROCM Driver Version, HIPCC on AMD).
_RUNTIME_KEYS = ("NVCC", "CUDA_HOME", "CUDA Driver Version", "HIPCC", "ROCM_HOME", "ROCM Driver Version")
_VERSION_RE = re.compile(r"^v?\d+(\.\w+)+")
_PACKAGE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")


def runtime_versions(fp: HostFingerprint) -> dict[str, str]:
    """The GPU runtime lines of check_env (CUDA toolkit and driver, or ROCm), as reported."""
    return {k: fp.check_env[k] for k in _RUNTIME_KEYS if k in fp.check_env}


def package_versions(fp: HostFingerprint) -> dict[str, str]:
    """Every package check_env reports with a version (``sglang``, ``sgl_kernel``, ``flashinfer_python``,
    ``triton``, ``PyTorch``, ...): a one-word key whose value starts like a version number. A package the
    engine adds to its report shows up without a change here."""
    return {
        k: v for k, v in fp.check_env.items()
        if _PACKAGE_RE.match(k) and _VERSION_RE.match(v) and k not in _RUNTIME_KEYS and k != "Python"
    }  # fmt: skip



#: Run by the host's Python: exit 0 when something accepts TCP connections on (argv[1], argv[2]), 1 when
#: the connection is refused or times out (2 s).
_LISTENS = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)\n"
    "s.settimeout(2)\n"
    "sys.exit(0 if s.connect_ex((sys.argv[1],int(sys.argv[2])))==0 else 1)"
)
_SS_USER = re.compile(r'users:\(\("([^"]+)",pid=(\d+)')


def port_holder(host: Host, port: int, address: str | None = None) -> tuple[bool, str | None] | None:
    """Whether something on `host` already accepts TCP connections on `port` (at `address`; default, and
    for the wildcard addresses, the loopback), and what it is when ``ss -ltnp`` names it (``"python3
    (pid 123)"``). Asked through the host's own Python (``{python}``) and ``ss``; None when the host
    could not tell (no Python there, the command failed). Never raises."""
    to = "127.0.0.1" if not address or address in ("0.0.0.0", "::", "[::]") else address.strip("[]")
    try:
        res = host.run(expand_argv(["{python}", "-c", _LISTENS, to, str(port)], host), timeout=15.0)
    except HostError:
        return None
    if res.returncode not in (0, 1):
        return None
    if res.returncode == 1:
        return False, None
    try:
        ss = host.run(["ss", "-Htlnp", f"sport = :{port}"], timeout=10.0)
    except HostError:
        return True, None
    m = _SS_USER.search(ss.stdout) if ss.returncode == 0 else None
    return True, (f"{m.group(1)} (pid {m.group(2)})" if m else None)
