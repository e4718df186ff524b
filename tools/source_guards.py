"""Read the installed source at a failure's traceback frames and find what guards the failing line.

When a traceback runs through SGLang or a kernel package's Python code, an engineer opens the installed
file at the failing frame and reads which branch conditions lead there; a condition that reads an
environment variable or a server argument names a one-variable experiment. This module does that
without launching anything:

1. `read_guards` parses the log's tracebacks (`tools.tracebacks`) and takes the innermost frames whose
   files belong to SGLang or a kernel package (`PACKAGES`).
2. Each file is read on the host (`Host.read_text`: this machine or over SSH) and parsed with `ast`. The
   failing line is checked against the source line the traceback printed; when they differ (another
   release's traceback), the nearest line with that text in the same function is used, or the line
   with that text when it is unique in the file (a function renamed since); otherwise the frame is
   reported as ``differs`` and not guessed.
3. The conditions on the path to that line: enclosing ``if``/``elif``/``else`` and ``while``, earlier
   ``if ...: return/raise`` exits of the same blocks, the failing ``assert`` itself, and conditional
   expressions in the failing statement. Each has a polarity: what it evaluated to on the failing path.
4. The names in a condition are resolved across a few hops (`max_hops`) of local and module-level
   assignments, ``self.x`` attributes (also ``p.x`` for a parameter annotated with a class, such as
   ``scheduler: Scheduler``), function and method calls (return values and the conditions guarding
   them) and imports (other files read on the host, within `max_files`), down to
   - environment variables: ``os.getenv("X")``, ``os.environ["X"]`` / ``.get("X")``, ``"X" in
     os.environ``, SGLang's ``envs.X.get()`` / ``.is_set()`` (``srt/environ.py``, whose declaration
     gives the variable's type), and helpers such as ``get_bool_env_var("X")`` / ``get_int_env_var``
     (``srt/utils/common.py``): any call whose name speaks of the environment and whose first argument
     is an upper-case name;
   - server arguments: ``server_args.x``, ``self.server_args.x``, ``global_server_args_dict["x"]``
     (SGLang 0.4-0.5.9), ``get_global_server_args().x`` (0.5.x), the 0.5.23 namespace bags
     ``get_exec().kernel.x``, ``get_schedule().x``, ... (``srt/runtime_context.py``), and
     ``getattr(server_args, "x")``; the field name ``x`` is the argparse dest, turned into a flag
     through the host's ``--help`` catalog.
5. Each such name becomes a `SourceLead`: kind, name, the value that flips the condition where the
   comparison shows it (``== "triton"`` on the failing path: anything else, recorded as ``avoid``;
   ``!= "triton"``: ``triton``; a true boolean: off), the file and line of the condition and its text.

An ``ImportError`` / ``ModuleNotFoundError`` / "could not load ... library" is read as well
(`SourceReading.missing`): the guards of the import line say whether a variable avoids it.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from tools.engines import ENGINE_NAMES, get_engine
from tools.flags import FlagCatalog, FlagSpec
from tools.tracebacks import Frame, MissingImport, Traceback, missing_import, parse_tracebacks

#: Top-level packages whose Python code is read: SGLang and the kernel packages it calls into. A frame
#: in any other file (torch, the standard library) is passed over.
PACKAGES = (
    "sglang",
    "sgl_kernel",
    "flashinfer",
    "deep_gemm",
    "flash_mla",
    "flash_attn",
    "tilelang",
    "triton",
    "aiter",
    "xgrammar",
    "vllm",
)
#: Calls that return the server arguments or one of their namespaces: SGLang 0.5.x
#: ``get_global_server_args()`` (srt/server_args.py), 0.5.23 ``get_server_args()`` and the namespace bag
#: accessors of srt/runtime_context.py.
ROOT_CALLS = frozenset(
    {
        "get_global_server_args",
        "get_server_args",
        "get_exec",
        "get_schedule",
        "get_memory",
        "get_spec",
        "get_model",
        "get_device",
        "get_lora",
        "get_mm",
        "get_disagg",
        "get_serving",
        "get_observability",
    }
)
#: Names that hold the server arguments (a ServerArgs object, or 0.4-0.5.9's global dict).
ROOT_NAMES = frozenset({"server_args", "global_server_args_dict", "global_server_args"})
#: Wrappers that return a view of their argument (0.5.23 arg_groups/model_override_base.py).
ROOT_WRAPPERS = frozenset({"resolving_view"})
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")
_ENVISH_CALL = re.compile(r"(?:^|_)env(?:_|$)|^getenv$|env_var", re.IGNORECASE)
#: Methods that hand on their receiver's value for the purpose of a condition (``.lower()`` of a
#: variable's text, ``.get()`` of an ``envs`` field).
_PASS_METHODS = frozenset({"lower", "upper", "strip", "casefold", "get", "value"})
_PASS_FUNCS = frozenset({"bool", "int", "float", "str"})
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
_NEGATE = {"==": "!=", "!=": "==", "in": "not in", "not in": "in", "is": "is not", "is not": "is"}

LeadValue = str | bool | None


class SourceLead(BaseModel):
    """An environment variable or server argument in a condition on the path to a failing line.

    ``kind``/``name``: ``env`` and the variable's name, or ``flag`` and the canonical flag name from the
    host's ``--help`` (``--attention-backend``; when the catalog has no flag with that dest, the dest
    spelled as a flag and ``known_flag`` False). ``dest`` is the server-argument field.
    ``value``: the value that flips the condition, where it can be read off it (``True`` for a switch
    to turn on); ``unset``: removing the variable or flag flips it; ``avoid``: the value(s) the failing
    path needs, so any other value flips it (``value`` None then). ``polarity``: what the condition
    evaluated to on the failing path (None: not known, e.g. inside a called helper); ``certain``:
    the flip is read exactly and changing this variable alone flips the condition (not one operand of
    an ``or`` that held).
    ``path``/``line``/``condition``: the guard (file on the host, 1-based line, source text);
    ``via``: the hops from the guard to the variable (``file:line: text``); ``frame``: the frame's index
    (0 = innermost frame read), ``function`` its function.
    """

    kind: Literal["env", "flag"]
    name: str
    dest: str | None = None
    known_flag: bool = True
    value: LeadValue = None
    unset: bool = False
    avoid: list[str] = Field(default_factory=list)
    polarity: bool | None = None
    certain: bool = False
    path: str
    line: int
    condition: str
    guard: str = "if"
    via: list[str] = Field(default_factory=list)
    frame: int = 0
    function: str = ""

    def where(self) -> str:
        """``path:line``."""
        return f"{self.path}:{self.line}"

    def flip_text(self) -> str:
        """What flips the condition, for people: ``=0``, ``unset``, ``!= triton``, ``(on)``."""
        if self.unset:
            return "unset"
        if self.value is True:
            return "(on)"
        if self.value is not None:
            return f"={self.value}"
        if self.avoid:
            return "!= " + " / ".join(self.avoid)
        return "changed"


class FrameRead(BaseModel):
    """One frame the reader looked at: where, and what became of it (``read``, ``missing`` on the
    host, ``unparsable``, ``moved`` when the printed source line was found elsewhere, ``differs`` when
    it was not found at all)."""

    path: str
    line: int
    function: str
    status: Literal["read", "moved", "missing", "unparsable", "differs"]
    located: int | None = None


class SourceReading(BaseModel):
    """What reading the installed source at a failure's tracebacks found (no launch).

    ``exception``: the innermost traceback's ``Type: message``; ``leads`` innermost frame first;
    ``missing``: the module/package/library a failed import names; ``files_read``: how many files were
    read on the host.
    """

    exception: str = ""
    frames: list[FrameRead] = Field(default_factory=list)
    leads: list[SourceLead] = Field(default_factory=list)
    missing: MissingImport | None = None
    files_read: int = 0

    def avoidable(self) -> bool:
        """Whether some variable or flag guards the failing line (a lead exists)."""
        return bool(self.leads)


# ---------------------------------------------------------------------------------- parsed modules


@dataclass
class _Module:
    path: str
    text: str
    tree: ast.Module
    lines: list[str]
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    imports: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # name -> (module, orig, level)
    star_imports: list[tuple[str, int]] = field(default_factory=list)

    @classmethod
    def parse(cls, path: str, text: str) -> _Module:
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
        text = ast.get_source_segment(self.text, node) or ""
        flat = " ".join(text.split())
        return flat if len(flat) <= limit else flat[: limit - 3] + "..."

    def line_text(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def top_level(
        self, name: str
    ) -> tuple[list[ast.expr], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None]:
        """Module-level assignments of `name` (any depth of module-level if/try) and its def, if any."""
        values: list[ast.expr] = []
        definition: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None = None
        for stmt in _module_statements(self.tree.body):
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and stmt.name == name:
                definition = stmt
            values += _assigned(stmt, name)
        return values, definition


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, descending into if/try/with blocks (not into defs)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody"):
                yield from _module_statements(getattr(stmt, block, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                yield from _module_statements(handler.body)


def _assigned(stmt: ast.stmt, name: str) -> list[ast.expr]:
    """The values `stmt` assigns to the plain name `name`."""
    if isinstance(stmt, ast.Assign):
        return [stmt.value for t in stmt.targets if isinstance(t, ast.Name) and t.id == name]
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
        t = stmt.target
        return [stmt.value] if isinstance(t, ast.Name) and t.id == name else []
    return []


def _function_statements(fn: ast.AST) -> Iterator[ast.stmt]:
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


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _const(node: ast.expr) -> Any:
    """A literal's value (tuples/lists/sets of literals as a tuple); raises ValueError otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return tuple(_const(e) for e in node.elts)
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        if isinstance(value, int | float):
            return -value
    raise ValueError("not a literal")


