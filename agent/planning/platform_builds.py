"""Which platforms a kernel package's builds target, read from ``knowledge/libraries.toml`` (``platforms``
and ``ports``, each with its public source), and what follows for a setting: a flag or variable named for
a package whose builds all target other platforms than the host's (``--flashinfer-*`` on ROCm,
``SGLANG_USE_AITER`` on CUDA) configures code that cannot run there, so changing it is not a candidate
(issue 20, point 1: only what is in play). Read by ``agent.planning.in_play`` and
``agent.planning.foreign``; nothing is named here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agent.domain.models import Change
from agent.planning.evidence_packages import Library, entries_by_name, entry, libraries
from tools.installed import dist_key

if TYPE_CHECKING:
    from agent.planning.in_play import InPlay

__all__ = ["foreign_build", "foreign_option", "foreign_setting", "installed_version", "names_package"]


def installed_version(lib: Library, package: str, installed: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(distribution, version) of ``lib`` (import name ``package``) among the host's ``installed``
    distributions, or (None, None) when the host did not list it."""
    for name in (*lib.distributions, package):
        if (version := installed.get(dist_key(name))) is not None:
            return dist_key(name), version
    return None, None


def foreign_build(lib: Library, host: str, version: str | None) -> bool:
    """Whether ``lib``'s builds all target other platforms than ``host``: ``host`` is not among its
    ``platforms``, and no port to ``host`` exists, or one does and the installed ``version`` is known and is
    not that port's (an unknown version could be the port: not foreign)."""
    if not lib.platforms or host in lib.platforms:
        return False
    ports = [p for p in lib.ports if p.platform == host]
    if not ports:
        return True
    return version is not None and not any(re.search(p.version, version) for p in ports)


@functools.lru_cache(maxsize=4096)
def _tokens(text: str) -> tuple[str, ...]:
    return tuple(t for t in re.split(r"[^a-z0-9]+", text.lower()) if t)


def names_package(text: str, package: str) -> bool:
    """Whether ``text`` (a setting's name and value) names ``package`` or one of its distributions as a
    word, or as words run together: ``--flashinfer-mxfp4-moe-precision`` and ``flashinfer_cutlass`` name
    flashinfer, ``SGLANG_ENABLE_JIT_DEEPGEMM`` names deep_gemm; ``--deepep-mode`` does not name deep_gemm."""
    return _names_entry(text, package, entry(package))


def _names_entry(text: str, package: str, lib: Library | None) -> bool:
    """``names_package`` with ``lib`` the package's entry (``entry(package)``), looked up by the caller."""
    return _names_any(text, frozenset({package, *(lib.distributions if lib is not None else ())}))


@functools.lru_cache(maxsize=8192)
def _names_any(text: str, names: frozenset[str]) -> bool:
    """Whether ``text`` names one of ``names`` as ``names_package`` says (cached: every candidate change
    against every package, each step)."""
    tokens = _tokens(text)
    for name in names:
        parts = _tokens(name)
        if parts and ("".join(parts) in tokens or any(tokens[i:i + len(parts)] == parts for i in range(len(tokens)))):
            return True
    return False


def foreign_setting(change: Change, play: InPlay) -> str | None:
    """``foreign_option`` on the host and configuration ``play`` describes (its platform, the fingerprint's
    installed packages): read by the rule planner's chooser for every candidate change."""
    return foreign_option(change, play.platform, play.fp.installed if play.fp is not None else {})


def foreign_option(change: Change, platform: str | None, installed: Mapping[str, str]) -> str | None:
    """Why ``change`` cannot matter on a host of ``platform``: its name or new value names a package whose
    builds all target other platforms (``foreign_build``); None otherwise, and always for a removal (it
    restores SGLang's own choice) or an unknown platform."""
    if platform is None or change.after is None:
        return None
    text = f"{change.name} {change.after if isinstance(change.after, str) else ''}"
    entries = libraries()
    named = entries_by_name(entries)  # ``entry`` of each package, from this version of the file
    for lib in entries:
        if not lib.platforms or not _names_entry(text, lib.package, named.get(dist_key(lib.package))):
            continue
        if foreign_build(lib, platform, installed_version(lib, lib.package, installed)[1]):
            return (f"{change.name} configures {lib.package}, whose builds target {' / '.join(lib.platforms)}, not "
                    f"this host's platform ({platform}): it cannot run here whatever its options say")
    return None
