"""What a run that found no fix blames (issue 20: a package no setting fixes is named, ``not_isolated``): the
failure the run chased, not the refusal of a test's own change that failed earlier; and a cuBLAS status code
in torch's error names the cuBLAS wheel (knowledge/libraries.toml).

Bf16 GEMMs fail in cuBLAS (torch's ``CUBLAS_STATUS_INVALID_VALUE when calling cublasGemmEx``) while the
decode CUDA graphs are captured, after the weights loaded; the last test switched the bf16 GEMM backend to
one SGLang 0.5.23 refuses on this GPU at start-up (srt/layers/quantization/unquant.py
``initialize_bf16_gemm_config``). Real parts: the repository's signatures and knowledge, the log reader, the
rule planner's history and the ending.
"""

from __future__ import annotations

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Change, Conclusion, Experiment
from agent.planning.conclusion import conclusion_of
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.signatures import for_engine, load_signatures

SITE = "/workspace/.venv/lib/python3.12/site-packages"
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA GeForce RTX 4090", gpu_count=1, compute_capability="8.9",
                       memory_total_mib=24564, sglang_version="0.5.23",
                       installed={"sglang": "0.5.23", "torch": "2.14.1+cu128", "nvidia-cublas-cu12": "12.8.4.1",
                                  "nvidia-cudnn-cu12": "9.10.2.21", "sglang-kernel": "0.4.10"})
CAPTURE = f"""[2026-12-05 10:00:00 TP0] Load weight begin. avail mem=23.10 GB
[2026-12-05 10:00:20 TP0] Load weight end. elapsed=20.01 s, type=MistralForCausalLM, avail mem=9.40 GB, mem usage=13.70 GB.
[2026-12-05 10:00:22 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=2.10 GB
[2026-12-05 10:00:22 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 512, in __init__
    self.capture()
  File "{SITE}/sglang/srt/layers/linear.py", line 1390, in forward
    output_parallel = self.quant_method.apply(self, input_, bias)
  File "{SITE}/torch/nn/functional.py", line 125, in linear
    return torch._C._nn.linear(input, weight, bias)
RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 518, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`
[2026-12-05 10:00:22] Received sigquit from a child process. It usually means the child failed.
"""
REFUSED = f"""[2026-12-05 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 1013, in init_moe_gemm_config
    initialize_bf16_gemm_config()
  File "{SITE}/sglang/srt/layers/quantization/unquant.py", line 338, in initialize_bf16_gemm_config
    raise ValueError(
ValueError: --bf16-gemm-backend cutedsl requires SM100/SM103 (Blackwell)
[2026-12-05 10:05:00] Received sigquit from a child process. It usually means the child failed.
"""


def _ending(*runs: tuple[Change | None, str]) -> Conclusion:
    """The ending of a run whose launches (the baseline's first) crashed with these logs, no fix found."""
    case = Case.model_validate({"name": "c", "model": {"path": "/m/mistral"}, "baseline": {"flags": {}, "env": {}}})
    sigs = for_engine(load_signatures(), "sglang")
    experiments, outcomes = [], []
    for i, (change, log) in enumerate(runs):
        exp = Experiment(id=f"e{i}", purpose="test" if change else "baseline", baseline=case.baseline, change=change,
                         status="done")
        experiments.append(exp)
        outcomes.append(classify_outcome(RawEvidence.from_log(exp.id, log, sigs, "x.log").model_copy(
            update={"status": "crashed"})))
    state = {"case": case.model_dump(mode="json"), "status": "done", "fingerprint": HOST.model_dump(mode="json"),
             "conclude_reason": "experiment budget spent",
             "experiments": [e.model_dump(mode="json") for e in experiments],
             "outcomes": [o.model_dump(mode="json") for o in outcomes], "hypotheses": []}
    return conclusion_of(state)  # type: ignore[arg-type]


def test_the_failure_chased_is_blamed_not_a_tests_own_refusal() -> None:
    refused = Change(kind="flag", name="--bf16-gemm-backend", before=None, after="cutedsl")
    c = _ending((None, CAPTURE), (refused, REFUSED))
    assert c.status == "not_isolated" and c.implicated is not None, c.reason
    assert c.implicated["experiment_id"] == "e0", c.implicated
    assert "nvidia-cublas-cu12" in c.implicated["packages"], (c.implicated, c.reason)
    assert "the log names nvidia-cublas-cu12" in c.reason, c.reason
    assert "CUBLAS_STATUS_INVALID_VALUE" in c.implicated["evidence"]
    assert "compiled ahead of time" not in c.reason, c.reason  # the refusal's words implicate no kernel package

