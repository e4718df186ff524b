"""The rule engine of the lab: evaluation context, conditions, templates, auto-resolution, faults.

Everything here is pure (no I/O, no sleeping) so the bench and the tests can ask "what would this
command line do in this world?" without starting a process (`plan_launch`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lab import expr
from lab.world import SITE_DIR
from lab.world_types import (
    TEMPLATE_RE,
    Condition,
    Fault,
    FlagDef,
    LineSpec,
    ResolveRule,
    VersionDef,
    World,
    WorldError,
    package_key,
)


class Context:
    """Values visible to conditions and templates.

    Bare keys and `args.<dest>` are the effective server arguments (after auto-resolution so far);
    `user.<dest>` is what the command line set explicitly (None if not given); `hw.<key>`,
    `model.<key>`, `env.<NAME>` and `mem.<key>` come from the world, the process environment and the
    memory model. Missing keys read as None.
    """

    def __init__(
        self,
        world: World,
        args: dict[str, Any],
        user: dict[str, Any],
        env: Mapping[str, str],
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.world = world
        self.args = args
        self.user = user
        self.env = env
        self.hw = world.hardware.context()
        self.mem: dict[str, Any] = {}
        self.extra: dict[str, Any] = {"version": world.version.version, "site": SITE_DIR, **(extra or {})}

    def get(self, key: str) -> Any:
        prefix, _, name = key.partition(".")
        if not name:
            if key in self.args:
                return self.args[key]
            if key in self.mem:
                return self.mem[key]
            return self.extra.get(key)
        if prefix == "args":
            return self.args.get(name)
        if prefix == "user":
            return self.user.get(name)
        if prefix == "hw":
            return self.hw.get(name)
        if prefix == "model":
            return self.world.model.fields.get(name)
        if prefix == "env":
            return self.env.get(name)
        if prefix == "mem":
            return self.mem.get(name)
        if prefix == "pkg":
            return self.world.packages.get(package_key(name))
        return self.extra.get(key)


# -------------------------------------------------------------------------------------- conditions


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _equal(actual: Any, expected: Any) -> bool:
    if actual is None or expected is None:
        return actual is None and expected is None
    if isinstance(actual, bool) or isinstance(expected, bool):
        if isinstance(actual, bool) and isinstance(expected, bool):
            return actual == expected
        return str(actual).lower() == str(expected).lower()
    a, b = _as_number(actual), _as_number(expected)
    if a is not None and b is not None:
        return a == b
    return str(actual) == str(expected)


def _clause_holds(actual: Any, op: str, operand: Any) -> bool:
    if op == "eq":
        return _equal(actual, operand)
    if op == "ne":
        return not _equal(actual, operand)
    if op == "in":
        return any(_equal(actual, item) for item in operand)
    if op == "not_in":
        return not any(_equal(actual, item) for item in operand)
    if op in ("gt", "ge", "lt", "le"):
        a = _as_number(actual)
        if a is None:
            return False
        b = float(operand)
        return {"gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}[op]
    if op in ("contains", "not_contains"):
        if isinstance(actual, list | tuple):
            found = any(_equal(item, operand) for item in actual)
        elif isinstance(actual, str):
            found = str(operand) in actual
        else:
            found = False
        return found if op == "contains" else not found
    if op == "is_set":
        return (actual is not None) == bool(operand)
    if op == "matches":
        return actual is not None and re.search(str(operand), str(actual)) is not None
    if op.startswith("version_"):
        if actual is None:
            return False
        a, b = version_key(str(actual)), version_key(str(operand))
        return {"version_lt": a < b, "version_le": a <= b, "version_gt": a > b, "version_ge": a >= b}[op]
    raise WorldError(f"unknown operator {op!r}")


def version_key(text: str) -> tuple[Any, ...]:
    """An order for release strings (PEP 440 in the shapes packages use): `0.6.3` < `0.6.3.post1`,
    `0.7.0rc1` < `0.7.0`, `2.9.1+cu128` == `2.9.1` (the local part is ignored), `1.10` > `1.9`."""
    base = text.strip().lower().split("+", 1)[0].lstrip("v")
    m = re.match(r"^(\d+(?:\.\d+)*)(?:[.-]?(dev|a|alpha|b|beta|rc|c|post)[.-]?(\d*))?", base)
    if not m:
        return ((), 0, 0, base)
    release = tuple(int(x) for x in m.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    rank = {"dev": -4, "a": -3, "alpha": -3, "b": -2, "beta": -2, "rc": -1, "c": -1, "post": 1}.get(m.group(2) or "", 0)
    return (release, rank, int(m.group(3) or 0), "")


def holds(condition: Condition | None, ctx: Context) -> bool:
    """True if any alternative has all its clauses true (an empty condition always holds)."""
    if condition is None:
        return False
    if not condition.alternatives:
        return True
    return any(
        all(
            expr.holds(c.operand, ctx.get) if c.op == "expr" else _clause_holds(ctx.get(c.key), c.op, c.operand)
            for c in alt
        )
        for alt in condition.alternatives
    )


def applies(when: Condition, unless: Condition | None, ctx: Context) -> bool:
    return holds(when, ctx) and not (unless is not None and holds(unless, ctx))


# --------------------------------------------------------------------------------------- templates


def render_value(value: Any) -> str:
    """Format a value the way a Python f-string in SGLang would."""
    return str(value)


def render(text: str, ctx: Context) -> str:
    """Substitute `{key}` / `{key:spec}` from the context; `{{` and `}}` are literal braces."""

    def sub(m: re.Match[str]) -> str:
        whole = m.group(0)
        if whole == "{{":
            return "{"
        if whole == "}}":
            return "}"
        value = ctx.get(m.group(1))
        spec = m.group(2)
        if spec:
            try:
                return format(value, spec)
            except (TypeError, ValueError):
                return render_value(value)
        return render_value(value)

    return TEMPLATE_RE.sub(sub, text)


def render_set_value(value: Any, ctx: Context) -> Any:
    """A `set` value: a string that is exactly `{key}` copies the value with its type."""
    if isinstance(value, str):
        m = TEMPLATE_RE.fullmatch(value)
        if m and m.group(1):
            return ctx.get(m.group(1))
        return render(value, ctx)
    return value


# ----------------------------------------------------------------------------------------- argparse


def build_parser(version: VersionDef, *, suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """An argparse parser with the version's flags (prefix matching on, like SGLang's).

    With `suppress_defaults` the namespace only holds the options given on the command line.
    """
    parser = argparse.ArgumentParser(
        allow_abbrev=True,
        argument_default=argparse.SUPPRESS if suppress_defaults else None,
    )
    for flag in version.flags:
        _add_flag(parser, flag, suppress_defaults)
    parser.add_argument("--version", action="version", version=version.version)
    return parser


_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float}


def _deprecated(base: type[argparse.Action], message: str) -> type[argparse.Action]:
    """`base` (argparse's own action) that first warns, like SGLang 0.5.23's `DeprecatedStoreTrueAction`
    (arg_groups/argparse_actions.py; argparse runs before logging is configured, so the warning reaches
    stderr as a bare line). `{option}` in `message` becomes the spelling used."""

    class Deprecated(base):  # type: ignore[valid-type,misc]
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            sys.stderr.write(message.replace("{option}", option_string or self.option_strings[0]) + "\n")
            super().__call__(parser, namespace, values, option_string)

    return Deprecated


class _Removed(argparse.Action):
    """A retired flag: `parser.error(message)` (exit 2), like 0.5.23's `DeprecatedAction(error_message=)`."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, message: str, nargs: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)
        self.message = message

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(self.message)


class _Warn(argparse.Action):
    """SGLang's `DeprecatedAction`: takes no value, stores nothing (the default stays); the warning is
    added by `_deprecated`."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        return None


_ACTIONS: dict[str, Any] = {
    "store_true": "store_true",
    "store_false": "store_false",
    "boolean_optional": argparse.BooleanOptionalAction,
    "store_const": "store_const",
    "warn": _Warn,
}


def _add_flag(parser: argparse.ArgumentParser, flag: FlagDef, suppress: bool) -> None:
    kwargs: dict[str, Any] = {"dest": flag.dest, "help": flag.help or None}
    if flag.action in _ACTIONS:
        kwargs["action"] = _ACTIONS[flag.action]
        if flag.action == "store_const":
            kwargs["const"] = flag.const
    else:
        kwargs["type"] = _TYPES[flag.type]
        if flag.choices is not None:
            kwargs["choices"] = list(flag.choices)
        if flag.nargs is not None:
            kwargs["nargs"] = flag.nargs
        if flag.metavar:
            kwargs["metavar"] = flag.metavar
        if flag.required:
            kwargs["required"] = True
    if suppress:
        kwargs["default"] = argparse.SUPPRESS
        kwargs.pop("required", None)
    else:
        kwargs["default"] = flag.default
    if flag.removed is not None:
        nargs = 0 if flag.action in _ACTIONS else flag.nargs
        parser.add_argument(
            flag.name, *flag.aliases, action=_Removed, message=flag.removed, nargs=nargs,
            dest=flag.dest, default=kwargs["default"], help=kwargs["help"],
        )
        return
    if flag.deprecated is not None:
        base = {
            "store": argparse._StoreAction,
            "store_true": argparse._StoreTrueAction,
            "store_false": argparse._StoreFalseAction,
            "boolean_optional": argparse.BooleanOptionalAction,
            "store_const": argparse._StoreConstAction,
            "warn": _Warn,
        }[flag.action]
        kwargs["action"] = _deprecated(base, flag.deprecated)
    parser.add_argument(flag.name, *flag.aliases, **kwargs)


def role_view(version: VersionDef, args: dict[str, Any]) -> dict[str, Any]:
    """`args` plus the lab's role names (`cuda_graph_max_bs`, `disable_cuda_graph`, ...) filled from the
    dest that plays each role in this release (lab/release.py), where the role is not a dest itself."""
    out = dict(args)
    dests = set(version.dests)
    for role, dest in version.release.roles.items():
        if role not in dests:
            out[role] = args.get(dest)
    return out


def parse_command_line(version: VersionDef, argv: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse argv like SGLang 0.5.x would: (all args with defaults, only the explicitly given ones).

    Exits with status 2 on unknown flags or invalid values (argparse behaviour), 0 on --help/--version.
    """
    ns = build_parser(version).parse_args(list(argv))
    explicit = build_parser(version, suppress_defaults=True).parse_args(list(argv))
    return dict(vars(ns)), dict(vars(explicit))


# ------------------------------------------------------------------------------------- resolution


@dataclass
class Resolution:
    """The effective configuration after auto-resolution, with the log records it printed."""

    args: dict[str, Any]
    user: dict[str, Any]
    logs: list[tuple[LineSpec, str]] = field(default_factory=list)  # (spec, rendered text)
    applied: list[str] = field(default_factory=list)  # rule names, for debugging and tests


def _apply_rule(rule: ResolveRule, ctx: Context, res: Resolution) -> None:
    if not applies(rule.when, rule.unless, ctx):
        return
    for key, value in rule.set.items():
        ctx.args[key] = render_set_value(value, ctx)
    for key, value in rule.set_default.items():
        if ctx.args.get(key) is None:
            ctx.args[key] = render_set_value(value, ctx)
    for spec in rule.log:
        res.logs.append((spec, render(spec.text, ctx)))
    res.applied.append(rule.name)


def resolve(
    world: World, args: dict[str, Any], user: dict[str, Any], env: Mapping[str, str]
) -> tuple[Resolution, Context]:
    """Run the world's rules, then the version's default rules, in file order."""
    res = Resolution(args=dict(args), user={d: user.get(d) for d in world.version.dests})
    ctx = Context(world, res.args, res.user, env)
    for rule in (*world.resolve, *world.version.resolve):
        _apply_rule(rule, ctx, res)
    res.args.update(role_view(world.version, res.args))
    return res, ctx


def matching_faults(
    world: World, ctx: Context, *, effect: str | None = None, at: str | None = None
) -> list[Fault]:
    """Fault rules whose conditions hold now, in file order, optionally filtered by effect / point."""
    out = []
    for fault in world.faults:
        if effect is not None and fault.effect != effect:
            continue
        if at is not None and fault.at != at:
            continue
        if applies(fault.when, fault.unless, ctx):
            out.append(fault)
    return out


@dataclass
class LaunchPlan:
    """What a command line does in a world, without running it (for tests and the bench)."""

    effective: dict[str, Any]
    resolution_log: list[str]
    faults: list[Fault]  # every fault whose condition holds on the final effective config

    @property
    def fatal(self) -> Fault | None:
        """The first fault that stops the run, by stage order."""
        order = [
            "launch_error",
            "load_error",
            "capture_error",
            "hang",
            "crash_at_first_decode",
            "wrong_output",
        ]
        stage = {
            "args": 0,
            "init": 1,
            "weights": 2,
            "kv_pool": 3,
            "capture": 4,
            "piecewise_capture": 4,
            "draft_worker": 4.5,
            "warmup": 5,
            "first_decode": 6,
            "shutdown": 10,
        }
        fatal = [f for f in self.faults if f.effect in order and f.at != "shutdown"]
        if self.effective.get("disable_cuda_graph"):
            fatal = [f for f in fatal if f.at not in ("capture", "piecewise_capture")]
        if self.effective.get("skip_server_warmup"):  # no warm-up request is sent
            fatal = [f for f in fatal if not (f.at == "warmup" and f.effect == "crash_at_first_decode")]
        fatal.sort(key=lambda f: stage.get(f.at, 9))  # stable: file order wins within a stage
        return fatal[0] if fatal else None


def plan_launch(world: World, argv: Sequence[str], env: Mapping[str, str] | None = None) -> LaunchPlan:
    """Resolve a command line against a world and list the faults that would apply.

    The memory model (OOM, no room for the KV cache) is not evaluated here; the server does that.
    Request-time keys take a default request's values: `sampled` is true (a request that names no
    temperature samples, SGLang's default temperature 1.0).
    """
    args, user = parse_command_line(world.version, argv)
    res, ctx = resolve(world, args, user, env or {})
    ctx.extra.setdefault("sampled", True)
    return LaunchPlan(
        effective=dict(res.args),
        resolution_log=[text for _, text in res.logs],
        faults=matching_faults(world, ctx),
    )
