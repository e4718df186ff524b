"""End to end on the lab (the real CLI, graph and rule planner, auto-approved, lab servers launched): CPU
hosts, where the failures an engineer meets are a default the engine cannot compute there and a native
crash inside the tensor library (issue 20, points 1, 6 and 7).

- A TypeError on None in the code that resolves unset arguments (sgl-project/sglang#11103: SGLang compared
  a CPU's unknown device memory with a threshold while choosing memory defaults) is read as "a default
  could not be computed": the next launch gives explicitly the unset setting the failing frame names, and
  that is the fix; whichever setting the failing line reads.
- A flaky segfault under load that no setting avoids ends not_isolated naming the package the process
  died in, read from the crash's native stack, even when that package is a generic runtime; every launch
  sends the case's load.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import changes_tested, lab_bench_env, run_auto, transcript_events

from bench.methods import run_agent
from bench.run import empty_catalog_knowledge
from bench.worlds import discover

#: Fast enough for CI, slow enough for the stall detector and the lab's batching window.
TIME_SCALE = "0.002"
TEST_WORLDS = Path(__file__).parent / "data" / "worlds"


@pytest.fixture(scope="module")
def bench_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with lab_bench_env(tmp_path_factory.mktemp("cpu-worlds"), TIME_SCALE) as root:
        yield root



@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_default_the_engine_cannot_compute_on_a_cpu_host_is_given_explicitly(catalog: str, bench_env: Path) -> None:
    """The development world of sgl-project/sglang#11103: after the baseline, the first change tested sets
    the unset setting the failing frame names, and the run ends isolated on the truth's root fix."""
    (world,) = discover(["qwen25-7b-cpu-k8s"])
    os.environ["HYPOLOOP_LAB_STATE"] = str(bench_env / f"lab-state-k8s-{catalog}")
    knowledge = empty_catalog_knowledge(bench_env) if catalog == "empty" else None
    result = run_agent(world, transcripts=bench_env / f"tr-k8s-{catalog}", seed="7", knowledge=knowledge)
    assert result.correct, f"{result.status}, found {result.found}, {result.launches} launches"
    assert not result.wrong_isolated
    events = transcript_events(Path(result.extra["transcript"]))
    first = changes_tested(events)[0]
    fixes = tomllib.loads((world.case_path.parent / "world.toml").read_text())["truth"]["fixes"]
    assert first["name"] in {f["name"] for f in fixes} and first["before"] is None, first
    if catalog == "empty":
        assert not result.extra["catalog_used"]


def test_the_setting_the_failing_line_reads_is_the_one_given(tmp_path: Path) -> None:
    """A test world where the missing value meets the prefill chunk SGLang would choose
    (``cfg.chunked_prefill_size * 1.5 / gpu_mem``): the setting the failing line reads is tested first and is
    the fix, not the memory fraction the same frame's words also share."""
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "cpu-default-not-computed"\n'
        'description = "SGLang CPU engine on a Xeon host; launch_server exits during start-up."\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{TEST_WORLDS / "cpu-default-not-computed" / "world.toml"}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        '[model]\npath = "Qwen/Qwen2.5-7B-Instruct"\n'
        '[baseline]\nflags = { "--device" = "cpu" }\n[budget]\nexperiments = 6\n'
    )
    result, events = run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE=TIME_SCALE, HYPOLOOP_LAB_SEED="t",
                              HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))
    assert result["status"] == "isolated", result.get("reason")
    assert result["root_cause"]["fix"]["name"] == "--chunked-prefill-size"
    assert changes_tested(events)[0]["name"] == "--chunked-prefill-size"


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_flaky_native_crash_no_setting_avoids_names_the_package_it_died_in(catalog: str, bench_env: Path) -> None:
    """The development world of a segfault in the tensor library's GEMM under concurrent load (flaky, load-
    only, no setting avoids it): the run ends not_isolated naming torch first, from the crash's native
    stack, although torch is a generic runtime and a kernel package called into it; every launch sends the
    case's concurrent load, and no change is called the fix."""
    (world,) = discover(["qwen3-8b-xeon-amx"])
    os.environ["HYPOLOOP_LAB_STATE"] = str(bench_env / f"lab-state-amx-{catalog}")
    knowledge = empty_catalog_knowledge(bench_env) if catalog == "empty" else None
    result = run_agent(world, transcripts=bench_env / f"tr-amx-{catalog}", seed="7", knowledge=knowledge)
    assert result.correct, f"{result.status}, found {result.found}, {result.launches} launches"
    assert not result.wrong_isolated
    events = transcript_events(Path(result.extra["transcript"]))
    (ending,) = [e["data"] for e in events if e["type"] == "conclusion"]
    assert ending["status"] == "not_isolated"
    assert ending["implicated"]["package"] == "torch", ending["implicated"]
    assert "compiled code" in ending["reason"]
    concurrency = world.case.reproduce.concurrency
    launched = [e["data"] for e in events if e["type"] == "experiment.proposed"]
    assert launched
    for exp in launched:
        assert any(p.get("concurrency") == concurrency for p in exp.get("probes") or []), exp["id"]
