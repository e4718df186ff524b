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
  fallback also failed: no launch setting can help).
"""

from __future__ import annotations

import json
import os
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
    assert "first experiment: --kv-cache-dtype: fp8_e5m2 (in the log) → bf16" in text, out


def test_unsupported_architecture_says_only_a_package_or_model_change_can_help(tmp_path: Path) -> None:
    out = _analyze(tmp_path, "unsupported_arch.log")
    _no_empty_heading(out)
    text = " ".join(out.split())
    assert "only a package or model change can help" in text and "NewModelForCausalLM" in text, out
    assert "Change the package sglang" in text
    doc = json.loads(_analyze(tmp_path, "unsupported_arch.log", "--json"))
    assert doc["first_experiment"] is None and doc["package_change"]["package"] == "sglang"
