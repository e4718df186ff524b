"""Which package a failure's evidence belongs to when it is not a Python frame in site-packages: a native
stack frame's shared library or symbol (``librccl.so``, ``dnnl::impl::...`` inside ``libtorch_cpu.so``), or a
log line (aiter's ``[aiter]`` prefix, ROCr's ``Kernel Name: _ZN5aiter...``, ``NCCL WARN``,
``Memory access fault by GPU node``). The mapping is data, ``knowledge/libraries.toml``, each entry with its
public source (ROCm documentation, PyPI wheel layouts, public crash reports); nothing is named here.

A library that failed is named before the runtime that ran it: an entry marked ``runtime`` (the HIP/ROCr
runtime, the NVIDIA driver) is where every kernel's fault surfaces, so the process dying inside it blames its
caller (``died_in``), and a runtime's log line is the last evidence ``agent.planning.blame`` uses.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.knowledge_files import item_path
from tools.tracebacks import Frame, Traceback

__all__ = [
    "Library", "LibrariesError", "Port", "died_in", "entry", "libraries", "library_file", "library_of", "log_evidence",
    "relabelled",
]

FILE = "libraries.toml"


class LibrariesError(ValueError):
    """``libraries.toml`` cannot be used (one line naming the file and the field)."""


class Port(BaseModel):
    """Another platform's build of a library, told apart by its installed version (``ports``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    platform: str = Field(min_length=1)
    version: str = Field(min_length=1)
    source: str = Field(min_length=1)


