"""The probe set: short questions with known answers, sent to a ready server to count how many it gets
right (graded wrong output, README.md).

The set is data, ``knowledge/probe_set.toml`` of the knowledge folder in force (its source and scoring
rule are stated in the file). Each question becomes one greedy request (``tools.probes.Probe``, temperature
0, the set's ``kind`` and ``max_tokens``), sent through the engine's API the way every probe is
(``tools.probes.run_probe``: SGLang's /generate, or /v1/completions on an engine without it); its reply is
scored by the set's rule. This module only asks and counts: whether the count is below what the case
expects is decided in ``agent.domain.accuracy``.
"""

from __future__ import annotations

import concurrent.futures
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tools.knowledge_files import item_path, knowledge_path
from tools.probes import Probe, ProbeResult, split_thinking

#: The probe set's file in the knowledge folder.
FILE_NAME = "probe_set.toml"
#: The id of the probe result that stands for the whole probe set (``agent.domain.accuracy.set_result``).
SET_PROBE_ID = "probe-set"
#: Probe statuses that mean the server did not answer at all: the set is not scored then.
NO_ANSWER = frozenset({"connection_error", "timeout", "http_error"})
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")


class ProbeSetError(ValueError):
    """The probe set file is missing or malformed; the message is one line naming the file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SetHeader(_Strict):
    """The ``[set]`` table: how every question is asked and scored."""

    name: str
    source: str = Field(min_length=1)
    kind: Literal["generate", "chat"] = "generate"
    prompt: str = Field(min_length=1)  # the request text; ``{question}`` is replaced by the item's question
    max_tokens: int = Field(default=16, ge=1, le=1024)
    scoring: Literal["last_number", "word"] = "last_number"

    @field_validator("prompt")
    @classmethod
    def _has_question(cls, value: str) -> str:
        if "{question}" not in value:
            raise ValueError("must contain {question}")
        return value


class Item(_Strict):
    """One ``[[item]]``: a question and its one right answer."""

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: str = Field(min_length=1)


class ProbeSet(_Strict):
    """A whole probe set file."""

    set: SetHeader
    item: list[Item] = Field(min_length=1)

    def probe(self, item: Item) -> Probe:
        """The greedy request that asks ``item``."""
        return Probe(
            id=f"probe-set:{item.id}",
            kind=self.set.kind,
            prompt=self.set.prompt.replace("{question}", item.question),
            max_tokens=self.set.max_tokens,
            temperature=0.0,
        )


def load_probe_set(path: Path | None = None) -> ProbeSet:
    """Read the probe set (default: ``probe_set.toml`` of the knowledge folder in force).

    Raises ProbeSetError (one line: file, field, what was expected) for a missing, non-TOML or invalid
    file, or for duplicate item ids.
    """
    path = path or knowledge_path(FILE_NAME)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProbeSetError(f"{path}: cannot read the probe set: {exc.strerror or type(exc).__name__}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProbeSetError(f"{path}: not valid TOML: {exc}") from None
    try:
        probe_set = ProbeSet.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = item_path(err["loc"]) or "(top level)"
        raise ProbeSetError(f"{path}: {where}: {err['msg']}") from None
    ids = [i.id for i in probe_set.item]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise ProbeSetError(f"{path}: item.id: {dup!r} appears more than once (ids must be unique)")
    return probe_set


def _first_line(text: str | None) -> str:
    answer, _thinking = split_thinking(text)
    return next((line for line in answer.splitlines() if line.strip()), "")


def score_reply(text: str | None, answer: str, scoring: str = "last_number") -> bool:
    """Whether a reply is right by the set's rule, on the first non-empty line of its answer (after any
    ``<think>`` block). ``last_number``: the last number there equals ``answer`` (as numbers: "42.0" and
    "42" agree; "1,024" is 1024), as SGLang's GSM8K benchmark scores (benchmark/gsm8k/bench_sglang.py,
    ``get_answer_value``). ``word``: ``answer`` is a whole word there, case ignored."""
    line = _first_line(text)
    if scoring == "word":
        return re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", line, re.IGNORECASE) is not None
    numbers = _NUMBER.findall(line)
    if not numbers:
        return False
    try:
        return float(numbers[-1].replace(",", "")) == float(answer.replace(",", ""))
    except ValueError:
        return False


class SetRun(BaseModel):
    """What a probe set got: ``asked`` questions answered, ``correct`` of them right; ``wrong`` (id, reply)
    for up to five wrong ones; ``failure`` the first request the server did not answer (then the count
    stops there and is not a measure of accuracy); ``latency_s`` wall seconds for all of them."""

    name: str
    asked: int = 0
    correct: int = 0
    wrong: list[tuple[str, str]] = Field(default_factory=list)
    failure: ProbeResult | None = None
    latency_s: float = 0.0


def run_probe_set(probe_set: ProbeSet, send: Callable[[Probe], ProbeResult], concurrency: int = 1) -> SetRun:
    """Ask every question of ``probe_set`` through ``send`` (a probe -> its result: ``tools.probes.run_probe``
    bound to a server, or a caller's wrapper that reconnects) and count the right answers: one after another,
    or with ``concurrency`` above 1 that many at once on threads (a case whose drop shows only under a burst of
    concurrent requests), counted in the set's order either way. The count stops at the first question (in
    that order) the server did not answer (``NO_ANSWER``). Never raises for server-side problems."""
    run = SetRun(name=probe_set.set.name)
    if concurrency > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(lambda item: send(probe_set.probe(item)), probe_set.item))
    else:
        results = []
        for item in probe_set.item:
            results.append(send(probe_set.probe(item)))
            if results[-1].status in NO_ANSWER:
                break
    for item, result in zip(probe_set.item, results, strict=False):
        run.latency_s += result.latency_s
        if result.status in NO_ANSWER:
            run.failure = result
            break
        run.asked += 1
        if score_reply(result.text, item.answer, probe_set.set.scoring):
            run.correct += 1
        elif len(run.wrong) < 5:
            run.wrong.append((item.id, " ".join((result.text or "").split())[:80]))
    return run
