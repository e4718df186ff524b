"""`hypoloop analyze` on logs carrying SGLang 0.5.23's own error texts always gives the best next experiment
when a launch setting can help, or says plainly that only a package or model change can, naming it:
never an empty "hypotheses" heading or a bare "no experiment to propose".

The logs in tests/data/logs_0.5.23/ quote the 0.5.23 wheel's sources ($HYPOLOOP_SGLANG_SRC, checked
below when present):
- ``no_accelerator.log``: srt/utils/common.py ``get_device`` on a host without accelerator (the move is
  ``--device cpu``; no host is asked, so the log's own line must show the host is CPU-only);
- ``kv_dtype_assert.log``: srt/arg_groups/overrides.py ``_dsa_kv_cache_dtype_default``, the assertion
  that a DSA model allows only a bf16/bfloat16 or fp8_e4m3 KV cache, with an explicit attention backend;
- ``unsupported_arch.log``: srt/models/registry.py ``_raise_for_unsupported`` (after the Transformers
  fallback also failed: no launch setting can help);
- ``prefill_capture_oom.log``: a prefill CUDA graph (0.5.23's breakable backend) runs out of memory during
  capture: model_runner_components/cuda_graph_setup.py ``Capture target prefill CUDA graph begin.``,
  breakable_cuda_graph/context.py logging runner_backend_utils ``PREFILL_CUDA_GRAPH_CAPTURE_FAILED_MSG``
  ("Fail when using backend: breakable for prefill runner." and its "Possible suggestions:").
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from clirun import run_cli

DATA = Path(__file__).parent / "data" / "logs_0.5.23"

#: (log, the text of the SGLang 0.5.23 source file it quotes, that file)
SOURCES = [
    ("no_accelerator.log", "No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.",
     "sglang/srt/utils/common.py"),
    ("kv_dtype_assert.log", "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype",
     "sglang/srt/arg_groups/overrides.py"),
    ("unsupported_arch.log", "are not supported for now. ", "sglang/srt/models/registry.py"),
    ("prefill_capture_oom.log", "Fail when using backend: ", "sglang/srt/model_executor/runner_backend_utils/__init__.py"),
    ("prefill_capture_oom.log", "Possible suggestions:", "sglang/srt/model_executor/runner_backend_utils/__init__.py"),
    ("prefill_capture_oom.log", "1. disable the prefill CUDA graph by --cuda-graph-backend-prefill=disabled",
     "sglang/srt/model_executor/runner_backend_utils/breakable_cuda_graph/context.py"),
    ("prefill_capture_oom.log", " CUDA graph begin. ",
     "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py"),
]


def _analyze(tmp_path: Path, log: str, *extra: str) -> str:
    done = run_cli(tmp_path, "analyze", str(DATA / log), *extra, COLUMNS="100")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _no_empty_heading(out: str) -> None:
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("hypotheses"):
            assert "none" in line or (i + 1 < len(lines) and lines[i + 1].strip()), lines[i : i + 2]
    assert "no experiment to propose" not in " ".join(out.split())


@pytest.mark.parametrize(("log", "text", "path"), SOURCES)
def test_the_logs_quote_sglang_0_5_23(log: str, text: str, path: str) -> None:
    src = os.environ.get("HYPOLOOP_SGLANG_SRC")
    if not src or not (Path(src) / path).is_file():
        pytest.skip("HYPOLOOP_SGLANG_SRC (the SGLang 0.5.23 sources) not set")
    assert text in (Path(src) / path).read_text()
    assert text.strip() in (DATA / log).read_text()


def test_no_accelerator_on_a_cpu_host_proposes_device_cpu(tmp_path: Path) -> None:
    out = _analyze(tmp_path, "no_accelerator.log")
    _no_empty_heading(out)
    text = " ".join(out.split())
    assert "first experiment: --device: (unset) → cpu" in text, out
    assert "the log shows a cpu host" in text  # the user is told where the platform was read from
    doc = json.loads(_analyze(tmp_path, "no_accelerator.log", "--json"))
    assert doc["first_experiment"]["name"] == "--device" and doc["first_experiment"]["after"] == "cpu"


def test_the_platform_note_quotes_the_part_of_the_config_dump_that_shows_it(tmp_path: Path) -> None:
    """The server_args line is thousands of characters; the note quotes the window with the device in it,
    not the start of the stretch the pattern spanned."""
    out = _analyze(tmp_path, "fp8-triton-no-driver.log")
    text = " ".join(out.split())
    note = text[text.index("the log shows a cpu host"):]
    assert "'device': 'cpu'" in note[:260], note[:260]


def test_cpu_only_says_so_without_the_log(tmp_path: Path) -> None:
    """--cpu-only tells analyze the host's platform when the log does not; a GPU name beside it is refused."""
    log = tmp_path / "no_plugin.log"
    log.write_text((DATA / "no_accelerator.log").read_text().replace("No accelerator", "No accel."))
    assert "--device" not in " ".join(_analyze(tmp_path, str(log)).split()).split("first experiment")[-1][:40]
    out = " ".join(_analyze(tmp_path, str(log), "--cpu-only").split())
    assert "first experiment: --device: (unset) → cpu" in out, out
    done = run_cli(tmp_path, "analyze", str(log), "--cpu-only", "--gpu-name", "H100")
    assert done.returncode != 0 and "--cpu-only" in done.stderr and "Traceback" not in done.stderr


def test_kv_dtype_assertion_proposes_a_value_the_error_allows(tmp_path: Path) -> None:
    out = _analyze(tmp_path, "kv_dtype_assert.log")
    _no_empty_heading(out)
    text = " ".join(out.split())
    assert "first experiment: --kv-cache-dtype: fp8_e5m2 (in the log) → fp8_e4m3" in text, out


