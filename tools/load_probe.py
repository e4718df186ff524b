"""Sending a load-shaped probe (``Probe.shape``, built from a case's ``[reproduce]``): the priming request
of a shared prefix, then ``concurrency`` workers, each sending its next request as soon as its last one
answered until the shape's duration has passed (one request each without a duration). The first
failure stops every worker; the worst result stands for the probe (tools/load_shapes.py says what each
shape sends)."""

from __future__ import annotations

import time
from typing import Any, Literal, Protocol

import httpx

from tools.load_shapes import (
    JUDGED_WORDS,
    LoadShape,
    Traffic,
    lengths,
    pool_map,
    reply_text,
    request_for,
    shaped_prompt,
    shared_prefix,
)
from tools.tls import http_client

#: A probe and its result (tools.probes.Probe / ProbeResult). This module cannot import tools.probes,
#: which sends shaped probes through it, so the probe module's judging comes in as `Judging`.
Probe = Any
ProbeResult = Any


class Judging(Protocol):
    """What tools.probes lends this module: its result maker, its reply judge, the order of statuses from
    most to least telling, its one-line error shortener and its auth header."""

    severity: tuple[str, ...]

    def result(self, probe: Probe, status: str, start: float, **kw: Any) -> ProbeResult: ...

    def judge(self, probe: Probe, text: str | None, reasoning: str | None, start: float, status: int | None,
              finish: str | None) -> ProbeResult | None: ...

    def one_line(self, text: str, limit: int = 300) -> str: ...

    def auth(self, api_key: str | None) -> dict[str, str]: ...


def run_shaped(
    base: str,
    probe: Probe,
    *,
    model: str,
    timeout_s: float,
    api_key: str | None,
    generate_api: Literal["native", "completions"],
    judging: Judging,
) -> ProbeResult:
    """Send ``probe`` as its ``shape`` says and classify the worst answer (never raises for server-side
    problems). ``timeout_s`` bounds each request in seconds; the whole probe also runs for the shape's
    ``duration_s``. The error text says how many requests went out and for how long. ``judging``: the
    probe module's result maker and judge (tools/probes.py `JUDGING`)."""
    assert probe.shape is not None
    shape = probe.shape
    start = time.monotonic()
    api: Literal["chat", "native", "completions"] = (
        "chat" if probe.kind == "chat" or {"tools", "image"} & set(shape.features) else generate_api
    )
    if api == "completions" and "image" in shape.features:
        api = "chat"
    traffic = Traffic(shape.duration_s)
    shared = shared_prefix(shape)
    # one connection per request in flight (httpx keeps 20 alive by default: a burst of 128 would close and
    # reopen connections under its own requests)
    limits = httpx.Limits(max_connections=probe.concurrency, max_keepalive_connections=probe.concurrency)
    with http_client(timeout=timeout_s, headers=judging.auth(api_key), limits=limits) as client:
        send = _Sender(base, probe, client, traffic, api, model, shared, judging)
        send.vllm_style = generate_api == "completions"
        if shared is not None:  # the prefix is computed (and cached) before the others reuse it
            first = send.one(lengths(shape, probe.max_tokens, 1)[0])
            if not first.ok:
                return _summary(probe, [first], traffic, start, judging)
        results = pool_map(send.worker, lengths(shape, probe.max_tokens, probe.concurrency))
    return _summary(probe, [r for rs in results for r in rs], traffic, start, judging)