def _exits(block: list[ast.stmt]) -> bool:
    return bool(block) and isinstance(block[-1], ast.Return | ast.Raise | ast.Continue | ast.Break)


@dataclass(frozen=True)
class _Want:
    """What a condition (or the part of it being resolved) evaluated to on the failing path.

    ``pol``: True/False/None (unknown). With ``op`` set it is a comparison ``VALUE op const`` that held
    (pol True) or not; without, the value's truth.
    """

    pol: bool | None
    op: str | None = None
    const: Any = None
    symbolic: bool = False
    #: Flipping this part alone surely flips the whole condition (False for one operand of an ``or``
    #: that held, or of an ``and`` that did not).
    sure: bool = True

    def negated(self) -> _Want:
        return _Want(None if self.pol is None else not self.pol, self.op, self.const, self.symbolic, self.sure)

    def unsure(self) -> _Want:
        return _Want(self.pol, self.op, self.const, self.symbolic, False)


@dataclass
class _Scope:
    module: _Module
    func: ast.FunctionDef | ast.AsyncFunctionDef | None
    cls: ast.ClassDef | None
    line: int


@dataclass
class _Guard:
    test: ast.expr
    pol: bool | None
    scope: _Scope
    kind: str


@dataclass
class _Found:
    kind: Literal["env", "flag"]
    name: str
    want: _Want
    via: list[str]
    env_type: str = "raw"  # raw | bool | int | str | set


