"""A chain of exceptions is read from its original error: where a wrapper caught the failure and raised
another ("During handling of the above exception, another exception occurred:"), the code that failed is
the first traceback's, not the wrapper's (issue 20, point 7: blame what the frames say, read as an engineer
reads a chained traceback, from its root).

The log is SGLang 0.5.23's as its sources print it: DeepGEMM's JIT compiler refusing an old nvcc inside
srt/layers/deep_gemm_wrapper/compile_utils.py during decode-graph capture, re-raised by
srt/model_executor/runner/decode_cuda_graph_runner.py as "Capture cuda graph failed: ..." with its list of
memory remedies (sgl-project/sglang#7495, #5858 report the assertion).
"""

from __future__ import annotations

from sglang_logs import capture_failed

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import implicated
from agent.run.nodes.analyze import classify_outcome
from tools.signatures import for_engine, load_signatures
from tools.tracebacks import chained_to_cause, parse_tracebacks

SITE = "/opt/venv/lib/python3.12/site-packages"
CHAINED = f"""[2026-12-05 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 598, in __init__
    self.capture()
  File "{SITE}/sglang/srt/layers/deep_gemm_wrapper/compile_utils.py", line 424, in execute
    deep_gemm.fp8_gemm_nt(
  File "{SITE}/deep_gemm/__init__.py", line 50, in _fn
    return func(*args, **kwargs)
""" + capture_failed(
    'RuntimeError: Assertion error (csrc/apis/../jit_kernels/impls/../../jit/compiler.hpp:187): (major > 12 or '
    '(major == 12 and minor >= 3)) and "NVCC version should be >= 12.3"', SITE)


def test_a_chain_is_reversed_so_its_original_error_comes_last() -> None:
    tbs = parse_tracebacks(CHAINED)
    assert len(tbs) == 2
    text = dict(enumerate(CHAINED.split("\n"), 1))
    ordered = chained_to_cause(tbs, text)
    assert ordered[-1].exception_line.startswith("RuntimeError: Assertion error")
    assert ordered[0].exception_line.startswith("Exception: Capture cuda graph failed")
    # two failures one after the other (no chain line between them) keep their order
    apart = CHAINED.replace("During handling of the above exception, another exception occurred:", "[t] later")
    kept = chained_to_cause(parse_tracebacks(apart), dict(enumerate(apart.split("\n"), 1)))
    assert [tb.exception_line.split(":", 1)[0] for tb in kept] == ["RuntimeError", "Exception"]


def test_the_failing_site_is_where_the_original_error_was_raised_not_the_wrapper() -> None:
    raw = RawEvidence.from_log("e", CHAINED, for_engine(load_signatures(), "sglang"), "x.log")
    out = classify_outcome(raw.model_copy(update={"status": "crashed"}))
    case = Case.model_validate({"name": "c", "model": {"path": "m"}})
    imp = implicated(GeneratorInput(case=case, baseline=case.baseline, reference=out))
    assert imp.innermost.startswith("sglang.srt.layers.deep_gemm_wrapper.compile_utils"), imp.innermost
    assert "deep_gemm" in imp.packages.values()