def test_unsupported_architecture_says_only_a_package_or_model_change_can_help(tmp_path: Path) -> None:
    out = _analyze(tmp_path, "unsupported_arch.log")
    _no_empty_heading(out)
    text = " ".join(out.split())
    assert "only a package or model change can help" in text and "NewModelForCausalLM" in text, out
    assert "Change the package sglang" in text
    doc = json.loads(_analyze(tmp_path, "unsupported_arch.log", "--json"))
    assert doc["first_experiment"] is None and doc["package_change"]["package"] == "sglang"


# --- values checked against this host -------------------------------------------------------------------
# cpu_threads_bind.log: SGLang 0.5.23's srt/utils/numa_utils.py init_threads_binding assertion (two ranks on
# a one-NUMA-node host), whose text gives CPU lists for "a machine with 2 numa nodes" (cores 0-63).


@pytest.mark.parametrize("log", ["cpu_threads_bind.log", "tp2-no-bind.log"])
def test_another_machines_cpu_list_is_never_proposed(tmp_path: Path, log: str) -> None:
    """Unknown CPU count: the example lists are left out and the user is told why; the first experiment
    is the variable the error names as the remedy, one CPU per rank (CPUs any host running 2 ranks has),
    which keeps the user's 2 ranks; lowering --tp-size (a change of the deployment) is the alternative."""
    out = _analyze(tmp_path, log)
    _no_empty_heading(out)
    text = " ".join(out.split())
    first = text.split("first experiment:")[1].split("alternatives")[0]
    assert first.startswith(" SGLANG_CPU_OMP_THREADS_BIND: (unset) → 0|1"), out
    proposals = text.split("hypotheses")[1].split("values checked against this host")[0]
    assert "0-31" not in proposals and "0-15" not in proposals
    assert re.search(r"--tp-size: 2 (\(in the log\) )?→ 1", text.split("alternatives")[1]), out
    assert "example for another machine" in text and "--cpus" in text


def test_with_the_cpu_count_a_fitting_value_is_derived_or_left_out_with_the_reason(tmp_path: Path) -> None:
    out = " ".join(_analyze(tmp_path, "cpu_threads_bind.log", "--cpus", "8").split())
    proposals = out.split("hypotheses")[1].split("values checked against this host")[0]
    assert "0-31" not in proposals and "63" not in proposals
    # two ranks on this host's 8 CPUs: SGLang's per-rank form, '|' between the ranks (a CPU list passes the guard)
    assert "SGLANG_CPU_OMP_THREADS_BIND" in proposals and "0-3|4-7" in proposals, out
    assert "names CPUs up to 63 and this host has 8: 0-3|4-7 is this host's 8 CPUs split among 2 rank(s)" in out


def test_fit_cpu_list_checks_against_the_host() -> None:
    from agent.planning.values import fit_cpu_list

    example = "For example, on a machine with 2 numa nodes, set X=0-31"
    assert fit_cpu_list("0-31", example, cpu_count=None, ranks=None)[0] is None
    assert fit_cpu_list("0-31", example, cpu_count=None, ranks=1)[0] == "0"  # one CPU per rank
    assert fit_cpu_list("0-31|32-63", example, cpu_count=None, ranks=2)[0] == "0|1"
    assert fit_cpu_list("0-31", example, cpu_count=4, ranks=1)[0] == "0-3"
    assert fit_cpu_list("0-31", "set X=0-31", cpu_count=64, ranks=1) == ("0-31", "")
    assert fit_cpu_list("0-31|32-63", "set X=0-31|32-63", cpu_count=64, ranks=2) == ("0-31|32-63", "")
    # a sentence of the error's example paragraph without an example word: unchecked, never proposed as read
    assert fit_cpu_list("0-31|32-63", "the same as setting X=0-31|32-63", cpu_count=None, ranks=2)[0] == "0|1"
    assert fit_cpu_list("0-3", example, cpu_count=2, ranks=4)[0] is None  # fewer CPUs than ranks
    assert fit_cpu_list("16", example, cpu_count=2, ranks=1) == ("16", "")  # a count, not a CPU list


def test_a_prefill_graph_out_of_memory_is_a_capture_failure_whose_suggestions_are_read(tmp_path: Path) -> None:
    """0.5.23 words a prefill graph's capture failure differently from a decode graph's ("Fail when using
    backend: X for prefill runner." and "Possible suggestions:", not "Capture cuda graph failed" and
    "Possible solutions:"): it is still a capture failure, SGLang's own suggestions are read, and the
    first change is the static fraction they name first, not a torch GEMM backend the frames pass through."""
    doc = json.loads(_analyze(tmp_path, "prefill_capture_oom.log", "--json"))
    ids = {s["id"] for s in doc["signatures"]}
    assert {"cuda_graph_capture_begin", "cuda_graph_capture_failed", "cuda_out_of_memory"} <= ids, ids
    said = [s["text"] for s in doc["sglang_suggestions"]]
    assert any("--cuda-graph-backend-prefill=disabled" in t for t in said), said
    assert any("--cuda-graph-max-bs-prefill" in t for t in said), said
    assert doc["facts"]["capture_phase"] == "prefill"  # the phase whose capture began last
    assert doc["hypotheses"][0]["component"] == "cuda_graph.prefill_capture_memory", doc["hypotheses"][:2]
    first = doc["first_experiment"]
    assert first["name"] == "--mem-fraction-static", first
    assert float(first["after"]) < 0.836  # below what the log shows the server ran with
