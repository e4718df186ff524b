"""What differs between imitated SGLang releases besides their flags: log texts and line formats.

A version file (`lab/versions/<version>.toml`) may carry a `[release]` table:

```toml
[release]
server_args_format = "dict"          # "repr": server_args=ServerArgs(a=1, ...)  (0.5.9)
                                     # "dict": server_args={'a': 1, ...}          (0.5.23)
[release.texts]                      # overrides of the start-up texts below; "" = the release prints none
load_end = "Load weight end. elapsed={elapsed:.2f} s, type={arch}, avail mem={avail:.2f} GB, mem usage={usage:.2f} GB."

[release.roles]                      # which argparse dest plays a role the lab's memory model reads
cuda_graph_max_bs = "cuda_graph_max_bs_decode"
```

`DEFAULT_TEXTS` are SGLang 0.5.9's texts (sources cited per key), so a version file without `[release]`
imitates 0.5.9. Placeholders are `str.format` fields; the values each key gets are listed in
`TEXT_FIELDS`. Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

SERVER_ARGS_FORMATS = ("repr", "dict")

#: SGLang 0.5.9 texts (python/sglang/srt/..., release 0.5.9 wheel).
DEFAULT_TEXTS: dict[str, str] = {
    # model_executor/model_runner.py init_torch_distributed
    "init_begin": "Init torch distributed begin.",
    "init_end": "Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB",
    # model_executor/model_runner.py load_model
    "load_begin": "Load weight begin. avail mem={avail:.2f} GB",
    "load_end": (
        "Load weight end. elapsed={elapsed:.2f} s, type={arch}, dtype={dtype}, avail mem={avail:.2f} GB, "
        "mem usage={usage:.2f} GB."
    ),
    # mem_cache/memory_pool.py MHATokenToKVPool._create_buffers
    "kv_allocated": "KV Cache is allocated. #tokens: {tokens}, K size: {k_gb:.2f} GB, V size: {v_gb:.2f} GB",
    # model_executor/model_runner_kv_cache_mixin.py init_memory_pool
    "mem_pool_end": "Memory pool end. avail mem={avail:.2f} GB",
    # model_executor/model_runner.py init_device_graphs, cuda_graph_runner.py
    "capture_begin": "Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB",
    "capture_bs": "Capture cuda graph bs {bs_list}",
    "capture_end": (
        "Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. avail mem={avail:.2f} GB."
    ),
    # model_executor/cuda_graph_runner.py (the text after "Capture cuda graph failed: <error>\n")
    "capture_solutions": (
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "
    ),
    # model_executor/model_runner_kv_cache_mixin.py init_memory_pool: loaded weights leave no KV room
    "no_kv_room": (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static={fraction}"
    ),
    "no_kv_room_frames": (
        '  File "{site}/sglang/srt/model_executor/model_runner.py", line 452, in initialize\n'
        "    self.init_memory_pool(min_per_gpu_memory)\n"
        '  File "{site}/sglang/srt/model_executor/model_runner_kv_cache_mixin.py", line 416, in init_memory_pool\n'
        "    raise RuntimeError("
    ),
    # entrypoints/engine.py launch_phase_sigquit_handler (a child failed while launching)
    "sigquit_launch": "Received sigquit from a child process. It usually means the child failed.",
    # managers/tokenizer_manager.py running_phase_sigquit_handler, installed by auto_create_handle_loop
    # at the first request through asyncio's loop.add_signal_handler, which passes no arguments.
    "sigquit_running": "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    # utils/common.py kill_process_tree: 0.5.9 logs nothing
    "kill_tree": "",
    # entrypoints/http_server.py _execute_server_warmup: a warm-up request that failed or timed out
    "warmup_error": "Initialization failed. warmup error: {traceback}",
    # model_executor/model_runner.py init_piecewise_cuda_graphs (--enable-piecewise-cuda-graph; after the
    # decode graphs in 0.5.9)
    "piecewise_begin": "Capture piecewise CUDA graph begin. avail mem={avail:.2f} GB",
    "piecewise_end": (
        "Capture piecewise CUDA graph end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. "
        "avail mem={avail:.2f} GB."
    ),
    # speculative/eagle_worker_v2.py init_cuda_graphs (the draft worker, after the target's graphs)
    "draft_capture_begin": "Capture draft cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB",
    "draft_capture_end": (
        "Capture draft cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. avail mem={avail:.2f} GB."
    ),
    # managers/tokenizer_manager.py SignalHandler.sigterm_handler, installed with loop.add_signal_handler
    # (which passes no arguments, hence signum=None), then the drain loop sigterm_watchdog
    "sigterm": "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
    # utils/watchdog.py SubprocessWatchdog._check_processes (0.5.17+): the scheduler died of the SIGTERM
    # the process group received; "" where the release has no watchdog (0.5.9)
    "watchdog_crash": "",
    # entrypoints/engine.py _wait_for_scheduler_ready: a scheduler that died while the server was starting
    # (the pipe closed): 0.5.9 logs two lines and re-raises the EOFError (exit 1)
    "child_died_launch": (
        "Rank 0 scheduler is dead. Please check if there are relevant logs.\nExit code: {code}\n"
        "Traceback (most recent call last):\n"
        '  File "{site}/sglang/srt/entrypoints/engine.py", line 894, in _wait_for_scheduler_ready\n'
        "    data = scheduler_pipe_readers[i].recv()\n"
        "EOFError"
    ),
}

#: The values each text is rendered with (checked when a version file is loaded).
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "init_begin": (),
    "init_end": ("usage", "elapsed"),
    "load_begin": ("avail",),
    "load_end": ("arch", "dtype", "avail", "usage", "elapsed"),
    "kv_allocated": ("tokens", "k_gb", "v_gb", "kv_dtype"),
    "mem_pool_end": ("avail",),
    "capture_begin": ("avail",),
    "capture_bs": ("bs_list",),
    "capture_end": ("elapsed", "usage", "avail", "bs_list"),
    "capture_solutions": (),
    "no_kv_room": ("fraction", "suggested", "minimum"),
    "no_kv_room_frames": ("site",),
    "sigquit_launch": (),
    "sigquit_running": (),
    "kill_tree": ("pid",),
    "warmup_error": ("traceback",),
    "piecewise_begin": ("avail", "tokens", "backend"),
    "piecewise_end": ("elapsed", "usage", "avail"),
    "draft_capture_begin": ("avail", "bs_list"),
    "draft_capture_end": ("elapsed", "usage", "avail"),
    "sigterm": (),
    "watchdog_crash": ("pid", "code"),
    "child_died_launch": ("code", "site"),
}

#: Roles the lab's memory model and capture phase read, and the 0.5.9 dest that plays each.
DEFAULT_ROLES: dict[str, str] = {
    "cuda_graph_max_bs": "cuda_graph_max_bs",
    "cuda_graph_bs": "cuda_graph_bs",
    "disable_cuda_graph": "disable_cuda_graph",
    # the setting that turns prefill (piecewise) CUDA graphs on: a switch in 0.5.9, a backend name
    # ("disabled" = off) in 0.5.17+
    "prefill_cuda_graph": "enable_piecewise_cuda_graph",
}


@dataclass(frozen=True)
class Release:
    """The non-flag traits of one imitated SGLang release."""

    server_args_format: str = "repr"
    #: prefill (piecewise) CUDA graphs are captured before the decode graphs (0.5.17+,
    #: cuda_graph_setup.py: "prefill before decode"), else after them (0.5.9 model_runner.initialize)
    prefill_graph_first: bool = False
    texts: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_TEXTS))
    roles: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ROLES))

    def text(self, key: str, **values: Any) -> str:
        """The release's text `key` rendered with `values` ("" when the release prints none)."""
        return self.texts[key].format(**values)

    def server_args_line(self, args: dict[str, Any], dests: tuple[str, ...]) -> str:
        """`server_args=...` as the release logs it.

        0.5.9: `logger.info(f"{server_args=}")` of the ServerArgs dataclass, i.e. `ServerArgs(a=1, ...)`
        (entrypoints/engine.py). 0.5.23: `logger.info(f"server_args={_server_args_for_logging(...)}")`,
        the plain dict of `ServerArgs.resolved_dict()` (entrypoints/engine.py, server_args.py).
        """
        if self.server_args_format == "dict":
            return "server_args=" + repr({dest: args.get(dest) for dest in dests})
        return "server_args=ServerArgs(" + ", ".join(f"{dest}={args.get(dest)!r}" for dest in dests) + ")"

    def role(self, args: dict[str, Any], role: str) -> Any:
        """The value of the flag that plays `role` (e.g. the decode CUDA-graph max batch size)."""
        return args.get(self.roles.get(role, role))


