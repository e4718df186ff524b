"""The stand-in's HTTP endpoints, as SGLang serves them behind uvicorn: health, model/server info, the
OpenAI-compatible chat and completion routes and SGLang's native /generate, with uvicorn's access log.

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import email.utils
import json
import socket
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lab import responder
from lab.generation import Generation
from lab.load import Request


class LabHTTPServer(ThreadingHTTPServer):
    """The stand-in's threaded HTTP server; `lab` is the launch whose endpoints it serves."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler], lab: Generation) -> None:
        self.lab = lab
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Dropped connections are normal here (crashes, impatient clients): no traceback in the log."""


class LabHandler(BaseHTTPRequestHandler):
    """One HTTP request to the stand-in, answered the way SGLang's http_server.py answers it."""

    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    server: LabHTTPServer

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

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The `Date` header on the simulated clock (the log's timestamps): a client that times its traffic
        by the server's clock sees simulated seconds, as it would see real ones on a real host."""
        log = self.server.lab.log
        return email.utils.formatdate(log.start_wall + log.sim_elapsed(), usegmt=True)

    @property
    def lab(self) -> Generation:
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
        generation = {"/v1/chat/completions": self._chat, "/v1/completions": self._completion, "/generate": self._generate}
        if path in ("/health", "/health_generate"):
            self._health(path)
        elif path in ("/get_model_info", "/model_info"):
            self._warn_deprecated(path, "/model_info")
            self._send(200, self.lab.model_info())
        elif path in ("/get_server_info", "/server_info"):
            self._warn_deprecated(path, "/server_info")
            self._send(200, self.lab.server_info())
        elif path == "/v1/models":
            self._models()
        elif path == "/flush_cache":
            self._flush_cache()
        elif path in generation and method == "POST":
            generation[path](body)
        elif path in generation:
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})

    def _health(self, path: str) -> None:
        """/health: 200 once ready; /health_generate also decodes one token first. A dead scheduler
        answers 503 once the health check's wait for it runs out."""
        lab = self.lab
        if lab.state == "scheduler_dead":
            time.sleep(min(20 * lab.log.scale, 5.0))  # the health check waits for a scheduler that is gone
            self._empty(503)
        elif path == "/health":
            self._empty(200 if lab.state == "ready" else 503)
        elif lab.state != "ready":
            self._empty(503)
        else:
            lab.generate(Request("", 1))
            self._empty(200)

    def _warn_deprecated(self, path: str, current: str) -> None:
        """SGLang's warning for the old `/get_*` name of an info endpoint (none for `current` itself)."""
        if path != current:
            self.lab.log.line(
                f"Endpoint '{path}' is deprecated and will be removed in a future version. "
                f"Please use '{current}' instead.",
                level="warning",
            )

    def _models(self) -> None:
        lab = self.lab
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

    def _flush_cache(self) -> None:
        self.lab.prefix_cache.clear()
        self.lab.log.line("Cache flushed successfully!", source="scheduler")
        self._send(
            200,
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
            "waiting requests, the operation will not be performed.)\n",
            "text/plain",
        )

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
        prompt_parts = [_message_text(msg) for msg in messages]
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
        overhead = 4 * len(messages) + 2
        prompt_tokens = sum(responder.count_tokens(p) for p in prompt_parts) + overhead
        request = Request(
            last_user,
            max_tokens,
            _temperature(body.get("temperature")),
            think=think,
            context="\n".join(prompt_parts),
            features=openai_features(body),
            ignore_eos=bool(body.get("ignore_eos")),
            json_key=_json_key(body.get("response_format")),
            prompt_tokens=prompt_tokens,
        )
        result = self.lab.generate(request)
        answer: str | None = result["text"]
        reasoning: str | None = None
        if think and self.lab.args.get("reasoning_parser"):
            # --reasoning-parser moves the thinking into reasoning_content; content is what follows
            # </think> (None while the reply is still thinking) (entrypoints/openai/serving_chat.py).
            head, sep, tail = str(answer).partition("</think>")
            reasoning = head.replace("<think>", "").strip()
            answer = tail.lstrip("\n") if sep else None
        model = body.get("model") or self.lab.args.get("served_model_name")
        rid = uuid.uuid4().hex
        created = int(time.time())
        if body.get("stream"):
            self._stream_chat(rid, created, model, result, prompt_tokens)
            return
        message = {"role": "assistant", "content": answer, "reasoning_content": reasoning, "tool_calls": None}
        self._send(200, _chat_completion(rid, created, model, message, result, prompt_tokens))

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
        request = Request(
            str(prompt),
            self._max_tokens(body, 16),
            _temperature(body.get("temperature")),
            features=openai_features(body),
            ignore_eos=bool(body.get("ignore_eos")),
            json_key=_json_key(body.get("response_format")),
        )
        result = self.lab.generate(request)
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
        features = native_features(body)
        json_key = _schema_key(params.get("json_schema")) if params.get("json_schema") else None
        for prompt in prompts:
            request = Request(
                str(prompt),
                max_new,
                _temperature(params.get("temperature")),
                features=features,
                ignore_eos=bool(params.get("ignore_eos")),
                json_key=json_key,
            )
            result = self.lab.generate(request)
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


def openai_features(body: dict[str, Any]) -> frozenset[str]:
    """The load features (lab/load.py `FEATURES`) of an OpenAI-compatible chat or completion request."""
    found = set()
    if body.get("tools"):
        found.add("tools")
    if isinstance(body.get("response_format"), dict) and body["response_format"].get("type") in (
        "json_schema",
        "json_object",
    ):
        found.add("json_schema")
    if body.get("regex"):
        found.add("regex")
    if body.get("logprobs") or body.get("top_logprobs"):
        found.add("logprobs")
    for msg in body.get("messages") or []:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") in ("image_url", "image") for p in content
        ):
            found.add("image")
    return frozenset(found)


def native_features(body: dict[str, Any]) -> frozenset[str]:
    """The load features of a native /generate request (io_struct.py `GenerateReqInput`: `image_data`,
    `return_logprob`; sampling_params.py: `json_schema`, `regex`)."""
    params = body.get("sampling_params") or {}
    found = set()
    if params.get("json_schema"):
        found.add("json_schema")
    if params.get("regex"):
        found.add("regex")
    if body.get("image_data"):
        found.add("image")
    if body.get("return_logprob"):
        found.add("logprobs")
    return frozenset(found)


def _json_key(response_format: Any) -> str | None:
    """The key of a JSON reply to a `response_format` request (json_object: "answer"), else None."""
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return "answer"
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        return _schema_key(spec.get("schema") if isinstance(spec, dict) else None)
    return None


def _schema_key(schema: Any) -> str:
    """The first property of a JSON schema (given as an object or a JSON string), else "answer"."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return "answer"
    props = schema.get("properties") if isinstance(schema, dict) else None
    return next(iter(props), "answer") if isinstance(props, dict) and props else "answer"


def _message_text(msg: Any) -> str:
    """A chat message's text: its content, or the text parts of a list content joined by spaces."""
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _chat_completion(
    rid: str, created: int, model: Any, message: dict[str, Any], result: dict[str, Any], prompt_tokens: int
) -> dict[str, Any]:
    """The body of a non-streamed /v1/chat/completions reply (SGLang's ChatCompletionResponse)."""
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
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
    }


def _temperature(value: Any) -> float:
    """A request's temperature; unset means SGLang's default sampling (temperature 1.0,
    sampling/sampling_params.py), i.e. a sampled request."""
    return 1.0 if value is None else float(value)

