"""Dependency direction (docs/ARCHITECTURE.md): ``agent`` and ``tools`` never import ``lab``; the lab imports only
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
    """lab/site/ is data, not lab code: a simulated installed tree whose files are read, never imported
    (its ``import sglang...`` lines are what a reader of an installation sees)."""
    offenders = []
    site = REPO / "lab" / "site"
    for path in _files("lab"):
        if site in path.parents:
            continue
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


def _typing_only(tree: ast.Module) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:`` blocks: imports for the type checker, which load nothing."""
    return {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for n in ast.walk(stmt)
    }


def _import_graph(root: Path, packages: list[str], *, runtime_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (anywhere in the file, function bodies included;
    ``from pkg import submodule`` counts as importing the submodule). ``runtime_only``: leave out the
    imports under ``if TYPE_CHECKING:``."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skipped = _typing_only(tree) if runtime_only else set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            graph[module] |= {n for n in names if n in modules and n != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_agent_and_tools_have_no_import_circles() -> None:
    graph = _import_graph(REPO, ["agent", "tools"])
    assert "agent.run.graph" in graph and "tools.ssh" in graph
    circles = _cycles(graph)
    assert not circles, "modules that import each other (directly or round a loop):\n" + "\n".join(
        " <-> ".join(c) + "".join(f"\n    {m} imports {sorted(graph[m] & set(c))}" for m in c) for c in circles
    )


def test_the_circle_check_sees_a_circle_through_a_function_body(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import f\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg import c\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    assert _cycles(_import_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.b", "pkg.c"]]
