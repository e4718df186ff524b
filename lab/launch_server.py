"""Stand-in for `python -m sglang.launch_server`, driven by a lab world file.

    HYPOLOOP_LAB_WORLD=glm5-nvfp4-sm120 HYPOLOOP_LAB_TIME_SCALE=0.01 \
        python -m lab.launch_server --model-path zai-org/GLM-5-NVFP4 --tp-size 8 ...

It parses the command line with the imitated SGLang version's flags (argparse, prefix matching,
exit 2 on unknown flags), applies the world's auto-resolution rules, prints SGLang-style log lines
on the world's (scaled) timeline, serves SGLang's HTTP endpoints once "loaded", and fails exactly
where the world's fault rules say. Log text imitates SGLang 0.5.x (scheduler, model runner, uvicorn).
All output goes to stderr, one flushed write per record; the caller redirects it to a log file.

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn

from lab import responder
from lab.chance import hits_request, is_live, launch_seed, onset_s
from lab.memory import MemoryPlan, capture_batch_sizes, default_cuda_graph_max_bs, plan_memory
from lab.model_files import ensure_model_files
from lab.rules import Resolution, matching_faults, parse_command_line, render, resolve
from lab.world import WorldError, load_world_from_env, time_scale_from_env
from lab.world_types import DEATH_SIGNALS, Fault, LineSpec, World

#: Wall seconds a decode request waits for others to join its batch, in worlds whose faults depend on
#: `running_requests` (the simulated scheduler batches requests that arrive together).
BATCH_WINDOW_S = 0.15
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_SITE = "/usr/local/lib/python3.12/dist-packages"


class _Terminated(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler."""


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _exit_process(code: int) -> NoReturn:
    """Leave immediately; -9 imitates SGLang's kill_process_tree (the process SIGKILLs itself)."""
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    except OSError:
        pass
    if code == -9:
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(code if code >= 0 else 128 - code)


# ---------------------------------------------------------------------------------------- logging


