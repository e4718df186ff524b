"""Load-shaped probes: traffic that looks like the reporter's (a case's ``[reproduce]``), so a failure that
shows only under that load is reproduced as reported, not by luck.

A ``LoadShape`` says what the traffic looked like: long prompts (``prompt_tokens``: filler text of about
that many tokens before the probe's question), long outputs (``output_tokens``: that many new tokens,
with the engine's ``ignore_eos`` so the model keeps writing; with ``output_tokens_min`` the concurrent
requests ask for lengths spread from the minimum to the maximum, so the batch shrinks as the shorter ones
finish), one long prefix shared by the requests (``shared_prefix_tokens``: one request first so the
engine caches the prefix, then the rest reuse it), request features in the engine's own API
(``features``: ``tools``, ``json_schema``, ``regex``, ``image``, ``logprobs``) and time under traffic
(``duration_s``: every worker sends its next request as soon as the last one answers, until that many
seconds have passed on the server's clock, its HTTP ``Date`` header, or the client's, whichever runs
ahead; never a fixed sleep).

Filler text is plain English words with a full stop every few words: a BPE tokenizer (and the lab's
word/punctuation count) makes about one token of each, so ``prompt_tokens`` is close to what the server
counts (its own count is in the reply's usage / meta_info; the probe does not check it).

APIs: SGLang's native ``/generate`` (``sampling_params.json_schema`` / ``regex`` / ``ignore_eos``,
``return_logprob``, ``image_data``: 0.5.23 managers/io_struct.py, sampling/sampling_params.py), the
OpenAI-compatible ``/v1/chat/completions`` (``tools``, ``response_format`` json_schema, ``logprobs`` /
``top_logprobs``, ``image_url`` parts, and the engines' ``ignore_eos`` / SGLang's ``regex`` / vLLM's
``structured_outputs`` extensions) and ``/v1/completions`` for engines without ``/generate`` (vLLM).
Tools and images always go through chat.
"""

from __future__ import annotations

import base64
import concurrent.futures
import email.utils
import json
import struct
import threading
import time
import uuid
import zlib
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

Feature = Literal["tools", "json_schema", "regex", "image", "logprobs"]
#: Every request feature a load shape can ask for.
FEATURES: tuple[str, ...] = Feature.__args__  # type: ignore[attr-defined]

#: The JSON schema of a json_schema request: one string property.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
#: The regex of a regex request: a sentence of words and common punctuation.
ANSWER_REGEX = r"[A-Za-z0-9 ,.'!?-]{1,400}"
#: The one function of a tools request.
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_fact",
        "description": "Look up a short fact about a country.",
        "parameters": {
            "type": "object",
            "properties": {"country": {"type": "string"}, "fact": {"type": "string"}},
            "required": ["country", "fact"],
        },
    },
}
#: Words of a long-output reply judged for content: a healthy model told to ignore its end-of-sequence
#: token may loop after its answer, which is not a failure of the server.
JUDGED_WORDS = 64

_WORDS = (
    "the quick brown fox jumps over a lazy dog near the river bank while children play in the park "
    "and their parents talk about the weather the market the news of the day and plans for the summer "
    "holidays by the sea where the water is warm and the days are long"
).split()


