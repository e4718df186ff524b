"""Following the names in a condition to what they read: local and module-level assignments, ``self.x``
attributes, calls and imports, down to environment variables and server arguments."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal

from tools.flags import FlagCatalog, FlagSpec
from tools.source_guards.files import SourceFiles
from tools.source_guards.flips import Want
from tools.source_guards.guards import Scope
from tools.source_guards.reads import (
    ENV_NAME,
    PASS_FUNCS,
    PASS_METHODS,
    ROOT_CALLS,
    ROOT_NAMES,
    ROOT_WRAPPERS,
    env_read,
    is_environ,
    refs_variable,
)
from tools.source_guards.syntax import (
    ParsedModule,
    assigned,
    call_name,
    const_value,
    function_statements,
    is_literal,
    nested_def,
)

_CMP = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!=", "is": "is", "is not": "is not"}


@dataclass
class Found:
    """An environment variable or server-argument dest a condition depends on, with what it was on the
    failing path and the hops to it; `env_type` how the variable is read (raw | bool | int | str | set)."""
    kind: Literal["env", "flag"]
    name: str
    want: Want
    via: list[str]
    env_type: str = "raw"  # raw | bool | int | str | set


class Resolver:
    """Resolves an expression to the environment variables and server arguments it depends on, across at
    most `max_hops` assignments/calls/imports (`files` reads the files on the way). `catalog`: the host's
    flag catalog; its dests (``attention_backend`` for ``--attention-backend``) are `dests`; without it,
    any public attribute of the server arguments counts as one."""

    def __init__(self, files: SourceFiles, catalog: FlagCatalog | None = None, *, max_hops: int = 4) -> None:
        self.files = files
        self.catalog = catalog
        self.max_hops = max_hops
        self.dests: dict[str, FlagSpec] = {}
        if catalog is not None:
            for spec in catalog.flags.values():
                for opt in spec.option_strings:
                    if opt.startswith("--") and not opt.startswith("--no-"):
                        self.dests.setdefault(opt[2:].replace("-", "_"), spec)

    def resolve(
        self, expr: ast.expr, want: Want, scope: Scope, depth: int, via: list[str]
    ) -> list[Found]:
        """Environment variables and server arguments `expr` depends on, with what they were."""
        if depth > self.max_hops:
            return []
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return self.resolve(
                expr.operand, want.negated() if want.op is None else Want(None), scope, depth, via
            )
        if isinstance(expr, ast.BoolOp):
            # ``a or b`` that held (``a and b`` that did not): flipping one operand may not be enough.
            either = isinstance(expr.op, ast.Or) == bool(want.pol) and want.op is None and len(expr.values) > 1
            part = want.unsure() if either else want
            return [f for v in expr.values for f in self.resolve(v, part, scope, depth, via)]
        if isinstance(expr, ast.Compare):
            return self._compare(expr, want, scope, depth, via)
        if isinstance(expr, ast.IfExp):
            return [
                *self.resolve(expr.test, Want(None), scope, depth, via),
                *self.resolve(expr.body, want, scope, depth, via),
                *self.resolve(expr.orelse, want, scope, depth, via),
            ]
        env = env_read(expr)
        if env is not None:
            name, env_type = env
            if env_type == "envs":
                env_type = self.files.envs_type(scope.module, name)
            elif env_type == "envs_is_set":
                env_type = "set"
            return [Found("env", name, want, via, env_type)]
        dest = self._server_arg(expr, scope, depth)
        if dest is not None:
            return [Found("flag", dest, want, via)]
        if isinstance(expr, ast.Call):
            return self._call(expr, want, scope, depth, via)
        if isinstance(expr, ast.Name):
            return self._name(expr.id, want, scope, depth, via)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            if expr.value.id in ("self", "cls"):
                return self._self_attr(expr.attr, want, scope, depth, via)
            typed = self._annotated_class(expr.value.id, scope)
            if typed is not None:
                return self._self_attr(expr.attr, want, typed, depth, via)
        return []

    def _annotated_class(self, name: str, scope: Scope) -> Scope | None:
        """For a parameter annotated with a class (``scheduler: Scheduler``), that class's scope, so
        ``scheduler.x`` reads like ``self.x`` inside it."""
        fn = scope.func
        if fn is None:
            return None
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        arg = next((a for a in args if a.arg == name), None)
        ann = arg.annotation if arg is not None else None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            cls_name = ann.value.strip("'\"")
        elif isinstance(ann, ast.Name):
            cls_name = ann.id
        else:
            return None
        found = self.files.lookup(scope.module, cls_name)
        if found is None or not isinstance(found[2], ast.ClassDef):
            return None
        return Scope(found[0], None, found[2], found[2].lineno)

    def _compare(
        self, expr: ast.Compare, want: Want, scope: Scope, depth: int, via: list[str]
    ) -> list[Found]:
        if len(expr.ops) != 1 or want.op is not None:
            sides = [expr.left, *expr.comparators]
            return [f for s in sides for f in self.resolve(s, Want(None), scope, depth, via)]
        op = _CMP.get(type(expr.ops[0]))
        left, right = expr.left, expr.comparators[0]
        if op is None:
            return []
        # ``"X" in os.environ``: whether a variable is set.
        if op in ("in", "not in") and isinstance(left, ast.Constant) and isinstance(left.value, str):
            if ENV_NAME.match(left.value) and is_environ(right):
                pol = want.pol if op == "in" else (None if want.pol is None else not want.pol)
                return [Found("env", left.value, Want(pol, sure=want.sure), via, "set")]
            return []
        for var, other, var_op in ((left, right, op), (right, left, _MIRROR.get(op))):
            if var_op is None or is_literal(var):
                continue
            try:
                const = const_value(other)
                symbolic = False
            except ValueError:
                if refs_variable(other):
                    continue
                const, symbolic = scope.module.segment(other, 60), True
            return self.resolve(var, Want(want.pol, var_op, const, symbolic, want.sure), scope, depth, via)
        return [
            *self.resolve(left, Want(None), scope, depth, via),
            *self.resolve(right, Want(None), scope, depth, via),
        ]

    def _server_arg(self, expr: ast.expr, scope: Scope, depth: int) -> str | None:
        """The server-argument field `expr` reads (``server_args.x``, ``global_server_args_dict["x"]``,
        ``get_exec().kernel.x``, ``getattr(server_args, "x")``), or None."""
        if isinstance(expr, ast.Attribute):
            if self._root(expr.value, scope, depth) and self._is_dest(expr.attr, final=True):
                return expr.attr
            return None
        if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant):
            key = expr.slice.value
            if isinstance(key, str) and self._root(expr.value, scope, depth):
                return key
            return None
        if isinstance(expr, ast.Call) and expr.args:
            name = call_name(expr.func)
            first = expr.args[0]
            if name == "getattr" and len(expr.args) >= 2 and isinstance(expr.args[1], ast.Constant):
                key = expr.args[1].value
                if isinstance(key, str) and self._root(first, scope, depth):
                    return key
            if (
                name == "get"
                and isinstance(expr.func, ast.Attribute)
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and self._root(expr.func.value, scope, depth)
            ):
                return first.value
        return None

    def _is_dest(self, attr: str, *, final: bool) -> bool:
        if self.catalog is None:
            return final and not attr.startswith("_")
        return attr in self.dests

    def _root(self, expr: ast.expr, scope: Scope, depth: int) -> bool:
        """Whether `expr` is the server arguments or one of their namespaces."""
        if depth > self.max_hops:
            return False
        if isinstance(expr, ast.Name):
            if expr.id in ROOT_NAMES:
                return True
            values = self._name_values(expr.id, scope)
            return any(self._root(v, s, depth + 1) for v, s, _ in values)
        if isinstance(expr, ast.Attribute):
            if expr.attr in ROOT_NAMES:
                return True
            # A namespace of the arguments (``get_exec().kernel``), not a field itself.
            return not self._is_dest(expr.attr, final=False) and self._root(expr.value, scope, depth + 1)
        if isinstance(expr, ast.Call):
            name = call_name(expr.func)
            if name in ROOT_CALLS:
                return True
            if name in ROOT_WRAPPERS and expr.args:
                return self._root(expr.args[0], scope, depth + 1)
        return False

    def _name_values(self, name: str, scope: Scope) -> list[tuple[ast.expr, Scope, str]]:
        """What a plain name may hold at `scope.line`: the latest local assignments before the line,
        else module-level ones (this module's or an imported module's). Each with its scope and a
        ``file:line: text`` hop description."""
        out: list[tuple[ast.expr, Scope, str]] = []
        fn = scope.func
        if fn is not None:
            params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
            local: list[tuple[int, ast.expr]] = []
            for stmt in function_statements(fn):
                for value in assigned(stmt, name):
                    local.append((stmt.lineno, value))
            before = [lv for lv in local if lv[0] < scope.line] or local
            if before:
                before.sort(key=lambda lv: lv[0])
                for lineno, value in before[-2:]:
                    out.append((value, scope, self._hop(scope.module, lineno)))
                return out
            if name in params:
                return []
        found = self.files.lookup(scope.module, name)
        if found is None:
            return []
        mod, values, _definition = found
        for value in values[-2:]:
            holder = mod.parents.get(value)
            lineno = getattr(holder, "lineno", value.lineno)
            out.append((value, Scope(mod, None, None, lineno), self._hop(mod, lineno)))
        return out

    def _hop(self, mod: ParsedModule, line: int) -> str:
        return f"{mod.path}:{line}: {mod.line_text(line)[:160]}"

    def _name(self, name: str, want: Want, scope: Scope, depth: int, via: list[str]) -> list[Found]:
        out: list[Found] = []
        for value, vscope, hop in self._name_values(name, scope):
            out += self.resolve(value, want, vscope, depth + 1, [*via, hop])
        return out

    def _self_attr(self, attr: str, want: Want, scope: Scope, depth: int, via: list[str]) -> list[Found]:
        """``self.attr``: every ``self.attr = ...`` in the enclosing class's methods."""
        cls = scope.cls
        if cls is None:
            return []
        out: list[Found] = []
        for item in cls.body:
            if isinstance(item, ast.Assign | ast.AnnAssign):
                for value in assigned(item, attr):
                    out += self.resolve(
                        value,
                        want,
                        Scope(scope.module, None, cls, item.lineno),
                        depth + 1,
                        [*via, self._hop(scope.module, item.lineno)],
                    )
            if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for stmt in function_statements(item):
                if isinstance(stmt, ast.Assign):
                    targets = stmt.targets
                elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                    targets = [stmt.target]
                else:
                    continue
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and t.attr == attr
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        and stmt.value is not None
                    ):
                        out += self.resolve(
                            stmt.value,
                            want,
                            Scope(scope.module, item, cls, stmt.lineno),
                            depth + 1,
                            [*via, self._hop(scope.module, stmt.lineno)],
                        )
        return out

    def _call(self, call: ast.Call, want: Want, scope: Scope, depth: int, via: list[str]) -> list[Found]:
        func = call.func
        name = call_name(func)
        if name in PASS_FUNCS and call.args and isinstance(func, ast.Name):
            return self.resolve(call.args[0], want, scope, depth, via)
        if isinstance(func, ast.Attribute) and name in PASS_METHODS and not call.args:
            return self.resolve(func.value, want, scope, depth, via)
        target: tuple[ParsedModule, ast.AST, ast.ClassDef | None] | None = None
        if isinstance(func, ast.Name):
            nested = nested_def(scope.func, func.id)
            if nested is not None:
                target = (scope.module, nested, scope.cls)
            else:
                found = self.files.lookup(scope.module, func.id)
                if found is not None and isinstance(found[2], ast.FunctionDef | ast.AsyncFunctionDef):
                    target = (found[0], found[2], None)
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
        ):
            if scope.cls is not None:
                method = next(
                    (
                        m
                        for m in scope.cls.body
                        if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name == func.attr
                    ),
                    None,
                )
                if method is not None:
                    target = (scope.module, method, scope.cls)
        if target is None:
            return []
        mod, fn, cls = target
        assert isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        hop = [*via, self._hop(mod, fn.lineno)]
        out: list[Found] = []
        for stmt in function_statements(fn):
            inner = Scope(mod, fn, cls, stmt.lineno)
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                out += self.resolve(stmt.value, want, inner, depth + 1, hop)
            elif isinstance(stmt, ast.If) and any(
                isinstance(s, ast.Return | ast.Raise) for s in ast.walk(stmt)
            ):
                out += self.resolve(stmt.test, Want(None), inner, depth + 1, hop)
        return out
