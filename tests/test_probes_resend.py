"""A burst's request whose pooled connection breaks under it is sent once more on a fresh connection
(encode/httpx#3348: read errors under high concurrency are the client's pool as much as the server): a
server that answers the re-send serves, and the verdict says a request was re-sent; a server that drops
every request still fails. Found on a no-fault control world, where one of 128 requests ended
``ReadError: [Errno 9] Bad file descriptor`` on a server that kept answering, and the run blamed a setting.
Real parts: a real HTTP server on a real socket that closes a connection without answering."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tools.load_shapes import LoadShape
from tools.probes import Probe, run_probe


class _Handler(BaseHTTPRequestHandler):
    """SGLang's /generate answering "Paris", except that the first ``drops`` requests (all, when negative)
    have their connection closed without a response."""

    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    seen = 0
    drops = 1

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            type(self).seen += 1
            drop = self.drops < 0 or self.seen <= self.drops
        if drop:
            self.close_connection = True
            self.connection.close()
            return
        body = json.dumps({"text": "Paris", "meta_info": {"finish_reason": {"type": "stop"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[type[_Handler]]:
    handler = type("H", (_Handler,), {"seen": 0, "drops": 1, "lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def _burst(url: str) -> Probe:
    return Probe(id="burst", kind="generate", prompt="What is the capital of France?", expect="Paris",
                 concurrency=8, shape=LoadShape.model_validate({"prompt_tokens": 64}))


def test_a_request_whose_connection_broke_is_sent_again_and_the_burst_serves(serve: type[_Handler]) -> None:
    r = run_probe(serve.url, _burst(serve.url), model="m", timeout_s=30)  # type: ignore[attr-defined]
    assert r.ok, r.error
    assert serve.seen == 9  # eight requests, one of them sent twice
    assert "1 re-sent once on a fresh connection after a transport error" in (r.error or "")


def test_a_server_that_drops_every_request_still_fails(serve: type[_Handler]) -> None:
    serve.drops = -1
    r = run_probe(serve.url, _burst(serve.url), model="m", timeout_s=30)  # type: ignore[attr-defined]
    assert not r.ok and r.status == "connection_error", r
    assert "8 of 8 requests failed" in (r.error or "") and "re-sent" in (r.error or "")
