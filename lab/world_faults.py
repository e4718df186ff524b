"""Parsing the rule tables of world and version files: `[[resolve]]` (auto-resolution) and `[[fault]]`, with
their conditions (`when`/`unless`), `set` tables and log-line templates, each key checked against the
flags of the imitated SGLang version; each mistake is a one-line `WorldError` naming the file and field.

Standard library only: the lab is also installed on remote hosts.
"""

from __future__ import annotations

import re
from typing import Any

from lab import expr
from lab.world_tables import FileContext, nth
from lab.world_types import (
    DEATH_SIGNALS,
    DEFAULT_EXIT_CODES,
    EFFECT_POINTS,
    EFFECTS,
    EXTRA_KEYS,
    HW_KEYS,
    KEY_RE,
    LEVELS,
    MEM_KEYS,
    OPERATORS,
    POINT_ALIASES,
    SOURCES,
    TEMPLATE_RE,
    Clause,
    Condition,
    Fault,
    LineSpec,
    Model,
    ResolveRule,
    VersionDef,
)

#: The fields a `[[fault]]` table may have (lab/README.md).
FAULT_FIELDS = frozenset(
    "id when unless effect at progress lines exit_code output source level probability per_request per_minute "
    "signal text delay_s accuracy drop".split()
)


class KeyCheck:
    """Validates context keys used in conditions, `set` tables and templates."""

    def __init__(self, version: VersionDef, model: Model | None) -> None:
        self.dests = set(version.dests)
        self.model_keys = set(model.fields) if model is not None else None

    def check(self, key: str, *, settable: bool = False) -> str | None:
        """Return an error message, or None if the key is valid."""
        m = KEY_RE.match(key)
        if not m:
            return f"invalid key {key!r}"
        prefix, name = m.group(1), m.group(2)
        if settable:
            if prefix not in (None, "args") or name not in self.dests:
                return f"{key!r} is not a flag dest of this SGLang version"
            return None
        if prefix in (None, "args", "user"):
            if name in self.dests or (prefix is None and name in EXTRA_KEYS):
                return None
            return f"unknown key {key!r} (not a flag dest of this SGLang version)"
        if prefix == "hw" and name not in HW_KEYS:
            return f"unknown hardware key {key!r} (allowed: {', '.join(HW_KEYS)})"
        if prefix == "mem" and name not in MEM_KEYS:
            return f"unknown memory key {key!r} (allowed: {', '.join(MEM_KEYS)})"
        if prefix == "model" and self.model_keys is not None and name not in self.model_keys:
            return f"unknown model key {key!r} (not in [model])"
        return None


def parse_condition(ctx: FileContext, keys: KeyCheck, raw: Any, where: str) -> Condition:
    """A `when`/`unless` condition: a table of key = condition, or an array of such tables (any of them).
    Raises WorldError."""
    if raw is None:
        return Condition()
    alternatives_raw = raw if isinstance(raw, list) else [raw]
    alternatives: list[tuple[Clause, ...]] = []
    for j, alt in enumerate(alternatives_raw):
        alt_where = nth(where, j) if isinstance(raw, list) else where
        if not isinstance(alt, dict):
            raise ctx.fail(alt_where, "expected a table of key = condition")
        clauses: list[Clause] = []
        for key, spec in alt.items():
            if key == "expr":  # a relation between settings (lab/expr.py)
                if not isinstance(spec, str):
                    raise ctx.fail(f"{alt_where}.expr", "expected an expression string")
                try:
                    tree = expr.parse(spec)
                except expr.ExprError as exc:
                    raise ctx.fail(f"{alt_where}.expr", f"{spec!r}: {exc}") from None
                for name in expr.keys(tree):
                    err = keys.check(name)
                    if err:
                        raise ctx.fail(f"{alt_where}.expr", f"{spec!r}: {err}")
                clauses.append(Clause("expr", "expr", tree))
                continue
            err = keys.check(key)
            if err:
                raise ctx.fail(alt_where, err)
            if isinstance(spec, dict):
                if not spec:
                    raise ctx.fail(f"{alt_where}.{key}", "empty operator table")
                for op, operand in spec.items():
                    if op not in OPERATORS:
                        raise ctx.fail(
                            f"{alt_where}.{key}", f"unknown operator {op!r} (allowed: {', '.join(OPERATORS)})"
                        )
                    if op in ("in", "not_in") and not isinstance(operand, list):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", "expected a list")
                    if op in ("gt", "ge", "lt", "le") and (
                        isinstance(operand, bool) or not isinstance(operand, int | float)
                    ):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", "expected a number")
                    if op.startswith("version_") and not isinstance(operand, str | int | float):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", 'expected a version such as "0.6.3"')
                    if op == "is_set" and not isinstance(operand, bool):
                        raise ctx.fail(f"{alt_where}.{key}.{op}", "expected true or false")
                    if op == "matches":
                        try:
                            re.compile(str(operand))
                        except re.error as exc:
                            raise ctx.fail(f"{alt_where}.{key}.{op}", f"bad regex: {exc}") from None
                    clauses.append(Clause(key, op, operand))
            elif isinstance(spec, list):
                clauses.append(Clause(key, "in", spec))
            else:
                clauses.append(Clause(key, "eq", spec))
        alternatives.append(tuple(clauses))
    return Condition(tuple(alternatives))


