"""Relations between settings in fault conditions: a small expression language, safely evaluated.

    when = { expr = "cuda_graph_max_bs_prefill > model.context_length" }
    when = { expr = "speculative_num_draft_tokens != speculative_num_steps + 1", speculative_algorithm = "EAGLE" }

An expression is parsed with `ast.parse(mode="eval")` and only these nodes are allowed: names and dotted
names (context keys: `tp_size`, `model.context_length`, `hw.memory_gb`, `env.NAME`, `pkg.torch`), numbers,
strings, booleans, `None`, lists/tuples of those, `+ - * / // % **`, unary `- not`, `and or`, comparisons
(`== != < <= > >= in not in`, chained), `a if c else b`, and calls of `min`, `max`, `abs`, `int`,
`float`, `len`. Nothing is ever passed to `eval`. An unset value (None) in arithmetic or an ordering
makes the whole expression false (a relation about a setting nobody set does not hold). Standard library only.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "len": len}


class ExprError(ValueError):
    """An expression that is not in the allowed language; the message names what is not allowed."""


class _Unset(Exception):
    """An unset value reached arithmetic or an ordering: the expression does not hold."""


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def parse(text: str) -> ast.Expression:
    """Parse and check an expression. Raises ExprError (syntax, or a construct outside the language)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not an expression: {exc.msg}") from None
    _check(tree.body)
    return tree


def keys(tree: ast.Expression) -> list[str]:
    """The context keys an expression reads (dotted names), for validating them when a world loads."""
    found: list[str] = []

    def walk(node: ast.AST) -> None:
        name = _dotted(node)
        if name is not None and not (isinstance(node, ast.Name) and node.id in ("True", "False", "None")):
            found.append(name)
            return
        if isinstance(node, ast.Call):
            for arg in node.args:
                walk(arg)
            return
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree.body)
    return found


def _check(node: ast.AST) -> None:
    name = _dotted(node)
    if name is not None:
        if any(part.startswith("_") for part in name.split(".")):
            raise ExprError(f"name {name!r} is not allowed (no part may start with '_')")
        return
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, int | float | str | bool | type(None)):
            raise ExprError(f"constant {node.value!r} is not allowed")
        return
    if isinstance(node, ast.List | ast.Tuple):
        for elt in node.elts:
            _check(elt)
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check(node.left)
        _check(node.right)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not | ast.UAdd):
        _check(node.operand)
        return
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value)
        return
    if isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        _check(node.left)
        for comp in node.comparators:
            _check(comp)
        return
    if isinstance(node, ast.IfExp):
        for part in (node.test, node.body, node.orelse):
            _check(part)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        for arg in node.args:
            _check(arg)
        return
    raise ExprError(f"{type(node).__name__} is not allowed (only names, numbers, strings, arithmetic, comparisons, "
                    f"and/or/not, if-else and {', '.join(_FUNCS)})")


def _number(value: Any) -> Any:
    """Numbers stay numbers; numeric strings (flag values are often strings) become numbers."""
    if value is None:
        raise _Unset
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return value
    return value


def _eval(node: ast.AST, get: Callable[[str], Any]) -> Any:
    if isinstance(node, ast.Name) and node.id in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.id]
    name = _dotted(node)
    if name is not None:
        return get(name)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, get) for e in node.elts]
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_number(_eval(node.left, get)), _number(_eval(node.right, get)))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, get)
        if isinstance(node.op, ast.Not):
            return not value
        return -_number(value) if isinstance(node.op, ast.USub) else _number(value)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, get) for v in node.values)
        return any(_eval(v, get) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, get)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, get)
            if isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE):
                a, b = _number(left), _number(right)
            elif isinstance(op, ast.Eq | ast.NotEq) and None not in (left, right):
                a, b = _number(left), _number(right)
            else:
                a, b = left, right
            if not _CMPOPS[type(op)](a, b):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, get) if _eval(node.test, get) else _eval(node.orelse, get)
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _FUNCS[node.func.id](*(_number(_eval(a, get)) for a in node.args))
    raise ExprError(f"{type(node).__name__} is not allowed")


def holds(tree: ast.Expression, get: Callable[[str], Any]) -> bool:
    """Whether the expression is true with context values from `get(key)`; false when an unset value
    reaches arithmetic or an ordering, or the values do not fit the operation (a string times a list)."""
    try:
        return bool(_eval(tree.body, get))
    except (_Unset, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return False
