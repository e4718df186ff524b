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


# CPython's faulthandler dump of a scheduler killed by SIGSEGV (Python/faulthandler.c, 3.12), two threads,
# then the native stack of the crash as gdb prints it (the shape of sgl-project/sglang#28992's report);
# SGLang's own log lines around it.
DUMP = """\
[2026-06-02 10:00:01 TP0] Decode batch, #running-req: 16
Fatal Python error: Segmentation fault

Thread 0x00007f3c2e7fe640 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 355 in wait
  File "/usr/lib/python3.12/threading.py", line 1030 in _bootstrap

Current thread 0x00007f3c2dfff640 (most recent call first):
  File "/opt/venv/lib/python3.12/site-packages/torch/_ops.py", line 1243 in __call__
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/layers/amx_utils.py", line 118 in weight_packed_linear
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 3215 in run_scheduler_process

Extension modules: numpy._core._multiarray_umath, torch._C (total: 61)
#0  0x00007f3d8a41c2b6 in ldtilecfg () from /opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#1  0x00007f3d86b2c4a1 in at::native::cpublas::brgemm(long, long, bool) () from /opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#2  0x00007f3d42e1a8c3 in weight_packed_linear () from /opt/venv/lib/python3.12/site-packages/sgl_kernel/common_ops.abi3.so
#3  0x00007f3d40000000 in __libc_start_call_main () at ../sysdeps/nptl/libc_start_call_main.h:58
[2026-06-02 10:00:02] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


def test_a_crash_dump_is_a_traceback_whose_frames_start_with_the_native_stack() -> None:
    """faulthandler's dump and the native stack after it are one traceback: the signal as its message, the
    native frames innermost first (each naming the installed package whose library it is, none for a
    system file), then the crashed thread's Python frames (the "Current thread" block, not the first)."""
    (tb,) = parse_tracebacks(DUMP)
    assert (tb.exception, tb.message) == ("Fatal Python error", "Segmentation fault")
    assert tb.exception_line == "Fatal Python error: Segmentation fault"
    assert [(f.native, f.package, f.function) for f in tb.frames] == [
        (True, "torch", "ldtilecfg"),
        (True, "torch", "at::native::cpublas::brgemm"),
        (True, "sgl_kernel", "weight_packed_linear"),
        (True, None, "__libc_start_call_main"),
        (False, "torch", "__call__"),
        (False, "sglang", "weight_packed_linear"),
        (False, "sglang", "run_scheduler_process"),
    ]
    assert tb.frames[3].line == 58 and tb.frames[4].line == 1243
    assert tb.frames[4].module == "torch._ops" and tb.frames[0].module is None


def test_a_dump_without_any_frame_is_no_traceback() -> None:
    """A signal death in a thread with no Python frame and no native stack printed (the HSA runtime's
    abort) names no code: it is not a traceback."""
    text = ("Memory access fault by GPU node-2 (Agent handle: 0x55d1) on address 0x7f00. Reason: Page not present.\n"
            "Fatal Python error: Aborted\n\nThread 0x00007f3a2b7fe646 (most recent call first):\n  <no Python frame>\n\n"
            "Extension modules: numpy._core._multiarray_umath, torch._C (total: 6)\n[2026-06-02 10:00:02] SIGQUIT received.\n")
    assert parse_tracebacks(text) == []


def test_a_crash_dump_far_from_the_log_end_is_kept_as_evidence() -> None:
    """The kept lines of a long log still hold the whole dump (blank lines aside), so an outcome reads the
    same traceback from them as from the full text."""
    from agent.domain.excerpt import excerpt_of_text
    from agent.domain.failure import parse_tracebacks as kept_tracebacks

    text = "".join(f"[2026-06-02 09:{i // 60:02d}:{i % 60:02d} TP0] Decode batch, #running-req: 4\n" for i in range(300))
    text += DUMP + "".join(f"[2026-06-02 10:01:{i % 60:02d}] shutting down {i}\n" for i in range(200))
    (full,) = parse_tracebacks(text)
    (kept,) = kept_tracebacks(excerpt_of_text(text))
    assert [(f.package, f.function) for f in kept.frames] == [(f.package, f.function) for f in full.frames]


def test_exception_of_follows_a_chained_traceback_to_the_exception_that_propagated() -> None:
    from tools.tracebacks import exception_of

    log = [
        "Traceback (most recent call last):",
        '  File "/x/a.py", line 1, in f',
        "    g()",
        "NotImplementedError",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/x/b.py", line 2, in h',
        "    raise RuntimeError('no device')",
        "RuntimeError: no device",
        "[2026-01-01 00:00:00] later: Traceback (most recent call last):",
        '  File "/x/c.py", line 3, in k',
        "ValueError: another failure",
    ]
    numbered = list(enumerate(log, 1))
    assert exception_of(numbered, 1) == (11, "RuntimeError: no device")
    assert exception_of(numbered[:6], 1) == (4, "NotImplementedError")  # the chain not printed yet
    assert exception_of(numbered[:3], 1) is None  # not ended
    assert exception_of(numbered, 12) == (14, "ValueError: another failure")
