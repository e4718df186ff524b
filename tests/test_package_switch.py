"""Blame what the frames run in (issue 20): a failing error whose own frames run in an installed kernel package,
entered from the engine's code an environment variable gates (knowledge/switches.toml ``package`` and
``callers``: SGLang's DeepGEMM wrapper calling into ``deep_gemm``, turned off by SGLANG_ENABLE_JIT_DEEPGEMM=0),
makes that variable's other value the next test, ahead of the generic memory remedies SGLang's CUDA-graph
capture failure lists under "Possible solutions"; with or without the hypothesis catalog. A legacy spelling
the user set is the one changed (SGLang rewrites it over the new name at start-up). A call into the package
from code the variable does not gate, or a host of another platform, proposes nothing of it.

Real parts: SGLang 0.5.23's own ``--help``, the repository's knowledge and the rule planner for the steps; the
hypoloop command on a lab world (a real lab server process) end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_world
from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, under_catalog
from sglang_logs import capture_failed
from test_localise import H200, MI300X

from agent.planning.generators.switches import SWITCH_PREFIX
from agent.planning.switches import load_switches
from agent.planning.view import Proposal

SITE = "/opt/venv/lib/python3.12/site-packages"
ARGS = "[2026-12-05 10:00:00] server_args=ServerArgs(model_path='/m/q', tp_size=2, mem_fraction_static=0.88)\n"
#: The GEMM's caller in SGLang 0.5.23: the block-FP8 linear layer through the DeepGEMM wrapper (fp8_utils.py,
#: deep_gemm_wrapper/entrypoint.py and compile_utils.py).
WRAPPER = f"""  File "{SITE}/sglang/srt/layers/quantization/fp8_utils.py", line 1579, in deepgemm_w8a8_block_fp8_linear_with_fallback
    output = w8a8_block_fp8_matmul_deepgemm(
  File "{SITE}/sglang/srt/layers/deep_gemm_wrapper/entrypoint.py", line 237, in gemm_nt_f8f8bf16
    with compile_utils.deep_gemm_execution_hook(m, n, k, num_groups, kernel_type):
  File "{SITE}/sglang/srt/layers/deep_gemm_wrapper/compile_utils.py", line 424, in execute
    deep_gemm.fp8_gemm_nt(
"""
#: The same kernel called straight from a MoE layer's own code (SGLang 0.5.23 imports deep_gemm there without
#: reading the variable: srt/layers/moe/mega_moe.py).
DIRECT = f"""  File "{SITE}/sglang/srt/layers/moe/mega_moe.py", line 301, in forward
    deep_gemm.fp8_gemm_nt(
"""
ERROR = ("RuntimeError: Assertion error (csrc/apis/../jit/compiler.hpp:210): Failed to compile "
         "/root/.cache/deep_gemm/cache/kernel.gemm_fp8/kernel.cu")


def capture_failure(caller: str) -> str:
    """SGLang 0.5.23's decode CUDA-graph capture failing in a GEMM that ``caller`` (traceback frames) called
    into deep_gemm, wrapped in its "Capture cuda graph failed" exception with its list of memory remedies
    (srt/model_executor/runner/decode_cuda_graph_runner.py)."""
    return ARGS + f"""[2026-12-05 10:02:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 600, in __init__
    self.capture()
  File "{SITE}/sglang/srt/layers/linear.py", line 626, in forward
    output_parallel = self.quant_method.apply(self, input_, bias)
{caller}  File "{SITE}/deep_gemm/__init__.py", line 50, in _fn
    return func(*args, **kwargs)
  File "{SITE}/torch/_ops.py", line 1243, in __call__
    return self._op(*args, **kwargs)
{capture_failed(ERROR, SITE)}[2026-12-05 10:02:01] Received sigquit from a child process. It usually means the child failed.
"""


def _after_baseline(log: str, env: dict[str, str] | None = None, fp: object = H200) -> tuple[set[str], Proposal]:
    """The ledger's hypothesis ids and the next proposal once the baseline (TP 2, the user's memory
    fraction, ``env``) failed with ``log``."""
    planner, view, prop = baseline_failed_with(
        fp.model_copy(update={"gpu_count": 2}),  # type: ignore[attr-defined]
        {"--model-path": "/m/q", "--tp-size": 2, "--mem-fraction-static": 0.88}, log, SGLANG_0_5_23_FLAGS)
    if env:
        view.case.baseline.env.update(env)
        view.experiments[0].baseline.env.update(env)
        prop = planner.propose(view, planner.history(view))
    return {h.id for h in planner.history(view).hypotheses}, prop


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_failure_in_the_packages_own_frames_tests_its_switch_before_the_listed_memory_remedies(
    tmp_path: Path, catalog: str
) -> None:
    ids, prop = under_catalog(catalog, tmp_path, lambda: _after_baseline(capture_failure(WRAPPER)))
    exp = prop.experiment
    assert exp is not None and exp.change is not None, prop.conclude_reason
    assert (exp.change.kind, exp.change.name, exp.change.after) == ("env", "SGLANG_ENABLE_JIT_DEEPGEMM", "0"), \
        exp.change
    assert f"{SWITCH_PREFIX}deep-gemm-jit" in ids


def test_the_legacy_spelling_the_user_set_is_the_one_changed() -> None:
    sw = next(s for s in load_switches() if s.package == "deep_gemm")
    assert sw.legacy == ["SGL_ENABLE_JIT_DEEPGEMM"]
    _, prop = _after_baseline(capture_failure(WRAPPER), env={"SGL_ENABLE_JIT_DEEPGEMM": "1"})
    exp = prop.experiment
    assert exp is not None and exp.change is not None, prop.conclude_reason
    assert (exp.change.name, exp.change.before, exp.change.after) == ("SGL_ENABLE_JIT_DEEPGEMM", "1", "0")


@pytest.mark.parametrize(("caller", "fp"), [(DIRECT, H200), (WRAPPER, MI300X)], ids=["ungated-caller", "rocm"])
def test_no_switch_where_it_does_not_stop_the_call_or_is_not_read(caller: str, fp: object) -> None:
    ids, prop = _after_baseline(capture_failure(caller), fp=fp)
    assert f"{SWITCH_PREFIX}deep-gemm-jit" not in ids, sorted(ids)
    exp = prop.experiment
    assert exp is None or exp.change is None or "DEEPGEMM" not in exp.change.name


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_the_lab_chain_ends_on_the_switch_not_on_another_backend(tmp_path: Path, catalog: str) -> None:
    """The lab world with a removed option before DeepGEMM's JIT failing at the first capture: the second link
    is the switch, a root fix, reached without lowering the memory fraction first."""
    result, events = run_world(tmp_path, "qwen3-coder-30b-fp8-h100pcie-x2", catalog)
    assert result["status"] == "isolated", result
    changes = [e["data"]["change"] for e in events if e["type"] == "experiment.proposed" and e["data"]["change"]]
    assert [c["name"] for c in changes] == ["--enable-ep-moe", "SGLANG_ENABLE_JIT_DEEPGEMM"], changes
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert conclusion["fix"]["name"] == "SGLANG_ENABLE_JIT_DEEPGEMM" and conclusion["fix"]["after"] == "0"
