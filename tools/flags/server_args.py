"""A partial flag catalog read from the server-args line of a log, when the host's ``--help`` is not at hand."""

from __future__ import annotations

import re

from tools.flags.catalog import FlagCatalog
from tools.flags.spec import FlagSpec, ValueType

#: vLLM's start-up line of the arguments set away from their defaults (vLLM 0.32.0
#: entrypoints/serve/utils/api_utils.py).
_NON_DEFAULT = "non-default args: "
_SERVER_ARGS_RE = re.compile(
    rf"(?:server_args=|{_NON_DEFAULT})(?:ServerArgs\((?P<repr>.*)\)|(?P<dict>\{{.*\}}))\s*$"
)


_REPR_FIELD_RE = re.compile(r"(?:^|, )([a-z_][a-z0-9_]*)=('(?:[^'\\]|\\.)*'|[^,()\[\]{}]*)")


def catalog_from_server_args(log_text: str) -> FlagCatalog | None:
    """A partial flag catalog read from the server-args line of a log, for when the host's ``--help`` is
    not at hand (``hypoloop analyze`` of a log alone): every server argument ``x_y`` becomes a flag
    ``--x-y`` with the type of its printed value (a bool is a switch). It tells which release's spelling
    a log's host uses (``cuda_graph_max_bs_decode`` in 0.5.23, ``cuda_graph_max_bs`` in 0.5.9) but
    knows no choices or aliases. Reads SGLang 0.5.9's ``server_args=ServerArgs(a=1, ...)`` and 0.5.23's
    ``server_args={'a': 1, ...}`` (entrypoints/engine.py), and vLLM's ``non-default args: {'a': 1, ...}``
    (vLLM 0.32.0 ``entrypoints/serve/utils/api_utils.py``, the arguments set away from their defaults: a smaller catalog,
    but the engine's own spelling, so no other engine's flag is proposed on its log). None when the log has
    no such line.
    """
    import ast

    for line in log_text.splitlines():
        m = _SERVER_ARGS_RE.search(line)
        if not m:
            continue
        values: dict[str, object] = {}
        if m.group("dict"):
            parsed = _printed_dict(m.group("dict"))
            values = parsed if parsed is not None else {
                k: None for k in re.findall(r"'([a-z_][a-z0-9_]*)': ", m.group("dict"))}
        else:
            for key, raw in _REPR_FIELD_RE.findall(m.group("repr")):
                try:
                    values[key] = ast.literal_eval(raw.strip())
                except (ValueError, SyntaxError):
                    values[key] = None
        flags: dict[str, FlagSpec] = {}
        # vLLM's printed value is the parsed one: `--kv-cache-memory-bytes 1G` prints 1073741824, so a
        # number there says nothing of what the command line accepts.
        loose = _NON_DEFAULT in line
        for key, value in values.items():
            name = "--" + key.replace("_", "-")
            vtype: ValueType = (
                "bool" if isinstance(value, bool) else "str" if loose
                else "int" if isinstance(value, int) else "float" if isinstance(value, float) else "str"
            )
            flags[name] = FlagSpec(name=name, takes_value=vtype != "bool", value_type=vtype)
        return FlagCatalog(flags=flags, source="the log's server_args line") if flags else None
    return None


#: Keys of vLLM's non-default args that say where and what it serves, not how: never a setting to revert.
_PLACEMENT_KEYS = frozenset({"model_tag", "model", "host", "port"})


def _printed_dict(text: str) -> dict[str, object] | None:
    """A printed Python dict (``{'a': 1, ...}``) as a dict with string keys, or None when it is not one."""
    import ast

    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return {str(k): v for k, v in parsed.items()} if isinstance(parsed, dict) else None


def non_default_flags(log_text: str) -> dict[str, bool | str] | None:
    """The settings a vLLM log says were set away from their defaults (vLLM 0.32.0
    ``entrypoints/serve/utils/api_utils.py`` prints ``non-default args: {...}`` at start-up), as command-line
    flags as a case writes them (``{"--max-model-len": "4096", "--enforce-eager": True}``), the model, host and port left out; or
    None when the log has no such line. For ``hypoloop analyze`` of a log without its case: these are the
    user's own settings, the baseline a run would start from. List and dict values are left out (no
    single command-line spelling)."""
    for line in log_text.splitlines():
        m = _SERVER_ARGS_RE.search(line)
        if not m or _NON_DEFAULT not in line or not m.group("dict"):
            continue
        parsed = _printed_dict(m.group("dict"))
        if parsed is None:
            return None
        return {
            "--" + k.replace("_", "-"): v if isinstance(v, bool) else str(v) for k, v in parsed.items()
            if k not in _PLACEMENT_KEYS and isinstance(v, (bool, int, float, str)) and v is not False
        }
    return None
