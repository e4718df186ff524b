"""hypoloop on the load-shape test worlds (issue 21, item 3), end to end through the lab: each world's
failure shows only under the traffic its report describes. With the case's `[reproduce]` the failure is
reproduced on the first launch and the fix is found; with `[reproduce]` removed, the same world ends
not_reproduced (a bare short probe never shows it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from clirun import run_auto

TEST_WORLDS = Path(__file__).parent / "data" / "worlds"

#: world -> (baseline flags, [reproduce] as the reporter's traffic looked)
WORLDS = {
    "long-prompt-unchunked": ('{ "--chunked-prefill-size" = -1 }', "prompt_tokens = 20000"),
    "long-output-graph-replay": ("{}", "output_tokens = 6000"),
    "shared-prefix-radix": ('{ "--page-size" = 64 }', "concurrency = 4\nshared_prefix_tokens = 2000"),
    "grammar-under-load": ("{}", 'concurrency = 8\nfeatures = ["json_schema"]'),
    "sustained-traffic-padding": ("{}", "concurrency = 2\nduration_s = 600"),
    "shrinking-batch-padding": ("{}", "concurrency = 4\noutput_tokens = 400\noutput_tokens_min = 40"),
}

#: Worlds whose root fix today's rule planner does not reach (it tries the load hypotheses of
#: knowledge/hypotheses.toml: overlap scheduler, CUDA-graph padding, radix cache, batch caps); the failure
#: is still reproduced as reported on the first launch. Left for the planner's owners.
PLANNER_GAPS = {"long-output-graph-replay"}


def _case(tmp_path: Path, world: str, reproduce: str | None) -> Path:
    flags, _ = WORLDS[world]
    path = tmp_path / f"{world}.toml"
    path.write_text(
        f'name = "{world}"\ndescription = "the server crashes under our production traffic"\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{TEST_WORLDS / world / "world.toml"}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        f'[model]\npath = "Qwen/Qwen3-8B"\n[baseline]\nflags = {flags}\n[budget]\nexperiments = 8\nhost_seconds = 1000000\n'
        + (f"[reproduce]\n{reproduce}\n" if reproduce else "")
    )
    return path


#: Worlds whose fault waits for minutes of traffic (`traffic_s`), which the lab counts on the wall clock
#: scaled: at 0.001 a busy CI machine's half second of back-to-back default probes is 500 simulated seconds
#: and reaches the fault without the reported load (CI saw it); at 0.01 that took five wall seconds, which
#: the default probes also reached once on a 2-core machine running the suite on two workers beside other
#: work (2026-12-03); at 0.02 it takes ten.
SLOW_CLOCK = {"sustained-traffic-padding"}


def _run(tmp_path: Path, case: Path, world: str) -> tuple[dict, list[dict]]:
    scale = "0.02" if world in SLOW_CLOCK else "0.001"
    return run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE=scale, HYPOLOOP_LAB_SEED="t",
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def _truth(world: str) -> list[dict]:
    return tomllib.loads((TEST_WORLDS / world / "world.toml").read_text())["truth"]["fixes"]


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_the_reported_load_reproduces_and_the_fix_is_found(tmp_path: Path, world: str) -> None:
    result, events = _run(tmp_path, _case(tmp_path, world, WORLDS[world][1]), world)
    outcomes = [e["data"] for e in events if e["type"] == "outcome"]
    assert outcomes[0]["stage"] != "ok"  # the first launch, with the case's load, shows the failure
    if world in PLANNER_GAPS:  # reproduced as reported; no wrong fix is claimed
        assert result["status"] != "isolated" or any(
            f["name"] == result["root_cause"]["fix"]["name"] for f in _truth(world)
        )
        if all(not f.get("root", True) for f in _truth(world)):  # only a workaround exists: named as one
            conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
            assert "only a workaround" in conclusion["reason"] and _truth(world)[0]["name"] in conclusion["reason"]
    elif all(not f.get("root", True) for f in _truth(world)):  # only a workaround exists (a broad switch-off)
        assert result["status"] == "not_isolated", result  # the honest ending names it as one
        conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
        assert "only a workaround" in conclusion["reason"] and _truth(world)[0]["name"] in conclusion["reason"]
    else:
        assert result["status"] == "isolated", result
        fix = result["root_cause"]["fix"]
        assert any(f["name"] == fix["name"] for f in _truth(world)), fix
    proposed = [e["data"] for e in events if e["type"] == "experiment.proposed"]
    assert all(any(p.get("shape") for p in e["probes"]) for e in proposed)  # every launch sends the load


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_without_the_reported_load_it_does_not_reproduce(tmp_path: Path, world: str) -> None:
    result, events = _run(tmp_path, _case(tmp_path, world, None), world)
    assert all(e["data"]["stage"] == "ok" for e in events if e["type"] == "outcome")
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert result["root_cause"] is None and conclusion["implicated"] is None
    assert "could not be reproduced" in conclusion["reason"], conclusion["reason"]
