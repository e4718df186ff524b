"""A tensor-parallel server that stops answering under concurrent requests with nothing logged (symptom
class ``unanswered``) points at its collectives (knowledge/subsystems.toml gpu_collectives ``implicated_by``):
a collective that never completes leaves every rank waiting inside it, silently (sgl-project/sglang#1270).
End to end through the CLI and the lab, with the catalog and under the bench's empty-catalog ablation: the
user's own opt-in of the collectives is reverted before the catalog's general load suspects and before the
user's settings off the collectives. Test world ``unanswered-collective-hang``."""

from __future__ import annotations

from pathlib import Path

from clirun import changes_tested, run_auto

WORLD = Path(__file__).parent / "data" / "worlds" / "unanswered-collective-hang" / "world.toml"


def _case(tmp_path: Path) -> Path:
    path = tmp_path / "case.toml"
    path.write_text(
        'name = "tp-hang"\n'
        'description = "Qwen3-32B at TP=4 on four H100s answers single requests, but under our load test the '
        'in-flight requests never return, nothing is logged and /health stays 200."\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{WORLD}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        '[model]\npath = "Qwen/Qwen3-32B"\n[baseline]\n'
        'flags = { "--tp-size" = 4, "--enable-nccl-nvls" = true, "--chunked-prefill-size" = 4096, '
        '"--max-running-requests" = 16 }\n'
        "[reproduce]\nconcurrency = 8\n[budget]\nexperiments = 8\nhost_seconds = 1000000\n"
    )
    return path


def test_the_users_collective_setting_is_reverted_first_and_is_the_fix(tmp_path: Path) -> None:
    from bench.run import empty_catalog_knowledge

    for catalog in ("catalog", "empty"):
        work = tmp_path / catalog
        work.mkdir()
        env = {"HYPOLOOP_LAB_TIME_SCALE": "0.001", "HYPOLOOP_LAB_SEED": "t", "HYPOLOOP_LAB_STATE": str(work / "lab")}
        if catalog == "empty":
            env["HYPOLOOP_KNOWLEDGE"] = str(empty_catalog_knowledge(work))
        result, events = run_auto(work, _case(work), timeout=600, **env)
        changes = [c["name"] for c in changes_tested(events)]
        assert changes and changes[0] == "--enable-nccl-nvls", (catalog, changes)
        assert result["status"] == "isolated", (catalog, result["reason"])
        assert result["root_cause"]["fix"]["name"] == "--enable-nccl-nvls", (catalog, result["root_cause"])
