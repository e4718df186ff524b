"""SGLang 0.5.23 log texts several tests build their logs from (real wording, made-up figures)."""

from __future__ import annotations


def capture_failed(error: str, site: str) -> str:
    """The end of SGLang 0.5.23's decode CUDA-graph capture failure after the exception line ``error`` of the
    original error (``RuntimeError: ...``): Python's "During handling" chain to the scheduler's re-raise,
    "Capture cuda graph failed: MESSAGE", and its list of possible solutions
    (srt/model_executor/runner/decode_cuda_graph_runner.py); frames under ``site`` (a site-packages path)."""
    return f"""{error}

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{site}/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "{site}/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 602, in __init__
    raise Exception(
Exception: Capture cuda graph failed: {error.split(": ", 1)[1]}
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)
3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose
"""
