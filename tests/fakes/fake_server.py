"""A stand-in inference server for the runtime tests (standard library only).

Prints log lines with controllable timing, then serves /health, /get_server_info, /generate and
/v1/chat/completions, exits, crashes, or hangs, as the command line says. Accepts and ignores the SGLang
flags that `render_command` adds (--model-path, unknown flags are an argparse error like SGLang's).

    python fake_server.py [--port P] [--line TEXT]... [--interval S] [--trigger-file F --trigger-line T]...
                          [--then serve|exit|crash|hang] [--answer TEXT] [--on-request answer|crash|hang|error]
                          [--ignore-sigterm] [--on-sigterm-line TEXT]... [--child none|sleep|stubborn]
                          [--child-pid-file F]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY = threading.Event()
ARGS: argparse.Namespace


def say(text: str, *, end: str = "\n") -> None:
    sys.stdout.write(text + end)
    sys.stdout.flush()


def crash_lines() -> None:
    say("[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):")
    say('  File "/sgl/scheduler.py", line 1, in event_loop')
    say("RuntimeError: CUDA error: device-side assert triggered")
    say("[2026-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        say(f'INFO:     127.0.0.1 - "{self.command} {self.path} HTTP/1.1" {args[1] if len(args) > 1 else ""}')

    def _json(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path == "/health":
            self._json(200 if READY.is_set() else 503, {})
        elif self.path == "/get_server_info":
            self._json(200, {"version": "0.0-fake", "kv_cache_dtype": "auto", "max_total_num_tokens": 1000})
        else:
            self._json(404, {"detail": "Not Found"})

    def _generation(self) -> str | None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        mode = ARGS.on_request
        if mode == "crash":
            crash_lines()
            os._exit(1)
        if mode == "hang":
            time.sleep(3600)
        if mode == "error":
            self._json(500, {"object": "error", "message": "internal error", "code": 500})
            return None
        return str(ARGS.answer)

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        if self.path == "/generate":
            text = self._generation()
            if text is not None:
                meta = {"finish_reason": {"type": "stop"}, "prompt_tokens": 5, "completion_tokens": 1}
                self._json(200, {"text": text, "meta_info": meta})
        elif self.path == "/v1/chat/completions":
            text = self._generation()
            if text is not None:
                self._json(
                    200,
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": "fake",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
                    },
                )
        else:
            self._json(404, {"detail": "Not Found"})


def start_child(kind: str, pid_file: str | None) -> None:
    if kind == "none":
        return
    code = "import time\n"
    if kind == "stubborn":
        code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(600)\n"
    child = subprocess.Popen([sys.executable, "-c", code])  # stays in our process group
    if pid_file:
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(child.pid))
        os.replace(pid_file + ".tmp", pid_file)


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser(prog="fake_server")
    p.add_argument("--model-path", default="fake-model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--line", action="append", default=[])
    p.add_argument("--interval", type=float, default=0.0)
    p.add_argument("--trigger-file")
    p.add_argument("--trigger-line", action="append", default=[])
    p.add_argument("--then", choices=["serve", "exit", "crash", "hang"], default="exit")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--warmup-s", type=float, default=0.0)
    p.add_argument("--answer", default="Paris")
    p.add_argument("--on-request", choices=["answer", "crash", "hang", "error"], default="answer")
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--on-sigterm-line", action="append", default=[],
                   help="a line printed when SIGTERM arrives, before the usual shutdown line")
    p.add_argument("--child", choices=["none", "sleep", "stubborn"], default="none")
    p.add_argument("--child-pid-file")
    p.add_argument("--tail", help="text printed without a newline just before exiting")
    ARGS = p.parse_args()

    if ARGS.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:

        def on_term(signum: int, frame: object) -> None:
            for line in ARGS.on_sigterm_line:
                say(line)
            say("Received SIGTERM, shutting down.")
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)

    start_child(ARGS.child, ARGS.child_pid_file)
    for i, line in enumerate(ARGS.line):
        if i and ARGS.interval:
            time.sleep(ARGS.interval)
        say(line)
    if ARGS.trigger_file:
        while not os.path.exists(ARGS.trigger_file):
            time.sleep(0.002)
        for line in ARGS.trigger_line:
            say(line)

    if ARGS.then == "exit":
        if ARGS.tail:
            say(ARGS.tail, end="")
        sys.exit(ARGS.exit_code)
    if ARGS.then == "crash":
        crash_lines()
        sys.exit(1)
    if ARGS.then == "hang":
        while True:
            time.sleep(3600)

    server = ThreadingHTTPServer((ARGS.host, ARGS.port), Handler)
    server.daemon_threads = True
    say(f"INFO:     Uvicorn running on http://{ARGS.host}:{ARGS.port} (Press CTRL+C to quit)")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if ARGS.warmup_s:
        time.sleep(ARGS.warmup_s)
    READY.set()
    say("[2026-01-01 00:00:00] The server is fired up and ready to roll!")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
