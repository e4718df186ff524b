"""The simulated engine's state and its fault machinery: which faults fire where, and how the process dies.

`Engine` holds one launch of the stand-in in one world (parsed and auto-resolved arguments, the log, the
memory plan, the per-launch fault draws); `lab.startup` (the start-up stages), `lab.generation` (requests)
and `lab.launch_server` (serving and termination) build on it.

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import ThreadingHTTPServer
from typing import Any, NoReturn

from lab.chance import is_live, launch_seed
from lab.load import BATCH_WINDOW_S, BatchRegistry, PrefixCache, TrafficClock
from lab.memory import MemoryPlan, default_cuda_graph_max_bs, plan_memory
from lab.rules import Resolution, matching_faults, parse_command_line, render, resolve
from lab.sim_log import SimLog
from lab.world_types import BATCH_KEYS, DEATH_SIGNALS, REQUEST_DEFAULTS, Fault, World

#: Where the imitated traceback frames say SGLang and its dependencies are installed.
SITE = "/usr/local/lib/python3.12/dist-packages"


class LaunchExit(Exception):
    """Ends the launch with process exit status `code` (raised by a stage that fails)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def exit_process(code: int) -> NoReturn:
    """Leave immediately; -9 imitates SGLang's kill_process_tree (the process SIGKILLs itself)."""
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    except OSError:
        pass
    if code == -9:
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(code if code >= 0 else 128 - code)




class Engine:
    """One launch of the stand-in server in one world: its state and its faults."""

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
        self.prefix_cache = PrefixCache()  # the radix cache (off with --disable-radix-cache)
        self.traffic = TrafficClock()
        self.graph_on = not bool(self.args.get("disable_cuda_graph"))
        self.last_gen_throughput = 0.0
        self.ctx.extra["context_len"] = self.context_len
        self.ctx.extra.update(REQUEST_DEFAULTS)
        # Flaky faults: drawn once per launch (lab/chance.py); a fault that is not live never fires.
        self.seed = launch_seed(env)
        self.requests_seen = 0  # decode requests taken, the warm-up's included (per-request draws)
        self.ready_at: float | None = None  # simulated seconds at the ready line (per-minute faults)
        self.dormant = {f.id for f in world.faults if not is_live(f, self.seed)}
        self.load_sensitive = any(f.uses(key) for f in world.faults for key in BATCH_KEYS)
        # requests gathered in one batching window see each other (lab/load.py BATCH_WINDOW_S)
        self.batch = BatchRegistry(BATCH_WINDOW_S if self.load_sensitive else 0.0)
        self.in_flight = 0
        self.rids = 0  # decode requests numbered for the batch registry
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
            raise LaunchExit(fault.exit_code if fault.exit_code is not None else 1)

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

    def _jitter(self, rank: int) -> float:
        """A small per-rank spread (GB) so the ranks' memory lines differ the way real ranks' do."""
        return ((rank * 37) % 11) * 0.01

    # ------------------------------------------------------------------------------ deaths

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
            self.log.line(self.release.text("child_died_launch", code=-number, site=SITE), level="error")
            raise LaunchExit(1)
        crash = self.release.text("watchdog_crash", pid=self.pid + 1, code=-number)
        if not crash:
            self.state = "scheduler_dead"
            threading.Event().wait()
        self.log.sleep(0.5)
        self.log.line(crash, level="error")
        self._sigquit(running=True)
        exit_process(-9)

    def _scheduler_dead(self, fault: Fault) -> None:
        """The scheduler died without a SIGQUIT to the launcher (e.g. the kernel's OOM killer): HTTP stays
        up, /health answers 503 once its health check times out (SGLANG_HEALTH_CHECK_TIMEOUT, 20 s),
        and generation requests wait forever for a scheduler that is gone (0.5.9/0.5.23
        entrypoints/http_server.py `health_generate`)."""
        self._emit_fault_lines(fault)
        self.state = "scheduler_dead"
