"""One traceback model for the tools and the planner: frames innermost first, each naming its package."""

from __future__ import annotations

from agent.domain.models import LogLine, Outcome
from agent.planning.generators.evidence import parse_tracebacks as evidence_tracebacks
from tools.tracebacks import Traceback, parse_tracebacks

# CPython's traceback format as SGLang prints it from a scheduler process (prefixed header).
LOG = """\
[2026-01-10 13:23:27 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "<frozen runpy>", line 88, in _run_code
  File "/usr/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2812, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)
  File "/opt/sglang/python/sglang/srt/layers/attention/__init__.py", line 40, in create
    return FlashInferBackend(runner)
  File "/usr/lib/python3.12/dist-packages/flashinfer/jit/core.py", line 118, in load
    raise RuntimeError("ninja build failed")
RuntimeError: ninja build failed
"""


def test_frames_name_their_package_and_module_innermost_first() -> None:
    (tb,) = parse_tracebacks(LOG)
    assert [f.package for f in tb.frames] == ["flashinfer", "sglang", "sglang", None]
    assert [f.module for f in tb.frames][:3] == [
        "flashinfer.jit.core",
        "sglang.srt.layers.attention",  # a source checkout's package __init__
        "sglang.srt.managers.scheduler",
    ]
    assert tb.innermost is tb.frames[0] and tb.innermost.function == "load"
    assert tb.exception == "RuntimeError" and tb.exception_line == "RuntimeError: ninja build failed"


def test_the_planner_reads_the_same_model_from_kept_log_lines() -> None:
    lines = [LogLine(line=n, text=t) for n, t in enumerate(LOG.splitlines(), 1)]
    (tb,) = evidence_tracebacks(lines)
    assert isinstance(tb, Traceback)
    assert tb.frames == parse_tracebacks(LOG)[0].frames
    ev = Outcome(experiment_id="e", stage="load_failed", log_excerpt=lines)  # what the generators read
    assert ev.tracebacks[0].innermost is not None and ev.tracebacks[0].innermost.package == "flashinfer"