def check_template(ctx: FileContext, keys: KeyCheck, text: str, where: str) -> None:
    """Check a log-line template's `{key}` fields and braces. Raises WorldError naming the field."""
    for m in TEMPLATE_RE.finditer(text):
        if m.group(1) is None:
            continue
        err = keys.check(m.group(1))
        if err:
            raise ctx.fail(where, f"template: {err} (write {{{{ and }}}} for literal braces)")
    stripped = TEMPLATE_RE.sub("", text)
    if "{" in stripped or "}" in stripped:
        raise ctx.fail(where, "template has an unmatched brace (write {{ and }} for literal braces)")


def parse_lines(
    ctx: FileContext, keys: KeyCheck, raw: Any, where: str, *, source: str, level: str
) -> tuple[LineSpec, ...]:
    """A rule's log lines: strings or tables {text, source, level, ranks}. Raises WorldError."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ctx.fail(where, "expected a list of strings or tables {text, source, level, ranks}")
    out: list[LineSpec] = []
    for i, item in enumerate(raw):
        w = nth(where, i)
        if isinstance(item, str):
            spec = LineSpec(text=item, source=source, level=level)
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            spec = LineSpec(
                text=item["text"],
                source=str(item.get("source", source)),
                level=str(item.get("level", level)),
                ranks=str(item.get("ranks", "0")),
            )
        else:
            raise ctx.fail(w, "expected a string or a table with a 'text' string")
        if spec.source not in SOURCES:
            raise ctx.fail(w, f"source must be one of {', '.join(SOURCES)}")
        if spec.level not in LEVELS:
            raise ctx.fail(w, f"level must be one of {', '.join(LEVELS)}")
        if spec.ranks != "all" and not re.fullmatch(r"\d+(,\d+)*", spec.ranks):
            raise ctx.fail(w, "ranks must be 'all' or a comma list of rank numbers ('0', '1,3')")
        check_template(ctx, keys, spec.text, w)
        out.append(spec)
    return tuple(out)


def parse_set(ctx: FileContext, keys: KeyCheck, raw: Any, where: str) -> dict[str, Any]:
    """A `set`/`set_default` table of flag dest = value (templates allowed). Raises WorldError."""
    if raw is None:
        return {}
    data = ctx.table(raw, where)
    out: dict[str, Any] = {}
    for key, value in data.items():
        err = keys.check(key, settable=True)
        if err:
            raise ctx.fail(where, err)
        if isinstance(value, str):
            check_template(ctx, keys, value, f"{where}.{key}")
        out[key.removeprefix("args.")] = value
    return out


def parse_resolve(ctx: FileContext, keys: KeyCheck, item: dict[str, Any], where: str) -> ResolveRule:
    """One `[[resolve]]` auto-resolution rule. Raises WorldError naming the field."""
    allowed = {"name", "when", "unless", "set", "set_default", "log", "level", "source"}
    for key in item:
        if key not in allowed:
            raise ctx.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    name = str(item.get("name", where))
    level = str(item.get("level", "warning"))
    source = str(item.get("source", "server"))
    return ResolveRule(
        name=name,
        when=parse_condition(ctx, keys, item.get("when"), f"{where}.when"),
        unless=parse_condition(ctx, keys, item["unless"], f"{where}.unless") if "unless" in item else None,
        set=parse_set(ctx, keys, item.get("set"), f"{where}.set"),
        set_default=parse_set(ctx, keys, item.get("set_default"), f"{where}.set_default"),
        log=parse_lines(ctx, keys, item.get("log"), f"{where}.log", source=source, level=level),
    )


def parse_fault(ctx: FileContext, keys: KeyCheck, item: dict[str, Any], where: str) -> Fault:
    """One `[[fault]]` rule (effect, where and when it fires, its lines and chances). Raises WorldError."""
    for key in item:
        if key not in FAULT_FIELDS:
            raise ctx.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(FAULT_FIELDS))})")
    effect = item.get("effect")
    if effect not in EFFECTS:
        raise ctx.fail(f"{where}.effect", f"expected one of {', '.join(EFFECTS)}")
    points = EFFECT_POINTS[effect]
    at = str(item.get("at", points[0]))
    if at not in points:
        raise ctx.fail(f"{where}.at", f"effect {effect} can happen at: {', '.join(points)}")
    at = POINT_ALIASES.get(at, at)
    progress = item.get("progress", 0.0)
    if isinstance(progress, bool) or not isinstance(progress, int | float) or not 0.0 <= progress <= 1.0:
        raise ctx.fail(f"{where}.progress", "expected a number between 0 and 1")
    exit_code = item.get("exit_code", DEFAULT_EXIT_CODES.get(effect))
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise ctx.fail(f"{where}.exit_code", "expected an integer (-9 = killed by SIGKILL)")
    probability = _chance(ctx, item, where, "probability", "the chance per launch")
    death = item.get("signal", "SIGABRT")
    if death not in DEATH_SIGNALS or ("signal" in item and effect != "signal_death"):
        raise ctx.fail(f"{where}.signal", f"a signal_death fault's signal: one of {', '.join(DEATH_SIGNALS)}")
    per_request, per_minute = _serving_rates(ctx, item, where, at)
    text = item.get("text")
    if text is not None and (effect != "wrong_output" or not isinstance(text, str) or not text):
        raise ctx.fail(f"{where}.text", "only a wrong_output fault has a text (a non-empty string)")
    delay_s = item.get("delay_s", 0.0)
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float) or delay_s < 0:
        raise ctx.fail(f"{where}.delay_s", "expected simulated seconds >= 0")
    accuracy, drop = _graded(ctx, item, where, effect)
    default_level = "warning" if effect in ("warning", "wrong_output", "degrade_accuracy") else "error"
    default_source = "raw" if effect in ("launch_error", "signal_death") else "scheduler"
    return Fault(
        id=str(item.get("id", where)),
        when=parse_condition(ctx, keys, item.get("when"), f"{where}.when"),
        unless=parse_condition(ctx, keys, item["unless"], f"{where}.unless") if "unless" in item else None,
        effect=effect,
        at=at,
        progress=float(progress),
        lines=parse_lines(
            ctx,
            keys,
            item.get("lines"),
            f"{where}.lines",
            source=str(item.get("source", default_source)),
            level=str(item.get("level", default_level)),
        ),
        exit_code=exit_code,
        output=str(item.get("output", "!")),
        probability=float(probability),
        per_request=float(per_request),
        per_minute=float(per_minute),
        signal=str(death),
        text=text,
        delay_s=float(delay_s),
        accuracy=accuracy,
        drop=drop,
    )


def _graded(ctx: FileContext, item: dict[str, Any], where: str, effect: str) -> tuple[float | None, float]:
    """A degrade_accuracy fault's `accuracy` (the share of graded questions answered right under it) or
    `drop` (how far below the model's healthy accuracy); exactly one of them, each in [0, 1], and only on
    that effect. Raises WorldError naming the field."""
    given = [key for key in ("accuracy", "drop") if key in item]
    if effect != "degrade_accuracy":
        if given:
            raise ctx.fail(f"{where}.{given[0]}", "only a degrade_accuracy fault has an accuracy or a drop")
        return None, 0.0
    if len(given) != 1:
        raise ctx.fail(where, "a degrade_accuracy fault needs exactly one of accuracy (e.g. 0.87) or drop (e.g. 0.06)")
    value = item[given[0]]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ctx.fail(f"{where}.{given[0]}", "expected a number between 0 and 1 (a share of questions)")
    return (float(value), 0.0) if given[0] == "accuracy" else (None, float(value))


def _chance(ctx: FileContext, item: dict[str, Any], where: str, key: str, per: str) -> float:
    """`item[key]` (default 1) as a probability in (0, 1]; `per` says what it is the chance of."""
    value = item.get(key, 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value <= 1.0:
        raise ctx.fail(f"{where}.{key}", f"expected a number in (0, 1]: {per}")
    return float(value)


def _serving_rates(ctx: FileContext, item: dict[str, Any], where: str, at: str) -> tuple[float, float]:
    """A fault's `per_request` chance and `per_minute` rate (events per simulated minute of serving);
    either only for a serving fault."""
    per_request = _chance(ctx, item, where, "per_request", "the chance per request")
    per_minute = item.get("per_minute", 0.0)
    if isinstance(per_minute, bool) or not isinstance(per_minute, int | float) or per_minute < 0:
        raise ctx.fail(f"{where}.per_minute", "expected events per simulated minute of serving (>= 0)")
    if (per_request < 1.0 or per_minute > 0) and at != "first_decode":
        raise ctx.fail(f"{where}.at", "per_request and per_minute apply to serving faults (at = first_decode / serving)")
    return per_request, float(per_minute)
