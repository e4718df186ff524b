"""End to end on the lab (the real CLI, graph and rule planner, auto-approved, lab servers launched): a CPU
host whose engine leaves part of the host unused (issue 20, points 1 and 8).

SGLang's CPU engine binds each rank's threads and memory to one NUMA node and says so when the ranks are
fewer than the nodes ("Detected the current machine has N numa nodes available, but the total number of
ranks (dp_size * tp_size * pp_size) is 1, so only 1 numa nodes are used": 0.5.23
srt/utils/numa_utils.py). When the server then dies loading the weights, an engineer sizes the ranks to
the host before reverting anything the user set; on a CPU host the rank count the case left to the default
is how the same box runs, not a change of what is served, so it is the fix. On a GPU host a larger
tensor-parallel size takes other GPUs: still a change of the deployment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import changes_tested, lab_case, run_auto

from agent.planning.served import OnHost, served_settings
from bench.run import empty_catalog_knowledge

TIME_SCALE = "0.002"
WORLD = Path(__file__).parent / "data" / "worlds" / "cpu-ranks-below-numa-nodes" / "world.toml"



def _run(tmp_path: Path, case: Path, catalog: str) -> tuple[dict, list[dict]]:
    """Run ``case`` on the lab, auto-approved, with the shipped knowledge or an empty catalog."""
    env = {"HYPOLOOP_LAB_TIME_SCALE": TIME_SCALE, "HYPOLOOP_LAB_SEED": "t",
           "HYPOLOOP_LAB_STATE": str(tmp_path / "lab-state")}
    if catalog == "empty":
        env["HYPOLOOP_KNOWLEDGE"] = str(empty_catalog_knowledge(tmp_path))
    return run_auto(tmp_path, case, **env)


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_ranks_fewer_than_the_hosts_numa_nodes_are_sized_to_the_host(catalog: str, tmp_path: Path) -> None:
    """The notice names four nodes and one rank, the server dies while the weights load: the first change
    tested is --tp-size 4 (not a revert of the user's own settings), and the run ends isolated on it, with
    or without the hypothesis catalog."""
    case = lab_case(tmp_path / "case.toml", WORLD, model="meituan/DeepSeek-R1-Channel-INT8",
                    description="A large model with the SGLang CPU engine on our four-socket box; it loads for a "
                    "long time and then dies before it is ready.",
                    baseline='flags = { "--device" = "cpu", "--quantization" = "w8a8_int8", '
                    '"--mem-fraction-static" = 0.8 }', budget="experiments = 6")
    result, events = _run(tmp_path, case, catalog)
    assert result["status"] == "isolated", result.get("reason")
    fix = result["root_cause"]["fix"]
    assert (fix["name"], str(fix["after"])) == ("--tp-size", "4"), fix
    first = changes_tested(events)[0]
    assert (first["name"], str(first["after"])) == ("--tp-size", "4"), first


def test_a_larger_tensor_parallel_size_changes_the_deployment_only_off_a_cpu_host() -> None:
    """served.toml's host_sized_on: a --tp-size the case left unset is served by any size on the CPU
    platform, but a larger one on a GPU host takes other GPUs, and a size the case set is the user's."""
    served = served_settings()
    assert not served.changes_deployment("flag", "--tp-size", "4", before=None, platform="cpu")
    assert served.changes_deployment("flag", "--tp-size", "4", before=None, platform="cuda")
    assert served.changes_deployment("flag", "--tp-size", "4", before=None)
    assert served.changes_deployment("flag", "--tp-size", "4", before="2", platform="cpu")


ABOVE = Path(__file__).parent / "data" / "worlds" / "cpu-ranks-above-numa-nodes" / "world.toml"


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_rank_count_the_engine_refused_for_this_hosts_numa_nodes_is_fitted_to_the_host_as_the_fix(
        catalog: str, tmp_path: Path) -> None:
    """The case sets --tp-size 8 (a GPU recipe's) on a four-node CPU host; the engine refuses it, naming the
    host's four nodes as the bound. --tp-size 4 serves: a size the engine itself refused on this box never
    served, so fitting it to the host is the fix (isolated), not "a change of the deployment"."""
    case = lab_case(tmp_path / "case.toml", ABOVE, model="meituan/DeepSeek-R1-Channel-INT8",
                    description="A large model with the SGLang CPU engine on our four-socket box, started with "
                    "the tensor-parallel size from the model card; it never becomes ready.",
                    baseline='flags = { "--device" = "cpu", "--tp-size" = 8, "--quantization" = "w8a8_int8", '
                    '"--mem-fraction-static" = 0.8 }', budget="experiments = 6")
    result, _events = _run(tmp_path, case, catalog)
    assert result["status"] == "isolated", result.get("reason")
    fix = result["root_cause"]["fix"]
    assert (fix["name"], str(fix["before"]), str(fix["after"])) == ("--tp-size", "8", "4"), fix
    assert "changes the deployment" not in (result.get("reason") or "")


#: The failing run's facts when the CPU engine refused 8 ranks on a 4-node host (knowledge/signatures.toml
#: ranks_bounded_by_host on SGLang 0.5.23's numa_utils assertion).
REFUSED = {"host_bounded": "dp_size * tp_size * pp_size", "host_limit": "4"}


def test_a_value_refused_for_the_hosts_figure_is_fitted_only_within_it_and_only_where_the_host_sizes_it() -> None:
    """served.toml host_sized_on with the refusal's facts: 8 → 4 (or fewer) on the CPU platform keeps what is
    served; 8 → 6 (still above the host's figure), a refusal that bounds other settings, no refusal at all, and
    the same change on a GPU host (a tensor-parallel size takes GPUs there) change the deployment."""
    served = served_settings()
    assert not served.changes_deployment("flag", "--tp-size", "4", before="8", platform=OnHost("cpu", REFUSED))
    assert not served.changes_deployment("flag", "--tp", "2", before="8", platform=OnHost("cpu", REFUSED))
    assert served.changes_deployment("flag", "--tp-size", "6", before="8", platform=OnHost("cpu", REFUSED))
    assert served.changes_deployment("flag", "--tp-size", "4", before="8", platform=OnHost("cpu", {**REFUSED, "host_bounded": "dp_size"}))
    assert served.changes_deployment("flag", "--tp-size", "4", before="8", platform="cpu")
    assert served.changes_deployment("flag", "--tp-size", "4", before="8", platform=OnHost("cuda", REFUSED))
    assert served.changes_deployment("flag", "--tp-size", "4", before="8", platform=OnHost(None, REFUSED))


def test_the_engines_refusal_names_the_bounded_settings_and_the_hosts_figure() -> None:
    """SGLang 0.5.23's assertion (the test world's text, numa_utils.init_threads_binding) read by the
    repository's signatures gives the facts the conclusion reads."""
    import tomllib

    from agent.domain.evidence import RawEvidence
    from agent.planning.served import host_refusals
    from agent.run.nodes.analyze import classify_outcome
    from tools.signatures import for_engine, load_signatures

    world = tomllib.loads(ABOVE.read_text(encoding="utf-8"))
    fault = next(f for f in world["fault"] if f["id"] == "ranks-above-numa-nodes-without-binding")
    log = fault["lines"][0]["text"].replace("{tp_size}", "8")
    raw = RawEvidence.from_log("e", log, for_engine(load_signatures(), "sglang"), "x.log")
    out = classify_outcome(raw.model_copy(update={"status": "crashed"}))
    assert host_refusals([out]) == REFUSED
    assert host_refusals([out.model_copy(update={"stage": "ok"})]) == {}
