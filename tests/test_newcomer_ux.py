"""What a newcomer trying hypoloop as a user saw go wrong (2026-12-04), each on real parts: the hypoloop
command run as a process against the lab host, its transcripts and its checkpoint store."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_cli


def _result(out: str) -> dict:
    """The ``--json`` result line: the last line of stdout."""
    return json.loads(out.strip().splitlines()[-1])


def test_a_shared_library_that_fails_to_load_is_named_a_library_and_the_package_that_loads_it(tmp_path: Path) -> None:
    """A failed load of a shared library (``libnvrtc.so.12: cannot open shared object file``) that no
    knowledge entry maps to a wheel: the ending calls it a library, never a package, and names as the
    package the distribution whose code loads it (the one ``implicated.package`` holds)."""
    r = run_cli(tmp_path, "run", "lab:qwen3-4b-rtx5080-cu13", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    result = _result(r.stdout)
    imp, reason = result["implicated"], result["reason"]
    assert result["status"] == "not_isolated"
    assert imp["library"] == "libnvrtc.so.12" and imp["package"] == "sglang-kernel"
    assert "libnvrtc.so.12" not in imp["packages"]
    assert "(package libnvrtc.so.12)" not in reason and "runs in libnvrtc.so.12" not in reason
    assert "the library libnvrtc.so.12, which the package sglang-kernel" in reason
