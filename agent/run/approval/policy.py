"""When to ask: the approval modes and the risky-change rules of ``knowledge/risky.toml``."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.domain.models import (
    Change,
    Experiment,
)
from tools.knowledge_files import check_keys

ApprovalMode = Literal["each", "risky", "auto"]


APPROVAL_MODES: tuple[str, ...] = get_args(ApprovalMode)


class RiskRulesError(ValueError):
    """A risky-changes file that cannot be used; one line naming the file, the entry and the field."""


class RiskRule(BaseModel):
    """One ``[[risky]]`` entry of ``knowledge/risky.toml`` (field meanings at the top of that file)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    why: str
    kind: Literal["flag", "env"] | None = None
    name: str | None = None
    name_matches: str | None = None
    above: float | None = None
    below: float | None = None
    value_matches: str | None = None
    unset: bool | None = None

    def matches(self, change: Change) -> bool:
        """Whether every condition this rule gives holds for ``change``."""
        if self.kind is not None and change.kind != self.kind:
            return False
        if self.name is not None and change.name != self.name:
            return False
        if self.name_matches is not None and not re.search(self.name_matches, change.name):
            return False
        if self.unset is not None and (change.after is None) != self.unset:
            return False
        text = "" if change.after is None else str(change.after)
        if self.value_matches is not None and not re.search(self.value_matches, text):
            return False
        if self.above is not None or self.below is not None:
            try:
                number = float(text)
            except ValueError:
                return False
            if self.above is not None and not number > self.above:
                return False
            if self.below is not None and not number < self.below:
                return False
        return True


def default_risk_rules_path() -> Path:
    """``risky.toml`` of the knowledge folder in force (``agent.domain.knowledge_dir``; default the repository's)."""
    from agent.domain.knowledge_dir import knowledge_file

    return knowledge_file("risky.toml")


_RULES_CACHE: dict[Path, list[RiskRule]] = {}


def load_risk_rules(path: Path | None = None) -> list[RiskRule]:
    """The risky-change rules (cached per path). Raises RiskRulesError naming the file, entry and field."""
    path = path or default_risk_rules_path()
    if path in _RULES_CACHE:
        return _RULES_CACHE[path]
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RiskRulesError(f"{path}: {exc}") from None
    check_keys(path, data, ["risky"], RiskRulesError)
    rules = []
    for i, raw in enumerate(data.get("risky", [])):
        try:
            rule = RiskRule.model_validate(raw)
            for pattern in (rule.name_matches, rule.value_matches):
                if pattern is not None:
                    re.compile(pattern)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise RiskRulesError(
                f"{path}: risky #{i + 1} ({raw.get('id', '?')}): field '{field}': {err['msg']}"
            ) from None
        except re.error as exc:
            raise RiskRulesError(f"{path}: risky #{i + 1} ({raw.get('id', '?')}): bad regex: {exc}") from None
        rules.append(rule)
    _RULES_CACHE[path] = rules
    return rules


def risky_reasons(exp: Experiment, rules: Sequence[RiskRule]) -> list[str]:
    """``"id: why"`` of every rule the experiment's change matches (none for baseline/confirm runs)."""
    if exp.change is None:
        return []
    return [f"{r.id}: {r.why}" for r in rules if r.matches(exp.change)]


def must_ask(mode: str | None, risky: Sequence[str]) -> bool:
    """Whether a person must answer before this experiment runs in approval ``mode``."""
    if mode == "auto":
        return False
    if mode == "risky":
        return bool(risky)
    return True
