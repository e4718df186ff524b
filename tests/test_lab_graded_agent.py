"""Graded wrong output end to end (issue 21, item 5): hypoloop (the real CLI, graph and rule planner,
auto-approved) on a lab world whose FP8 KV cache answers fluently but loses accuracy
(tests/data/worlds/fp8-kv-accuracy, from sgl-project/sglang#22671) detects the drop against the accuracy
measured on a known-good launch, confirms that a 16-bit cache serves right and reports it as the workaround it
is (the user chose the FP8 cache: knowledge/served.toml role "intent"); on the same deployment
without the drop (fp8-kv-accuracy-control) it blames nothing (the world's truth: not_reproduced)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from clirun import HYPOLOOP, run_auto

from tools.probe_set import load_probe_set, run_probe_set
from tools.probes import Probe, ProbeResult, run_probe

REPO = Path(__file__).resolve().parents[1]
WORLDS = Path(__file__).parent / "data" / "worlds"
MODEL = "org/Reasoning-MoE-FP8"
#: The lab's clock: slow enough that the probe set's HTTP round trips do not eat the host-second budget.
TIME_SCALE = "0.01"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _known_good_accuracy(tmp_path: Path, world: str) -> float:
    """What a known-good launch of the deployment scores on the probe set: the reporter's "when the dtype
    is set to bf16, the accuracy returns to normal", measured as a user would before filing the case."""
    port = _port()
    env = {**os.environ, "HYPOLOOP_LAB_WORLD": str(WORLDS / world / "world.toml"),
           "HYPOLOOP_LAB_TIME_SCALE": TIME_SCALE, "HYPOLOOP_LAB_STATE": str(tmp_path / "good-state"),
           "HF_HOME": str(tmp_path / "hf")}
    log = tmp_path / "good.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.launch_server", "--model-path", MODEL, "--port", str(port),
             "--kv-cache-dtype", "bf16"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "fired up" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)

        def send(probe: Probe) -> ProbeResult:
            return run_probe(f"http://127.0.0.1:{port}", probe, model=MODEL, timeout_s=30)

        run = run_probe_set(load_probe_set(), send)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert run.failure is None and 0 < run.correct < run.asked, run
    return run.correct / run.asked


def _run(tmp_path: Path, world: str, seed: str = "g") -> tuple[dict, list[dict]]:
    expected = _known_good_accuracy(tmp_path, world)
    case = tmp_path / f"{world}.toml"
    case.write_text(
        f'name = "{world}"\n'
        'description = "since we turned on the FP8 KV cache the model answers fluently but gets fewer '
        'questions right"\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{WORLDS / world / "world.toml"}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        f'[model]\npath = "{MODEL}"\n'
        '[baseline]\nflags = { "--kv-cache-dtype" = "fp8_e4m3" }\n'
        '[budget]\nexperiments = 8\n'
        f"[reproduce]\naccuracy = {expected}\n"
    )
    return run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE=TIME_SCALE, HYPOLOOP_LAB_SEED=seed,
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def _set_result(outcome: dict) -> dict:
    return next(p for p in outcome["probes"] if p["probe_id"] == "probe-set")


def test_an_accuracy_drop_is_detected_and_dropping_the_users_fp8_cache_is_a_workaround(tmp_path: Path) -> None:
    """The user chose the FP8 KV cache (knowledge/served.toml role "intent"): the 16-bit cache that serves
    right is confirmed but reported as a workaround that changes the deployment, never as the fix."""
    result, events = _run(tmp_path, "fp8-kv-accuracy")
    assert result["status"] == "not_isolated" and result["root_cause"] is None, result
    [drop] = result["workarounds"]
    assert drop["name"] == "--kv-cache-dtype" and "fp8" not in drop["change"].split("→")[-1], drop
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert "changes the deployment" in conclusion["reason"] and "--kv-cache-dtype" in conclusion["reason"]
    outcomes = [e["data"] for e in events if e["type"] == "outcome"]
    first = outcomes[0]
    assert first["stage"] == "wrong_output"
    # fewer right answers is not NaN/Inf or meaningless text: no hypothesis says it is
    said = [e["data"]["statement"] for e in events if e["type"] == "hypothesis.added"]
    assert said and not [s for s in said if "NaN" in s or "meaningless" in s], said
    # every answer looked fine one by one: only the count says it
    assert all(p["ok"] for p in first["probes"] if p["probe_id"] != "probe-set")
    evidence = _set_result(first)["error"]
    assert "Wilson interval" in evidence and "below it with 95% confidence" in evidence
    assert "one-sided exact binomial p = " in evidence and "expected 0.9" in evidence
    report = subprocess.run([*HYPOLOOP, "report", result["transcript"]], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "HYPOLOOP_HOME": str(tmp_path / "home")})
    symptom = next(line for line in report.stdout.splitlines() if line.startswith("- **symptom**"))
    assert "probe-set=wrong_answer (accuracy " in symptom and "Wilson interval" in symptom, symptom
    fixed = [o for o in outcomes if o["stage"] == "ok"]
    assert len(fixed) >= 2  # the fix's test and its confirmation
    assert all(_set_result(o)["ok"] and "not below" in _set_result(o)["text"] for o in fixed)


def test_the_same_deployment_without_the_drop_is_not_reproduced(tmp_path: Path) -> None:
    """Scored as ``python -m bench`` scores a no-fault control (``bench.worlds.score_run``): nothing
    blamed, no fix, not isolated."""
    result, events = _run(tmp_path, "fp8-kv-accuracy-control")
    assert result["status"] == "not_isolated", result
    assert result["root_cause"] is None and result["implicated"] is None, result
    outcomes = [e["data"] for e in events if e["type"] == "outcome"]
    assert outcomes and all(o["stage"] == "ok" for o in outcomes)
    assert all("not below" in _set_result(o)["text"] for o in outcomes)
