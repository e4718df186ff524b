"""A flag set to the value the engine resolves when it is left out (``--kv-cache-dtype auto``: SGLang's field
default, knowledge/served.toml ``default``) changes no variable: the planner never proposes it and a
person's edit to it is refused in one line, both through the real CLI against the lab."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from clirun import run_cli

from agent.planning.unset import at_unset_value


def _answer(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(tmp_path, *args, "--json")


def _pending(r: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert r.returncode == 3, r.stderr[-2000:]
    pending = json.loads(r.stdout.strip().splitlines()[-1])["pending"]
    assert isinstance(pending, dict), r.stdout[-2000:]
    return pending


def test_an_edit_to_the_value_unset_resolves_to_is_refused(tmp_path: Path) -> None:
    first = _answer(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--transcript-dir", "tr")
    run_id = str(json.loads(first.stdout.strip().splitlines()[-1])["run_id"])
    _pending(_answer(tmp_path, "resume", run_id, "--decision", "approve"))  # the first test waits
    r = run_cli(tmp_path, "resume", run_id, "--decision", "edit", "--set", "--kv-cache-dtype=auto")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert "--kv-cache-dtype" in lines[0] and "changes nothing" in lines[0], lines
    assert "Traceback" not in r.stderr
    # another value of the same flag is a change, and is taken
    again = run_cli(tmp_path, "resume", run_id, "--decision", "edit", "--set", "--kv-cache-dtype=fp8_e5m2")
    assert again.returncode in (0, 3), again.stderr[-2000:]


def test_the_planner_never_proposes_the_value_unset_resolves_to(tmp_path: Path) -> None:
    """A person keeps the FP8 KV cache and steers the run away from the planner's first ideas (as a
    newcomer did): the component hypothesis for --kv-cache-dtype then offers the flag's other legal
    choices, and ``auto`` (what SGLang gives the flag when it is not given) must not be one of them."""
    first = _answer(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--transcript-dir", "tr")
    run_id = str(json.loads(first.stdout.strip().splitlines()[-1])["run_id"])
    answers = [
        ["--decision", "approve"],
        ["--decision", "reject", "--reason", "keep fp8"],
        ["--decision", "edit", "--set", "--fp8-gemm-backend=triton"],
        ["--decision", "edit", "--set", "--kv-cache-dtype=fp8_e5m2"],
    ]
    proposals: list[dict[str, object]] = []
    for answer in answers:
        r = _answer(tmp_path, "resume", run_id, *answer)
        assert r.returncode in (0, 3), r.stderr[-2000:]
        if r.returncode == 0:
            break
        proposals.append(_pending(r))
    assert len(proposals) >= 3, proposals  # the run went on past the person's edits
    for p in proposals:
        change = p.get("change")
        if not isinstance(change, dict) or change.get("kind") != "flag" or change.get("before") is not None:
            continue
        assert not at_unset_value(str(change["name"]), change["after"]), f"proposed a launch equal to the baseline: {p}"
