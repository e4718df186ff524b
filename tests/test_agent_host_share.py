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
from clirun import changes_tested, run_auto

from agent.planning.served import served_settings
from bench.run import empty_catalog_knowledge

TIME_SCALE = "0.002"
WORLD = Path(__file__).parent / "data" / "worlds" / "cpu-ranks-below-numa-nodes" / "world.toml"



@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_ranks_fewer_than_the_hosts_numa_nodes_are_sized_to_the_host(catalog: str, tmp_path: Path) -> None:
    """The notice names four nodes and one rank, the server dies while the weights load: the first change
    tested is --tp-size 4 (not a revert of the user's own settings), and the run ends isolated on it, with
    or without the hypothesis catalog."""
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "cpu-ranks-below-numa-nodes"\n'
        'description = "A large model with the SGLang CPU engine on our four-socket box; it loads for a long '
        'time and then dies before it is ready."\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{WORLD}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        '[model]\npath = "meituan/DeepSeek-R1-Channel-INT8"\n'
        '[baseline]\nflags = { "--device" = "cpu", "--quantization" = "w8a8_int8", "--mem-fraction-static" = 0.8 }\n'
        '[budget]\nexperiments = 6\n'
    )
    env = {"HYPOLOOP_LAB_TIME_SCALE": TIME_SCALE, "HYPOLOOP_LAB_SEED": "t",
           "HYPOLOOP_LAB_STATE": str(tmp_path / "lab-state")}
    if catalog == "empty":
        env["HYPOLOOP_KNOWLEDGE"] = str(empty_catalog_knowledge(tmp_path))
    result, events = run_auto(tmp_path, case, **env)
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
