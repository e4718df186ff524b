"""Dependency direction (DESIGN.md): ``agent`` and ``tools`` never import ``lab``; the lab imports only
the standard library and itself (it is copied to remote hosts). Checked on the source (AST), so an
import hidden in a function body or done through importlib is caught too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in a file: import/from statements, importlib.import_module("x")
    and __import__("x") with a literal name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("package", ["agent", "tools"])
def test_agent_and_tools_never_import_the_lab(package: str) -> None:
    assert _files(package), f"no modules found under {package}/"
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in _files(package)
        for line, module in _imported_modules(path)
        if module == "lab" or module.startswith("lab.")
    ]
    assert not offenders, (
        "planner/tool modules must reach the lab only through commands and HTTP:\n" + "\n".join(offenders)
    )


def test_the_lab_imports_only_the_standard_library_and_itself() -> None:
    offenders = []
    for path in _files("lab"):
        for line, module in _imported_modules(path):
            top = module.split(".")[0]
            if top != "lab" and top not in sys.stdlib_module_names and top != "__future__":
                offenders.append(f"{path.relative_to(REPO)}:{line}: {module}")
    assert not offenders, "\n".join(offenders)


def test_the_scan_sees_hidden_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "import importlib\n"
        "def f():\n"
        "    from lab.world import load_world\n"
        "    return importlib.import_module('lab.rules'), __import__('lab')\n"
    )
    assert [m for _, m in _imported_modules(sample)] == ["importlib", "lab.world", "lab.rules", "lab"]
