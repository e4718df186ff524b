"""Loading a host's flag catalog: run its launcher's help, parse it, cache it per host and version."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from tools.flags.catalog import FlagCatalog
from tools.flags.help import parse_help
from tools.flags.spec import CatalogLoadError


class _CommandResultLike(Protocol):
    returncode: int
    stdout: str
    stderr: str


class _RunsCommands(Protocol):
    """The part of ``tools.host.Host`` that ``load_flag_catalog`` uses."""

    @property
    def name(self) -> str: ...

    def run(self, argv: Sequence[str], *, timeout: float = ...) -> _CommandResultLike: ...


def load_flag_catalog(
    host: _RunsCommands,
    launcher_argv: list[str],
    *,
    cache_dir: Path,
    version: str | None,
    timeout: float = 180.0,
    help_args: Sequence[str] = ("--help",),
) -> FlagCatalog:
    """Run ``[*launcher_argv, *help_args]`` on ``host`` and parse it; cache the result as JSON.

    ``help_args`` is how the engine prints every flag: ``--help`` for SGLang, ``--help=all`` for vLLM,
    whose plain ``--help`` lists only its argument groups (``knowledge/engines.toml``).

    The cache file in ``cache_dir`` is keyed by host name, launcher version and launcher argv, so a
    second call for the same host and version does not run anything. Without a version (unknown)
    nothing is cached: the help could change under the same key. A corrupt cache file is ignored
    and rewritten. ``timeout`` is in seconds (SGLang imports torch before printing help: tens of
    seconds on a cold host).

    Errors raised by ``host.run`` (HostError: host unreachable, command not found, timeout) propagate
    unchanged. Raises CatalogLoadError (one line, names host and command) when the command exits
    non-zero or prints no argparse options.
    """
    argv = [*launcher_argv, *help_args]
    command = " ".join(argv)
    cache_path = _cache_path(Path(cache_dir), host.name, version, argv) if version else None
    if cache_path is not None and cache_path.is_file():
        cached = _read_cache(cache_path, host.name, argv)
        if cached is not None:
            return cached
    result = host.run(argv, timeout=timeout)
    if result.returncode != 0:
        detail = _last_line(result.stderr) or _last_line(result.stdout) or "no output"
        raise CatalogLoadError(
            f"flag catalog: `{command}` on {host.name} exited with {result.returncode}: {detail}"
        )
    help_text = result.stdout if "usage:" in result.stdout.lower() or not result.stderr else result.stderr
    catalog = parse_help(help_text, source=f"{host.name}: {command}", version=version)
    if not catalog.flags:
        raise CatalogLoadError(
            f"flag catalog: `{command}` on {host.name} printed no argparse options "
            f"(first line: {_first_line(result.stdout) or _first_line(result.stderr) or 'empty'})"
        )
    if cache_path is not None:
        _write_cache(cache_path, host.name, argv, catalog)
    return catalog


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:200]


def _last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")[:200]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "x"


def _cache_path(cache_dir: Path, host_name: str, version: str, launcher_argv: list[str]) -> Path:
    digest = hashlib.sha256(json.dumps([host_name, launcher_argv]).encode()).hexdigest()[:10]
    return cache_dir / f"flags-{_slug(host_name)}-{_slug(version)}-{digest}.json"


def _read_cache(path: Path, host_name: str, launcher_argv: list[str]) -> FlagCatalog | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("host") != host_name or data.get("launcher_argv") != launcher_argv:
            return None
        return FlagCatalog.model_validate(data["catalog"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError):
        return None  # unreadable or from an older format: run --help again and overwrite


def _write_cache(path: Path, host_name: str, launcher_argv: list[str], catalog: FlagCatalog) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": 1,
        "host": host_name,
        "launcher_argv": launcher_argv,
        "catalog": catalog.model_dump(mode="json"),
    }
    # Write-then-rename so a concurrent reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