class SimLog:
    """SGLang-style log writer on a simulated clock.

    Simulated time = start wall time + real elapsed / scale, so a log written at scale 0.01 shows
    the timestamps of a full-length run. Every record is one flushed write (thread-safe).
    """

    def __init__(self, scale: float, level: str, http_level: str | None) -> None:
        self.scale = scale
        self.start_wall = time.time()
        self.start_mono = time.monotonic()
        self.threshold = _LEVELS.get(level.lower(), 20)
        self.http_threshold = _LEVELS.get((http_level or level).lower(), self.threshold)
        self._lock = threading.Lock()
        self._bar_open = False  # a tqdm bar's physical line is not ended yet

    def sim_elapsed(self) -> float:
        return (time.monotonic() - self.start_mono) / self.scale

    def stamp(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.start_wall + self.sim_elapsed()))

    def sleep(self, sim_seconds: float) -> None:
        if sim_seconds > 0:
            time.sleep(sim_seconds * self.scale)

    def _write(self, text: str) -> None:
        with self._lock:
            if self._bar_open:  # end the bar's physical line first, so the record starts a line of its own
                text = "\n" + text
                self._bar_open = False
            try:
                sys.stderr.write(text if text.endswith("\n") else text + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    def line(self, text: str, *, source: str = "server", level: str = "info", rank: int = 0) -> None:
        if _LEVELS.get(level, 20) < self.threshold:
            return
        if source == "scheduler":
            prefix = f"[{self.stamp()} TP{rank}] "
        elif source == "server":
            prefix = f"[{self.stamp()}] "
        else:
            prefix = ""
        self._write(prefix + text)

    def ranks(self, make: Any, tp_size: int, *, level: str = "info") -> None:
        """One scheduler line per TP rank; `make(rank)` returns the text."""
        for rank in range(tp_size):
            self.line(make(rank), source="scheduler", level=level, rank=rank)

    def uvicorn(self, text: str, level: str = "info") -> None:
        if _LEVELS.get(level, 20) < self.http_threshold:
            return
        self._write(f"[{self.stamp()}] {level.upper() + ':':<9} {text}")

    def progress(self, text: str, *, last: bool = False) -> None:
        """A tqdm progress-bar update: no prefix, never filtered by --log-level, redrawn in place.

        tqdm's `status_printer` writes "\\r" + the bar for every update and a newline only when the bar
        closes, so a log file holds the whole bar on one physical line (tqdm/std.py, used by SGLang's
        weight loader and CUDA-graph capture).
        """
        with self._lock:
            try:
                sys.stderr.write("\r" + text + ("\n" if last else ""))
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            self._bar_open = not last

    def spec(self, spec: LineSpec, text: str, tp_size: int) -> None:
        if spec.ranks != "0" and spec.source == "scheduler":
            for rank in spec.rank_list(tp_size):
                self.line(text, source="scheduler", level=spec.level, rank=rank)
        else:
            self.line(text, source=spec.source, level=spec.level)


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _rate(per_item: float) -> str:
    if per_item <= 0:
        return "?it/s"
    return f"{per_item:5.2f}s/it" if per_item >= 1 else f"{1 / per_item:5.2f}it/s"


def _bar(frac: float, width: int = 10) -> str:
    blocks = " ▏▎▍▌▋▊▉█"
    filled = frac * width
    full = int(filled)
    rest = int((filled - full) * 8)
    out = "█" * full + (blocks[rest] if full < width else "")
    return out.ljust(width)


#: torch dtype SGLang prints for an effective --kv-cache-dtype (0.5.23 "KV Cache is allocated. dtype: ...").
_TORCH_KV_DTYPES = {
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
    "bf16": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
    "fp16": "torch.float16",
    "fp4_e2m1": "torch.float4_e2m1fn_x2",
}


# ----------------------------------------------------------------------------------- the simulator


class StandIn:
    """One run of the stand-in server in one world."""

    def __init__(self, world: World, argv: Sequence[str], env: Mapping[str, str], scale: float) -> None:
        self.world = world
        self.env = env
        self.pid = os.getpid()
        self.parsed_args, self.parsed_user = parse_command_line(world.version, argv)
        self.res: Resolution
        self.res, self.ctx = resolve(world, self.parsed_args, self.parsed_user, env)
        self.args = self.res.args
        self.ctx.extra["pid"] = self.pid
        self.log = SimLog(scale, str(self.args.get("log_level") or "info"), self.args.get("log_level_http"))
        self.tp = max(1, int(self.args.get("tp_size") or 1))
        self.fired: set[str] = set()
        self.state = "loading"  # loading | warming | ready
        self.httpd: ThreadingHTTPServer | None = None
        self.max_total_num_tokens = 0
        self.context_len = int(self.args.get("context_length") or world.model.context_length)
        self.max_running_requests = 0
        self.decode_lock = threading.Lock()
        self.seen_prompts: set[str] = set()
        self.graph_on = not bool(self.args.get("disable_cuda_graph"))
        self.last_gen_throughput = 0.0
        self.ctx.extra["context_len"] = self.context_len
        self.ctx.extra["running_requests"] = 0
        # Flaky faults: drawn once per launch (lab/chance.py); a fault that is not live never fires.
        self.seed = launch_seed(env)
        self.requests_seen = 0  # decode requests taken, the warm-up's included (per-request draws)
        self.ready_at: float | None = None  # simulated seconds at the ready line (per-minute faults)
        self.dormant = {f.id for f in world.faults if not is_live(f, self.seed)}
        self.load_sensitive = any(f.uses("running_requests") for f in world.faults)
        self.in_flight = 0
        self.load_lock = threading.Lock()
        self.release = world.version.release
        self.memory: MemoryPlan = plan_memory(
            world, self.args, default_cuda_graph_max_bs(world, self.parsed_args, self.parsed_user, env)
        )

    # --------------------------------------------------------------------------------- helpers

    def _faults(self, point: str) -> list[Fault]:
        return [
            f
            for f in matching_faults(self.world, self.ctx, at=point)
            if f.id not in self.fired and f.id not in self.dormant
        ]

    def _emit_fault_lines(self, fault: Fault) -> None:
        """A fault's lines; a scheduler line printed by several ranks is rendered per rank, so
        `{rank}` differs between them (one rank's exception, the others' watchdog lines)."""
        self.log.sleep(fault.delay_s)
        for spec in fault.lines:
            if spec.source != "scheduler" or spec.ranks == "0":
                self.log.spec(spec, render(spec.text, self.ctx), self.tp)
                continue
            for rank in spec.rank_list(self.tp):
                self.ctx.extra["rank"] = rank
                self.log.line(render(spec.text, self.ctx), source="scheduler", level=spec.level, rank=rank)
            self.ctx.extra["rank"] = 0

    def _fire(self, point: str, index: int | None = None, steps: int | None = None) -> None:
        """Fire the faults registered at `point` (for stepped phases: whose progress maps to `index`)."""
        for fault in self._faults(point):
            if index is not None and steps is not None and round(fault.progress * steps) != index:
                continue
            if fault.effect in ("crash_at_first_decode", "wrong_output"):
                continue
            if fault.effect in ("hang", "scheduler_dead", "signal_death") and point == "first_decode":
                continue
            self.fired.add(fault.id)
            if fault.effect == "scheduler_dead":
                self._scheduler_dead(fault)
                continue
            if fault.effect == "signal_death":
                self._signal_death(fault)
            self._emit_fault_lines(fault)
            if fault.effect == "warning":
                continue
            if fault.effect == "hang":
                self._hang()
            raise _Exit(fault.exit_code if fault.exit_code is not None else 1)

    def _ranks_text(self, key: str, values: Any = None, level: str = "info") -> None:
        """One scheduler line per TP rank with the release's text `key` (none when the release prints none)."""
        if not self.release.texts[key]:
            return
        self.log.ranks(lambda r: self.release.text(key, **(values(r) if values else {})), self.tp, level=level)

    def _sigquit(self, *, running: bool) -> None:
        """The launcher's reaction to a dying child: its SIGQUIT handler's error line (launch phase, or
        the running-phase handler the tokenizer manager installs at the first request) and, in releases
        that log it, kill_process_tree's own line. The caller then exits with -9 (SIGKILL of the tree)."""
        self.log.line(
            self.release.text("sigquit_running" if running else "sigquit_launch"), source="server", level="error"
        )
        kill = self.release.text("kill_tree", pid=self.pid)
        if kill:
            self.log.line(kill, source="server")

    def _hang(self) -> NoReturn:
        while True:
            time.sleep(3600)

    def _scheduler_exception(self, frames: list[str], final: list[str], *, rank: int = 0) -> None:
        """A `Scheduler hit an exception` record with a traceback, then the parent's SIGQUIT line."""
        body = "\n".join(["Scheduler hit an exception: Traceback (most recent call last):", *frames, *final])
        self.log.line(body, source="scheduler", level="error", rank=rank)
        self._sigquit(running=self.state == "ready")

    # -------------------------------------------------------------------------------------- run

    def run(self) -> int:
        try:
            return self._run()
        except _Exit as exc:
            return exc.code

    def _run(self) -> int:
        model_path = str(self.args.get("model_path"))
        if model_path not in (self.world.model.path, *self.world.model.aliases):
            self._unknown_model(model_path)  # SGLang reads the HF config before any model-specific rule
            return 1
        ensure_model_files(self.world, os.environ, model_path)
        for spec, text in self.res.logs:
            self.log.spec(spec, text, self.tp)
        self._fire("args")
        self.log.line(self._server_args_line())
        self._phase_init()
        avail = self._phase_weights()
        avail = self._phase_kv_pool(avail)
        if self.release.prefill_graph_first:
            avail = self._phase_piecewise(avail)
            avail = self._phase_capture(avail)
        else:
            avail = self._phase_capture(avail)
            avail = self._phase_piecewise(avail)
        avail = self._phase_draft(avail)
        self.log.line(
            f"max_total_num_tokens={self.max_total_num_tokens}, "
            f"chunked_prefill_size={self.args.get('chunked_prefill_size')}, "
            f"max_prefill_tokens={self.args.get('max_prefill_tokens')}, "
            f"max_running_requests={self.max_running_requests}, "
            f"context_len={self.context_len}, available_gpu_mem={avail:.2f} GB",
            source="scheduler",
        )
        self._phase_serve()
        return 0

    def _server_args_line(self) -> str:
        return self.release.server_args_line(self.args, self.world.version.dests)

    def _unknown_model(self, model_path: str) -> None:
        frames = [
            '  File "<frozen runpy>", line 198, in _run_module_as_main',
            '  File "<frozen runpy>", line 88, in _run_code',
            f'  File "{_SITE}/sglang/launch_server.py", line 32, in <module>',
            "    server_args = prepare_server_args(sys.argv[1:])",
            f'  File "{_SITE}/transformers/utils/hub.py", line 479, in cached_files',
            "    raise EnvironmentError(",
            f"OSError: {model_path} is not a local folder and is not a valid model identifier listed on "
            "'https://huggingface.co/models'",
            "If this is a private repository, make sure to pass a token having permission to this repo either by "
            "logging in with `hf auth login` or by passing `token=<your_token>`",
        ]
        self.log.line("\n".join(["Traceback (most recent call last):", *frames]), source="raw", level="error")

    # ------------------------------------------------------------------------------ phase: init

    def _phase_init(self) -> None:
        timing = self.world.timing
        hw = self.world.hardware
        self._ranks_text("init_begin")
        self.log.sleep(timing.init_s * 0.4)
        if self.tp * int(self.args.get("pp_size") or 1) > hw.gpu_count and self.world.memory.enforce:
            frames = [
                f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
                "    scheduler = Scheduler(",
                f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 705, in init_torch_distributed',
                "    torch.get_device_module(self.device).set_device(self.gpu_id)",
                f'  File "{_SITE}/torch/cuda/__init__.py", line 567, in set_device',
                "    torch._C._cuda_setDevice(device)",
            ]
            final = [
                "torch.AcceleratorError: CUDA error: invalid device ordinal",
                "GPU device may be out of range, do you have enough GPUs?",
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                "below might be incorrect.",
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
            ]
            self._scheduler_exception(frames, final, rank=hw.gpu_count)
            raise _Exit(-9)
        self.log.line("sglang is using nccl==2.27.7", source="scheduler")
        self.log.sleep(timing.init_s * 0.6)
        overhead = self.world.memory.init_overhead_gb
        self._ranks_text(
            "init_end", lambda r: {"usage": overhead + self._jitter(r), "elapsed": self.world.timing.init_s * 0.5}
        )
        self._fire("init")

    def _jitter(self, rank: int) -> float:
        return ((rank * 37) % 11) * 0.01

    # --------------------------------------------------------------------------- phase: weights

    def _phase_weights(self) -> float:
        plan = self.memory
        total, avail_begin, weights = plan.total_gb, plan.avail_begin_gb, plan.weights_gb
        self.ctx.mem.update(
            total_gb=round(total, 2), avail_gb=round(avail_begin, 2), weights_gb=round(weights, 2)
        )
        self._ranks_text("load_begin", lambda r: {"avail": avail_begin - self._jitter(r)})
        shards = self.world.model.checkpoint_shards
        dummy = self.args.get("load_format") == "dummy"
        per_shard = self.world.timing.load_s / shards * (0.05 if dummy else 1.0)
        oom_at = plan.weights_oom_shard if plan.weights_oom_shard is not None else shards + 1
        start = self.log.sim_elapsed()
        if not dummy:
            self.log.progress(
                f"Loading safetensors checkpoint shards:   0% Completed | 0/{shards} [00:00<?, ?it/s]"
            )
        for i in range(shards + 1):
            self._fire("weights", i, shards)
            if i == oom_at:
                self._weights_oom(total, avail_begin, weights)
            if i == shards:
                break
            self.log.sleep(per_shard)
            if not dummy:
                done = i + 1
                elapsed = self.log.sim_elapsed() - start
                rate = elapsed / done
                self.log.progress(
                    f"Loading safetensors checkpoint shards: {done * 100 // shards:3d}% Completed | {done}/{shards} "
                    f"[{_clock(elapsed)}<{_clock(rate * (shards - done))}, {_rate(rate)}]",
                    last=done == shards,
                )
        avail = plan.avail_after_load_gb
        self.ctx.mem["avail_gb"] = round(avail, 2)
        arch, dtype = self.world.model.architecture, self._weight_dtype()
        load_s = self.log.sim_elapsed() - start
        self._ranks_text(
            "load_end",
            lambda r: {
                "arch": arch, "dtype": dtype, "avail": avail - self._jitter(r), "usage": weights,
                "elapsed": load_s + r * 0.02,
            },
        )
        return avail

    def _weight_dtype(self) -> str:
        """The torch dtype of "Load weight end": --dtype when given, else the checkpoint's."""
        given = str(self.args.get("dtype") or "auto")
        named = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32"}
        return self.world.model.dtype if given == "auto" else f"torch.{named.get(given, given)}"

    def _weights_oom(self, total: float, avail_begin: float, weights: float) -> NoReturn:
        free_mib = 500 + (self.pid % 400)
        frames = [
            f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
            "    scheduler = Scheduler(",
            f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 941, in load_model',
            "    self.model = get_model(",
            f'  File "{_SITE}/sglang/srt/model_loader/loader.py", line 633, in load_model',
            "    model = _initialize_model(",
            f'  File "{_SITE}/torch/utils/_device.py", line 104, in __torch_function__',
            "    return func(*args, **kwargs)",
        ]
        final = [
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of "
            f"{total:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch memory, this process has "
            f"{total - free_mib / 1024:.2f} GiB memory in use. Of the allocated memory {avail_begin - 0.9:.2f} GiB is "
            "allocated by PyTorch, and 312.55 MiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        ]
        self._scheduler_exception(frames, final)
        raise _Exit(-9)

    # --------------------------------------------------------------------------- phase: kv pool

    def _phase_kv_pool(self, avail: float) -> float:
        mem = self.world.memory
        plan = self.memory
        frac = plan.mem_fraction_static
        self._fire("kv_pool", 0, 1)
        self.log.sleep(self.world.timing.kv_pool_s * 0.5)
        kv_gb, tokens = plan.kv_gb, plan.kv_tokens
        if mem.enforce and tokens <= 0:
            frames = [
                f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
                "    scheduler = Scheduler(",
                *self.release.text("no_kv_room_frames", site=_SITE).split("\n"),
            ]
            # 0.5.23 suggests the fraction at which the loaded weights leave room (the lab's memory
            # model reserves total x (1 - fraction), so that is 1 - free-after-load / total here).
            minimum = 1 - plan.avail_after_load_gb / max(plan.total_gb, 1e-9)
            final = [
                self.release.text(
                    "no_kv_room", fraction=frac, minimum=minimum, suggested=math.ceil(minimum * 1000) / 1000
                )
            ]
            self._scheduler_exception(frames, final)
            raise _Exit(-9)
        self.max_total_num_tokens = tokens
        self.ctx.mem.update(kv_gb=round(kv_gb, 2), max_total_num_tokens=tokens)
        self.ctx.extra["max_total_num_tokens"] = tokens
        k_gb = kv_gb * mem.k_fraction
        kv_dtype = _TORCH_KV_DTYPES.get(str(self.args.get("kv_cache_dtype")), self.world.model.dtype)
        self._ranks_text(
            "kv_allocated",
            lambda r: {"tokens": tokens, "k_gb": k_gb, "v_gb": kv_gb - k_gb, "kv_dtype": kv_dtype},
        )
        self.log.sleep(self.world.timing.kv_pool_s * 0.5)
        avail -= kv_gb
        self.ctx.mem["avail_gb"] = round(avail, 2)
        self._ranks_text("mem_pool_end", lambda r: {"avail": avail - self._jitter(r)})
        requested = self.args.get("max_running_requests")
        default_reqs = min(max(int(tokens / max(self.context_len, 1) * 512), 2048), 4096)
        self.max_running_requests = int(requested) if requested else min(default_reqs, max(tokens // 2, 1))
        self.ctx.extra["max_running_requests"] = self.max_running_requests
        self._fire("kv_pool", 1, 1)
        return avail

    # --------------------------------------------------------------------------- phase: capture

    def _phase_capture(self, avail: float) -> float:
        if not self.graph_on:
            return avail
        plan = self.memory
        bs_list = plan.capture_batch_sizes
        default_n = len(capture_batch_sizes(self._default_cuda_graph_max_bs()))
        per_batch = self.world.timing.capture_s / max(default_n, 1)
        if self.args.get("enable_torch_compile"):
            per_batch *= 2.5
        start = self.log.sim_elapsed()
        self._ranks_text("capture_begin", lambda r: {"avail": avail - self._jitter(r)})
        bs_text = self.release.text("capture_bs", bs_list=bs_list)
        if bs_text:
            self.log.line(bs_text, source="scheduler")
        n = len(bs_list)
        oom_at = plan.capture_oom_batch if self.world.memory.enforce else None
        for i in range(n + 1):
            self._fire("capture", i, n)
            if i == n:
                break
            if oom_at is not None and i + 1 == oom_at:
                self.log.sleep(per_batch * 0.5)
                self._capture_oom(avail, bs_list[::-1][i], i)
            self.log.sleep(per_batch)
            done = i + 1
            elapsed = self.log.sim_elapsed() - start
            rate = elapsed / done
            bs = bs_list[::-1][done - 1]
            cur = avail - plan.capture_need_gb(done)
            self.log.progress(
                f"Capturing batches (bs={bs} avail_mem={cur:.2f} GB): {done * 100 // n:3d}%|{_bar(done / n)}| "
                f"{done}/{n} [{_clock(elapsed)}<{_clock(rate * (n - done))}, {_rate(rate)}]",
                last=done == n,
            )
        elapsed = self.log.sim_elapsed() - start
        graph_gb = plan.graph_gb
        avail -= graph_gb
        self.ctx.mem.update(avail_gb=round(avail, 2), graph_gb=round(graph_gb, 2))
        self._ranks_text(
            "capture_end",
            lambda r: {
                "elapsed": elapsed + r * 0.03, "usage": graph_gb, "avail": avail - self._jitter(r), "bs_list": bs_list,
            },
        )
        return avail

    def _prefill_graph_backend(self) -> str | None:
        """The prefill (piecewise) CUDA-graph setting when it is on, else None: 0.5.9's
        `--enable-piecewise-cuda-graph` switch, 0.5.17+'s `--cuda-graph-backend-prefill` (not `disabled`)."""
        value = self.release.role(self.args, "prefill_cuda_graph")
        if not value or value == "disabled" or not self.graph_on:
            return None
        return "full" if value is True else str(value)

    def _phase_piecewise(self, avail: float) -> float:
        """Prefill (piecewise) CUDA-graph capture: the release's begin/end lines; faults at
        `piecewise_capture` fire with progress 0 (after the begin line) or 1 (before the end line)."""
        backend = self._prefill_graph_backend()
        if backend is None:
            return avail
        tokens = self.args.get("piecewise_cuda_graph_max_tokens") or self.args.get("cuda_graph_max_bs_prefill") or 4096
        self._ranks_text("piecewise_begin", lambda r: {"avail": avail - self._jitter(r), "tokens": tokens,
                                                       "backend": backend})
        self._fire("piecewise_capture", 0, 1)
        self.log.sleep(self.world.timing.piecewise_s)
        self._fire("piecewise_capture", 1, 1)
        usage = 0.05 * self.memory.graph_gb
        avail -= usage
        self._ranks_text(
            "piecewise_end",
            lambda r: {"elapsed": self.world.timing.piecewise_s + r * 0.03, "usage": usage, "avail": avail - self._jitter(r)},
        )
        return avail

    def _phase_draft(self, avail: float) -> float:
        """The speculative draft worker (`--speculative-algorithm` set): faults at `draft_worker` fire with
        progress 0 (before its weights), 0.5 (after them) or 1 (after its CUDA graphs)."""
        if not self.args.get("speculative_algorithm"):
            return avail
        timing = self.world.timing
        self._fire("draft_worker", 0, 2)
        self.log.sleep(timing.draft_s * 0.6)
        self._fire("draft_worker", 1, 2)
        if self.graph_on:
            bs_list = self.memory.capture_batch_sizes
            self._ranks_text("draft_capture_begin", lambda r: {"avail": avail - self._jitter(r), "bs_list": bs_list})
            self.log.sleep(timing.draft_s * 0.4)
            usage = 0.1 * self.memory.graph_gb
            avail -= usage
            self._ranks_text(
                "draft_capture_end",
                lambda r: {"elapsed": timing.draft_s * 0.4 + r * 0.03, "usage": usage, "avail": avail - self._jitter(r)},
            )
        self._fire("draft_worker", 2, 2)
        return avail

    def _capture_oom(self, avail: float, bs: int, captured: int) -> NoReturn:
        """CUDA-graph capture ran out of memory at batch size `bs` (SGLang 0.5.x cuda_graph_runner)."""
        plan = self.memory
        free_gb = max(avail - plan.capture_need_gb(captured), 0.0)
        want_gb = plan.graph_gb_per_batch * (1.0 + bs / max(plan.capture_batch_sizes[-1], 1))
        free_mib = free_gb * 1024
        oom = (
            f"CUDA out of memory. Tried to allocate {want_gb:.2f} GiB. GPU 0 has a total capacity of "
            f"{plan.total_gb:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch memory, this "
            f"process has {plan.total_gb - free_gb:.2f} GiB memory in use. Of the allocated memory "
            f"{plan.total_gb - avail + plan.capture_need_gb(captured) - 0.4:.2f} GiB is allocated by PyTorch, "
            "and 402.11 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
            "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        frames = [
            f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
            "    scheduler = Scheduler(",
            f'  File "{_SITE}/sglang/srt/model_executor/model_runner.py", line 2188, in init_device_graphs',
            "    self.graph_runner = graph_runners[self.device](self)",
            f'  File "{_SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 423, in __init__',
            "    raise Exception(",
        ]
        final = [f"Exception: Capture cuda graph failed: {oom}", *self.release.text("capture_solutions").split("\n")]
        self._scheduler_exception(frames, final)
        raise _Exit(-9)

    def _default_cuda_graph_max_bs(self) -> int:
        """The max batch size the world resolves to when the user does not set one (timing baseline)."""
        return default_cuda_graph_max_bs(self.world, self.parsed_args, self.parsed_user, self.env)

    # ----------------------------------------------------------------------------- phase: serve

    def _phase_serve(self) -> None:
        host = str(self.args.get("host") or "127.0.0.1")
        port = int(self.args.get("port") or 30000)
        try:
            httpd = _LabHTTPServer((host, port), _Handler, self)
        except OSError as exc:
            self.log.uvicorn(
                f"[Errno {exc.errno}] error while attempting to bind on address {(host, port)!r}: "
                f"{(exc.strerror or str(exc)).lower()}",
                level="error",
            )
            raise _Exit(1) from None
        self.httpd = httpd
        self.state = "warming"
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        self.log.uvicorn(f"Started server process [{self.pid}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        self.log.uvicorn(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        self._fire("warmup")
        if not self.args.get("skip_server_warmup"):
            self._warmup_request_fault()
            self._warmup(host, port)
        self.log.line("The server is fired up and ready to roll!")
        self.ready_at = self.log.sim_elapsed()
        self.state = "ready"
        self._fire("ready")
        while True:
            time.sleep(0.5)

    def _warmup(self, host: str, port: int) -> None:
        """The launcher's warm-up, as SGLang 0.5.9 and 0.5.23 do it (entrypoints/http_server.py
        `_execute_server_warmup`): poll GET /model_info (1 s apart), then POST /generate
        {"text": "The capital city of France is", "sampling_params": {"temperature": 0,
        "max_new_tokens": 8}} with the API key when one is set. So the warm-up decodes 8 greedy tokens
        before the ready line: a decode fault can stop the start-up here. A failed or timed-out request
        logs "Initialization failed. warmup error: <traceback>" and kills the process tree; a crash of
        the scheduler ends the process through the running-phase SIGQUIT handler instead.
        """
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
        headers = {"Content-Type": "application/json"}
        if self.args.get("api_key"):
            headers["Authorization"] = f"Bearer {self.args.get('api_key')}"
        self.log.sleep(self.world.timing.warmup_s * 0.3)
        try:
            with urllib.request.urlopen(urllib.request.Request(url + "/model_info", headers=headers), timeout=5):
                pass
            body = json.dumps(
                {"sampling_params": {"temperature": 0, "max_new_tokens": 8}, "text": "The capital city of France is"}
            ).encode()
            timeout = max(600 * self.log.scale, 1.0)  # SGLANG_WARMUP_TIMEOUT unset: 600 s
            request = urllib.request.Request(url + "/generate", data=body, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                resp.read()
        except (urllib.error.URLError, OSError) as exc:
            self._warmup_failed(exc)
        self.log.sleep(self.world.timing.warmup_s * 0.7)

    def _warmup_failed(self, exc: BaseException) -> NoReturn:
        if isinstance(exc, urllib.error.HTTPError):
            detail = exc.read().decode("utf-8", "replace")
            final = f"AssertionError: {detail}"
            frames = [f'  File "{_SITE}/sglang/srt/entrypoints/http_server.py", line 1770, in _execute_server_warmup',
                      '    assert res.status_code == 200, f"{res.text}"']
        else:
            final = (
                "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', port="
                f"{self.args.get('port')}): Read timed out. (read timeout=600)"
            )
            frames = [f'  File "{_SITE}/requests/adapters.py", line 713, in send',
                      "    raise ReadTimeout(e, request=request)"]
        trace = "\n".join(["Traceback (most recent call last):", *frames, final])
        self.log.line(self.release.text("warmup_error", traceback=trace), source="server", level="error")
        kill = self.release.text("kill_tree", pid=self.pid)
        if kill:
            self.log.line(kill, source="server")
        _exit_process(-9)

    def _signal_death(self, fault: Fault) -> None:
        """The scheduler process dies of a platform signal: the fault's own lines (e.g. the HSA runtime's
        `Memory access fault by GPU node-2 ...`), faulthandler's `Fatal Python error: Aborted` (SGLang
        enables faulthandler in run_scheduler_process) from a thread with no Python frame, then the
        launcher's reaction: while starting, the release's child_died_launch (exit 1); while serving,
        the SubprocessWatchdog's line, SIGQUIT and the tree kill (137) where the release has the
        watchdog (0.5.17+), else the scheduler is silently gone (0.5.9: HTTP up, requests hang)."""
        number, name = DEATH_SIGNALS[fault.signal]
        self._emit_fault_lines(fault)
        if name:
            tid = 0x7F3A2B7FE640 + number
            self.log.line(
                f"Fatal Python error: {name}\n\nThread 0x{tid:016x} (most recent call first):\n  <no Python frame>\n\n"
                "Extension modules: numpy._core._multiarray_umath, torch._C, torch._C._dynamo.autograd_compiler, "
                "zmq.backend.cython._zmq, uvloop.loop, psutil._psutil_linux (total: 6)",
                source="raw", level="error",
            )
        if self.state not in ("warming", "ready"):
            self.log.line(self.release.text("child_died_launch", code=-number, site=_SITE), level="error")
            raise _Exit(1)
        crash = self.release.text("watchdog_crash", pid=self.pid + 1, code=-number)
        if not crash:
            self.state = "scheduler_dead"
            threading.Event().wait()
        self.log.sleep(0.5)
        self.log.line(crash, level="error")
        self._sigquit(running=True)
        _exit_process(-9)

    def _scheduler_dead(self, fault: Fault) -> None:
        """The scheduler died without a SIGQUIT to the launcher (e.g. the kernel's OOM killer): HTTP stays
        up, /health answers 503 once its health check times out (SGLANG_HEALTH_CHECK_TIMEOUT, 20 s),
        and generation requests wait forever for a scheduler that is gone (0.5.9/0.5.23
        entrypoints/http_server.py `health_generate`)."""
        self._emit_fault_lines(fault)
        self.state = "scheduler_dead"

    def _warmup_request_fault(self) -> None:
        """A fault at the warm-up request (`at = "warmup"`, effect crash_at_first_decode): SGLang's
        `_execute_server_warmup` (srt/entrypoints/http_server.py, 0.5.9) polls `/model_info`, sends one
        generation and, when either fails, logs `Initialization failed. warmup error: <traceback>` and
        kills its process tree. The fault's lines say what the warm-up saw; the process then exits
        (default -9, as kill_process_tree leaves it). Never fires with --skip-server-warmup."""
        for fault in self._faults("warmup"):
            if fault.effect == "crash_at_first_decode":
                self.fired.add(fault.id)
                self._emit_fault_lines(fault)
                _exit_process(fault.exit_code if fault.exit_code is not None else -9)

    # ------------------------------------------------------------------------------ generation

    def _log_prefill(self, prompt_tokens: int, cached: int) -> None:
        usage = prompt_tokens / max(self.max_total_num_tokens, 1)
        thr = prompt_tokens / max(prompt_tokens / self.world.timing.prefill_tokens_per_s, 1e-3)
        self.log.line(
            f"Prefill batch, #new-seq: 1, #new-token: {prompt_tokens - cached}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: 0, #queue-req: 0, input throughput (token/s): {thr:.2f}, "
            "cuda graph: False",
            source="scheduler",
        )

    def generate(
        self, prompt: str, max_new_tokens: int, temperature: float = 1.0, *, think: bool = False
    ) -> dict[str, Any]:
        """Simulate one generation request. May crash the process or hang, per the world's faults.

        `temperature` 0 decodes greedily (argmax: NaN logits give degenerate text, never the sampler's
        `probability tensor contains ...` assert), > 0 samples (torch.multinomial / the sampling kernels,
        where that assert fires): SGLang 0.5.9 and 0.5.23 layers/sampler.py `Sampler.forward`
        (`if sampling_info.is_all_greedy: torch.argmax(logits, -1)`). Faults see it as `sampled`.
        `think`: a reasoning model's chat reply starts with its thinking.
        Returns {"text", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "latency"}.
        """
        if self.state == "scheduler_dead":
            threading.Event().wait()
        prompt_tokens = responder.count_tokens(prompt) + 1
        cached = 0
        if not self.args.get("disable_radix_cache") and prompt in self.seen_prompts:
            cached = max(prompt_tokens - 1, 0)
        self.seen_prompts.add(prompt)
        self._log_prefill(prompt_tokens, cached)
        max_new_tokens = max(1, int(max_new_tokens))
        with self.load_lock:
            self.in_flight += 1
        try:
            return self._generate(prompt, max_new_tokens, prompt_tokens, cached, temperature > 0, think)
        finally:
            with self.load_lock:
                self.in_flight -= 1

    def _decode_faults(self, sampled: bool) -> tuple[list[Fault], int]:
        """First-decode faults that hold for the batch this request joins, and the batch size.

        In worlds with load-dependent faults the request first waits `BATCH_WINDOW_S` so requests
        sent together share a batch, the way SGLang's scheduler batches them.
        """
        if self.load_sensitive:
            time.sleep(BATCH_WINDOW_S)
        with self.load_lock:
            running = max(1, self.in_flight)
            request = self.requests_seen
            self.requests_seen += 1
            serving_s = self.log.sim_elapsed() - self.ready_at if self.ready_at is not None else -1.0
            self.ctx.extra["running_requests"] = running
            self.ctx.extra["sampled"] = sampled
            self.ctx.extra["serving_s"] = max(serving_s, 0.0)
            faults = [
                f
                for f in matching_faults(self.world, self.ctx, at="first_decode")
                if f.id not in self.dormant
                and hits_request(f, self.seed, request)
                and (f.per_minute <= 0 or serving_s >= onset_s(f, self.seed))
            ]
        return faults, running

    def _generate(
        self, prompt: str, max_new_tokens: int, prompt_tokens: int, cached: int, sampled: bool, think: bool
    ) -> dict[str, Any]:
        timing = self.world.timing
        degenerate: Fault | None = None
        running = 1
        if max_new_tokens > 1:
            faults, running = self._decode_faults(sampled)
            for fault in faults:
                if fault.effect == "warning" and fault.id not in self.fired:
                    self.fired.add(fault.id)
                    self._emit_fault_lines(fault)
            for fault in faults:
                if fault.effect == "hang":
                    self._emit_fault_lines(fault)
                    threading.Event().wait()
                if fault.effect == "scheduler_dead":
                    with self.decode_lock:
                        if self.state != "scheduler_dead":
                            self._scheduler_dead(fault)
                    threading.Event().wait()
                if fault.effect == "signal_death":
                    with self.decode_lock:
                        self._signal_death(fault)
                if fault.effect == "crash_at_first_decode":
                    with self.decode_lock:
                        self.log.sleep(1.0 / timing.decode_tokens_per_s)
                        self._emit_fault_lines(fault)
                        if not any("sigquit" in spec.text.lower() for spec in fault.lines):
                            # the first request installed the running-phase handler (even the warm-up's)
                            self._sigquit(running=True)
                        _exit_process(fault.exit_code if fault.exit_code is not None else -9)
                if fault.effect == "wrong_output":
                    degenerate = fault
                    self._emit_fault_lines(fault)
                    break
        if degenerate is not None:
            text = (
                responder.garbage(degenerate.text, max_new_tokens)
                if degenerate.text is not None
                else responder.degenerate(degenerate.output, max_new_tokens)
            )
            truncated = True
        else:
            full = (responder.THINKING if think else "") + responder.answer(prompt)
            text, truncated = responder.truncate(full, max_new_tokens)
        completion = max(1, responder.count_tokens(text)) if degenerate is None else max_new_tokens
        latency = (
            prompt_tokens - cached
        ) / timing.prefill_tokens_per_s + completion / timing.decode_tokens_per_s
        interval = max(1, int(self.args.get("decode_log_interval") or 40))
        step = 1.0 / timing.decode_tokens_per_s
        self.log.sleep((prompt_tokens - cached) / timing.prefill_tokens_per_s)
        for tok in range(1, completion + 1):
            if tok % interval == 0:
                self.log.sleep(step * interval)
                self.last_gen_throughput = timing.decode_tokens_per_s
                self.log.line(
                    f"Decode batch, #running-req: {running}, #token: {prompt_tokens + tok}, token usage: "
                    f"{(prompt_tokens + tok) / max(self.max_total_num_tokens, 1):.2f}, cuda graph: {self.graph_on}, "
                    f"gen throughput (token/s): {timing.decode_tokens_per_s:.2f}, #queue-req: 0, ",
                    source="scheduler",
                )
        self.log.sleep(step * (completion % interval))
        return {
            "text": text,
            "finish_reason": "length" if truncated else "stop",
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "cached_tokens": cached,
            "latency": latency,
        }

    # ---------------------------------------------------------------------------- info payloads

    def server_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {dest: self.args.get(dest) for dest in self.world.version.dests}
        mem = self.ctx.mem
        info.update(
            {
                "max_total_num_tokens": self.max_total_num_tokens,
                "max_req_input_len": max(self.context_len - 5, 1),
                "internal_states": [
                    {
                        "attention_backend": self.args.get("attention_backend"),
                        "chunked_prefill_size": self.args.get("chunked_prefill_size"),
                        "max_running_requests": self.max_running_requests,
                        "last_gen_throughput": self.last_gen_throughput,
                        "memory_usage": {
                            "weight": mem.get("weights_gb"),
                            "kvcache": mem.get("kv_gb"),
                            "token_capacity": self.max_total_num_tokens,
                            "graph": mem.get("graph_gb", 0.0),
                        },
                    }
                ],
                "version": self.world.version.version,
            }
        )
        return info

    def model_info(self) -> dict[str, Any]:
        model = self.world.model
        return {
            "model_path": self.args.get("model_path"),
            "tokenizer_path": self.args.get("tokenizer_path"),
            "is_generation": True,
            "preferred_sampling_params": self.args.get("preferred_sampling_params"),
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model.model_type or None,
            "architectures": [model.architecture],
        }

    # ------------------------------------------------------------------------------ termination

    def on_terminate(self) -> int:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if self.httpd is None:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(self.pid, signal.SIGTERM)
            return 143
        self.log.line(self.release.text("sigterm"), level="warning")
        for fault in self._faults("shutdown"):
            self.fired.add(fault.id)
            self._emit_fault_lines(fault)
            if fault.effect == "hang":  # the shutdown never finishes: only SIGKILL ends the process
                self._hang()
        crash = self.release.text("watchdog_crash", pid=self.pid + 1, code=-15)
        if crash:
            # the scheduler died of the group's SIGTERM; the launcher's watchdog sees it within its 1 s
            # interval and SIGQUITs the launcher, whose running-phase handler kills the tree (137)
            self.log.sleep(0.5)
            self.log.line(crash, level="error")
            self._sigquit(running=True)
            try:
                self.httpd.server_close()
            except OSError:
                pass
            return -9
        self.log.uvicorn("Shutting down")
        self.log.uvicorn("Waiting for application shutdown.")
        self.log.uvicorn("Application shutdown complete.")
        self.log.uvicorn(f"Finished server process [{self.pid}]")
        try:
            self.httpd.server_close()
        except OSError:
            pass
        return 0


# -------------------------------------------------------------------------------------------- HTTP


class _LabHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler], lab: StandIn) -> None:
        self.lab = lab
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Dropped connections are normal here (crashes, impatient clients): no traceback in the log."""


class _Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    server: _LabHTTPServer

    # uvicorn-style access log instead of BaseHTTPRequestHandler's
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            status = HTTPStatus(int(code))
            text = f"{status.value} {status.phrase}"
        except (ValueError, TypeError):
            text = str(code)
        host, port = self.client_address[:2]
        self.server.lab.log.uvicorn(f'{host}:{port} - "{self.requestline}" {text}')

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler API
        return

    @property
    def lab(self) -> StandIn:
        return self.server.lab

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = (
            body
            if isinstance(body, bytes)
            else (json.dumps(body).encode() if content_type == "application/json" else str(body).encode())
        )
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _empty(self, code: int) -> None:
        self.send_response(code)
        self.send_header("content-length", "0")
        self.end_headers()

    def _error(self, code: int, message: str) -> None:
        self._send(
            code,
            {
                "object": "error",
                "message": message,
                "type": HTTPStatus(code).phrase.replace(" ", ""),
                "param": None,
                "code": code,
            },
        )

    def _body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if not raw:
            return {}
        return json.loads(raw)

    def _authorized(self) -> bool:
        key = self.lab.args.get("api_key")
        if not key or self.path.split("?")[0] in ("/health", "/health_generate"):
            return True
        if self.headers.get("authorization", "") == f"Bearer {key}":
            return True
        self._send(HTTPStatus.UNAUTHORIZED, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self._route("POST")

    def _route(self, method: str) -> None:
        try:
            self._dispatch(method)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self._error(400, f"Invalid request: {exc}")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?")[0]
        try:
            body = self._body() if method == "POST" else {}
        except (ValueError, json.JSONDecodeError) as exc:
            self._error(400, f"Invalid JSON body: {exc}")
            return
        if not self._authorized():
            return
        lab = self.lab
        if path in ("/health", "/health_generate") and lab.state == "scheduler_dead":
            time.sleep(min(20 * lab.log.scale, 5.0))  # the health check waits for a scheduler that is gone
            self._empty(503)
        elif path == "/health":
            self._empty(200 if lab.state == "ready" else 503)
        elif path == "/health_generate":
            if lab.state != "ready":
                self._empty(503)
            else:
                lab.generate("", 1)
                self._empty(200)
        elif path in ("/get_model_info", "/model_info"):
            if path == "/get_model_info":
                lab.log.line(
                    "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                    "Please use '/model_info' instead.",
                    level="warning",
                )
            self._send(200, lab.model_info())
        elif path in ("/get_server_info", "/server_info"):
            if path == "/get_server_info":
                lab.log.line(
                    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                    "Please use '/server_info' instead.",
                    level="warning",
                )
            self._send(200, lab.server_info())
        elif path == "/v1/models":
            name = lab.args.get("served_model_name") or lab.args.get("model_path")
            self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": name,
                            "object": "model",
                            "created": int(time.time()),
                            "owned_by": "sglang",
                            "root": lab.args.get("model_path"),
                            "max_model_len": lab.context_len,
                        }
                    ],
                },
            )
        elif path == "/flush_cache":
            lab.seen_prompts.clear()
            lab.log.line("Cache flushed successfully!", source="scheduler")
            self._send(
                200,
                "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                "waiting requests, the operation will not be performed.)\n",
                "text/plain",
            )
        elif path == "/v1/chat/completions" and method == "POST":
            self._chat(body)
        elif path == "/v1/completions" and method == "POST":
            self._completion(body)
        elif path == "/generate" and method == "POST":
            self._generate(body)
        elif path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})

    # ---- generation endpoints

    def _max_tokens(self, body: dict[str, Any], default: int) -> int:
        for key in ("max_completion_tokens", "max_tokens"):
            if body.get(key) is not None:
                return int(body[key])
        return default

    def _chat(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._error(400, "messages must be a non-empty list")
            return
        prompt_parts: list[str] = []
        for msg in messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            prompt_parts.append(str(content or ""))
        last_user = next(
            (
                p
                for m, p in zip(reversed(messages), reversed(prompt_parts), strict=True)
                if isinstance(m, dict) and m.get("role") == "user"
            ),
            prompt_parts[-1],
        )
        max_tokens = self._max_tokens(body, 128)
        think = self._thinks(body)
        result = self.lab.generate(last_user, max_tokens, _temperature(body.get("temperature")), think=think)
        answer: str | None = result["text"]
        reasoning: str | None = None
        if think and self.lab.args.get("reasoning_parser"):
            # --reasoning-parser moves the thinking into reasoning_content; content is what follows
            # </think> (None while the reply is still thinking) (entrypoints/openai/serving_chat.py).
            head, sep, tail = str(answer).partition("</think>")
            reasoning = head.replace("<think>", "").strip()
            answer = tail.lstrip("\n") if sep else None
        overhead = 4 * len(messages) + 2
        prompt_tokens = sum(responder.count_tokens(p) for p in prompt_parts) + overhead
        model = body.get("model") or self.lab.args.get("served_model_name")
        rid = uuid.uuid4().hex
        created = int(time.time())
        if body.get("stream"):
            self._stream_chat(rid, created, model, result, prompt_tokens)
            return
        self._send(
            200,
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": answer,
                            "reasoning_content": reasoning,
                            "tool_calls": None,
                        },
                        "logprobs": None,
                        "finish_reason": result["finish_reason"],
                        "matched_stop": 154820 if result["finish_reason"] == "stop" else None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens + result["completion_tokens"],
                    "completion_tokens": result["completion_tokens"],
                    "prompt_tokens_details": None,
                    "reasoning_tokens": 0,
                },
                "metadata": {"weight_version": "default"},
            },
        )

    def _thinks(self, body: dict[str, Any]) -> bool:
        """Whether a chat reply starts with thinking: the world's model reasons (`model.reasoning`) and
        the request's `chat_template_kwargs` do not turn it off (`enable_thinking` for Qwen3/GLM-style
        templates, `thinking` for DeepSeek-V3.1-style ones); `model.reasoning = "always"` thinks anyway."""
        reasoning = self.lab.world.model.fields.get("reasoning")
        if not reasoning:
            return False
        if reasoning == "always":  # a template that opens <think> itself (DeepSeek-R1 style)
            return True
        kwargs = body.get("chat_template_kwargs") or {}
        return not (kwargs.get("enable_thinking") is False or kwargs.get("thinking") is False)

    def _stream_chat(
        self, rid: str, created: int, model: Any, result: dict[str, Any], prompt_tokens: int
    ) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        chunks = [
            {"role": "assistant", "content": ""},
            {"content": result["text"]},
        ]
        for i, delta in enumerate(chunks):
            payload = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": result["finish_reason"] if i == len(chunks) - 1 else None,
                    }
                ],
            }
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": result["completion_tokens"],
            "total_tokens": prompt_tokens + result["completion_tokens"],
        }
        final = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()

    def _completion(self, body: dict[str, Any]) -> None:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = prompt[0] if prompt else ""
        result = self.lab.generate(str(prompt), self._max_tokens(body, 16), _temperature(body.get("temperature")))
        self._send(
            200,
            {
                "id": uuid.uuid4().hex,
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model") or self.lab.args.get("served_model_name"),
                "choices": [
                    {
                        "index": 0,
                        "text": result["text"],
                        "logprobs": None,
                        "finish_reason": result["finish_reason"],
                        "matched_stop": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": result["prompt_tokens"],
                    "completion_tokens": result["completion_tokens"],
                    "total_tokens": result["prompt_tokens"] + result["completion_tokens"],
                },
            },
        )

    def _generate(self, body: dict[str, Any]) -> None:
        text = body.get("text")
        if text is None:
            self._error(400, "Either text or input_ids should be provided.")
            return
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens", 128))
        prompts = text if isinstance(text, list) else [text]
        outputs = []
        for prompt in prompts:
            result = self.lab.generate(str(prompt), max_new, _temperature(params.get("temperature")))
            finish: dict[str, Any] = (
                {"type": "length", "length": result["completion_tokens"]}
                if result["finish_reason"] == "length"
                else {"type": "stop", "matched": 154820}
            )
            outputs.append(
                {
                    "text": result["text"],
                    "meta_info": {
                        "id": uuid.uuid4().hex,
                        "finish_reason": finish,
                        "prompt_tokens": result["prompt_tokens"],
                        "weight_version": "default",
                        "completion_tokens": result["completion_tokens"],
                        "cached_tokens": result["cached_tokens"],
                        "e2e_latency": round(result["latency"], 4),
                    },
                }
            )
        self._send(200, outputs if isinstance(text, list) else outputs[0])


def _temperature(value: Any) -> float:
    """A request's temperature; unset means SGLang's default sampling (temperature 1.0,
    sampling/sampling_params.py), i.e. a sampled request."""
    return 1.0 if value is None else float(value)


# -------------------------------------------------------------------------------------------- main


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Exit codes: 0 clean stop, 1 world/launch/load error, 2 bad command line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        world = load_world_from_env()
        scale = time_scale_from_env()
    except WorldError as exc:
        print(f"lab.launch_server: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _raise_terminated)
    signal.signal(signal.SIGINT, _raise_terminated)
    stand_in: StandIn | None = None
    try:
        stand_in = StandIn(world, argv, dict(os.environ), scale)
        return stand_in.run()
    except _Terminated:
        if stand_in is None:
            return 143
        return stand_in.on_terminate()
    except WorldError as exc:
        print(f"lab.launch_server: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    _exit_process(main())