class _Sender:
    """One shaped probe's requests over one HTTP client."""

    def __init__(
        self,
        base: str,
        probe: Probe,
        client: httpx.Client,
        traffic: Traffic,
        api: Literal["chat", "native", "completions"],
        model: str,
        shared: str | None,
        judging: Judging,
    ) -> None:
        self.base, self.probe, self.client, self.judging = base, probe, client, judging
        self.shape: LoadShape = probe.shape
        self.vllm_style = False  # set by run_shaped: the engine has no /generate (vLLM)
        self.traffic, self.api, self.model, self.shared = traffic, api, model, shared

    def worker(self, max_tokens: int) -> list[ProbeResult]:
        """Requests of one worker: one, then more while the shape's duration lasts; stops at a failure."""
        out = [self.one(max_tokens)]
        while out[-1].ok and self.traffic.more():
            out.append(self.one(max_tokens))
        if not out[-1].ok:
            self.traffic.stop.set()
        return out

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST ``body``; a connection the client held that broke under the request (a read or write error,
        the peer's protocol error: not a refused connection, not a timeout) is the client's own pool as
        much as the server (encode/httpx#3348: read errors under high concurrency), so the request is sent
        once more on a fresh connection; a server that is down or drops it again fails that one. Counted
        in ``traffic.resent``. Raises httpx.TransportError (and TimeoutException) as ``Client.post``."""
        try:
            return self.client.post(self.base + path, json=body)
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
            with self.traffic.lock:
                self.traffic.resent += 1
            with http_client(timeout=self.client.timeout, headers=self.client.headers) as fresh:
                return fresh.post(self.base + path, json=body)

    def one(self, max_tokens: int) -> ProbeResult:
        probe, j = self.probe, self.judging
        start = time.monotonic()
        prompt = shaped_prompt(self.shape, probe.prompt, self.shared)
        path, body = request_for(self.shape, prompt, max_tokens, probe.temperature, api=self.api, model=self.model,
                                 structured_outputs=self.vllm_style)
        with self.traffic.lock:
            self.traffic.sent += 1
        try:
            resp = self._post(path, body)
        except httpx.TimeoutException as exc:
            return j.result(probe, "timeout", start, error=j.one_line(f"no answer within the timeout: {exc!r}"))
        except httpx.TransportError as exc:
            return j.result(probe, "connection_error", start, error=j.one_line(f"{type(exc).__name__}: {exc}"))
        self.traffic.seen(resp)
        if resp.status_code >= 400:
            return j.result(probe, "http_error", start, http_status=resp.status_code,
                           error=j.one_line(resp.text or resp.reason_phrase))
        try:
            text, finish = reply_text(self.api, resp.json())
        except ValueError:
            return j.result(probe, "http_error", start, http_status=resp.status_code, error="response is not JSON")
        if self.shape.output_tokens and text:  # judge the head: a model made to run past its end may loop
            text = " ".join(text.split()[:JUDGED_WORDS])
        judged_probe = probe
        if finish == "length" and max_tokens < probe.max_tokens:
            # cut by the shape's shorter output before the answer could come: only garbage counts
            judged_probe = probe.model_copy(update={"expect": None, "answer": None})
        judged = j.judge(judged_probe, text, None, start, resp.status_code, finish)
        if judged is None:
            return j.result(probe, "ok", start, http_status=resp.status_code, text=text,
                           error="reasoning only within max_tokens")
        return judged


def _summary(probe: Probe, results: list[ProbeResult], traffic: Traffic, start: float, judging: Judging) -> ProbeResult:
    """The worst result, its error saying what load was sent: ``3 of 48 requests failed (prompts of 9000
    tokens, 612 s of traffic): ...``."""
    assert probe.shape is not None
    worst = min(results, key=lambda r: judging.severity.index(r.status))
    failed = sum(not r.ok for r in results)
    load = probe.shape.describe()
    sent = f"{traffic.sent} request{'s' if traffic.sent != 1 else ''}"
    if probe.shape.duration_s:
        sent += f" over {traffic.elapsed():.0f} s"
    error = f"{failed} of {sent} failed ({load})" + (f": {worst.error}" if worst.error else "") if failed else (
        worst.error
    )
    if traffic.resent:  # said, so a reader sees the client's re-sends beside the verdict
        again = f"{traffic.resent} re-sent once on a fresh connection after a transport error"
        error = f"{error}; {again}" if error else again
    traffic_s = round(min(probe.shape.duration_s, traffic.elapsed()), 3) if probe.shape.duration_s else None
    return worst.model_copy(update={"latency_s": time.monotonic() - start, "error": error, "traffic_s": traffic_s})
