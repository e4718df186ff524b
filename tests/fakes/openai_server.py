"""A scripted OpenAI-compatible chat endpoint for tests (standard library only).

Stands in for the paid API: ``POST .../chat/completions`` answers with the next scripted step, in order,
and keeps every request body so a test can check what was sent (model, response format, messages).
``GET .../models`` lists the one model. Listens on 127.0.0.1 only.

A step is a dict:

- ``{"content": TEXT}`` or ``{"json": OBJ}`` (sent as ``json.dumps(OBJ)``): a normal answer;
- ``{"sleep": SECONDS, ...}``: wait first (longer than the client's timeout = a timeout);
- ``{"status": CODE, "error": MESSAGE}``: an HTTP error in OpenAI's error shape;
- a callable ``request_body -> step``: computed from the request.

When the script is used up, ``default`` (a step) answers; without one, HTTP 500.

In a test::

    with ScriptedOpenAI([{"json": {...}}]) as server:
        ... base_url=server.base_url ...
        server.requests  # list of request bodies (dicts)

From a shell: ``python openai_server.py --port 8099 --script steps.json`` (a JSON list of steps).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class ScriptedOpenAI:
    """The server; start with ``start()`` or a ``with`` block, stop with ``stop()``."""

    def __init__(
        self, script: list[Step] | None = None, *, model: str = "scripted", default: Step | None = None
    ) -> None:
        self.script: list[Step] = list(script or [])
        self.model = model
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.served: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, port: int = 0) -> ScriptedOpenAI:
        server = self

        class Handler(_Handler):
            owner = server

        httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="scripted-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedOpenAI:
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ script
    def push(self, *steps: Step) -> None:
        """Append steps to the script (e.g. between two runs)."""
        with self._lock:
            self.script.extend(steps)

    def _next(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            self.requests.append(body)
            step: Step | None = self.script.pop(0) if self.script else self.default
        if step is None:
            return None
        resolved = step(body) if callable(step) else dict(step)
        with self._lock:
            self.served.append(resolved)
        return resolved

    def completion(self, body: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
        content = step["content"] if "content" in step else json.dumps(step.get("json", {}))
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        usage = {
            "prompt_tokens": prompt_chars // 4,
            "completion_tokens": max(1, len(content) // 4),
            "total_tokens": prompt_chars // 4 + max(1, len(content) // 4),
        }
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": step.get("finish_reason", "stop"),
                }
            ],
            **({} if step.get("no_usage") else {"usage": usage}),
        }


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a scripted timeout)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": self.owner.model, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        body["_headers"] = {k.lower(): v for k, v in self.headers.items()}
        step = self.owner._next(body)
        if step is None:
            self._send(500, {"error": {"message": "script exhausted", "type": "server_error"}})
            return
        if step.get("sleep"):
            time.sleep(float(step["sleep"]))
        if step.get("status"):
            self._send(
                int(step["status"]),
                {
                    "error": {
                        "message": step.get("error", "error"),
                        "type": "invalid_request_error",
                        "param": step.get("param"),
                    }
                },
            )
            return
        self._send(200, self.owner.completion(body, step))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--script", help="a JSON file with a list of steps")
    ap.add_argument("--model", default="scripted")
    args = ap.parse_args(argv)
    steps = json.load(open(args.script, encoding="utf-8")) if args.script else []  # noqa: SIM115
    server = ScriptedOpenAI(steps, model=args.model).start(args.port)
    print(f"listening on {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
        sys.exit(0)


if __name__ == "__main__":
    main()
