"""Several SGLang releases: 0.5.23 logs read by `hypoloop analyze`, flag roles resolved per host, the
lab imitating each release (version files from the real --help; texts from the release's sources)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import run_cli

from agent.catalog import load_catalog, load_roles
from tools.flags import catalog_from_server_args, parse_help

DATA = Path(__file__).parent / "data"
LOGS = DATA / "logs_0.5.23"


def _analyze(tmp_path: Path, log: Path) -> dict:
    r = run_cli(tmp_path, "analyze", str(log), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_analyze_no_kv_room_in_0_5_23_words(tmp_path: Path) -> None:
    out = _analyze(tmp_path, LOGS / "no_kv_room.log")
    assert out["stage"] == "load_failed"  # a ValueError after loading began is no argument error
    ids = {s["id"] for s in out["signatures"]}
    assert {"not_enough_memory_kv", "server_args_mem_fraction_static", "kill_process_tree"} <= ids
    assert out["facts"]["mem_fraction_static"] == "0.45"  # from the dict-form server args
    top = out["hypotheses"][0]
    assert top["component"] == "memory.static_fraction"
    first = out["first_experiment"]
    assert first["name"] == "--mem-fraction-static" and float(first["after"]) > 0.48  # above SGLang's minimum


def test_analyze_capture_oom_in_0_5_23_words_names_the_decode_flag(tmp_path: Path) -> None:
    out = _analyze(tmp_path, LOGS / "capture_oom.log")
    assert out["stage"] == "load_failed"
    ids = {s["id"] for s in out["signatures"]}
    assert {"cuda_graph_capture_begin", "cuda_graph_capture_failed", "cuda_out_of_memory"} <= ids
    assert out["facts"]["capture_batches_done"] == "2"  # tqdm redraws split on \r
    assert out["hypotheses"][0]["component"] == "cuda_graph.capture_memory"
    assert out["first_experiment"]["name"] == "--cuda-graph-max-bs-decode"


def test_the_same_failure_in_a_0_5_9_log_names_the_0_5_9_flag(tmp_path: Path) -> None:
    text = (LOGS / "capture_oom.log").read_text().splitlines(keepends=True)
    text[0] = (
        "[2026-11-30 11:00:01] server_args=ServerArgs(model_path='meta-llama/Llama-3.3-70B-Instruct', "
        "tp_size=2, mem_fraction_static=0.93, kv_cache_dtype='auto', cuda_graph_max_bs=256, "
        "disable_cuda_graph=False, attention_backend=None)\n"
    )
    log = tmp_path / "capture_oom_0.5.9.log"
    log.write_text("".join(text))
    out = _analyze(tmp_path, log)
    assert out["facts"]["cuda_graph_max_bs"] == "256"
    assert out["first_experiment"]["name"] == "--cuda-graph-max-bs"


def test_server_args_line_gives_a_partial_catalog_of_either_form() -> None:
    new = catalog_from_server_args((LOGS / "capture_oom.log").read_text())
    assert new is not None and new.has("--cuda-graph-max-bs-decode") and not new.lookup("--cuda-graph-max-bs")
    assert new.resolve("--disable-decode-cuda-graph").value_type == "bool"
    old = catalog_from_server_args("x server_args=ServerArgs(tp_size=8, cuda_graph_max_bs=None, model_path='m')")
    assert old is not None and old.resolve("--tp-size").value_type == "int" and old.lookup("--cuda-graph-max-bs")
    assert catalog_from_server_args("no such line") is None


@pytest.mark.parametrize(
    ("help_file", "expected"),
    [
        (
            "help_sglang_0.5.9_full.txt",
            {
                "cuda_graph.decode_max_bs": "--cuda-graph-max-bs",
                "cuda_graph.disable_decode": "--disable-cuda-graph",
                "attention.sparse_decode_backend": "--nsa-decode-backend",
            },
        ),
        (
            "help_sglang_0.5.23.txt",
            {
                "cuda_graph.decode_max_bs": "--cuda-graph-max-bs-decode",
                "cuda_graph.disable_decode": "--disable-decode-cuda-graph",  # --disable-cuda-graph is deprecated
                "attention.sparse_decode_backend": "--dsa-decode-backend",
            },
        ),
    ],
)
def test_flag_roles_resolve_to_each_hosts_spelling(help_file: str, expected: dict[str, str]) -> None:
    catalog = parse_help((DATA / help_file).read_text())
    roles = load_roles()
    for role, spelling in expected.items():
        spec = catalog.resolve_role(roles[role])
        assert spec is not None and spec.name == spelling, role


def test_catalog_interventions_name_roles_not_a_release_spelling() -> None:
    """A fix naming the old --cuda-graph-max-bs would be an ambiguous prefix on 0.5.23."""
    for entry in load_catalog():
        for iv in entry.intervention:
            assert "--cuda-graph-max-bs" not in iv.names or iv.role == "cuda_graph.decode_max_bs", entry.id
            assert "--nsa-decode-backend" not in iv.names or iv.role is not None, entry.id
