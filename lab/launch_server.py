"""Stand-in for `python -m sglang.launch_server`, driven by a lab world file.

    HYPOLOOP_LAB_WORLD=glm5-nvfp4-sm120 HYPOLOOP_LAB_TIME_SCALE=0.01 \
        python -m lab.launch_server --model-path zai-org/GLM-5-NVFP4 --tp-size 8 ...

It parses the command line with the imitated SGLang version's flags (argparse, prefix matching,
exit 2 on unknown flags), applies the world's auto-resolution rules, prints SGLang-style log lines
on the world's (scaled) timeline, serves SGLang's HTTP endpoints once "loaded", and fails exactly
where the world's fault rules say. Log text imitates SGLang 0.5.x (scheduler, model runner, uvicorn).
All output goes to stderr, one flushed write per record; the caller redirects it to a log file.

The pieces: `lab.sim_log` (the log writer), `lab.engine` (state and faults), `lab.startup` (the
start-up stages), `lab.generation` (requests), `lab.http_api` (the endpoints); this module runs them
in order, serves, warms up and handles termination.

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, NoReturn

from lab.engine import SITE, LaunchExit, exit_process
from lab.generation import Generation
from lab.http_api import LabHandler, LabHTTPServer
from lab.model_files import ensure_model_files
from lab.startup import StartupStages
from lab.world import WorldError, load_world_from_env, time_scale_from_env


class _Terminated(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler."""


class StandIn(StartupStages, Generation):
    """One run of the stand-in server in one world."""

    def run(self) -> int:
        """Start up, serve until terminated; returns the exit status of a launch that fails."""
        try:
            return self._run()
        except LaunchExit as exc:
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
            f'  File "{SITE}/sglang/launch_server.py", line 32, in <module>',
            "    server_args = prepare_server_args(sys.argv[1:])",
            f'  File "{SITE}/transformers/utils/hub.py", line 479, in cached_files',
            "    raise EnvironmentError(",
            f"OSError: {model_path} is not a local folder and is not a valid model identifier listed on "
            "'https://huggingface.co/models'",
            "If this is a private repository, make sure to pass a token having permission to this repo either by "
            "logging in with `hf auth login` or by passing `token=<your_token>`",
        ]
        self.log.line("\n".join(["Traceback (most recent call last):", *frames]), source="raw", level="error")

    # ----------------------------------------------------------------------------- phase: serve

    def _phase_serve(self) -> None:
        host = str(self.args.get("host") or "127.0.0.1")
        port = int(self.args.get("port") or 30000)
        try:
            httpd = LabHTTPServer((host, port), LabHandler, self)
        except OSError as exc:
            self.log.uvicorn(
                f"[Errno {exc.errno}] error while attempting to bind on address {(host, port)!r}: "
                f"{(exc.strerror or str(exc)).lower()}",
                level="error",
            )
            raise LaunchExit(1) from None
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
            frames = [f'  File "{SITE}/sglang/srt/entrypoints/http_server.py", line 1770, in _execute_server_warmup',
                      '    assert res.status_code == 200, f"{res.text}"']
        else:
            final = (
                "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', port="
                f"{self.args.get('port')}): Read timed out. (read timeout=600)"
            )
            frames = [f'  File "{SITE}/requests/adapters.py", line 713, in send',
                      "    raise ReadTimeout(e, request=request)"]
        trace = "\n".join(["Traceback (most recent call last):", *frames, final])
        self.log.line(self.release.text("warmup_error", traceback=trace), source="server", level="error")
        kill = self.release.text("kill_tree", pid=self.pid)
        if kill:
            self.log.line(kill, source="server")
        exit_process(-9)

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
                exit_process(fault.exit_code if fault.exit_code is not None else -9)

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
    exit_process(main())
