"""End to end through the CLI (issue 20, point 3): on a lab world whose illegal memory access surfaces in the
scheduler and whose true stack (only with CUDA_LAUNCH_BLOCKING=1) names the attention decode, hypoloop
launches the localiser before any guess, then changes the subsystem the true frames name, and ends with a
root fix of the world's truth; CUDA_LAUNCH_BLOCKING is nowhere in the ending. No launch count is pinned
(issue 20: a tunable answers to the sweep over all worlds)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from clirun import run_auto

from agent.planning.in_play import load_subsystems

CASE = Path(__file__).resolve().parents[1] / "lab" / "worlds" / "qwen3-32b-h200" / "case.toml"


def test_the_localiser_runs_first_and_the_fix_is_the_narrower_change_in_the_true_frames_subsystem(
    tmp_path: Path,
) -> None:
    result, events = run_auto(tmp_path, CASE, timeout=900, HYPOLOOP_LAB_TIME_SCALE="0.002",
                              HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"), HYPOLOOP_LAB_SEED="7")
    proposed = [e["data"] for e in events if e["type"] == "experiment.proposed"]
    tests = [d for d in proposed if d["purpose"] == "test"]
    assert tests, proposed
    first = tests[0]["change"]
    assert (first["kind"], first["name"], first["after"]) == ("env", "CUDA_LAUNCH_BLOCKING", "1")
    assert "localise first" in tests[0]["rationale"]
    # the ledger recorded where the kernel failed, from that launch's frames
    supported = [e["data"] for e in events if e["type"] == "hypothesis.supported"
                 and e["data"]["id"].startswith("localise:")]
    assert any("flashattention_backend.forward_decode" in ev["detail"] for d in supported for ev in d["evidence"])
    # the next change is in the subsystem the true frames name, never the localiser again
    attention = next(s for s in load_subsystems().subsystems if s.id == "attention")
    assert attention.flags is not None
    nxt = tests[1]["change"]
    assert nxt["kind"] == "flag" and attention.flags.search(nxt["name"]), nxt

    assert result["status"] == "isolated", (result["status"], result.get("reason"))
    fix = result["root_cause"]["fix"]
    truth = tomllib.loads((CASE.parent / "world.toml").read_text(encoding="utf-8"))["truth"]
    roots = {(f["kind"], f["name"], str(f["value"])) for f in truth["fixes"] if f["root"]}
    assert (fix["kind"], fix["name"], str(fix["after"])) in roots, fix
    # the ending does not carry the debugging setting: not the fix, not a blocker, not the working command
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert "CUDA_LAUNCH_BLOCKING" not in json.dumps(result["root_cause"])
    assert "CUDA_LAUNCH_BLOCKING" not in json.dumps(conclusion.get("findings_entry") or "")
    fixing = next(d for d in proposed if d["id"] == conclusion["fix_experiment_id"])
    assert "CUDA_LAUNCH_BLOCKING" not in fixing["baseline"]["env"]