class LoadShape(BaseModel):
    """What the reporter's traffic looked like (see the module docstring); every field optional."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int | None = Field(default=None, ge=1, le=2_000_000)
    output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    output_tokens_min: int | None = Field(default=None, ge=1, le=1_000_000)
    shared_prefix_tokens: int | None = Field(default=None, ge=1, le=2_000_000)
    features: list[Feature] = Field(default_factory=list)
    duration_s: float | None = Field(default=None, gt=0, le=86_400)

    @model_validator(mode="after")
    def _consistent(self) -> LoadShape:
        if self.output_tokens_min is not None and (
            self.output_tokens is None or self.output_tokens_min > self.output_tokens
        ):
            raise ValueError("output_tokens_min needs output_tokens at least as large (the longest request)")
        if (
            self.shared_prefix_tokens is not None
            and self.prompt_tokens is not None
            and self.shared_prefix_tokens > self.prompt_tokens
        ):
            raise ValueError("shared_prefix_tokens is part of the prompt: at most prompt_tokens")
        if {"json_schema", "regex"} <= set(self.features):
            # SGLang 0.5.23 sampling_params.py: "Only one of json_schema, regex, ebnf, or structural_tag can be set."
            raise ValueError("features: json_schema and regex are two grammars; a request takes one of them")
        return self

    def shaped(self) -> bool:
        """Whether the shape says anything beyond a plain request."""
        return any(
            v not in (None, []) for v in (
                self.prompt_tokens, self.output_tokens, self.shared_prefix_tokens, self.features, self.duration_s
            )
        )

    def describe(self) -> str:
        """One line for a rationale: ``prompts of 9000 tokens, tools, 600 s of traffic``."""
        parts = []
        if self.prompt_tokens:
            parts.append(f"prompts of {self.prompt_tokens} tokens")
        if self.shared_prefix_tokens:
            parts.append(f"a shared prefix of {self.shared_prefix_tokens} tokens")
        if self.output_tokens:
            low = f"{self.output_tokens_min}-" if self.output_tokens_min else ""
            parts.append(f"outputs of {low}{self.output_tokens} tokens")
        parts += list(self.features)
        if self.duration_s:
            parts.append(f"{self.duration_s:g} s of traffic")
        return ", ".join(parts)


def filler(n_tokens: int) -> str:
    """About ``n_tokens`` tokens of plain English (words, a full stop every 12 words)."""
    out: list[str] = []
    count = 0
    i = 0
    while count < n_tokens:
        word = _WORDS[i % len(_WORDS)]
        i += 1
        if i % 12 == 0:
            out.append(word + ".")
            count += 2
        else:
            out.append(word)
            count += 1
    return " ".join(out)


def _tokens(text: str) -> int:
    """The probe's own estimate of a text's tokens (words and punctuation marks)."""
    import re

    return len(re.findall(r"\w+|[^\w\s]", text))


def shaped_prompt(shape: LoadShape, question: str, shared: str | None) -> str:
    """One request's prompt: the shared prefix (when the shape has one), a line that makes the request
    unique (so nothing else is shared), filler up to ``prompt_tokens``, then the probe's question."""
    unique = f"Note {uuid.uuid4().hex[:12]} follows."
    head = f"{shared}\n\n{unique}" if shared else unique
    want = (shape.prompt_tokens or 0) - _tokens(head) - _tokens(question)
    body = f"{head}\n\n{filler(want)}" if want > 0 else head
    return f"{body}\n\n{question}"


def shared_prefix(shape: LoadShape) -> str | None:
    """The prefix every request of one shaped probe shares (a fresh one per probe), or None."""
    if not shape.shared_prefix_tokens:
        return None
    head = f"Shared context {uuid.uuid4().hex[:12]}:"
    return f"{head} {filler(max(1, shape.shared_prefix_tokens - _tokens(head)))}"


def _png() -> str:
    """A 2x2 white PNG as a data URL (built here: no file, no download)."""
    raw = b"".join(b"\x00" + b"\xff\xff\xff" * 2 for _ in range(2))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


IMAGE_URL = _png()


def request_for(
    shape: LoadShape,
    prompt: str,
    max_tokens: int,
    temperature: float,
    *,
    api: Literal["chat", "native", "completions"],
    model: str,
    structured_outputs: bool = False,
) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of one shaped request in the engine's own API. ``structured_outputs``: a regex
    goes in vLLM's ``structured_outputs`` (an engine without /generate: vLLM 0.32.0
    entrypoints/openai/chat_completion/protocol.py) instead of SGLang's ``regex`` field."""
    feats: set[str] = set(shape.features)
    if api == "chat":
        chat = _chat_body(shape, prompt, max_tokens, temperature, model)
        if structured_outputs and chat.pop("regex", None):
            chat["structured_outputs"] = {"regex": ANSWER_REGEX}
        return "/v1/chat/completions", chat
    if api == "native":
        params: dict[str, Any] = {"max_new_tokens": max_tokens, "temperature": temperature}
        if shape.output_tokens:
            params["ignore_eos"] = True
        if "json_schema" in feats:
            params["json_schema"] = json.dumps(ANSWER_SCHEMA)
        if "regex" in feats:
            params["regex"] = ANSWER_REGEX
        body: dict[str, Any] = {"text": prompt, "sampling_params": params}
        if "logprobs" in feats:
            body.update(return_logprob=True, top_logprobs_num=5)
        if "image" in feats:
            body["image_data"] = IMAGE_URL
        return "/generate", body
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature}
    if shape.output_tokens:
        body["ignore_eos"] = True
    if "logprobs" in feats:
        body["logprobs"] = 5
    structured = _structured(feats)
    if structured:
        body["structured_outputs"] = structured
    return "/v1/completions", body