class SourceReader:
    """Reads installed source files through `read` (a host's `read_text`) and finds guard leads.

    `catalog`: the host's flag catalog (dest -> flag); without it, server-argument dests are spelled as
    flags and marked unknown. `max_files`: files read on the host at most (each is one SFTP round trip
    over SSH); `max_hops`: assignments/calls/imports followed from a condition to a variable.
    """

    def __init__(
        self,
        read: Callable[[str], str | None],
        catalog: FlagCatalog | None = None,
        *,
        max_files: int = 24,
        max_hops: int = 4,
    ) -> None:
        self._read = read
        self.catalog = catalog
        self.max_files = max_files
        self.max_hops = max_hops
        self.files_read = 0
        self._modules: dict[str, _Module | None] = {}
        self._unparsable: set[str] = set()
        self._envs_decl: dict[str, dict[str, tuple[str, Any]]] = {}
        self._dests: dict[str, FlagSpec] = {}
        if catalog is not None:
            for spec in catalog.flags.values():
                for opt in spec.option_strings:
                    if opt.startswith("--") and not opt.startswith("--no-"):
                        self._dests.setdefault(opt[2:].replace("-", "_"), spec)

    # ------------------------------------------------------------------------------------ files

    def module(self, path: str) -> _Module | None:
        """The parsed file at `path` on the host (cached); None if missing, unparsable or over budget."""
        if path in self._modules:
            return self._modules[path]
        if self.files_read >= self.max_files:
            return None
        self.files_read += 1
        text = self._read(path)
        mod: _Module | None = None
        if text is not None:
            try:
                mod = _Module.parse(path, text)
            except (SyntaxError, ValueError, RecursionError):
                self._unparsable.add(path)
        self._modules[path] = mod
        return mod

    def _package_root(self, path: str, top: str | None = None) -> str | None:
        """The directory that holds the top-level package of `path` (site-packages, a source checkout)."""
        parts = path.split("/")
        names = (top,) if top else PACKAGES
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] in names:
                return "/".join(parts[:i]) or "/"
        return None

    def _import_paths(self, mod: _Module, module: str, level: int) -> list[str]:
        """Candidate files of an imported module (``x.py`` then ``x/__init__.py``)."""
        if level:
            base = posixpath.dirname(mod.path)
            for _ in range(level - 1):
                base = posixpath.dirname(base)
        else:
            top = module.split(".")[0]
            base = self._package_root(mod.path, top) or self._package_root(mod.path) or ""
            if not base:
                return []
        rel = module.replace(".", "/") if module else ""
        stem = posixpath.join(base, rel) if rel else base
        return [stem + ".py", posixpath.join(stem, "__init__.py")]

    def _imported_module(self, mod: _Module, module: str, level: int) -> _Module | None:
        for p in self._import_paths(mod, module, level):
            m = self.module(p)
            if m is not None:
                return m
        return None

    def _lookup(
        self, mod: _Module, name: str, hops: int = 3
    ) -> tuple[_Module, list[ast.expr], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None] | None:
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
            return self._lookup(target, orig, hops - 1)
        for module, level in mod.star_imports:
            target = self._imported_module(mod, module, level)
            if target is not None:
                found = self._lookup(target, name, hops - 1)
                if found is not None:
                    return found
        return None

    def _envs_declarations(self, mod: _Module) -> dict[str, tuple[str, Any]]:
        """``NAME -> (EnvBool/EnvInt/..., default)`` from the engine's environment declarations beside
        `mod` (`tools.engines`: SGLang's ``srt/environ.py`` class ``Envs``, vLLM's ``vllm/envs.py`` typed
        names under ``if TYPE_CHECKING:``, vLLM 0.32.0)."""
        path = None
        for name in ENGINE_NAMES:
            envs_file = get_engine(name).data.envs_file
            root = self._package_root(mod.path, envs_file.split("/")[0])
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
                if isinstance(node, ast.If) and _is_type_checking(node.test):
                    for stmt in node.body:
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                            kind = "Env" + _annotation_kind(stmt.annotation)
                            try:
                                declared = _const(stmt.value) if stmt.value is not None else None
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
                            kind = _call_name(stmt.value.func) or ""
                            default: Any = None
                            if stmt.value.args:
                                try:
                                    default = _const(stmt.value.args[0])
                                except ValueError:
                                    default = None
                            out[stmt.targets[0].id] = (kind, default)
        self._envs_decl[path] = out
        return out

    # ------------------------------------------------------------------------------------ reading

    def read(self, tracebacks: list[Traceback], *, max_frames: int = 6) -> SourceReading:
        """Leads from the innermost `max_frames` package frames of each traceback (innermost first)."""
        reading = SourceReading()
        if tracebacks:
            last = tracebacks[-1]
            reading.exception = f"{last.exception}: {last.message}" if last.exception else last.message
        seen: set[tuple[Any, ...]] = set()
        frame_no = 0
        for tb in reversed(tracebacks):  # the last printed is the one that ended the process
            picked = [f for f in tb.frames if self._package_root(f.path) is not None][:max_frames]
            for i, frame in enumerate(picked):
                inner = picked[i - 1] if i > 0 else None
                innermost = i == 0 and tb.frames and tb.frames[0] is frame
                for lead in self._read_frame(frame, inner, bool(innermost), tb, reading, frame_no):
                    key = (
                        lead.kind,
                        lead.name,
                        lead.value,
                        lead.unset,
                        tuple(lead.avoid),
                        lead.path,
                        lead.line,
                    )
                    if key not in seen:
                        seen.add(key)
                        reading.leads.append(lead)
                frame_no += 1
        reading.files_read = self.files_read
        return reading

    def _read_frame(
        self,
        frame: Frame,
        inner: Frame | None,
        innermost: bool,
        tb: Traceback,
        reading: SourceReading,
        frame_no: int,
    ) -> list[SourceLead]:
        mod = self.module(frame.path)
        if mod is None:
            status: Literal["missing", "unparsable"] = (
                "unparsable" if frame.path in self._unparsable else "missing"
            )
            reading.frames.append(
                FrameRead(path=frame.path, line=frame.line, function=frame.function, status=status)
            )
            return []
        line = _locate(mod, frame)
        if line is None:
            reading.frames.append(
                FrameRead(path=frame.path, line=frame.line, function=frame.function, status="differs")
            )
            return []
        reading.frames.append(
            FrameRead(
                path=frame.path,
                line=frame.line,
                function=frame.function,
                status="read" if line == frame.line else "moved",
                located=line,
            )
        )
        leads: list[SourceLead] = []
        for guard in _guards(mod, line, inner, innermost, tb):
            for found in self._resolve(guard.test, _Want(guard.pol), guard.scope, 0, []):
                lead = self._lead(found, guard, frame, frame_no)
                if lead is not None:
                    leads.append(lead)
        return leads

    # ------------------------------------------------------------------------------------ resolution

    def _resolve(
        self, expr: ast.expr, want: _Want, scope: _Scope, depth: int, via: list[str]
    ) -> list[_Found]:
        """Environment variables and server arguments `expr` depends on, with what they were."""
        if depth > self.max_hops:
            return []
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return self._resolve(
                expr.operand, want.negated() if want.op is None else _Want(None), scope, depth, via
            )
        if isinstance(expr, ast.BoolOp):
            # ``a or b`` that held (``a and b`` that did not): flipping one operand may not be enough.
            either = isinstance(expr.op, ast.Or) == bool(want.pol) and want.op is None and len(expr.values) > 1
            part = want.unsure() if either else want
            return [f for v in expr.values for f in self._resolve(v, part, scope, depth, via)]
        if isinstance(expr, ast.Compare):
            return self._compare(expr, want, scope, depth, via)
        if isinstance(expr, ast.IfExp):
            return [
                *self._resolve(expr.test, _Want(None), scope, depth, via),
                *self._resolve(expr.body, want, scope, depth, via),
                *self._resolve(expr.orelse, want, scope, depth, via),
            ]
        env = _env_read(expr)
        if env is not None:
            name, env_type = env
            if env_type == "envs":
                env_type = self._envs_type(scope.module, name)
            elif env_type == "envs_is_set":
                env_type = "set"
            return [_Found("env", name, want, via, env_type)]
        dest = self._server_arg(expr, scope, depth)
        if dest is not None:
            return [_Found("flag", dest, want, via)]
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

    def _annotated_class(self, name: str, scope: _Scope) -> _Scope | None:
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
        found = self._lookup(scope.module, cls_name)
        if found is None or not isinstance(found[2], ast.ClassDef):
            return None
        return _Scope(found[0], None, found[2], found[2].lineno)

    def _envs_type(self, mod: _Module, name: str) -> str:
        kind, _default = self._envs_declarations(mod).get(name, ("", None))
        if "Bool" in kind:
            return "bool"
        if "Int" in kind or "Float" in kind:
            return "int"
        return "raw"

    def _compare(
        self, expr: ast.Compare, want: _Want, scope: _Scope, depth: int, via: list[str]
    ) -> list[_Found]:
        if len(expr.ops) != 1 or want.op is not None:
            sides = [expr.left, *expr.comparators]
            return [f for s in sides for f in self._resolve(s, _Want(None), scope, depth, via)]
        op = _CMP.get(type(expr.ops[0]))
        left, right = expr.left, expr.comparators[0]
        if op is None:
            return []
        # ``"X" in os.environ``: whether a variable is set.
        if op in ("in", "not in") and isinstance(left, ast.Constant) and isinstance(left.value, str):
            if _ENV_NAME.match(left.value) and _is_environ(right):
                pol = want.pol if op == "in" else (None if want.pol is None else not want.pol)
                return [_Found("env", left.value, _Want(pol, sure=want.sure), via, "set")]
            return []
        for var, other, var_op in ((left, right, op), (right, left, _MIRROR.get(op))):
            if var_op is None or _is_literal(var):
                continue
            try:
                const = _const(other)
                symbolic = False
            except ValueError:
                if _refs_variable(other):
                    continue
                const, symbolic = scope.module.segment(other, 60), True
            return self._resolve(var, _Want(want.pol, var_op, const, symbolic, want.sure), scope, depth, via)
        return [
            *self._resolve(left, _Want(None), scope, depth, via),
            *self._resolve(right, _Want(None), scope, depth, via),
        ]

    def _server_arg(self, expr: ast.expr, scope: _Scope, depth: int) -> str | None:
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
            name = _call_name(expr.func)
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
        return attr in self._dests

    def _root(self, expr: ast.expr, scope: _Scope, depth: int) -> bool:
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
            name = _call_name(expr.func)
            if name in ROOT_CALLS:
                return True
            if name in ROOT_WRAPPERS and expr.args:
                return self._root(expr.args[0], scope, depth + 1)
        return False

    def _name_values(self, name: str, scope: _Scope) -> list[tuple[ast.expr, _Scope, str]]:
        """What a plain name may hold at `scope.line`: the latest local assignments before the line,
        else module-level ones (this module's or an imported module's). Each with its scope and a
        ``file:line: text`` hop description."""
        out: list[tuple[ast.expr, _Scope, str]] = []
        fn = scope.func
        if fn is not None:
            params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
            local: list[tuple[int, ast.expr]] = []
            for stmt in _function_statements(fn):
                for value in _assigned(stmt, name):
                    local.append((stmt.lineno, value))
            before = [lv for lv in local if lv[0] < scope.line] or local
            if before:
                before.sort(key=lambda lv: lv[0])
                for lineno, value in before[-2:]:
                    out.append((value, scope, self._hop(scope.module, lineno)))
                return out
            if name in params:
                return []
        found = self._lookup(scope.module, name)
        if found is None:
            return []
        mod, values, _definition = found
        for value in values[-2:]:
            holder = mod.parents.get(value)
            lineno = getattr(holder, "lineno", value.lineno)
            out.append((value, _Scope(mod, None, None, lineno), self._hop(mod, lineno)))
        return out

    def _hop(self, mod: _Module, line: int) -> str:
        return f"{mod.path}:{line}: {mod.line_text(line)[:160]}"

    def _name(self, name: str, want: _Want, scope: _Scope, depth: int, via: list[str]) -> list[_Found]:
        out: list[_Found] = []
        for value, vscope, hop in self._name_values(name, scope):
            out += self._resolve(value, want, vscope, depth + 1, [*via, hop])
        return out

    def _self_attr(self, attr: str, want: _Want, scope: _Scope, depth: int, via: list[str]) -> list[_Found]:
        """``self.attr``: every ``self.attr = ...`` in the enclosing class's methods."""
        cls = scope.cls
        if cls is None:
            return []
        out: list[_Found] = []
        for item in cls.body:
            if isinstance(item, ast.Assign | ast.AnnAssign):
                for value in _assigned(item, attr):
                    out += self._resolve(
                        value,
                        want,
                        _Scope(scope.module, None, cls, item.lineno),
                        depth + 1,
                        [*via, self._hop(scope.module, item.lineno)],
                    )
            if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for stmt in _function_statements(item):
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
                        out += self._resolve(
                            stmt.value,
                            want,
                            _Scope(scope.module, item, cls, stmt.lineno),
                            depth + 1,
                            [*via, self._hop(scope.module, stmt.lineno)],
                        )
        return out

    def _call(self, call: ast.Call, want: _Want, scope: _Scope, depth: int, via: list[str]) -> list[_Found]:
        func = call.func
        name = _call_name(func)
        if name in _PASS_FUNCS and call.args and isinstance(func, ast.Name):
            return self._resolve(call.args[0], want, scope, depth, via)
        if isinstance(func, ast.Attribute) and name in _PASS_METHODS and not call.args:
            return self._resolve(func.value, want, scope, depth, via)
        target: tuple[_Module, ast.AST, ast.ClassDef | None] | None = None
        if isinstance(func, ast.Name):
            nested = _nested_def(scope.func, func.id)
            if nested is not None:
                target = (scope.module, nested, scope.cls)
            else:
                found = self._lookup(scope.module, func.id)
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
        out: list[_Found] = []
        for stmt in _function_statements(fn):
            inner = _Scope(mod, fn, cls, stmt.lineno)
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                out += self._resolve(stmt.value, want, inner, depth + 1, hop)
            elif isinstance(stmt, ast.If) and any(
                isinstance(s, ast.Return | ast.Raise) for s in ast.walk(stmt)
            ):
                out += self._resolve(stmt.test, _Want(None), inner, depth + 1, hop)
        return out

    # ------------------------------------------------------------------------------------ leads

    def _lead(self, found: _Found, guard: _Guard, frame: Frame, frame_no: int) -> SourceLead | None:
        mod = guard.scope.module
        base: dict[str, Any] = {
            "polarity": found.want.pol,
            "certain": found.want.sure and found.want.pol is not None,
            "path": mod.path,
            "line": guard.test.lineno,
            "condition": mod.segment(guard.test),
            "guard": guard.kind,
            "via": found.via,
            "frame": frame_no,
            "function": frame.function,
        }
        if found.kind == "env":
            return SourceLead(kind="env", name=found.name, **base, **_env_flip(found.want, found.env_type))
        spec = self._dests.get(found.name)
        if self.catalog is not None and spec is None:
            return None  # not a server argument on this host (a field of some other object)
        flag = spec.name if spec is not None else "--" + found.name.replace("_", "-")
        switch = spec is not None and not spec.takes_value
        return SourceLead(
            kind="flag",
            name=flag,
            dest=found.name,
            known_flag=spec is not None,
            **base,
            **_flag_flip(found.want, switch),
        )


