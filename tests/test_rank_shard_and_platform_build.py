"""End to end on the lab (the real CLI, graph and rule planner, auto-approved, lab servers launched): two
platform failures an engineer reads from the host's evidence (issue 20, points 1, 7 and 8).

- A CPU host at two ranks, one per socket: every rank warns that its shard of a weight does not fit the AMX
  tiles (SGLang 0.5.23 srt/layers/amx_utils.py), and the first request dies. The smallest change to the split
  is one rank; on the CPU engine fewer ranks serve the same model on the same box, so it is the fix.
- A ROCm host whose answers are garbage whatever the launch settings, while the user says the image of the
  same release for another ROCm version served: the ending names the kernel package built only for ROCm
  (knowledge/libraries.toml ``platforms``), whose version each image pins, though no log line names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clirun import changes_tested, run_auto

from agent.domain.case import Case
from agent.planning.evidence_packages import libraries
from agent.planning.generators.ranks import fewer_ranks
from agent.planning.in_play import load_subsystems, platform_of
from agent.planning.package_changes import packages_knowledge
from agent.planning.platform_change import host_platform_id
from agent.planning.platform_change import platform_builds as builds_of
from agent.planning.served import SHARD_FACT, OnHost, served_settings
from bench.run import empty_catalog_knowledge
from tools.fingerprint import HostFingerprint

TIME_SCALE = "0.002"
WORLDS = Path(__file__).parent / "data" / "worlds"
_LAUNCHER = ('[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
             'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n')


def _env(tmp_path: Path, catalog: str) -> dict[str, str]:
    env = {"HYPOLOOP_LAB_TIME_SCALE": TIME_SCALE, "HYPOLOOP_LAB_SEED": "t",
           "HYPOLOOP_LAB_STATE": str(tmp_path / "lab-state")}
    if catalog == "empty":
        env["HYPOLOOP_KNOWLEDGE"] = str(empty_catalog_knowledge(tmp_path))
    return env


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_ranks_refused_shard_on_a_cpu_host_is_fixed_by_one_rank_fewer(catalog: str, tmp_path: Path) -> None:
    """The user runs two ranks on a two-socket CPU host; each rank's shard of the experts' weights is refused by
    the AMX prepacking and the server dies at its first request. The first change tested is --tp-size 1, and
    the run ends isolated on it (the same model on the same box, not a change of the deployment), with or
    without the hypothesis catalog."""
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "cpu-rank-shard-refused"\n'
        'description = "Our MXFP4 MoE model with the SGLang CPU engine on a two-socket server, one rank per socket; '
        'it loads, then dies at its first request."\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{WORLDS / "cpu-rank-shard-refused" / "world.toml"}" }}\n'
        + _LAUNCHER + 'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        '[model]\npath = "example/moe-mxfp4-test"\n'
        '[baseline]\nflags = { "--device" = "cpu", "--tp-size" = 2, "--trust-remote-code" = true, '
        '"--mem-fraction-static" = 0.8 }\n'
        '[budget]\nexperiments = 6\n'
    )
    result, events = run_auto(tmp_path, case, **_env(tmp_path, catalog))
    assert result["status"] == "isolated", result.get("reason")
    fix = result["root_cause"]["fix"]
    assert (fix["name"], str(fix["before"]), str(fix["after"])) == ("--tp-size", "2", "1"), fix
    assert "changes the deployment" not in (result.get("reason") or "")
    first = changes_tested(events)[0]
    assert (first["name"], str(first["after"])) == ("--tp-size", "1"), first


def test_fewer_ranks_keep_what_is_served_only_after_a_refused_shard_and_only_where_the_host_sizes_them() -> None:
    """served.toml host_sized_on with the refused shard's fact: 2 → 1 on the CPU platform keeps what is
    served; without the fact (the user's own size), on a GPU host (ranks take GPUs), or raising it, it does not."""
    served, shard = served_settings(), {SHARD_FACT: "tp_size"}
    assert not served.changes_deployment("flag", "--tp-size", "1", before="2", platform=OnHost("cpu", shard))
    assert not served.changes_deployment("flag", "--tp-size", None, before="4", platform=OnHost("cpu", shard))
    assert served.changes_deployment("flag", "--tp-size", "1", before="2", platform=OnHost("cpu", {}))
    assert served.changes_deployment("flag", "--tp-size", "1", before="2", platform=OnHost("cuda", shard))
    assert served.changes_deployment("flag", "--tp-size", "4", before="2", platform=OnHost("cpu", shard))
    assert served.changes_deployment("flag", "--tp-size", "1", before="2",
                                     platform=OnHost("cpu", {SHARD_FACT: "dp_size"}))


def test_the_smallest_step_down_divides_the_attention_heads() -> None:
    assert fewer_ranks(2, 64) == 1
    assert fewer_ranks(4, 64) == 2  # 3 does not divide 64 heads
    assert fewer_ranks(4, None) == 3
    assert fewer_ranks(1, 64) is None


_ROCM_DESCRIPTION = ("An FP8 MoE model at TP=8 on our 8x MI300X node, in the ROCm 6.3 SGLang image. The server "
                     "comes up, but nearly every answer is unusable. A colleague says the ROCm 7.0 image of the "
                     "same release looked fine on another node, but we are stuck on ROCm 6.3 for now.")


def test_garbage_on_rocm_with_another_rocm_build_serving_names_the_rocm_only_kernel_package(tmp_path: Path) -> None:
    """No launch setting repairs the answers and no log line names a package; the user says the image for
    another ROCm version of the same release served. The run ends not_isolated naming aiter, the kernel
    package built only for ROCm."""
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "rocm-image-build-garbage"\n'
        f'description = "{_ROCM_DESCRIPTION}"\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{WORLDS / "rocm-image-build-garbage" / "world.toml"}" }}\n'
        + _LAUNCHER + 'gpu_query_argv = ["{python}", "-m", "lab.amd_smi"]\n'
        '[model]\npath = "example/moe-fp8-test"\n'
        '[baseline]\nflags = { "--tp-size" = 8, "--quantization" = "fp8", "--attention-backend" = "triton" }\n'
        '[budget]\nexperiments = 4\n'
    )
    result, _events = run_auto(tmp_path, case, **_env(tmp_path, "catalog"))
    assert result["status"] == "not_isolated", result.get("reason")
    implicated = result.get("implicated") or {}
    assert implicated.get("package") == "aiter", implicated
    assert "rocm 7.0" in (result.get("reason") or "").lower()


