"""Budgets: settings with which a user bounds a resource (knowledge/budgets.toml), how much one request
needs of it, and whether a case's description says the user set the bound on purpose.

An engineer who reads "the budget cannot hold one request" beside the user's own small budget raises the
budget to what one request needs, rounded up to a sensible size (``raised_value``), rather than removing
it: without the budget the engine sizes the resource itself, the opposite of what a user who set it "to
save memory" asked for (``bounded_on_purpose``). The need is the engine's own figure when its error states
it (a signature fact), else the arithmetic of the engine's KV-cache layout over the model's config.json
(``kv_bytes_per_token``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.domain.case import Case
from agent.domain.models import Baseline
from agent.planning.kv_layout import kv_bytes_per_token
from tools.knowledge_files import KnowledgeFile, load_model

__all__ = ["Budget", "BudgetsError", "Resource", "Sizer", "Table", "bounded_on_purpose", "budget_of", "kv_bytes_per_token",
           "doubled", "load_budgets", "need_bytes", "raised_value", "removes_budget_on_purpose"]

GIB = 2**30
#: Binary suffixes the engine's integer parser reads (vLLM's ``human_readable_int``: K = 2**10 ...).
_SUFFIXES = (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10))


class BudgetsError(ValueError):
    """knowledge/budgets.toml cannot be used (one line naming the file and the field)."""


class Resource(BaseModel):
    """A resource budgets bound (see knowledge/budgets.toml for the fields)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    component: str
    stated: str = ""
    tokens: list[str] = Field(default_factory=list)
    margin: float = Field(default=1.0, ge=1.0)
    intent: list[str] = Field(default_factory=list)
    dtype_bytes: dict[str, float] = Field(default_factory=dict)
    source: str

    @cached_property
    def intent_patterns(self) -> list[re.Pattern[str]]:
        """The ``intent`` expressions compiled (case-insensitive)."""
        return [re.compile(p, re.I) for p in self.intent]


class Budget(BaseModel):
    """A setting that bounds a resource (see knowledge/budgets.toml for the fields)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["flag", "env"] = "flag"
    resource: str
    unit: Literal["bytes", "GiB", "count"]
    short: list[str] = Field(min_length=1)
    overrides: list[str] = Field(default_factory=list)
    source: str


class Sizer(BaseModel):
    """A setting a table's size is proportional to (see knowledge/budgets.toml ``[[table]]``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    from_checkpoint: str = ""


class Table(BaseModel):
    """A device tensor whose shape follows settings (see knowledge/budgets.toml ``[[table]]``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    modules: str
    code: str
    sized_by: list[Sizer] = Field(min_length=1)
    source: str

    @cached_property
    def patterns(self) -> tuple[re.Pattern[str], re.Pattern[str]]:
        """``modules`` and ``code`` compiled."""
        return re.compile(self.modules), re.compile(self.code)


class Budgets(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    resource: list[Resource] = Field(default_factory=list)
    budget: list[Budget] = Field(default_factory=list)
    table: list[Table] = Field(default_factory=list)

    def resource_of(self, budget: Budget) -> Resource | None:
        """The resource ``budget`` bounds."""
        return next((r for r in self.resource if r.id == budget.resource), None)


def _load(path: Path) -> Budgets:
    data = load_model(path, Budgets, BudgetsError)
    ids = {r.id for r in data.resource}
    for i, b in enumerate(data.budget):
        if b.resource not in ids:
            raise BudgetsError(f"{path}: field 'budget.{i}.resource': {b.resource!r} is no [[resource]] id")
    for t in data.table:
        for field in ("modules", "code"):
            try:
                re.compile(getattr(t, field))
            except re.error as exc:
                raise BudgetsError(f"{path}: field 'table.{t.id}.{field}': not a regex: {exc}") from None
    for r in data.resource:
        for j, p in enumerate(r.intent):
            try:
                re.compile(p)
            except re.error as exc:
                raise BudgetsError(f"{path}: field 'resource.{r.id}.intent.{j}': not a regex: {exc}") from None
    return data


#: budgets.toml of the knowledge folder in force (none: no budgets).
_BUDGETS: KnowledgeFile[Budgets] = KnowledgeFile("budgets.toml", _load, absent=Budgets)


def load_budgets() -> Budgets:
    """knowledge/budgets.toml of the knowledge folder in force. Raises ``BudgetsError`` (one line) for a
    malformed file."""
    return _BUDGETS()


def budget_of(kind: str, name: str) -> Budget | None:
    """The budget entry of a setting (``name`` in the spelling budgets.toml uses), or None."""
    return next((b for b in load_budgets().budget if b.kind == kind and b.name == name), None)


def overridden(baseline: Baseline, canonical: Callable[[str], str]) -> set[str]:
    """The flags whose value no longer sizes a resource because ``baseline`` sets a budget for it
    (budgets.toml ``overrides``: an explicit ``--kv-cache-memory-bytes`` makes vLLM ignore
    ``--gpu-memory-utilization``, its ``--help``, 0.32.0). ``canonical`` maps a flag as the baseline
    spells it to the host's canonical name."""
    out: set[str] = set()
    for b in load_budgets().budget:
        name = b.name
        held = baseline.env.get(name) if b.kind == "env" else next(
            (v for n, v in baseline.flags.items() if canonical(n) == name), None)
        if held is not None and held is not False:
            out.update(b.overrides)
    return out


