"""What reads a variable in source: the packages read, the calls and names that hold the server arguments,
and the expressions that read an environment variable."""

from __future__ import annotations

import ast
import re

from tools.source_guards.syntax import call_name

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


ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")


_ENVISH_CALL = re.compile(r"(?:^|_)env(?:_|$)|^getenv$|env_var", re.IGNORECASE)


#: Methods that hand on their receiver's value for the purpose of a condition (``.lower()`` of a
#: variable's text, ``.get()`` of an ``envs`` field).
PASS_METHODS = frozenset({"lower", "upper", "strip", "casefold", "get", "value"})


PASS_FUNCS = frozenset({"bool", "int", "float", "str"})


def refs_variable(node: ast.expr) -> bool:
    """Whether `node` itself reads a variable we could resolve (an env read or a server argument)."""
    return (
        env_read(node) is not None
        or any(isinstance(n, ast.Name) and n.id in ROOT_NAMES for n in ast.walk(node))
        or any(isinstance(n, ast.Call) and call_name(n.func) in ROOT_CALLS for n in ast.walk(node))
    )


def is_environ(node: ast.expr) -> bool:
    """``os.environ`` / ``environ``."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def env_read(expr: ast.expr) -> tuple[str, str] | None:
    """``(NAME, how)`` when `expr` reads an environment variable: how is ``raw`` (os.getenv,
    os.environ), ``bool``/``int`` (a helper named for its type), ``envs``/``envs_is_set`` (SGLang's
    ``envs.NAME.get()`` / ``.is_set()``)."""
    if isinstance(expr, ast.Subscript) and is_environ(expr.value) and isinstance(expr.slice, ast.Constant):
        key = expr.slice.value
        return (key, "raw") if isinstance(key, str) else None
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute):
            holder = func.value
            if ENV_NAME.match(holder.attr) and is_envs(holder.value):
                if func.attr == "is_set":
                    return holder.attr, "envs_is_set"
                if func.attr in ("get", "value"):
                    return holder.attr, "envs"
        name = call_name(func) or ""
        if expr.args and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
            key = expr.args[0].value
            if not ENV_NAME.match(key):
                return None
            if (
                isinstance(func, ast.Attribute)
                and is_environ(func.value)
                and name in ("get", "pop", "setdefault")
            ):
                return key, "raw"
            if _ENVISH_CALL.search(name):
                low = name.lower()
                return key, "bool" if "bool" in low else "int" if ("int" in low or "float" in low) else "raw"
    if isinstance(expr, ast.Attribute) and ENV_NAME.match(expr.attr) and is_envs(expr.value):
        return expr.attr, "envs"
    return None


def is_envs(node: ast.expr) -> bool:
    """SGLang's ``envs`` namespace (``srt/environ.py``), by name or attribute."""
    return (isinstance(node, ast.Name) and node.id == "envs") or (
        isinstance(node, ast.Attribute) and node.attr == "envs"
    )