class Library(BaseModel):
    """One ``[[library]]`` of ``libraries.toml`` (see its header for the fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str
    component: str | None = None
    distributions: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    log: tuple[str, ...] = ()
    runtime: bool = False
    vendor: str | None = None
    platforms: tuple[str, ...] = ()
    ports: tuple[Port, ...] = ()
    platforms_source: str | None = None
    prebuilt: bool = False
    prebuilt_source: str | None = None
    source: str = Field(min_length=1)

    def applies_to(self, vendor: str | None) -> bool:
        """Whether the entry applies on a host whose GPU vendor is ``vendor`` (None: unknown, every entry)."""
        return self.vendor is None or vendor is None or vendor == self.vendor

    def label(self) -> str:
        """How the ending names it: ``aiter``, ``torch (its bundled oneDNN)``."""
        return f"{self.package} (its bundled {self.component})" if self.component else self.package


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    library: tuple[Library, ...] = ()


@functools.cache
def _of(path: Path, mtime: float) -> tuple[Library, ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        entries = _File.model_validate(data).library
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LibrariesError(f"{path}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise LibrariesError(f"{path}: field '{item_path(err['loc'])}': {err['msg']}") from None
    for n, lib in enumerate(entries):
        i = f"library #{n + 1}"  # counted as a person counts [[library]] tables
        if (lib.platforms or lib.ports) and not lib.platforms_source:
            raise LibrariesError(f"{path}: field '{i}.platforms_source': required with platforms and ports")
        if lib.prebuilt and not lib.prebuilt_source:
            raise LibrariesError(f"{path}: field '{i}.prebuilt_source': required with prebuilt")
        for j, port in enumerate(lib.ports):
            try:
                re.compile(port.version)
            except re.error as exc:
                raise LibrariesError(f"{path}: field '{i}.ports #{j + 1}.version': {port.version!r}: {exc}") from None
        for field in ("files", "symbols", "log"):
            for pat in getattr(lib, field):
                try:
                    re.compile(pat)
                except re.error as exc:
                    raise LibrariesError(f"{path}: field '{i}.{field}': {pat!r}: {exc}") from None
    return entries


def libraries() -> tuple[Library, ...]:
    """The entries of ``libraries.toml`` in the knowledge folder in force (else the repository's), read once
    per file version. Raises LibrariesError (one line naming the file and the field)."""
    from agent.domain.knowledge_dir import knowledge_file

    path = knowledge_file(FILE)
    return _of(path, path.stat().st_mtime)


def library_of(frame: Frame, vendor: str | None = None) -> Library | None:
    """The entry a native frame belongs to: the first whose ``symbols`` match its function, else the first
    whose ``files`` match its library path; None for a Python frame or an unknown library (libc)."""
    if not frame.native:
        return None
    entries = [lib for lib in libraries() if lib.applies_to(vendor)]
    for lib in entries:
        if any(re.search(p, frame.function) for p in lib.symbols):
            return lib
    for lib in entries:
        if any(re.search(p, frame.path) for p in lib.files):
            return lib
    return None


def library_file(path: str, vendor: str | None = None) -> Library | None:
    """The entry whose ``files`` match a shared library's path or name (a failed import's
    ``libcudnn.so.9: cannot open shared object file``), else None."""
    return next((lib for lib in libraries() if lib.applies_to(vendor) and any(re.search(p, path) for p in lib.files)),
                None)


def relabelled(tracebacks: Iterable[Traceback], vendor: str | None = None) -> list[Traceback]:
    """The tracebacks with each native frame's ``package`` set to its library's (``library_of``): a frame in
    ``/opt/rocm/lib/librccl.so`` is ``rccl``, one in ``torch/lib/librccl.so`` too (not torch, which only
    bundles it). Python frames and unknown libraries are left as read."""
    out: list[Traceback] = []
    for tb in tracebacks:
        frames = []
        for fr in tb.frames:
            lib = library_of(fr, vendor)
            frames.append(fr.model_copy(update={"package": lib.package}) if lib is not None else fr)
        out.append(tb.model_copy(update={"frames": frames}))
    return out


def died_in(tracebacks: Iterable[Traceback], vendor: str | None = None) -> Frame | None:
    """The native frame a killed process died in, for blame: the innermost frame of the crash's native
    stack that belongs to a package, passing over system libraries (libc's ``raise`` of a SIGABRT) and the
    runtimes (``runtime``: the fault a kernel library caused surfaces in the driver it called). Of the last
    such traceback; its ``package`` is the library's (``relabelled``). None without a native stack."""
    found = None
    for tb in relabelled(tracebacks, vendor):
        for fr in tb.frames:
            if not fr.native:
                break
            lib = library_of(fr, vendor)
            if fr.package and not (lib is not None and lib.runtime):
                found = fr
                break
    return found


def log_evidence(lines: Iterable[str], vendor: str | None = None) -> list[tuple[Library, str]]:
    """The entries whose ``log`` patterns match the kept log lines, the latest line first (closest to the
    failure), each once with the line that matched it (stripped, at most 200 characters)."""
    found: dict[str, tuple[Library, str]] = {}
    entries = [lib for lib in libraries() if lib.log and lib.applies_to(vendor)]
    for line in reversed(list(lines)):
        for lib in entries:
            if lib.package not in found and any(re.search(p, line) for p in lib.log):
                text = line.strip()
                found[lib.package] = (lib, text if len(text) <= 200 else text[:197] + "...")
    return list(found.values())


def entry(package: str) -> Library | None:
    """The first entry naming ``package`` (an import name or one of its distributions), else None."""
    from tools.installed import dist_key

    return entries_by_name(libraries()).get(dist_key(package))


def entries_by_name(entries: tuple[Library, ...]) -> dict[str, Library]:
    """``entries`` (``libraries()``) by each name they go by (``dist_key`` of the import name and of each
    distribution), the first entry for a name shared, as ``entry`` finds it; built once per version of the
    file (``entry`` is asked for every package of every candidate change, each step)."""
    from tools.installed import dist_key

    key = id(entries)
    kept = _BY_NAME.get(key)
    if kept is not None and kept[0] is entries:
        return kept[1]
    out: dict[str, Library] = {}
    for lib in entries:
        for name in (lib.package, *lib.distributions):
            out.setdefault(dist_key(name), lib)
    _BY_NAME.clear()  # one version of the file in use at a time
    _BY_NAME[key] = (entries, out)
    return out


#: ``entries_by_name``'s index, by the id of the tuple it indexes (kept with it, so the id stays its own).
_BY_NAME: dict[int, tuple[tuple[Library, ...], dict[str, Library]]] = {}