def bounded_on_purpose(case: Case, budget: Budget) -> str | None:
    """The words of the case's description saying the user bounded ``budget``'s resource on purpose ("to
    save memory"), or None. Only a budget the case itself sets counts: the words are about the user's own
    setting."""
    if case.baseline.value(budget.kind, budget.name) is None:
        return None
    resource = load_budgets().resource_of(budget)
    if resource is None:
        return None
    for p in resource.intent_patterns:
        if m := p.search(case.description or ""):
            return m.group(0)
    return None


def _number(value: object) -> float | None:
    try:
        return float(str(value).strip())
    except (TypeError, ValueError):
        return None


def budget_bytes(budget: Budget, value: object) -> float | None:
    """A budget's value in bytes (``4096``, ``1G`` = 2**30 for unit bytes; ``4`` = 4 GiB for unit GiB),
    or None when it is no number."""
    text = str(value).strip()
    if budget.unit == "GiB":
        n = _number(text)
        return n * GIB if n is not None else None
    for suffix, mult in _SUFFIXES:
        if text.endswith(suffix):
            n = _number(text[:-1])
            return n * mult if n is not None else None
    return _number(text)


def _tokens(resource: Resource, baseline: Baseline, checkpoint: Mapping[str, str]) -> tuple[float | None, str]:
    """The length of one request: the first of ``resource.tokens`` the baseline sets or config.json gives."""
    for key in resource.tokens:
        raw = baseline.flags.get(key) if key.startswith("-") else checkpoint.get(key)
        if (n := _number(raw)) and n > 0:
            return n, f"{key} {n:g}"
    return None, "no request length (" + ", ".join(resource.tokens) + ")"


def need_bytes(budget: Budget, facts: Mapping[str, str], baseline: Baseline,
               checkpoint: Mapping[str, str]) -> tuple[float | None, str]:
    """Bytes of ``budget``'s resource one request needs, with how that was found: the engine's own figure
    (the resource's ``stated`` fact, in GiB, when the error states a non-zero one), else tokens a request
    x bytes a token from config.json (``kv_bytes_per_token``). (None, why) when neither is known."""
    resource = load_budgets().resource_of(budget)
    if resource is None:
        return None, f"{budget.resource} is no resource of budgets.toml"
    stated = _number(facts.get(resource.stated)) if resource.stated else None
    if stated:
        return stated * GIB, f"the error states {stated:g} GiB is needed"
    per_token, how = kv_bytes_per_token(checkpoint, resource.dtype_bytes)
    tokens, where = _tokens(resource, baseline, checkpoint)
    if per_token is None or tokens is None:
        return None, how if per_token is None else where
    need = per_token * tokens
    return need, f"{how} x {where} tokens = {_size(need)}"


def doubled(value: object) -> tuple[str | None, str]:
    """A short pool of whole slots (unit ``count``) the engine states no need for: twice its size, with how
    that was found; (None, why) when ``value`` is no positive whole number."""
    n = _number(value)
    if n is None or n < 1 or n != int(n):
        return None, f"{value} is no slot count"
    return str(int(n) * 2), f"the engine states no figure; twice the user's {int(n)} slots"


def raised_value(budget: Budget, need: float) -> str:
    """The budget to set for a need of ``need`` bytes: the need times the resource's ``margin``, rounded up
    to a power of two and written as the setting takes it (``1M`` for a flag in bytes; whole GiB for a
    GiB setting, at least 1)."""
    resource = load_budgets().resource_of(budget)
    target = need * (resource.margin if resource else 1.0)
    if budget.unit == "GiB":
        return str(max(1, math.ceil(target / GIB)))
    size = 2 ** max(10, math.ceil(math.log2(max(target, 1.0))))
    return next(f"{size // mult}{suffix}" for suffix, mult in _SUFFIXES if size % mult == 0 and size >= mult)


def _size(n: float) -> str:
    """Bytes in words: ``256 KiB``, ``1.5 GiB``."""
    for suffix, mult in _SUFFIXES:
        if n >= mult:
            return f"{n / mult:.3g} {suffix}iB"
    return f"{n:g} bytes"


def removes_budget_on_purpose(case: Case, kind: str, name: str, after: object) -> str | None:
    """The description's words, when removing the setting (``after`` None) takes away a budget the user
    set on purpose (``bounded_on_purpose``): such a removal changes the deployment (the engine then sizes
    the resource itself), so it is a workaround at best, never the fix. None otherwise."""
    if after is not None:
        return None
    budget = budget_of(kind, name)
    return bounded_on_purpose(case, budget) if budget is not None else None
