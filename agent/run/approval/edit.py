"""A person's edit of a proposed experiment: its text read into one change (``parse_edit``) and the
experiment it asks for, checked like any planner proposal (``apply_edit``)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import Literal

from agent.domain.models import (
    Change,
    Experiment,
    FlagValue,
    Hypothesis,
    Prediction,
    value_key,
)
from agent.planning.guard import GuardError, check_experiment
from agent.planning.view import PlannerView
from tools.flags import FlagCatalog, FlagError

#: An environment-variable assignment in an edit: upper-case names only, so that ``kv-cache-dtype=bf16``
#: or ``kv_cache_dtype=bf16`` read as flags.
_ENV_ASSIGN = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$")
_FLAG_ASSIGN = re.compile(r"^(?P<name>[a-z][a-z0-9_-]*)=(?P<value>.*)$")


class EditError(ValueError):
    """An edit that cannot run; the message says why in one line and how to say it instead."""


def _show(v: FlagValue) -> str:
    return "(unset)" if v is None else ("(on)" if v is True else str(v))


#: ``--flag={"k": "v"}``, ``flag={"k": "v"}`` or ``--flag {"k": "v"}``: a JSON object or array as one flag's value, as a shell
#: passes ``--set '--json-model-override-args={"a": 1}'`` or a person types it at the prompt.
_JSON_SETTING = re.compile(
    r"^\s*(?P<name>(?:--)?[A-Za-z0-9][\w-]*)(?:=|\s+)(?P<value>[\[{].*?)\s*$", re.DOTALL
)


def parse_edit(
    items: Sequence[str], *, current: Change | None, flags: FlagCatalog | None
) -> tuple[Literal["flag", "env"], str, FlagValue]:
    """Read an edit's text into ``(kind, name, value)``; ``value`` ``None`` removes the flag/variable.

    Accepts ``--flag VALUE``, ``--flag=VALUE``, a bare ``--switch``, ``flag-name=VALUE``, ``NAME=VALUE``
    (upper-case: an environment variable) and, when ``current`` is given, a bare ``VALUE`` for the
    proposed variable. Raises EditError when the text holds anything but exactly one change.
    """
    changes = _read_changes(_edit_tokens(items), current=current, flags=flags)
    if len(changes) != 1:
        named = ", ".join(name for _, name, _ in changes)
        raise EditError(
            f"an experiment changes exactly one variable; this edit changes {len(changes)} ({named}). "
            "Give one change, e.g. --attention-backend triton or NCCL_P2P_DISABLE=1"
        )
    return changes[0]


def _edit_tokens(items: Sequence[str]) -> list[str]:
    """The words of an edit, split as a shell would; a JSON value stays one word. Raises EditError when
    a quote is unbalanced or nothing is given."""
    tokens: list[str] = []
    for item in items:
        if m := _JSON_SETTING.match(item):  # JSON keeps its quotes and spaces: no shell-style split
            tokens.append(f"{m['name']}={m['value']}")
            continue
        try:
            tokens += shlex.split(item)
        except ValueError as exc:
            raise EditError(f"cannot read {item!r}: {exc}") from None
    if not tokens:
        raise EditError("empty edit: give one change, e.g. --attention-backend triton or NCCL_P2P_DISABLE=1")
    return tokens


def _takes_value(flags: FlagCatalog | None, name: str) -> bool | None:
    """Whether the host's flag ``name`` takes a value (None: unknown)."""
    if flags is None:
        return None
    try:
        return flags.resolve(name).takes_value
    except FlagError:
        return None


def _read_changes(
    tokens: list[str], *, current: Change | None, flags: FlagCatalog | None
) -> list[tuple[Literal["flag", "env"], str, FlagValue]]:
    """Every change the words of an edit name (see ``parse_edit``). Raises EditError on a word that is none."""
    changes: list[tuple[Literal["flag", "env"], str, FlagValue]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-"):
            name, eq, value = tok.partition("=")
            if eq:
                changes.append(("flag", name, value if value != "" else None))
            else:
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                if (
                    _takes_value(flags, name) is not False
                    and nxt is not None
                    and not nxt.startswith("-")
                    and not _ENV_ASSIGN.match(nxt)
                ):
                    changes.append(("flag", name, nxt))
                    i += 1
                else:
                    changes.append(("flag", name, True))
        elif m := _ENV_ASSIGN.match(tok):
            changes.append(("env", m["name"], m["value"] if m["value"] != "" else None))
        elif m := _FLAG_ASSIGN.match(tok):
            changes.append(("flag", m["name"], m["value"] if m["value"] != "" else None))
        elif len(tokens) == 1 and current is not None and not tok.startswith("="):
            changes.append((current.kind, current.name, tok))
        else:
            raise EditError(f"{tok!r}: expected --flag VALUE, --flag=VALUE or NAME=VALUE")
        i += 1
    return changes


def apply_edit(
    exp: Experiment,
    items: Sequence[str],
    *,
    view: PlannerView,
    flags: FlagCatalog | None,
    hypotheses: Sequence[Hypothesis],
    predict: Callable[[Hypothesis, Change | None], str],
    by: str = "user",
) -> Experiment:
    """The experiment a person's edit of ``exp`` asks for: the same baseline, one different change.

    The change is normalised through the host's flag catalog (canonical name, legal value) and the new
    experiment passes ``check_experiment`` like any planner proposal; each open hypothesis's prediction
    is recomputed with ``predict``. Raises EditError (one line) when it cannot run.
    """
    if exp.purpose != "test" or exp.change is None:
        raise EditError(
            f"a {exp.purpose} run changes nothing, so there is no change to edit; approve, reject or stop it"
        )
    kind, name, value = parse_edit(items, current=exp.change, flags=flags)
    if kind == "flag":
        try:
            if value is None:
                canon, after = (flags.resolve(name).name if flags else name), None
            else:
                canon, after = flags.validate(name, value) if flags else (name, value)
        except FlagError as exc:
            raise EditError(str(exc)) from None
    else:
        canon, after = name, value
    if not isinstance(after, str | bool | type(None)):
        after = str(after)
    before = exp.baseline.value(kind, canon)
    if (before is None and after is None) or (
        before is not None and after is not None and value_key(before) == value_key(after)
    ):
        raise EditError(f"{canon} is already {_show(before)} in the baseline; an edit must change it")
    change = Change(kind=kind, name=canon, before=before, after=after)
    live = [h for h in hypotheses if h.status in ("open", "supported")]
    new = Experiment(
        id=Experiment.make_id(exp.baseline, change, "test"),
        purpose="test",
        baseline=exp.baseline,
        change=change,
        predictions=[
            Prediction.model_validate({"hypothesis_id": h.id, "expect": predict(h, change)}) for h in live
        ],
        rationale=f"edited by {by}: proposed {exp.change.describe()}, runs {change.describe()} instead",
        cost_estimate_s=exp.cost_estimate_s,
        proposed_by=by,
    )
    try:
        check_experiment(new, view=view, flags=flags)
    except GuardError as exc:
        raise EditError(str(exc)) from None
    return new
