"""Parsed source files and the ``ast`` questions the reader asks of them (assignments, statements of a
function, literal values, exits)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ParsedModule:
    """One source file: its text, tree and lines, each node's parent, and its ``from`` imports (name ->
    (module, original name, level)) and star imports."""
    path: str
    text: str
    tree: ast.Module
    lines: list[str]
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    imports: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # name -> (module, orig, level)
    star_imports: list[tuple[str, int]] = field(default_factory=list)

    @classmethod
    def parse(cls, path: str, text: str) -> ParsedModule:
        """Parse `text` (the file at `path`); raises SyntaxError / ValueError / RecursionError as ``ast.parse`` does."""
        tree = ast.parse(text, filename=path)
        mod = cls(path=path, text=text, tree=tree, lines=text.splitlines())
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                mod.parents[child] = node
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        mod.star_imports.append((node.module or "", node.level))
                    else:
                        mod.imports.setdefault(
                            alias.asname or alias.name, (node.module or "", alias.name, node.level)
                        )
        return mod

    def segment(self, node: ast.AST, limit: int = 200) -> str:
        """The source of `node` on one line, cut to `limit` characters."""
        text = ast.get_source_segment(self.text, node) or ""
        flat = " ".join(text.split())
        return flat if len(flat) <= limit else flat[: limit - 3] + "..."

    def line_text(self, line: int) -> str:
        """The stripped text of 1-based `line`, ``""`` outside the file."""
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def top_level(
        self, name: str
    ) -> tuple[list[ast.expr], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None]:
        """Module-level assignments of `name` (any depth of module-level if/try) and its def, if any."""
        values: list[ast.expr] = []
        definition: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None = None
        for stmt in module_statements(self.tree.body):
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and stmt.name == name:
                definition = stmt
            values += assigned(stmt, name)
        return values, definition


def module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, descending into if/try/with blocks (not into defs)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody"):
                yield from module_statements(getattr(stmt, block, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                yield from module_statements(handler.body)


def assigned(stmt: ast.stmt, name: str) -> list[ast.expr]:
    """The values `stmt` assigns to the plain name `name`."""
    if isinstance(stmt, ast.Assign):
        return [stmt.value for t in stmt.targets if isinstance(t, ast.Name) and t.id == name]
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
        t = stmt.target
        return [stmt.value] if isinstance(t, ast.Name) and t.id == name else []
    return []


def function_statements(fn: ast.AST) -> Iterator[ast.stmt]:
    """Statements of a function body at any depth, not entering nested defs or classes."""
    stack = list(reversed(getattr(fn, "body", [])))
    while stack:
        stmt = stack.pop()
        yield stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                stack.append(child)
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                stack.extend(reversed(child.body))


def call_name(func: ast.expr) -> str | None:
    """The called name: ``f`` of ``f(...)`` or ``x.f(...)``; None otherwise."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def const_value(node: ast.expr) -> Any:
    """A literal's value (tuples/lists/sets of literals as a tuple); raises ValueError otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return tuple(const_value(e) for e in node.elts)
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        if isinstance(value, int | float):
            return -value
    raise ValueError("not a literal")


def is_literal(node: ast.expr) -> bool:
    """Whether `node` is a literal (``const_value`` reads it)."""
    try:
        const_value(node)
    except ValueError:
        return False
    return True


def ends_in_exit(block: list[ast.stmt]) -> bool:
    """Whether a block ends in ``return``, ``raise``, ``continue`` or ``break``."""
    return bool(block) and isinstance(block[-1], ast.Return | ast.Raise | ast.Continue | ast.Break)


def nested_def(fn: ast.AST | None, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function `name` defined inside `fn`, if any."""
    if fn is None:
        return None
    for stmt in function_statements(fn):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
            return stmt
    return None


def is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def annotation_kind(ann: ast.expr) -> str:
    """``Bool`` / ``Int`` / ``Str`` for a declared type (``bool``, ``int | None``, ``float``, ``str``)."""
    text = ast.unparse(ann)
    if re.search(r"\bbool\b", text):
        return "Bool"
    if re.search(r"\b(int|float)\b", text):
        return "Int"
    return "Str"
