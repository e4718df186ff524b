"""What configures the LLM planner and what it spent: its options (``LLMPlannerConfig``), its memory
across steps (``LLMMemory``, ``LLMUsage``), the ``PlannerSpec`` a run checkpoints, the spec built from
command-line options, and how the spending and exchanges are shown to people."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError

from agent.planning.catalog import CatalogEntry
from agent.review.wording import count

#: The planners a run may name (``PlannerSpec.kind``, ``--planner``).
PLANNER_KINDS = ("rules", "llm")


class LLMPlannerConfig(BaseModel):
    """Options of the LLM planner (JSON-plain; kept in the checkpoint, never the key itself).

    ``model``: the endpoint's model name. ``base_url``: an OpenAI-compatible ``.../v1`` URL (``None``:
    api.openai.com). ``api_key_env``: the environment variable holding the key. ``context_tokens``:
    budget of one request's prompt, estimated at 4 characters per token. ``token_budget``: tokens
    (prompt + completion) the whole run may spend. ``max_output_tokens``: completion limit per request.
    ``retries``: how often a refused or failed answer is asked again before the step falls back to the
    rule planner. ``timeout_s``: per request. ``temperature``: ``None`` sends none (OpenAI's reasoning
    models accept only their default). ``response_format``: ``json_schema`` (structured outputs),
    ``json_object`` or ``text``; lowered automatically when the endpoint refuses it. ``redact_hosts``:
    also mask host names and IP addresses in what is sent.
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    context_tokens: int = Field(default=12000, ge=1000)
    token_budget: int = Field(default=300000, ge=1000)
    max_output_tokens: int = Field(default=4096, ge=256)
    retries: int = Field(default=2, ge=0, le=5)
    timeout_s: float = Field(default=180.0, gt=0)
    temperature: float | None = 0.0
    response_format: Literal["json_schema", "json_object", "text"] = "json_schema"
    redact_hosts: bool = False

    def api_key(self) -> str | None:
        """The key from the environment (``None`` when the variable is unset or empty)."""
        return os.environ.get(self.api_key_env) or None

    def endpoint(self) -> str:
        """The base URL as shown to people."""
        return self.base_url or "https://api.openai.com/v1"


class LLMUsage(BaseModel):
    """What the LLM planner spent and how its answers fared, over the whole run.

    Tokens as the endpoint reported them; ``estimated_tokens`` counts those estimated (4 chars/token)
    because the endpoint reported no usage. ``latency_s``: summed wall time of the requests.
    """

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_tokens: int = 0
    latency_s: float = 0.0
    accepted: int = 0
    invalid: int = 0
    errors: int = 0
    fallbacks: int = 0
    budget: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class LLMMemory(BaseModel):
    """The LLM planner's own state across steps (checkpointed with the run): the hypotheses the model
    added (as catalog entries), its latest note per hypothesis, the tokens spent, and what the endpoint
    was found to refuse (a lowered response format, a parameter left out)."""

    hypotheses: list[CatalogEntry] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict)
    usage: LLMUsage = Field(default_factory=LLMUsage)
    response_format: str | None = None
    drop_temperature: bool = False
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None


class PlannerSpec(BaseModel):
    """Which planner a run uses, with its options and memory; ``state["planner"]`` holds its dump."""

    kind: Literal["rules", "llm"] = "rules"
    llm: LLMPlannerConfig | None = None
    memory: LLMMemory = Field(default_factory=LLMMemory)