def _refs_variable(node: ast.expr) -> bool:
    """Whether `node` itself reads a variable we could resolve (an env read or a server argument)."""
    return (
        _env_read(node) is not None
        or any(isinstance(n, ast.Name) and n.id in ROOT_NAMES for n in ast.walk(node))
        or any(isinstance(n, ast.Call) and _call_name(n.func) in ROOT_CALLS for n in ast.walk(node))
    )


def _is_literal(node: ast.expr) -> bool:
    try:
        _const(node)
    except ValueError:
        return False
    return True


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _env_read(expr: ast.expr) -> tuple[str, str] | None:
    """``(NAME, how)`` when `expr` reads an environment variable: how is ``raw`` (os.getenv,
    os.environ), ``bool``/``int`` (a helper named for its type), ``envs``/``envs_is_set`` (SGLang's
    ``envs.NAME.get()`` / ``.is_set()``)."""
    if isinstance(expr, ast.Subscript) and _is_environ(expr.value) and isinstance(expr.slice, ast.Constant):
        key = expr.slice.value
        return (key, "raw") if isinstance(key, str) else None
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute):
            holder = func.value
            if _ENV_NAME.match(holder.attr) and _is_envs(holder.value):
                if func.attr == "is_set":
                    return holder.attr, "envs_is_set"
                if func.attr in ("get", "value"):
                    return holder.attr, "envs"
        name = _call_name(func) or ""
        if expr.args and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
            key = expr.args[0].value
            if not _ENV_NAME.match(key):
                return None
            if (
                isinstance(func, ast.Attribute)
                and _is_environ(func.value)
                and name in ("get", "pop", "setdefault")
            ):
                return key, "raw"
            if _ENVISH_CALL.search(name):
                low = name.lower()
                return key, "bool" if "bool" in low else "int" if ("int" in low or "float" in low) else "raw"
    if isinstance(expr, ast.Attribute) and _ENV_NAME.match(expr.attr) and _is_envs(expr.value):
        return expr.attr, "envs"
    return None


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _annotation_kind(ann: ast.expr) -> str:
    """``Bool`` / ``Int`` / ``Str`` for a declared type (``bool``, ``int | None``, ``float``, ``str``)."""
    text = ast.unparse(ann)
    if re.search(r"\bbool\b", text):
        return "Bool"
    if re.search(r"\b(int|float)\b", text):
        return "Int"
    return "Str"


