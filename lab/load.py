"""Load shapes on the simulated server: what one request and its batch look like to a fault.

A request's prompt is cut into tokens by the lab's tokenizer (a word or a punctuation mark is one token,
`responder.count_tokens`: plain English text counts about as a BPE tokenizer counts it); the prefix
cache plays SGLang's radix cache (tokens of a prompt already computed for an earlier one are reused
and reported as `cached_tokens`); the batch registry knows which requests decode together and how long
each will run (a batch shrinks when a shorter one finishes while another still decodes); the traffic
clock counts simulated seconds of continuous traffic.

Standard library only (the lab is also installed on remote hosts).
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

#: The request features a fault can test (`req.features`, `batch.features`), as the request says them:
#: `tools` (a chat request with a non-empty `tools` list), `json_schema` (`response_format` json_schema or
#: json_object, native `sampling_params.json_schema`), `regex` (native or chat `regex`), `image` (an
#: `image_url` part, native `image_data`), `logprobs` (chat `logprobs`, completions `logprobs`, native
#: `return_logprob`).
FEATURES = ("tools", "json_schema", "regex", "image", "logprobs")

#: Wall seconds a batch gathers requests, in worlds whose faults read the batch (`BATCH_KEYS`): requests
#: sent together share a batch, as SGLang's scheduler batches requests that arrive together.
BATCH_WINDOW_S = 0.15

#: Simulated seconds without any request in flight that end a stretch of traffic (`traffic_s`).
TRAFFIC_IDLE_S = 60.0


@dataclass(frozen=True)
class Request:
    """One generation request as the engine sees it.

    `prompt` is what the answer is made from (a chat's last user message); `context` the whole prompt
    the model reads (every chat message; default `prompt`), which the prefix cache matches;
    `temperature` 0 decodes greedily; `think`: a reasoning model's reply starts with its thinking;
    `ignore_eos`: generate exactly `max_new_tokens` (SGLang's `ignore_eos` sampling parameter);
    `json_key`: the reply is a JSON object with this key (a `json_schema` request); `prompt_tokens`:
    the prompt's length when the endpoint counts it itself (a chat's template overhead), else None.
    """

    prompt: str
    max_new_tokens: int
    temperature: float = 1.0
    think: bool = False
    context: str | None = None
    features: frozenset[str] = frozenset()
    ignore_eos: bool = False
    json_key: str | None = None
    prompt_tokens: int | None = None

    @property
    def text(self) -> str:
        return self.prompt if self.context is None else self.context


class PrefixCache:
    """SGLang's radix cache, simplified: the prompts computed so far (the newest `capacity`); a new
    prompt's cached tokens are the whole tokens of its longest common prefix with any of them (the
    caller keeps it below the prompt's length: SGLang always computes the last token, 0.5.23
    managers/schedule_batch.py `_compute_max_prefix_len`)."""

    def __init__(self, capacity: int = 512) -> None:
        self._seen: deque[str] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def match(self, text: str) -> int:
        """Tokens of `text` found in the cache, then `text` is cached too (as after its prefill)."""
        ends = [m.end() for m in _TOKEN_RE.finditer(text)]
        with self._lock:
            common = max((_common_prefix(text, seen) for seen in self._seen), default=0)
            self._seen.append(text)
        return bisect.bisect_right(ends, common)

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings (binary search on slices: C-speed compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class _Member:
    decode_s: float  # simulated seconds of decoding ahead of it
    features: frozenset[str]


@dataclass
class Batch:
    """Requests that arrived within one batching window and decode together; `closes_at` is the wall
    time (time.monotonic) after which later arrivals start a new batch."""

    closes_at: float
    last_call: float  # the latest it may close: a burst spread by a busy machine still forms one batch
    members: dict[int, _Member] = field(default_factory=dict)


@dataclass
class BatchView:
    """What a request's batch looks like when it starts decoding: `running` requests decode together,
    `shrink` of them finish while this one still decodes (the first after `shrink_in_s` simulated
    seconds), `features` is the union of their request features."""

    running: int
    shrink: int
    shrink_in_s: float
    features: frozenset[str] = field(default_factory=frozenset)


class BatchRegistry:
    """Forms batches the way the scheduler gathers requests: the first request opens a batch for
    `window_s` wall seconds, each request arriving meanwhile joins it and keeps it open `window_s` more
    (at most 4 × `window_s` in all), later ones open the next."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._open: Batch | None = None
        self._lock = threading.Lock()

    def join(self, rid: int, decode_s: float, features: frozenset[str]) -> Batch:
        """Request `rid`, with `decode_s` simulated seconds of decoding, joins the open batch."""
        with self._lock:
            now = time.monotonic()
            batch = self._open
            if batch is None or now >= batch.closes_at:
                batch = self._open = Batch(closes_at=now + self._window_s, last_call=now + 4 * self._window_s)
            else:  # another arrival keeps the batch open a little longer
                batch.closes_at = min(max(batch.closes_at, now + self._window_s), batch.last_call)
            batch.members[rid] = _Member(decode_s, features)
            return batch

    @staticmethod
    def gathered(batch: Batch) -> None:
        """Wait until `batch` has closed (its closing time moves while requests keep arriving)."""
        while (left := batch.closes_at - time.monotonic()) > 0:
            time.sleep(left)

    def view(self, batch: Batch, rid: int) -> BatchView:
        """The batch of request `rid` once it has closed."""
        with self._lock:
            me = batch.members[rid]
            others = [m for r, m in batch.members.items() if r != rid]
        shorter = [m.decode_s for m in others if m.decode_s < me.decode_s]
        feats = frozenset().union(me.features, *(m.features for m in others))
        return BatchView(1 + len(others), len(shorter), min(shorter, default=0.0), feats)


class TrafficClock:
    """Simulated seconds since the current stretch of traffic began: a stretch starts with a request
    while none was in flight for `TRAFFIC_IDLE_S`, and goes on while requests keep coming."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._began: float | None = None
        self._idle_since: float | None = None

    def begin(self, now: float) -> None:
        with self._lock:
            if self._in_flight == 0 and (
                self._began is None or self._idle_since is None or now - self._idle_since > TRAFFIC_IDLE_S
            ):
                self._began = now
            self._in_flight += 1

    def end(self, now: float) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            if self._in_flight == 0:
                self._idle_since = now

    def seconds(self, now: float) -> float:
        with self._lock:
            return 0.0 if self._began is None else max(0.0, now - self._began)