def parse_release(raw: Any, dests: set[str], where: str) -> Release:
    """The `[release]` table of a version file. Raises ValueError with a one-line reason naming the key."""
    if raw is None:
        return Release()
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a table")
    unknown = set(raw) - {"server_args_format", "texts", "roles", "prefill_graph_first"}
    if unknown:
        raise ValueError(
            f"{where}.{sorted(unknown)[0]}: unknown key (expected server_args_format, texts, roles, prefill_graph_first)"
        )
    first = raw.get("prefill_graph_first", False)
    if not isinstance(first, bool):
        raise ValueError(f"{where}.prefill_graph_first: expected true or false")
    fmt = raw.get("server_args_format", "repr")
    if fmt not in SERVER_ARGS_FORMATS:
        raise ValueError(f"{where}.server_args_format: expected one of {', '.join(SERVER_ARGS_FORMATS)}")
    texts = dict(DEFAULT_TEXTS)
    raw_texts = raw.get("texts", {})
    if not isinstance(raw_texts, dict):
        raise ValueError(f"{where}.texts: expected a table")
    for key, value in raw_texts.items():
        if key not in DEFAULT_TEXTS:
            raise ValueError(f"{where}.texts.{key}: unknown text (expected one of {', '.join(DEFAULT_TEXTS)})")
        if not isinstance(value, str):
            raise ValueError(f"{where}.texts.{key}: expected a string")
        for _, name, _, _ in string.Formatter().parse(value):
            if name is not None and name not in TEXT_FIELDS[key]:
                raise ValueError(
                    f"{where}.texts.{key}: unknown field {{{name}}} (expected {', '.join(TEXT_FIELDS[key]) or 'none'})"
                )
        texts[key] = value
    roles = dict(DEFAULT_ROLES)
    raw_roles = raw.get("roles", {})
    if not isinstance(raw_roles, dict):
        raise ValueError(f"{where}.roles: expected a table")
    for role, dest in raw_roles.items():
        if role not in DEFAULT_ROLES:
            raise ValueError(f"{where}.roles.{role}: unknown role (expected one of {', '.join(DEFAULT_ROLES)})")
        if dest not in dests:
            raise ValueError(f"{where}.roles.{role}: {dest!r} is not the dest of a flag of this version")
        roles[role] = str(dest)
    return Release(server_args_format=fmt, texts=texts, roles=roles, prefill_graph_first=first)
