"""Probes: small requests that tell a working server from a broken one.

A chat probe goes through the OpenAI-compatible API (`openai` client, /v1/chat/completions); a generate
probe POSTs SGLang's native /generate. The answer is classified, first failing check wins:
connection_error (refused, reset, dropped: the server died or is not up), timeout, http_error (status
>= 400, or a body that is not a valid answer), empty, degenerate (repetition loops, NaN-like garbage),
wrong_answer (`expect` not contained, case-insensitive), ok.

Wrong for the model at hand: a probe may carry `answer`, the text the healthy model is known to give
for its prompt (measured on a launch known to be good, at temperature 0). Such a probe is judged
against that answer alone: a reply that begins with it is ok however it looks (a tiny or odd model's
healthy answer need not look like English), any other reply is wrong (reported as degenerate when it
also looks like garbage, so broken numerics still read as such).

Sampling: a probe at temperature 0 decodes greedily (argmax), one above 0 samples. The two fail
differently on broken numerics: SGLang's sampler takes `torch.argmax` when every request is greedy, so
NaN logits decode to garbage text, while a sampled request reaches the sampling kernels, whose
`probability tensor contains either inf, nan or element < 0` assert kills the scheduler (SGLang 0.5.9
and 0.5.23 python/sglang/srt/layers/sampler.py, `Sampler.forward`). So the default probes include both.

Reasoning models: a chat probe asks the chat template not to think (`chat_template_kwargs` with
`enable_thinking: false` for Qwen3/GLM-style templates and `thinking: false` for DeepSeek-V3.1-style
ones; a template ignores keys it does not use), judges the answer after any `<think>...</think>` block
or the server's separate `reasoning_content`, and when a reply is still all thinking when it ran out of
tokens it asks once more with more tokens instead of calling the answer empty or wrong.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from tools.load_probe import run_shaped
from tools.load_shapes import LoadShape
from tools.tls import http_client, tls_context

ProbeStatus = Literal[
    "ok", "http_error", "connection_error", "timeout", "empty", "degenerate", "wrong_answer"
]


class Probe(BaseModel):
    """One request. `expect` is a case-insensitive substring of a correct answer (None: any non-garbage
    text passes). `max_tokens` caps the generated tokens. `concurrency` > 1 sends that many copies at
    once (a load probe): it passes only if every copy passes."""

    model_config = ConfigDict(extra="forbid")  # a case file's typo in a probe is an error, not ignored

    id: str
    kind: Literal["chat", "generate"]
    prompt: str
    max_tokens: int = 32
    expect: str | None = None
    #: What the healthy model answers to `prompt` at temperature 0 (its start is enough), from a launch
    #: known to be good. When set, the reply is judged against it instead of "does it look like language".
    answer: str | None = Field(default=None, min_length=1)
    concurrency: int = Field(default=1, ge=1, le=256)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # 0: greedy (argmax); > 0: sampled
    #: The traffic this probe sends (long prompts and outputs, a shared prefix, request features, time
    #: under traffic: tools/load_shapes.py); None: plain requests.
    shape: LoadShape | None = None

    def load_text(self) -> str:
        """The load this probe sends, in words: ``a burst of 16 concurrent requests``, ``4 concurrent
        requests with a shared prefix of 2000 tokens``, ``1 request with prompts of 20000 tokens``."""
        shaped = self.shape is not None and self.shape.shaped()
        if not shaped:
            return f"a burst of {self.concurrency} concurrent requests"
        assert self.shape is not None
        unit = "stream" if self.shape.duration_s else "request"
        many = f"{self.concurrency} concurrent {unit}s" if self.concurrency > 1 else f"1 {unit}"
        return f"{many} with {self.shape.describe()}"

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # an unshaped probe dumps as before shapes existed (experiment ids and transcripts unchanged)
        data: dict[str, Any] = handler(self)
        if data.get("shape") is None:
            data.pop("shape", None)
        return data


class ProbeResult(BaseModel):
    """Outcome of one probe. `latency_s` is wall seconds from request to answer or error. `traffic_s`: a
    timed probe's (``shape.duration_s``) seconds of traffic on the host's clock, at most its duration;
    None without one (not dumped then). Host-seconds bill it on a scaled host (tools/host_time.py)."""

    probe_id: str
    ok: bool
    status: ProbeStatus
    http_status: int | None = None
    text: str | None = None
    latency_s: float
    error: str | None = None
    traffic_s: float | None = Field(default=None, ge=0)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)  # without a duration, as before traffic_s existed
        if data.get("traffic_s") is None:
            data.pop("traffic_s", None)
        return data


DEFAULT_PROBES: list[Probe] = [
    Probe(
        id="chat-capital",
        kind="chat",
        prompt="What is the capital of France? Answer in one word.",
        expect="Paris",
    ),
    Probe(id="generate-capital", kind="generate", prompt="The capital of France is", expect="Paris"),
    # Sampled: the path where NaN logits trip the sampler's assert instead of decoding to garbage.
    Probe(
        id="generate-sampled",
        kind="generate",
        prompt="The capital of France is",
        max_tokens=16,
        temperature=0.7,
    ),
]

#: Most tokens a probe asks for when a reasoning model is still thinking at its first `max_tokens`.
REASONING_MAX_TOKENS = 1024
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.S | re.I)


# --- text checks -----------------------------------------------------------------------------------

_WORD = re.compile(r"\w+|[^\w\s]+")


def _longest_char_run(text: str) -> tuple[str, int]:
    best_c, best_n, cur_c, cur_n = "", 0, "", 0
    for ch in text:
        if ch == cur_c:
            cur_n += 1
        else:
            cur_c, cur_n = ch, 1
        if cur_n > best_n and not ch.isspace():
            best_c, best_n = cur_c, cur_n
    return best_c, best_n


def degeneracy_reason(text: str) -> str | None:
    """Why `text` looks like broken-model output, or None if it looks like language.

    Checks (tuned for short probe answers of up to a few hundred tokens): Unicode replacement
    characters; one non-space character repeated 8+ times in a row and filling >= 30% of the text
    ("!!!!!!!!" is what NaN logits often decode to); very low character variety; one word making up
    >= 50% of 6+ words; one 1-4-token n-gram repeated 4+ times covering >= 60% of the tokens; a short
    character period (<= 8) repeating through >= 80% of a text without spaces. Longer n-grams are left
    alone on purpose: healthy models at temperature 0 often loop on a whole sentence ("The capital of
    France is Paris. The capital of ..."), which is not a sign of broken numerics.
    """
    stripped = text.strip()
    if not stripped:
        return None
    compact = "".join(stripped.split())
    n = len(compact)
    bad = stripped.count("\ufffd")
    if bad >= 3 or (bad and bad / n >= 0.2):
        return f"{bad} replacement characters"
    ch, run = _longest_char_run(stripped)
    if run >= 8 and run / n >= 0.3:
        return f"{ch!r} repeated {run} times"
    if n >= 16 and len(set(compact)) <= 2:
        return f"only {len(set(compact))} distinct characters"
    tokens = _WORD.findall(stripped.lower())
    words = [t for t in tokens if t[0].isalnum() or t[0] == "_"]
    if len(words) >= 6:
        word, count = Counter(words).most_common(1)[0]
        if count / len(words) >= 0.5:
            return f"token {word!r} is {count} of {len(words)} words"
    for size in (1, 2, 3, 4):
        if len(tokens) < size * 4:
            break
        grams = Counter(tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1))
        gram, reps = grams.most_common(1)[0]
        if reps >= 4 and reps * size / len(tokens) >= 0.6:
            return f"{' '.join(gram)!r} repeated {reps} times"
    if " " not in stripped and n >= 16:
        for period in range(1, 9):
            if n < period * 4:
                break
            same = sum(1 for i in range(n - period) if compact[i] == compact[i + period])
            if same / (n - period) >= 0.8:
                return f"a {period}-character pattern repeats"
    return None


def _squash(text: str) -> str:
    return " ".join(text.split()).lower()


def classify_text(
    text: str | None, expect: str | None, answer: str | None = None
) -> tuple[ProbeStatus, str | None]:
    """Status for a successful HTTP answer's text: empty, degenerate, wrong_answer or ok (with reason).

    `answer`: the healthy model's known reply to this prompt. When given, a text that begins with it
    (case and runs of whitespace ignored) is ok without the language checks; any other text is
    degenerate if it looks like garbage, else wrong_answer. `expect` still has to be contained.
    """
    if text is None or not text.strip():
        return "empty", None
    if answer is not None:
        if not _squash(text).startswith(_squash(answer)):
            reason = degeneracy_reason(text)
            if reason is not None:
                return "degenerate", f"{reason}; the healthy model answers {_one_line(answer, 80)!r}"
            return "wrong_answer", f"the healthy model answers {_one_line(answer, 80)!r}"
        if expect is not None and expect.lower() not in text.lower():
            return "wrong_answer", f"expected {expect!r}"
        return "ok", None
    reason = degeneracy_reason(text)
    if reason is not None:
        return "degenerate", reason
    if expect is not None and expect.lower() not in text.lower():
        return "wrong_answer", f"expected {expect!r}"
    return "ok", None


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _result(probe: Probe, status: ProbeStatus, start: float, **kw: Any) -> ProbeResult:
    return ProbeResult(
        probe_id=probe.id, ok=status == "ok", status=status, latency_s=time.monotonic() - start, **kw
    )


def _finish(probe: Probe, text: str | None, start: float, http_status: int | None) -> ProbeResult:
    status, reason = classify_text(text, probe.expect, probe.answer)
    return _result(probe, status, start, http_status=http_status, text=text, error=reason)


# --- requests --------------------------------------------------------------------------------------


def split_thinking(text: str | None, reasoning: str | None = None) -> tuple[str, str]:
    """(answer, thinking) of a reply: `<think>...</think>` blocks (an unterminated one runs to the end)
    and a separate `reasoning_content` are thinking; the rest is the answer."""
    raw = text or ""
    thinking = [reasoning] if reasoning else []
    thinking += [m.group(0) for m in _THINK_BLOCK.finditer(raw)]
    answer = _THINK_BLOCK.sub("", raw)
    if "</think>" in answer.lower():  # the template opened the block in the prompt: text before it thinks
        head, _, answer = answer.rpartition("</think>")
        thinking.append(head)
    return answer.strip(), "\n".join(t for t in thinking if t)


def _judge(probe: Probe, text: str | None, reasoning: str | None, start: float, status: int | None,
           finish: str | None) -> ProbeResult | None:
    """The result for a reply, or None when it was all thinking and ran out of tokens (ask again)."""
    answer, thinking = split_thinking(text, reasoning)
    if not thinking:
        return _finish(probe, text, start, status)
    if not answer:
        reason = degeneracy_reason(thinking)
        if reason is not None:
            return _result(probe, "degenerate", start, http_status=status, text=thinking[:2000], error=reason)
        if finish == "length":
            return None
    return _finish(probe, answer or thinking, start, status)


def import_client() -> None:
    """Import the OpenAI client now (~0.35 s on an idle machine, seconds on a busy one). Call it before a
    launch: imported at the first chat probe, it was paid while a ready server sat idle waiting to be
    probed, as host-seconds of the scarce machine. It stays out of the commands that never probe. Never
    raises: an import error shows at the probe."""
    try:
        import openai  # noqa: F401
    except Exception:  # noqa: BLE001 - the probe's own import reports it
        pass


def _run_chat(
    base_url: str, probe: Probe, model: str, timeout_s: float, start: float, api_key: str | None = None
) -> ProbeResult:
    import openai  # here, not at the top: it takes ~0.35 s to import and most commands never probe

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "EMPTY", max_retries=0,
                           timeout=timeout_s, http_client=openai.DefaultHttpxClient(verify=tls_context()))
    max_tokens = probe.max_tokens
    try:
        while True:
            result = _chat_once(client, probe, model, timeout_s, start, max_tokens)
            if result is not None:
                return result
            if max_tokens >= REASONING_MAX_TOKENS:
                return _result(probe, "empty", start, http_status=200, text="",
                               error=f"still thinking after {max_tokens} tokens")
            max_tokens = min(REASONING_MAX_TOKENS, max_tokens * 8)
    finally:
        client.close()


def _chat_once(
    client: Any, probe: Probe, model: str, timeout_s: float, start: float, max_tokens: int
) -> ProbeResult | None:
    import openai

    try:
        resp = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": probe.prompt}],
            max_tokens=max_tokens,
            temperature=probe.temperature,
            # SGLang passes these to the chat template (entrypoints/openai/serving_chat.py); a template
            # ignores the keys it does not read.
            extra_body={"chat_template_kwargs": {"enable_thinking": False, "thinking": False}},
        )
    except openai.APITimeoutError as exc:
        return _result(probe, "timeout", start, error=_one_line(f"no answer within {timeout_s:g} s: {exc}"))
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        return _result(probe, "connection_error", start, error=_one_line(f"{type(cause).__name__}: {cause}"))
    except openai.APIStatusError as exc:
        return _result(
            probe, "http_error", start, http_status=exc.status_code, error=_one_line(str(exc.message))
        )
    except openai.APIError as exc:  # e.g. a 200 whose body is not a chat completion
        return _result(probe, "http_error", start, http_status=200, error=_one_line(f"bad response: {exc}"))
    if not resp.choices:
        return _result(probe, "empty", start, http_status=200, text="", error="no choices in response")
    choice = resp.choices[0]
    message = choice.message
    text = message.content if message is not None else None
    reasoning = getattr(message, "reasoning_content", None) if message is not None else None
    if reasoning is None and message is not None and message.model_extra:
        reasoning = message.model_extra.get("reasoning_content")
    return _judge(probe, text, reasoning if isinstance(reasoning, str) else None, start, 200, choice.finish_reason)


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _post(
    url: str, payload: dict[str, Any], probe: Probe, timeout_s: float, start: float, api_key: str | None
) -> httpx.Response | ProbeResult:
    """POST one probe's JSON; the response, or the probe's result when no usable answer came (a timeout,
    a transport error, an HTTP status of 400 or more)."""
    try:
        with http_client(timeout=timeout_s, headers=_auth(api_key)) as client:
            resp = client.post(url, json=payload)
    except httpx.TimeoutException as exc:
        return _result(probe, "timeout", start, error=_one_line(f"no answer within {timeout_s:g} s: {exc!r}"))
    except httpx.TransportError as exc:
        return _result(probe, "connection_error", start, error=_one_line(f"{type(exc).__name__}: {exc}"))
    if resp.status_code >= 400:
        return _result(
            probe, "http_error", start, http_status=resp.status_code, error=_one_line(resp.text or resp.reason_phrase)
        )
    return resp


def _run_generate(
    base_url: str, probe: Probe, timeout_s: float, start: float, api_key: str | None = None
) -> ProbeResult:
    payload = {
        "text": probe.prompt,
        "sampling_params": {"max_new_tokens": probe.max_tokens, "temperature": probe.temperature},
    }
    resp = _post(f"{base_url}/generate", payload, probe, timeout_s, start, api_key)
    if isinstance(resp, ProbeResult):
        return resp
    try:
        body = resp.json()
    except ValueError:
        return _result(probe, "http_error", start, http_status=resp.status_code, error="response is not JSON")
    if isinstance(body, list):
        body = body[0] if body else {}
    if not isinstance(body, dict):
        return _result(
            probe, "http_error", start, http_status=resp.status_code, error="unexpected JSON shape"
        )
    finish = (body.get("meta_info") or {}).get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        return _result(
            probe,
            "http_error",
            start,
            http_status=resp.status_code,
            text=body.get("text"),
            error=_one_line(f"request aborted: {finish.get('message', '')}"),
        )
    text = body.get("text")
    ftype = finish.get("type") if isinstance(finish, dict) else None
    judged = _judge(probe, text if isinstance(text, str) else None, None, start, resp.status_code, ftype)
    if judged is None:  # all thinking within max_new_tokens: not an empty answer
        return _result(probe, "ok", start, http_status=resp.status_code, text=text,
                       error="reasoning only within max_new_tokens")
    return judged


def _run_completion(
    base_url: str, probe: Probe, model: str, timeout_s: float, start: float, api_key: str | None = None
) -> ProbeResult:
    """A generate probe through the OpenAI text-completions API (engines without a native /generate,
    such as vLLM: POST /v1/completions {"model", "prompt", "max_tokens", "temperature"}; the answer is
    ``choices[0].text``, vLLM 0.32.0 vllm/entrypoints/openai/completion/)."""
    payload = {
        "model": model,
        "prompt": probe.prompt,
        "max_tokens": probe.max_tokens,
        "temperature": probe.temperature,
    }
    resp = _post(f"{base_url}/v1/completions", payload, probe, timeout_s, start, api_key)
    if isinstance(resp, ProbeResult):
        return resp
    try:
        body = resp.json()
    except ValueError:
        return _result(probe, "http_error", start, http_status=resp.status_code, error="response is not JSON")
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return _result(probe, "http_error", start, http_status=resp.status_code, error="no choices in response")
    text = choices[0].get("text")
    judged = _judge(
        probe, text if isinstance(text, str) else None, None, start, resp.status_code, choices[0].get("finish_reason")
    )
    if judged is None:  # all thinking within max_tokens: not an empty answer
        return _result(probe, "ok", start, http_status=resp.status_code, text=text,
                       error="reasoning only within max_tokens")
    return judged


#: How long one request may take on the host before it counts as unanswered, in host seconds.
REQUEST_TIMEOUT_HOST_S = 60.0
#: The least wall time (seconds) a request is given on the orchestrator, whatever the host's time scale:
#: a simulated host's answer still crosses real HTTP and a loaded machine.
MIN_REQUEST_WALL_S = 5.0


def request_timeout_s(time_scale: float = 1.0) -> float:
    """The wall-clock timeout (seconds) of one probe request on a host whose durations are scaled by
    ``time_scale`` (HYPOLOOP_LAB_TIME_SCALE; 1.0 on a real host): ``REQUEST_TIMEOUT_HOST_S`` of host
    time, but never under ``MIN_REQUEST_WALL_S``. On a real host this is 60 s; on a lab host at 0.001 a
    request that never returns costs 5 s of wall time instead of 60, of which the launch's host-seconds
    count the host's 60 s only (``patience_beyond_host_s``).
    Raises ValueError for a time scale that is not positive."""
    if not time_scale > 0:
        raise ValueError(f"time scale must be positive, got {time_scale!r}")
    return max(REQUEST_TIMEOUT_HOST_S * time_scale, MIN_REQUEST_WALL_S)


def patience_beyond_host_s(results: Sequence[ProbeResult], time_scale: float = 1.0) -> float:
    """Wall seconds the orchestrator waited on timed-out probes beyond their host-time timeout: for each
    probe of ``results`` that ended ``timeout``, ``request_timeout_s(time_scale)`` minus
    ``REQUEST_TIMEOUT_HOST_S * time_scale`` (0 on a real host, where the two agree). That wait is the
    orchestrator's floor (``MIN_REQUEST_WALL_S``), not time the host spent: a launch's host-seconds leave it
    out, so a request that never returns costs ``REQUEST_TIMEOUT_HOST_S`` of host time at any time scale.
    Raises ValueError for a time scale that is not positive."""
    excess = request_timeout_s(time_scale) - REQUEST_TIMEOUT_HOST_S * time_scale
    return excess * sum(1 for r in results if r.status == "timeout")


def run_probe(
    base_url: str,
    probe: Probe,
    *,
    model: str,
    timeout_s: float = REQUEST_TIMEOUT_HOST_S,
    api_key: str | None = None,
    generate_api: Literal["native", "completions"] = "native",
) -> ProbeResult:
    """Send `probe` to the server at `base_url` (e.g. "http://127.0.0.1:30000") and classify the answer.

    `model` is the served model name for chat probes (SGLang accepts the model path). `timeout_s` bounds
    the whole request in seconds. No retries. Never raises for server-side problems: they are statuses.
    `api_key` is the server's `--api-key` (sent as `Authorization: Bearer`, never logged).
    Chat: `openai.OpenAI(base_url=base_url + "/v1", max_retries=0)` at the probe's temperature, thinking
    turned off through `chat_template_kwargs`. Generate: POST /generate {"text", "sampling_params":
    {"max_new_tokens", "temperature"}} (SGLang's native API), read "text" and an abort in
    meta_info.finish_reason; with `generate_api` "completions" (the engine has no /generate: vLLM,
    `knowledge/engines.toml`) POST /v1/completions instead. A probe with a `shape` sends the traffic it
    describes (tools/load_probe.py).
    """
    start = time.monotonic()
    base = base_url.rstrip("/")
    if probe.shape is not None and probe.shape.shaped():  # load-shaped traffic (a case's [reproduce])
        return run_shaped(
            base, probe, model=model, timeout_s=timeout_s, api_key=api_key, generate_api=generate_api, judging=JUDGING
        )
    if probe.concurrency > 1:
        return _run_concurrent(base, probe, model, timeout_s, start, api_key, generate_api)
    if probe.kind == "chat":
        return _run_chat(base, probe, model, timeout_s, start, api_key)
    if generate_api == "completions":
        return _run_completion(base, probe, model, timeout_s, start, api_key)
    return _run_generate(base, probe, timeout_s, start, api_key)


#: Which status wins when concurrent copies disagree: the most telling failure first.
_SEVERITY: tuple[ProbeStatus, ...] = (
    "connection_error",
    "timeout",
    "http_error",
    "degenerate",
    "empty",
    "wrong_answer",
    "ok",
)


def _run_concurrent(
    base: str,
    probe: Probe,
    model: str,
    timeout_s: float,
    start: float,
    api_key: str | None,
    generate_api: Literal["native", "completions"] = "native",
) -> ProbeResult:
    """`probe.concurrency` copies at once on threads; the worst result stands for all of them."""
    single = probe.model_copy(update={"concurrency": 1})
    with concurrent.futures.ThreadPoolExecutor(max_workers=probe.concurrency) as pool:
        futures = [
            pool.submit(
                run_probe, base, single, model=model, timeout_s=timeout_s, api_key=api_key, generate_api=generate_api
            )
            for _ in range(probe.concurrency)
        ]
        results = [f.result() for f in futures]
    worst = min(results, key=lambda r: _SEVERITY.index(r.status))
    failed = sum(not r.ok for r in results)
    error = worst.error
    if failed:
        error = f"{failed} of {probe.concurrency} concurrent requests failed" + (
            f": {error}" if error else ""
        )
    return worst.model_copy(update={"latency_s": time.monotonic() - start, "error": error})


def get_server_info(
    base_url: str,
    *,
    timeout_s: float = 10.0,
    api_key: str | None = None,
    paths: Sequence[str] = ("/get_server_info", "/server_info"),
) -> dict[str, Any] | None:
    """The server's effective configuration: GET each of `paths` in turn (SGLang's /get_server_info,
    then /server_info of newer SGLang; an engine without one, vLLM, passes none).

    Returns the JSON object, or None if none answers 200 with a JSON object within `timeout_s` s.
    """
    if not paths:
        return None
    base = base_url.rstrip("/")
    with http_client(timeout=timeout_s, headers=_auth(api_key)) as client:
        for path in paths:
            try:
                resp = client.get(base + path)
            except httpx.HTTPError:
                continue
            if resp.status_code != 200:
                continue
            try:
                body = resp.json()
            except ValueError:
                continue
            if isinstance(body, dict):
                return body
    return None


class _Judging:
    """This module's judging, lent to tools/load_probe.py (which cannot import this module)."""

    severity: tuple[str, ...] = _SEVERITY

    def result(self, probe: Probe, status: str, start: float, **kw: Any) -> ProbeResult:
        return _result(probe, status, start, **kw)  # type: ignore[arg-type]

    def judge(self, probe: Probe, text: str | None, reasoning: str | None, start: float, status: int | None,
              finish: str | None) -> ProbeResult | None:
        return _judge(probe, text, reasoning, start, status, finish)

    def one_line(self, text: str, limit: int = 300) -> str:
        return _one_line(text, limit)

    def auth(self, api_key: str | None) -> dict[str, str]:
        return _auth(api_key)


JUDGING = _Judging()
