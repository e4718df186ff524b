"""The conditions on the path to a failing line: the frame's line located in the file, the statements
around it, and each enclosing or preceding condition with its value on that path."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tools.source_guards.syntax import ParsedModule, call_name, ends_in_exit
from tools.tracebacks import Frame, Traceback


@dataclass
class Scope:
    """Where an expression is read: its module, enclosing function and class, and line."""
    module: ParsedModule
    func: ast.FunctionDef | ast.AsyncFunctionDef | None
    cls: ast.ClassDef | None
    line: int


@dataclass
class Guard:
    """A condition on the path to the failing line: its test, its value on that path (None: not known),
    where it is, and its kind (``if``, ``else``, ``while``, ``early exit``, ``assert``, ``conditional expression``)."""
    test: ast.expr
    pol: bool | None
    scope: Scope
    kind: str


def locate(mod: ParsedModule, frame: Frame) -> int | None:
    """The line of `frame` in `mod`: its own line when the printed source matches (or none was
    printed), else the nearest line with that text inside a function of that name, else anywhere."""
    line = frame.line
    if not frame.code:
        return line if 0 < line <= len(mod.lines) else None
    want = " ".join(frame.code.split())

    def same(n: int) -> bool:
        return 0 < n <= len(mod.lines) and " ".join(mod.lines[n - 1].split()).startswith(want)

    if same(line):
        return line
    hits = [n for n in range(1, len(mod.lines) + 1) if same(n)]
    if not hits:
        return None
    funcs = [
        f
        for f in ast.walk(mod.tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == frame.function
    ]
    inside = [n for n in hits if any(f.lineno <= n <= (f.end_lineno or f.lineno) for f in funcs)]
    # A function renamed since the traceback's release: a line whose text is unique in the file is it.
    pool = inside or (hits if frame.function == "<module>" or not funcs or len(hits) == 1 else [])
    if not pool:
        return None
    return min(pool, key=lambda n: abs(n - line))


def statement_chain(body: list[ast.stmt], line: int) -> list[tuple[ast.stmt, str, list[ast.stmt], int]]:
    """(statement, block name, block, index) from the module down to the innermost statement at `line`."""
    out: list[tuple[ast.stmt, str, list[ast.stmt], int]] = []
    block, name = body, "body"
    while True:
        hit = None
        for i, stmt in enumerate(block):
            if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
                hit = (i, stmt)
                break
        if hit is None:
            return out
        i, stmt = hit
        out.append((stmt, name, block, i))
        nxt: tuple[list[ast.stmt], str] | None = None
        blocks: list[tuple[str, list[ast.stmt]]] = []
        for attr in ("body", "orelse", "finalbody"):
            sub = getattr(stmt, attr, None)
            if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                blocks.append((attr, sub))
        for handler in getattr(stmt, "handlers", []) or []:
            blocks.append(("handler", handler.body))
        for case in getattr(stmt, "cases", []) or []:
            blocks.append(("case", case.body))
        for attr, sub in blocks:
            if sub[0].lineno <= line <= (sub[-1].end_lineno or sub[-1].lineno):
                nxt = (sub, attr)
                break
        if nxt is None:
            return out
        block, name = nxt


def guards_on_path(mod: ParsedModule, line: int, inner: Frame | None, innermost: bool, tb: Traceback) -> list[Guard]:
    """The conditions on the path to `line`, innermost first, each with its value on that path."""
    chain = statement_chain(mod.tree.body, line)
    if not chain:
        return []
    func: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    cls: ast.ClassDef | None = None
    for stmt, *_ in chain:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            func = stmt
        elif isinstance(stmt, ast.ClassDef):
            cls = stmt
    scope = Scope(mod, func, cls, line)
    guards: list[Guard] = []
    target = chain[-1][0]
    if isinstance(target, ast.Assert) and (innermost or (tb.exception or "").endswith("AssertionError")):
        guards.append(Guard(target.test, False, scope, "assert"))
    if innermost or inner is not None:
        called = inner.function if inner is not None else None
        for node in ast.walk(target):
            if isinstance(node, ast.IfExp) and node.lineno <= line <= (node.end_lineno or node.lineno):
                pol: bool | None = None
                if called is not None:
                    in_body = any(
                        isinstance(n, ast.Call) and call_name(n.func) == called for n in ast.walk(node.body)
                    )
                    in_else = any(
                        isinstance(n, ast.Call) and call_name(n.func) == called
                        for n in ast.walk(node.orelse)
                    )
                    pol = True if in_body and not in_else else False if in_else and not in_body else None
                    if pol is None and not innermost:
                        continue
                guards.append(Guard(node.test, pol, scope, "conditional expression"))
    for depth in range(len(chain) - 1, -1, -1):
        stmt, _name, block, index = chain[depth]
        for prev in reversed(block[:index]):
            if isinstance(prev, ast.If) and ends_in_exit(prev.body) and not prev.orelse:
                guards.append(Guard(prev.test, False, scope, "early exit"))
        if depth == 0:
            continue
        parent, *_ = chain[depth - 1]
        if isinstance(parent, ast.If):
            in_body = any(s is stmt for s in parent.body)
            guards.append(Guard(parent.test, in_body, scope, "if" if in_body else "else"))
        elif isinstance(parent, ast.While) and any(s is stmt for s in parent.body):
            guards.append(Guard(parent.test, True, scope, "while"))
    return guards
