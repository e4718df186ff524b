"""The installed source files the reader reads on the host: parsed and cached within a budget, the
package each belongs to, and where a name they use is defined (their own top level or their imports)."""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Callable
from typing import Any

from tools.engines import ENGINE_NAMES, get_engine
from tools.source_guards.reads import PACKAGES
from tools.source_guards.syntax import ParsedModule, annotation_kind, call_name, const_value, is_type_checking


class SourceFiles:
    """Source files read through `read` (a host's `read_text`: path -> text, or None when missing), each
    parsed once. `max_files`: files read on the host at most (each is one SFTP round trip over SSH);
    `files_read` counts them; `unparsable` holds the paths that did not parse."""

    def __init__(self, read: Callable[[str], str | None], *, max_files: int = 24) -> None:
        self._read = read
        self.max_files = max_files
        self.files_read = 0
        self._modules: dict[str, ParsedModule | None] = {}
        self.unparsable: set[str] = set()
        self._envs_decl: dict[str, dict[str, tuple[str, Any]]] = {}

    def module(self, path: str) -> ParsedModule | None:
        """The parsed file at `path` on the host (cached); None if missing, unparsable or over budget."""
        if path in self._modules:
            return self._modules[path]
        if self.files_read >= self.max_files:
            return None
        self.files_read += 1
        text = self._read(path)
        mod: ParsedModule | None = None
        if text is not None:
            try:
                mod = ParsedModule.parse(path, text)
            except (SyntaxError, ValueError, RecursionError):
                self.unparsable.add(path)
        self._modules[path] = mod
        return mod

    def package_root(self, path: str, top: str | None = None) -> str | None:
        """The directory that holds the top-level package of `path` (site-packages, a source checkout)."""
        parts = path.split("/")
        names = (top,) if top else PACKAGES
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] in names:
                return "/".join(parts[:i]) or "/"
        return None

    def _import_paths(self, mod: ParsedModule, module: str, level: int) -> list[str]:
        """Candidate files of an imported module (``x.py`` then ``x/__init__.py``)."""
        if level:
            base = posixpath.dirname(mod.path)
            for _ in range(level - 1):
                base = posixpath.dirname(base)
        else:
            top = module.split(".")[0]
            base = self.package_root(mod.path, top) or self.package_root(mod.path) or ""
            if not base:
                return []
        rel = module.replace(".", "/") if module else ""
        stem = posixpath.join(base, rel) if rel else base
        return [stem + ".py", posixpath.join(stem, "__init__.py")]

    def _imported_module(self, mod: ParsedModule, module: str, level: int) -> ParsedModule | None:
        for p in self._import_paths(mod, module, level):
            m = self.module(p)
            if m is not None:
                return m
        return None

    def lookup(
        self, mod: ParsedModule, name: str, hops: int = 3
    ) -> tuple[ParsedModule, list[ast.expr], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None] | None:
        """Where `name` is defined for module `mod`: its own top level, or through its imports."""
        values, definition = mod.top_level(name)
        if values or definition:
            return mod, values, definition
        if hops <= 0:
            return None
        if name in mod.imports:
            module, orig, level = mod.imports[name]
            target = self._imported_module(mod, module, level)
            if target is None:
                # ``from pkg import submodule``: not a name in pkg/__init__.py
                return None
            return self.lookup(target, orig, hops - 1)
        for module, level in mod.star_imports:
            target = self._imported_module(mod, module, level)
            if target is not None:
                found = self.lookup(target, name, hops - 1)
                if found is not None:
                    return found
        return None

    def _envs_declarations(self, mod: ParsedModule) -> dict[str, tuple[str, Any]]:
        """``NAME -> (EnvBool/EnvInt/..., default)`` from the engine's environment declarations beside
        `mod` (`tools.engines`: SGLang's ``srt/environ.py`` class ``Envs``, vLLM's ``vllm/envs.py`` typed
        names under ``if TYPE_CHECKING:``, vLLM 0.32.0)."""
        path = None
        for name in ENGINE_NAMES:
            envs_file = get_engine(name).data.envs_file
            root = self.package_root(mod.path, envs_file.split("/")[0])
            if root is not None:
                path = posixpath.join(root, envs_file)
                break
        if path is None:
            return {}
        if path in self._envs_decl:
            return self._envs_decl[path]
        out: dict[str, tuple[str, Any]] = {}
        env_mod = self.module(path)
        if env_mod is not None:
            for node in env_mod.tree.body:
                if isinstance(node, ast.If) and is_type_checking(node.test):
                    for stmt in node.body:
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                            kind = "Env" + annotation_kind(stmt.annotation)
                            try:
                                declared = const_value(stmt.value) if stmt.value is not None else None
                            except ValueError:
                                declared = None
                            out[stmt.target.id] = (kind, declared)
                if isinstance(node, ast.ClassDef) and node.name == "Envs":
                    for stmt in node.body:
                        if (
                            isinstance(stmt, ast.Assign)
                            and len(stmt.targets) == 1
                            and isinstance(stmt.targets[0], ast.Name)
                            and isinstance(stmt.value, ast.Call)
                        ):
                            kind = call_name(stmt.value.func) or ""
                            default: Any = None
                            if stmt.value.args:
                                try:
                                    default = const_value(stmt.value.args[0])
                                except ValueError:
                                    default = None
                            out[stmt.targets[0].id] = (kind, default)
        self._envs_decl[path] = out
        return out

    def envs_type(self, mod: ParsedModule, name: str) -> str:
        """How the engine declares environment variable ``name`` (beside `mod`): ``bool``, ``int`` or ``raw``."""
        kind, _default = self._envs_declarations(mod).get(name, ("", None))
        if "Bool" in kind:
            return "bool"
        if "Int" in kind or "Float" in kind:
            return "int"
        return "raw"
