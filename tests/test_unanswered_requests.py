"""hypoloop on a lab world whose requests go unanswered under a burst while the server stays up and logs
nothing (symptom class ``unanswered``), end to end through the lab (real processes, HTTP): the user's own
settings on the request path (knowledge/subsystems.toml ``carries_requests``) are tested before the
catalog's load suspects that predict corrupted numbers or a crash, the root fix is found, and lifting the
queue bound the user set (which also makes the hang go away) is reported as a workaround, never as the
fix."""

from __future__ import annotations

from pathlib import Path

from clirun import run_auto

from tools.probes import MIN_REQUEST_WALL_S

WORLD = Path(__file__).parent / "data" / "worlds" / "unanswered-detokenizer-workers" / "world.toml"
#: What the user set away from SGLang's defaults: two detokenizer workers and bounded admission.
FLAGS = '{ "--detokenizer-worker-num" = 2, "--max-queued-requests" = 2, "--max-running-requests" = 4 }'
#: Catalog changes for load-only failures whose hypotheses predict corrupted decode, not a lost reply.
CORRUPTING = {"--disable-cuda-graph-padding", "--disable-radix-cache"}


def _case(tmp_path: Path, intent: str = "") -> Path:
    path = tmp_path / "case.toml"
    path.write_text(
        'name = "unanswered"\n'
        'description = "Under our load test some requests never get a response while /health says 200 and the '
        'server looks idle. Single requests are fine."\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{WORLD}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        f'[model]\npath = "Qwen/Qwen3-8B"\n[baseline]\nflags = {FLAGS}\n'
        "[reproduce]\nconcurrency = 8\n[budget]\nexperiments = 8\nhost_seconds = 1000000\n" + intent
    )
    return path


def _run(tmp_path: Path, case: Path) -> tuple[dict, list[dict]]:
    return run_auto(tmp_path, case, timeout=600, HYPOLOOP_LAB_TIME_SCALE="0.001", HYPOLOOP_LAB_SEED="t",
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def _changes(events: list[dict]) -> list[str]:
    """The flag each proposed one-change experiment changes, in order."""
    return [e["data"]["change"]["name"] for e in events
            if e["type"] == "experiment.proposed" and e["data"].get("change")]


def test_the_request_path_setting_is_tested_first_and_is_the_fix(tmp_path: Path) -> None:
    result, events = _run(tmp_path, _case(tmp_path))
    outcomes = [e["data"] for e in events if e["type"] == "outcome"]
    assert outcomes[0]["stage"] == "request_failed"  # the burst is left without an answer
    changes = _changes(events)
    assert changes and changes[0] == "--detokenizer-worker-num", changes
    assert not CORRUPTING & set(changes), changes
    assert result["status"] == "isolated", result
    assert result["root_cause"]["fix"]["name"] == "--detokenizer-worker-num"
    # the 5 s of wall time the orchestrator waits on a request that never returns (its floor at 0.001) is
    # not host time: the hung launch costs about 60 host-s more than one that served, not 5,000
    served = min(o["timings"]["host_seconds"] for o in outcomes if o["stage"] == "ok")
    assert outcomes[0]["timings"]["host_seconds"] - served < 0.8 * MIN_REQUEST_WALL_S / 0.001, outcomes[0]["timings"]


def test_lifting_the_queue_bound_is_reported_as_a_workaround(tmp_path: Path) -> None:
    """The user needs the two detokenizer workers (the case's intent): what remains that serves is lifting
    the queue bound, which avoids the overflow; the ending says it is a workaround and names it."""
    result, events = _run(tmp_path, _case(tmp_path, '[intent]\nkeep = ["--detokenizer-worker-num"]\n'))
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert result["status"] != "isolated" or result["root_cause"]["fix"]["name"] != "--max-queued-requests", result
    assert "workaround" in conclusion["reason"] and "--max-queued-requests" in conclusion["reason"], conclusion