def usage_summary(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Tokens and answers of the LLM planner over the run, for the conclusion (``None``: rule planner)."""
    if not spec or spec.get("kind") != "llm":
        return None
    s = PlannerSpec.model_validate(spec)
    u = s.memory.usage
    return {
        "model": s.llm.model if s.llm else None,
        "endpoint": s.llm.endpoint() if s.llm else None,
        "requests": u.requests,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "estimated_tokens": u.estimated_tokens,
        "total_tokens": u.total_tokens + u.estimated_tokens,
        "token_budget": s.llm.token_budget if s.llm else u.budget,
        "latency_s": round(u.latency_s, 2),
        "accepted": u.accepted,
        "refused": u.invalid,
        "errors": u.errors,
        "fallbacks": u.fallbacks,
        "model_hypotheses": [e.id for e in s.memory.hypotheses],
    }


def describe_usage(u: Mapping[str, Any]) -> str:
    """One line about the LLM planner's spending, as printed at the end of a run."""
    est = f", {u['estimated_tokens']} of them estimated" if u.get("estimated_tokens") else ""
    return (
        f"LLM planner ({u.get('model')}): {count(u.get('requests', 0), 'request')}, "
        f"{count(u.get('total_tokens', 0), 'token')} "
        f"of {u.get('token_budget')} ({u.get('prompt_tokens', 0)} prompt + {u.get('completion_tokens', 0)} "
        f"completion{est}), {u.get('latency_s', 0)} s; {count(u.get('accepted', 0), 'proposal')} accepted, "
        f"{u.get('refused', 0)} refused, {count(u.get('errors', 0), 'error')}, "
        f"{count(u.get('fallbacks', 0), 'rule fallback')}"
    )


def llm_notices(console: Any) -> Callable[[Any], None]:
    """A transcript listener that prints the LLM planner's exchanges in one line each."""
    from rich.markup import escape

    def show(ev: Any) -> None:
        d = ev.data
        if ev.type == "llm.request":
            console.print(
                f"  [dim]llm: asking {escape(str(d.get('model')))} (attempt {d.get('attempt')}, "
                f"~{d.get('est_prompt_tokens')} prompt tokens)[/]",
                highlight=False,
            )
        elif ev.type == "llm.response":
            u = d.get("usage") or {}
            console.print(
                f"  [dim]llm: answer in {d.get('latency_s')} s, {u.get('total_tokens')} tokens[/]",
                highlight=False,
            )
        elif ev.type == "llm.invalid":
            console.print(
                f"  [red]llm proposal refused[/] ({d.get('kind')}): {escape(str(d.get('reason')))}",
                highlight=False,
            )
        elif ev.type == "llm.error":
            note = " (adjusting the request)" if d.get("adjusted") else ""
            console.print(
                f"  [red]llm error[/] {d.get('kind')}: {escape(str(d.get('message')))[:200]}{note}",
                highlight=False,
            )
        elif ev.type == "llm.fallback":
            console.print(
                f"  [yellow]llm: falling back to the rule planner[/]: {escape(str(d.get('reason')))}",
                highlight=False,
            )
        elif ev.type == "llm.decision" and d.get("new_hypotheses"):
            console.print(
                f"  [yellow]llm adds hypotheses[/] {', '.join(d['new_hypotheses'])}", highlight=False
            )

    return show


def check_base_url(base_url: str | None) -> None:
    """Raise ValueError (one line naming ``--base-url``) unless ``base_url`` is None or an ``http://`` or
    ``https://`` URL with a host name (no spaces, a port that is a number in range)."""
    if base_url is None:
        return
    try:
        parts = urlsplit(base_url)
        ok = parts.port is None or parts.port > 0  # .port raises ValueError for one out of range
    except ValueError:
        ok = False
    if not (ok and parts.scheme in ("http", "https") and parts.hostname and not any(c.isspace() for c in base_url)):
        raise ValueError(f"--base-url {base_url!r}: expected an http:// or https:// URL of an OpenAI-compatible "
                         "endpoint, e.g. http://localhost:8000/v1")


def planner_spec_from_options(
    kind: str,
    *,
    model: str | None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    context_tokens: int | None = None,
    token_budget: int | None = None,
    timeout_s: float | None = None,
    redact_hosts: bool = False,
) -> dict[str, Any] | None:
    """The ``state["planner"]`` of a new run from command-line options (``None``: the rule planner).

    Raises ValueError (one line naming the option): an unknown kind, ``--planner llm`` without ``--model``, a
    bad ``--base-url`` (``check_base_url``), LLM options with the rule planner, a bad number, a missing API key."""
    llm_options = {
        "--model": model,
        "--base-url": base_url,
        "--api-key-env": api_key_env,
        "--llm-context-tokens": context_tokens,
        "--llm-token-budget": token_budget,
        "--llm-timeout": timeout_s,
    }
    if kind not in PLANNER_KINDS:
        raise ValueError(f"--planner {kind}: expected one of {', '.join(PLANNER_KINDS)}")
    if kind == "rules":
        given = [k for k, v in llm_options.items() if v is not None] + (
            ["--redact-hosts"] if redact_hosts else []
        )
        if given:
            raise ValueError(f"{', '.join(given)}: only used with --planner llm")
        return None
    if not model:
        raise ValueError("--planner llm needs --model NAME (the model name the endpoint serves)")
    check_base_url(base_url)
    values: dict[str, Any] = {"model": model, "base_url": base_url, "redact_hosts": redact_hosts}
    for key, v in (
        ("api_key_env", api_key_env),
        ("context_tokens", context_tokens),
        ("token_budget", token_budget),
        ("timeout_s", timeout_s),
    ):
        if v is not None:
            values[key] = v
    try:
        cfg = LLMPlannerConfig.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "?"
        option = {
            "context_tokens": "--llm-context-tokens",
            "token_budget": "--llm-token-budget",
            "timeout_s": "--llm-timeout",
        }.get(field, field)
        raise ValueError(f"{option}: {err['msg']}") from None
    if cfg.api_key() is None and (cfg.base_url is None or api_key_env is not None):
        where = "api.openai.com needs a key" if cfg.base_url is None else "it was named with --api-key-env"
        raise ValueError(f"${cfg.api_key_env} is not set ({where})")
    return PlannerSpec(kind="llm", llm=cfg).model_dump(mode="json")