def _is_envs(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "envs") or (
        isinstance(node, ast.Attribute) and node.attr == "envs"
    )


def _nested_def(fn: ast.AST | None, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if fn is None:
        return None
    for stmt in _function_statements(fn):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
            return stmt
    return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _boundary(op: str, const: Any, pol: bool) -> Any:
    """A value on the other side of ``VALUE op const`` from where the failing path was (None if the
    comparison does not allow reading one off)."""
    if isinstance(const, bool) or not isinstance(const, int | float):
        return None
    held = op if pol else {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
    step = 1 if isinstance(const, int) else 0
    if held == ">":  # was > c: c itself is not
        return const
    if held == ">=":
        return const - step if step else None
    if held == "<":
        return const
    if held == "<=":
        return const + step if step else None
    return None


def _flip(want: _Want) -> tuple[Any, list[str], bool] | None:
    """(value, avoid, unset) from a comparison want; None for a plain truth want."""
    if want.op is None or want.pol is None:
        return None
    op, const = want.op, want.const
    held = op if want.pol else _NEGATE.get(op, op)
    if want.symbolic:
        if held in ("==", "is", "in"):
            return None, [str(const)], False
        return None, [], False
    if held in ("is", "is not") and const is None:
        return (None, [], False) if held == "is" else (None, [], True)
    if held in ("==", "is"):
        return None, [_text(const)], False
    if held in ("!=", "is not"):
        return const, [], False
    if held == "in":
        return None, [_text(c) for c in (const if isinstance(const, tuple) else (const,))], False
    if held == "not in":
        values = const if isinstance(const, tuple) else (const,)
        return (values[0] if values else None), [], False
    if op in ("<", "<=", ">", ">="):
        return _boundary(op, const, want.pol), [], False
    return None, [], False


def _env_flip(want: _Want, env_type: str) -> dict[str, Any]:
    flipped = _flip(want)
    if flipped is not None:
        value, avoid, unset = flipped
        return {"value": None if value is None else _text(value), "avoid": avoid, "unset": unset}
    if want.pol is None:
        return {}
    if env_type == "set" or env_type == "raw":
        # A raw string is true when set and non-empty: unset flips a true one, any text a false one.
        return {"unset": True} if want.pol else {"value": "1"}
    return {"value": "0"} if want.pol else {"value": "1"}


def _flag_flip(want: _Want, switch: bool) -> dict[str, Any]:
    flipped = _flip(want)
    if flipped is not None:
        value, avoid, unset = flipped
        if isinstance(value, bool):
            return {"value": True, "avoid": avoid} if value else {"unset": True, "avoid": avoid}
        return {"value": None if value is None else _text(value), "avoid": avoid, "unset": unset}
    if want.pol is None:
        return {}
    if want.pol:
        return {"unset": True}
    return {"value": True} if switch else {}


# ---------------------------------------------------------------------------------- frames and guards


def _locate(mod: _Module, frame: Frame) -> int | None:
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


def _chain(body: list[ast.stmt], line: int) -> list[tuple[ast.stmt, str, list[ast.stmt], int]]:
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


def _guards(mod: _Module, line: int, inner: Frame | None, innermost: bool, tb: Traceback) -> list[_Guard]:
    """The conditions on the path to `line`, innermost first, each with its value on that path."""
    chain = _chain(mod.tree.body, line)
    if not chain:
        return []
    func: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    cls: ast.ClassDef | None = None
    for stmt, *_ in chain:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            func = stmt
        elif isinstance(stmt, ast.ClassDef):
            cls = stmt
    scope = _Scope(mod, func, cls, line)
    guards: list[_Guard] = []
    target = chain[-1][0]
    if isinstance(target, ast.Assert) and (innermost or (tb.exception or "").endswith("AssertionError")):
        guards.append(_Guard(target.test, False, scope, "assert"))
    if innermost or inner is not None:
        called = inner.function if inner is not None else None
        for node in ast.walk(target):
            if isinstance(node, ast.IfExp) and node.lineno <= line <= (node.end_lineno or node.lineno):
                pol: bool | None = None
                if called is not None:
                    in_body = any(
                        isinstance(n, ast.Call) and _call_name(n.func) == called for n in ast.walk(node.body)
                    )
                    in_else = any(
                        isinstance(n, ast.Call) and _call_name(n.func) == called
                        for n in ast.walk(node.orelse)
                    )
                    pol = True if in_body and not in_else else False if in_else and not in_body else None
                    if pol is None and not innermost:
                        continue
                guards.append(_Guard(node.test, pol, scope, "conditional expression"))
    for depth in range(len(chain) - 1, -1, -1):
        stmt, _name, block, index = chain[depth]
        for prev in reversed(block[:index]):
            if isinstance(prev, ast.If) and _exits(prev.body) and not prev.orelse:
                guards.append(_Guard(prev.test, False, scope, "early exit"))
        if depth == 0:
            continue
        parent, *_ = chain[depth - 1]
        if isinstance(parent, ast.If):
            in_body = any(s is stmt for s in parent.body)
            guards.append(_Guard(parent.test, in_body, scope, "if" if in_body else "else"))
        elif isinstance(parent, ast.While) and any(s is stmt for s in parent.body):
            guards.append(_Guard(parent.test, True, scope, "while"))
    return guards


def read_guards(
    read: Callable[[str], str | None],
    log_text: str,
    catalog: FlagCatalog | None = None,
    *,
    max_frames: int = 6,
    max_files: int = 24,
    max_hops: int = 4,
) -> SourceReading:
    """Read the installed source at the tracebacks of `log_text` and return the leads found.

    `read(path)` returns a file's text on the host or None (`Host.read_text`); `catalog` is the host's
    flag catalog. Frames: the innermost `max_frames` per traceback whose files belong to `PACKAGES`.
    No launch; at most `max_files` files are read. A log without a traceback gives an empty reading
    (with `missing` still set when an import failure is logged without one).
    """
    tracebacks = parse_tracebacks(log_text)
    reader = SourceReader(read, catalog, max_files=max_files, max_hops=max_hops)
    reading = reader.read(tracebacks, max_frames=max_frames)
    reading.missing = missing_import(log_text, tracebacks)
    return reading
