"""The simulated engine's start-up stages, in SGLang's order: distributed init, weight loading, the KV-cache
pool, CUDA-graph capture (decode, and prefill/piecewise), the speculative draft worker.

Each stage prints its release's log lines on the world's timeline, fires the world's faults registered at
that point (`at = "weights"`, `"capture"`, ...) and dies the way SGLang dies there when memory runs out
(`torch.OutOfMemoryError`, `Capture cuda graph failed`, no room for the KV cache).

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import math
from typing import NoReturn

from lab.engine import SITE, Engine, LaunchExit
from lab.memory import capture_batch_sizes, default_cuda_graph_max_bs
from lab.sim_log import tqdm_bar, tqdm_clock, tqdm_rate

#: torch dtype SGLang prints for an effective --kv-cache-dtype (0.5.23 "KV Cache is allocated. dtype: ...").
_TORCH_KV_DTYPES = {
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
    "bf16": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
    "fp16": "torch.float16",
    "fp4_e2m1": "torch.float4_e2m1fn_x2",
}


class StartupStages(Engine):
    """The start-up stages of one launch; each returns the free GPU memory (GB) it leaves."""

    # ------------------------------------------------------------------------------ phase: init

    def _phase_init(self) -> None:
        timing = self.world.timing
        hw = self.world.hardware
        self._ranks_text("init_begin")
        self.log.sleep(timing.init_s * 0.4)
        if self.tp * int(self.args.get("pp_size") or 1) > hw.gpu_count and self.world.memory.enforce:
            frames = [
                f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
                "    scheduler = Scheduler(",
                f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 705, in init_torch_distributed',
                "    torch.get_device_module(self.device).set_device(self.gpu_id)",
                f'  File "{SITE}/torch/cuda/__init__.py", line 567, in set_device',
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
            raise LaunchExit(-9)
        self.log.line("sglang is using nccl==2.27.7", source="scheduler")
        self.log.sleep(timing.init_s * 0.6)
        overhead = self.world.memory.init_overhead_gb
        self._ranks_text(
            "init_end", lambda r: {"usage": overhead + self._jitter(r), "elapsed": self.world.timing.init_s * 0.5}
        )
        self._fire("init")


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
                    f"[{tqdm_clock(elapsed)}<{tqdm_clock(rate * (shards - done))}, {tqdm_rate(rate)}]",
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
            f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
            "    scheduler = Scheduler(",
            f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 941, in load_model',
            "    self.model = get_model(",
            f'  File "{SITE}/sglang/srt/model_loader/loader.py", line 633, in load_model',
            "    model = _initialize_model(",
            f'  File "{SITE}/torch/utils/_device.py", line 104, in __torch_function__',
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
        raise LaunchExit(-9)

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
                f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
                "    scheduler = Scheduler(",
                *self.release.text("no_kv_room_frames", site=SITE).split("\n"),
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
            raise LaunchExit(-9)
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
                f"Capturing batches (bs={bs} avail_mem={cur:.2f} GB): {done * 100 // n:3d}%|{tqdm_bar(done / n)}| "
                f"{done}/{n} [{tqdm_clock(elapsed)}<{tqdm_clock(rate * (n - done))}, {tqdm_rate(rate)}]",
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
            f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process',
            "    scheduler = Scheduler(",
            f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 2188, in init_device_graphs',
            "    self.graph_runner = graph_runners[self.device](self)",
            f'  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 423, in __init__',
            "    raise Exception(",
        ]
        final = [f"Exception: Capture cuda graph failed: {oom}", *self.release.text("capture_solutions").split("\n")]
        self._scheduler_exception(frames, final)
        raise LaunchExit(-9)

    def _default_cuda_graph_max_bs(self) -> int:
        """The max batch size the world resolves to when the user does not set one (timing baseline)."""
        return default_cuda_graph_max_bs(self.world, self.parsed_args, self.parsed_user, self.env)
