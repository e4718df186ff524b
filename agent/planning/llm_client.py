"""Chat clients of the LLM planner: any OpenAI-compatible endpoint, or recorded answers replayed in order.

``OpenAIChatClient`` wraps the ``openai`` package (OpenAI, vLLM, SGLang, Ollama's ``/v1`` all speak the
same Chat Completions API). ``RecordedChatClient`` serves the ``llm.response`` / ``llm.error`` events of
a transcript back in the order they were recorded, so a run can be re-decided offline with no network.
Both raise ``ChatError`` with a ``kind`` the planner acts on; neither retries by itself (the planner
bounds and records every attempt).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel

__all__ = [
    "ChatClient",
    "ChatError",
    "ChatRequest",
    "ChatResponse",
    "OpenAIChatClient",
    "RecordedChatClient",
]

ErrorKind = Literal["timeout", "connection", "http", "auth", "bad_request", "exhausted", "config"]


class ChatRequest(BaseModel):
    """One Chat Completions request. ``max_tokens_param`` is the parameter name the endpoint wants
    (``max_tokens``; OpenAI's reasoning models want ``max_completion_tokens``)."""

    model: str
    messages: list[dict[str, str]]
    response_format: dict[str, Any] | None = None
    max_tokens: int = 4096
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    temperature: float | None = None
    timeout_s: float = 180.0


class ChatResponse(BaseModel):
    """The model's answer. Token counts are ``None`` when the endpoint reported no usage."""

    content: str
    reasoning: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    model: str | None = None


class ChatError(Exception):
    """A request that produced no answer.

    ``kind``: timeout, connection, http (5xx and other statuses), auth (401/403 or no key),
    bad_request (400: ``param`` names the refused parameter when the endpoint says so, e.g.
    ``response_format``), exhausted (a recorded client has no answer left), config.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        param: str | None = None,
        latency_s: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.status = status
        self.param = param
        self.latency_s = latency_s

    def record(self) -> dict[str, Any]:
        """JSON-plain fields for the transcript (``llm.error``), enough to replay the error."""
        return {
            "kind": self.kind,
            "message": str(self),
            "status": self.status,
            "param": self.param,
            "latency_s": round(self.latency_s, 3),
        }


class ChatClient(Protocol):
    """Sends one request, returns the answer or raises ChatError."""

    def complete(self, request: ChatRequest) -> ChatResponse: ...


#: Request parameters an endpoint may refuse, as they appear in its 400 message.
_PARAMS = ("response_format", "json_schema", "temperature", "max_completion_tokens", "max_tokens")


class OpenAIChatClient:
    """Chat Completions through the ``openai`` client. ``api_key``: ``None`` is sent as a placeholder
    (local servers ignore it). A new HTTP client is made per request and closed after it."""

    def __init__(self, *, base_url: str | None, api_key: str | None) -> None:
        self.base_url = base_url
        self.api_key = api_key

    def complete(self, request: ChatRequest) -> ChatResponse:
        import openai

        kwargs: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.response_format is not None:
            kwargs["response_format"] = request.response_format
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        kwargs[request.max_tokens_param] = request.max_tokens
        t0 = time.monotonic()
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key or "not-needed",
            timeout=request.timeout_s,
            max_retries=0,
        )
        try:
            resp = client.chat.completions.create(**kwargs)
        except openai.APITimeoutError:
            raise ChatError(
                "timeout", f"no answer within {request.timeout_s:g} s", latency_s=time.monotonic() - t0
            ) from None
        except openai.APIConnectionError as exc:
            raise ChatError(
                "connection", f"cannot reach the endpoint: {exc}", latency_s=time.monotonic() - t0
            ) from None
        except openai.APIStatusError as exc:
            raise _status_error(exc, time.monotonic() - t0) from None
        except openai.APIError as exc:  # e.g. a body that is not a chat completion
            raise ChatError("http", f"unusable answer: {exc}", latency_s=time.monotonic() - t0) from None
        finally:
            client.close()
        latency = time.monotonic() - t0
        if not resp.choices:
            raise ChatError("http", "the endpoint answered with no choices", latency_s=latency)
        choice = resp.choices[0]
        msg = choice.message
        extra = getattr(msg, "model_extra", None) or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        usage = resp.usage
        return ChatResponse(
            content=msg.content or "",
            reasoning=reasoning if isinstance(reasoning, str) else None,
            finish_reason=choice.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            latency_s=latency,
            model=resp.model,
        )


def _status_error(exc: Any, latency: float) -> ChatError:
    status = int(getattr(exc, "status_code", 0) or 0)
    body = getattr(exc, "body", None)
    message = str(getattr(exc, "message", "") or exc)
    param = body.get("param") if isinstance(body, Mapping) else None
    if status in (401, 403):
        return ChatError("auth", f"HTTP {status}: {message}", status=status, latency_s=latency)
    if status == 400 or status == 422:
        if not param:
            low = message.lower()
            param = next((p for p in _PARAMS if p in low), None)
        if param == "json_schema":
            param = "response_format"
        return ChatError(
            "bad_request", f"HTTP {status}: {message}", status=status, param=param, latency_s=latency
        )
    return ChatError("http", f"HTTP {status}: {message}", status=status, latency_s=latency)


class RecordedChatClient:
    """Answers from a transcript: each ``llm.response`` event is returned, each ``llm.error`` raised
    again, in recorded order; when none is left, ChatError(kind="exhausted")."""

    def __init__(self, records: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        self._records = list(records)
        self.requests: list[ChatRequest] = []

    @classmethod
    def from_events(cls, events: Iterable[Any]) -> RecordedChatClient:
        """From transcript events (``TranscriptEvent`` objects or their dicts)."""
        records: list[tuple[str, Mapping[str, Any]]] = []
        for ev in events:
            d = ev if isinstance(ev, Mapping) else ev.model_dump()
            if d.get("type") in ("llm.response", "llm.error"):
                records.append((d["type"], d.get("data") or {}))
        return cls(records)

    @property
    def remaining(self) -> int:
        """Recorded answers not served yet."""
        return len(self._records)

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if not self._records:
            raise ChatError("exhausted", "no recorded answer left to replay")
        kind, data = self._records.pop(0)
        if kind == "llm.error":
            raise ChatError(
                data.get("kind", "http"),
                str(data.get("message", "recorded error")),
                status=data.get("status"),
                param=data.get("param"),
                latency_s=float(data.get("latency_s") or 0.0),
            )
        usage = data.get("usage") or {}
        return ChatResponse(
            content=str(data.get("content") or ""),
            reasoning=data.get("reasoning"),
            finish_reason=data.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens") if not usage.get("estimated") else None,
            completion_tokens=usage.get("completion_tokens") if not usage.get("estimated") else None,
            latency_s=float(data.get("latency_s") or 0.0),
            model=data.get("model"),
        )