def _structured(feats: set[str]) -> dict[str, Any]:
    """vLLM's ``structured_outputs`` for the grammar features (vLLM 0.32 sampling_params.py)."""
    out: dict[str, Any] = {}
    if "json_schema" in feats:
        out["json"] = ANSWER_SCHEMA
    if "regex" in feats:
        out["regex"] = ANSWER_REGEX
    return out


def _chat_body(shape: LoadShape, prompt: str, max_tokens: int, temperature: float, model: str) -> dict[str, Any]:
    feats = set(shape.features)
    content: Any = prompt
    if "image" in feats:
        content = [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": IMAGE_URL}}]
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "chat_template_kwargs": {"enable_thinking": False, "thinking": False},
    }
    if shape.output_tokens:
        body["ignore_eos"] = True
    if "tools" in feats:
        body.update(tools=[TOOL], tool_choice="auto")
    if "json_schema" in feats:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}
    if "regex" in feats:
        body["regex"] = ANSWER_REGEX
    if "logprobs" in feats:
        body.update(logprobs=True, top_logprobs=5)
    return body


def reply_text(api: str, body: Any) -> tuple[str | None, str | None]:
    """(text, finish_reason) of a reply: chat content (or its tool calls, as JSON), /generate's text,
    a completion's text; (None, None) when the body has none of them."""
    if isinstance(body, list):
        body = body[0] if body else {}
    if not isinstance(body, dict):
        return None, None
    if api == "native":
        finish = (body.get("meta_info") or {}).get("finish_reason")
        text = body.get("text")
        return (text if isinstance(text, str) else None), (finish.get("type") if isinstance(finish, dict) else None)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, None
    choice = choices[0]
    if api == "completions":
        return choice.get("text"), choice.get("finish_reason")
    message = choice.get("message") or {}
    calls = message.get("tool_calls")
    if calls:
        return json.dumps(calls), choice.get("finish_reason")
    content = message.get("content")
    reasoning = message.get("reasoning_content")
    if content is None and isinstance(reasoning, str):
        content = reasoning
    return content, choice.get("finish_reason")


def server_seconds(resp: httpx.Response) -> float | None:
    """The server's clock from its ``Date`` header (epoch seconds), or None."""
    raw = resp.headers.get("date")
    if not raw:
        return None
    try:
        return email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError):
        return None


class Traffic:
    """The running state of one shaped probe: its clocks, its stop signal and how much it sent."""

    def __init__(self, duration_s: float | None) -> None:
        self.duration_s = duration_s
        self.wall0 = time.monotonic()
        self.server0: float | None = None
        self.server_now: float | None = None
        self.stop = threading.Event()
        self.sent = 0
        #: requests sent a second time after a transport error on a pooled connection (``tools.load_probe``)
        self.resent = 0
        self.lock = threading.Lock()

    def seen(self, resp: httpx.Response) -> None:
        stamp = server_seconds(resp)
        if stamp is None:
            return
        with self.lock:
            if self.server0 is None:
                self.server0 = stamp
            self.server_now = stamp

    def elapsed(self) -> float:
        """Seconds of traffic so far: the server's clock or the client's, whichever ran further."""
        wall = time.monotonic() - self.wall0
        with self.lock:
            server = (self.server_now - self.server0) if self.server0 is not None and self.server_now else 0.0
        return max(wall, server)

    def more(self) -> bool:
        """Whether a worker that just got an answer sends another request."""
        return not self.stop.is_set() and self.duration_s is not None and self.elapsed() < self.duration_s


def lengths(shape: LoadShape, default: int, n: int) -> list[int]:
    """Each of ``n`` concurrent requests' max tokens: ``output_tokens`` (or the probe's own), spread from
    ``output_tokens_min`` up when the shape gives a minimum."""
    top = shape.output_tokens or default
    low = shape.output_tokens_min
    if low is None or n <= 1:
        return [top] * n
    return [round(low + (top - low) * i / (n - 1)) for i in range(n)]


def pool_map(fn: Any, items: list[Any]) -> list[Any]:
    """``fn`` over ``items`` on as many threads, results in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        return list(pool.map(fn, items))