def platform_builds(case: Case, platform: str, installed: dict[str, str], check_env: dict[str, str]) -> Any:
    known = packages_knowledge().platform_builds
    assert known is not None
    return builds_of(case, platform, installed, check_env, libraries(), known.works_words)


def _case(description: str) -> Case:
    return Case.model_validate({"name": "c", "description": description, "model": {"path": "m"},
                                "baseline": {"flags": {"--tp-size": 8}}})


def test_a_platform_build_is_compared_only_when_the_description_says_another_version_served() -> None:
    """Both versions named, one of them said to serve: the ROCm-only package; one version only, no word that
    it served, the host's own platform not named, or the package reported as not installed: nothing."""
    found = platform_builds(_case(_ROCM_DESCRIPTION), "rocm", {}, {})
    assert found is not None and [lib.package for lib, _ in found.packages] == ["aiter"]
    assert (found.good, found.other) == (("7.0",), ("6.3",))
    assert platform_builds(_case("On ROCm 6.3 every answer is garbage."), "rocm", {}, {}) is None
    assert platform_builds(_case("It fails on ROCm 7.0 and on ROCm 6.3 alike."), "rocm", {}, {}) is None
    assert platform_builds(_case(_ROCM_DESCRIPTION), "cuda", {}, {}) is None
    assert platform_builds(_case(_ROCM_DESCRIPTION), "rocm", {}, {"amd-aiter": "Module Not Found"}) is None
    installed = platform_builds(_case(_ROCM_DESCRIPTION), "rocm", {"amd-aiter": "0.1.4"}, {"amd-aiter": "0.1.4"})
    assert installed is not None and installed.packages[0][1] == "0.1.4"


@pytest.mark.parametrize(("vendor", "device"), [("amd", None), ("nvidia", None), ("none", "cpu"), ("nvidia", "cpu"),
                                                ("amd", "cuda"), (None, None)])
def test_the_endings_platform_is_the_planners(vendor: str | None, device: str | None) -> None:
    """platform_change reads the host's platform as agent.planning.in_play.platform_of does."""
    flags = {"--device": device} if device else {}
    case = Case.model_validate({"name": "c", "model": {"path": "m"}, "baseline": {"flags": flags}})
    fp = HostFingerprint(gpu_vendor=vendor)
    assert host_platform_id(fp.model_dump(), case) == platform_of(fp, device, load_subsystems())
