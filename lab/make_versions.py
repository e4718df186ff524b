"""Regenerate the lab's version files (`lab/versions/<release>.toml`) from each real SGLang release.

    python -m lab.make_versions                 # every release in RELEASES
    python -m lab.make_versions 0.5.17          # one release
    python -m lab.make_versions --check         # exit 1 when a written file differs from a regeneration

For each release the wheel is fetched from the package registry with the ordinary client (`pip download
--no-deps sglang==X`), unpacked (source only, nothing installed) under `$HOME/.cache/hypoloop/sglang-X-src`
(the folder `.ci/run` and the tests use; `HYPOLOOP_CACHE` moves it), and the release's own parser is
built: `ServerArgs.add_cli_args(argparse.ArgumentParser())` from `sglang/srt/server_args.py`, run in a
child process where every third-party module the file imports (torch, transformers, msgspec, …) is an
inert stand-in, so no GPU, no dependency and no network beyond the registry are needed. Each argparse
action becomes one `[[flag]]` (option strings, dest, type, choices, default, nargs, required, help,
`--x/--no-x`, SGLang's deprecated-flag actions); the hand-written `lab/versions/parts/<release>-release.toml`
(the `[release]` texts and version-wide `[[resolve]]` rules, each citing its source file) is appended.

The lab imports only the standard library, and so does this script: SGLang is imported only inside the
child process, by name, from the unpacked wheel.
"""

from __future__ import annotations

import abc
import argparse
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any

#: The releases the lab imitates, oldest first. 0.5.9: the field cases (early 2026); 0.5.17: the release
#: most public reports of the last months cite (lab/README.md, "Releases"); 0.5.23: the newest.
RELEASES = ("0.5.9", "0.5.17", "0.5.23")

VERSIONS_DIR = Path(__file__).resolve().parent / "versions"
PARTS_DIR = VERSIONS_DIR / "parts"


def cache_dir() -> Path:
    """Where unpacked wheels live: `$HYPOLOOP_CACHE` or `$HOME/.cache/hypoloop`."""
    return Path(os.environ.get("HYPOLOOP_CACHE") or Path.home() / ".cache" / "hypoloop")


def source_dir(release: str) -> Path:
    """The unpacked source of one release (`<cache>/sglang-<release>-src`), fetched when missing.

    Uses `pip download --no-deps sglang==<release>` (the registry's ordinary client) and unpacks the
    wheel (a zip). Raises RuntimeError when pip fails (no network, unknown release)."""
    target = cache_dir() / f"sglang-{release}-src"
    if (target / "sglang" / "srt" / "server_args.py").is_file():
        # A source folder installed by other means (.ci/run's `pip install --no-deps --target`) lacks the
        # packages the parser needs: added once, beside it.
        for dep in _REAL_DEPS:
            if not (target / dep).is_dir():
                with tempfile.TemporaryDirectory() as tmp:
                    _unpack_dep(dep, target, tmp)
        return target
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             f"sglang=={release}", "-d", tmp],
            capture_output=True, text=True, check=False,
        )
        wheels = sorted(Path(tmp).glob("sglang-*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"pip download sglang=={release} failed: {done.stderr.strip()[-300:]}")
        partial = target.with_name(target.name + ".part")
        partial.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as whl:
            whl.extractall(partial)
        for dep in _REAL_DEPS:
            _unpack_dep(dep, partial, tmp)
        partial.rename(target)
    return target


#: Third-party packages whose real code the parser needs (0.5.23 declares its server arguments as
#: msgspec structs); unpacked beside SGLang, for the running Python.
_REAL_DEPS = ("msgspec",)


def _unpack_dep(name: str, into: Path, tmp: str) -> None:
    """Fetch one dependency's wheel for this Python (`pip download --no-deps`) and unpack it into `into`."""
    dest = Path(tmp) / name
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", name, "-d", str(dest)],
        capture_output=True, text=True, check=False,
    )
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise RuntimeError(f"pip download {name} failed: {done.stderr.strip()[-300:]}")
    with zipfile.ZipFile(wheels[0]) as whl:
        whl.extractall(into)


# --------------------------------------------------------------------------- child: build the parser


_PROBED = frozenset({
    "__wrapped__", "__deepcopy__", "__copy__", "__reduce_ex__", "__reduce__", "__getstate__",
    "__setstate__", "__fspath__", "__dataclass_fields__", "__origin__", "__args__", "__parameters__",
    "__signature__", "__length_hint__", "__await__", "__aiter__", "__func__", "__self__", "__objclass__",
    "__isabstractmethod__", "__get__", "__set_name__", "__module__", "__qualname__",
})


class _InertMeta(abc.ABCMeta):
    def __getattr__(cls, name: str) -> Any:
        if name in _PROBED or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return _Inert()


class _InertBase(metaclass=_InertMeta):
    """The base class an inert class stands for: accepts any class keywords and constructor arguments,
    and answers any class attribute (`Model.model_rebuild()`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)




#: Accelerator namespaces probed with hasattr(torch, ...): absent, so the host reads as a CUDA host.
_ABSENT = frozenset({"npu", "musa", "mlu", "sdaa"})
#: Accelerator plug-in packages: not installed (an ImportError, as on a CUDA host).
_UNINSTALLED = frozenset({
    "torch_npu", "torchada", "torch_musa", "habana_frameworks", "intel_extension_for_pytorch", "mlx",
    "torch_mlu", "torch_sdaa",
})


class _Inert(str):
    """Stands for anything of a third-party module: callable, indexable, iterable (empty), falsy (a
    string, so it can also be an attribute name or a type hint), usable as a base class and as a decorator (a
    single function argument is returned unchanged)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Inert:
        return super().__new__(cls, "object")

    def __getattr__(self, name: str) -> Any:
        if name in _PROBED:
            raise AttributeError(name)
        return _Inert()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return _Inert()

    def __getitem__(self, key: Any) -> Any:
        return _Inert()

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __delitem__(self, key: Any) -> None:
        pass

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __mro_entries__(self, bases: Any) -> tuple[type, ...]:
        return (_InertBase,)

    def __or__(self, other: Any) -> Any:
        return _Inert()

    __ror__ = __or__

    def __int__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __index__(self) -> int:
        return 0

    def __lt__(self, other: Any) -> bool:  # "older than" → no: version checks see a new release
        return False

    __le__ = __lt__

    def __gt__(self, other: Any) -> bool:
        return True

    __ge__ = __gt__

    def __eq__(self, other: Any) -> bool:
        return other is self

    def __hash__(self) -> int:
        return id(self)

    def __str__(self) -> str:
        return ""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name == "__version__":
            return "0.0.0"
        if name in _PROBED or name in _ABSENT or name in ("__all__", "__file__", "__spec__", "__loader__"):
            raise AttributeError(name)
        return _Inert()


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every import of a module that is neither the standard library nor SGLang with an inert
    module, so `server_args.py` can be imported without its dependencies."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.split(".")[0]
        if top in sys.stdlib_module_names or top in ("sglang", *_REAL_DEPS) or top in _UNINSTALLED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _InertModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, bool | int | float | str) for v in value):
        return list(value)
    return None


def _describe(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """One dict per option of the parser (help and positionals skipped), JSON-ready."""
    out: list[dict[str, Any]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        kind = type(action).__name__
        if isinstance(action, argparse.BooleanOptionalAction):
            act = "boolean_optional"
        elif isinstance(action, argparse._StoreTrueAction) or kind.endswith("StoreTrueAction"):
            act = "store_true"
        elif isinstance(action, argparse._StoreFalseAction):
            act = "store_false"
        elif isinstance(action, argparse._StoreConstAction) or kind.endswith("StoreConstAction"):
            act = "store_const"
        elif action.nargs == 0:
            act = "warn"
        elif isinstance(action, argparse._AppendAction):
            act = "append"
        else:
            act = "store"
        ftype = {int: "int", float: "float"}.get(action.type, "str")  # type: ignore[call-overload]
        choices = None
        if action.choices is not None:
            raw = sorted(action.choices) if isinstance(action.choices, set | frozenset) else list(action.choices)
            choices = [c if isinstance(c, bool | int | float) else str(c) for c in raw]
        default = action.default
        help_text = action.help if action.help and action.help is not argparse.SUPPRESS else ""
        out.append({
            "option_strings": list(action.option_strings),
            "dest": action.dest,
            "action": act,
            "class": kind,
            "type": ftype,
            "choices": choices,
            "nargs": action.nargs if isinstance(action.nargs, str) else (
                action.nargs if isinstance(action.nargs, int) else None
            ),
            "required": bool(action.required),
            "default": None if default is argparse.SUPPRESS else _jsonable(default),
            "default_repr": None if default is None or default is argparse.SUPPRESS else repr(default),
            "const": _jsonable(getattr(action, "const_value", getattr(action, "const", None))),
            "help": " ".join(str(help_text).split()),
            "new_flag": getattr(action, "new_flag", None) if kind.startswith("Deprecated") else None,
            "deprecated": kind.startswith("Deprecated"),
        })
    return out


def dump_parser(src: Path) -> list[dict[str, Any]]:
    """Build the real parser of the release unpacked at `src` (in this process) and describe it.

    Only for the child process `parser_of` starts: it installs an import hook and imports SGLang."""
    sys.meta_path.insert(0, _InertFinder())
    sys.path.insert(0, str(src))
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    module = importlib.import_module(".".join(("sglang", "srt", "server_args")))
    parser = argparse.ArgumentParser(prog="launch_server")
    module.ServerArgs.add_cli_args(parser)
    options = _describe(parser)
    # ServerArgs.from_cli_args may copy an argparse dest to the dataclass field the server uses
    # (0.5.9: `args.tp_size = args.tensor_parallel_size`); the lab's dest is that field.
    renames = dict(
        (old, new) for new, old in re.findall(
            r"args\.(\w+) = args\.(\w+)\s*$", inspect.getsource(module.ServerArgs.from_cli_args), re.M
        )
    )
    for opt in options:
        opt["dest"] = renames.get(opt["dest"], opt["dest"])
    return options


def parser_of(release: str) -> list[dict[str, Any]]:
    """The options of one release's `launch_server` parser, read from its unpacked wheel in a child
    process (see `dump_parser`). Raises RuntimeError with the child's last lines when it fails."""
    src = source_dir(release)
    done = subprocess.run(
        [sys.executable, "-I", str(Path(__file__).resolve()), "--dump", str(src)],
        capture_output=True, text=True, check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the parser of sglang {release} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


# --------------------------------------------------------------------------- TOML


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(type(value))


def _flag_block(opt: dict[str, Any]) -> str:
    strings: list[str] = opt["option_strings"]
    longs = [o for o in strings if o.startswith("--")]
    name = longs[0] if longs else strings[0]
    act = opt["action"]
    aliases = [o for o in strings if o != name and not (act == "boolean_optional" and o == "--no-" + name[2:])]
    lines = ["[[flag]]", f"name = {_toml(name)}"]
    if aliases:
        lines.append(f"aliases = {_toml(aliases)}")
    if opt["dest"] != name.lstrip("-").replace("-", "_"):
        lines.append(f"dest = {_toml(opt['dest'])}")
    if act in ("store_true", "store_false", "boolean_optional", "warn"):
        lines.append(f'action = "{act}"')
    elif act == "store_const":
        lines.append('action = "store_const"')
        if opt["const"] is not None:
            lines.append(f"const = {_toml(opt['const'])}")
    if act in ("store", "append"):
        lines.append(f'type = "{opt["type"]}"')
        if opt["choices"] is not None:
            cast = {"int": int, "float": float, "str": str}[opt["type"]]
            lines.append(f"choices = {_toml([cast(c) for c in opt['choices']])}")
        nargs = opt["nargs"]
        if act == "append":
            lines.append('nargs = "append"')
        elif isinstance(nargs, str) and nargs in ("+", "*", "?"):
            lines.append(f'nargs = "{nargs}"')
        elif isinstance(nargs, int):
            lines.append(f"nargs = {nargs}")
        if opt["required"]:
            lines.append("required = true")
    default = opt["default"]
    if default is not None and not (act == "store_true" and default is False) and not (
        act == "store_false" and default is True
    ) and not (isinstance(default, list) and not default):
        lines.append(f"default = {_toml(default)}")
    if opt["deprecated"]:
        new = opt["new_flag"]
        if opt["class"] == "DeprecatedAction":  # arg_groups/argparse_actions.py (server_args.py in 0.5.9)
            text = "The command line argument '{option}' is deprecated and will be removed in future versions."
        else:
            text = "'{option}' is deprecated and will be removed in a future release."
            text += f" Use '{new}' instead." if new else ""
        lines.append(f"deprecated = {_toml(text)}")
    if opt["help"]:
        lines.append(f"help = {_toml(opt['help'])}")
    return "\n".join(lines)


def installed_packages(release: str) -> dict[str, str]:
    """The packages a `pip install sglang==<release>` pins on Linux x86_64 (`name==version` lines of
    the wheel's METADATA without an extra; markers that exclude x86_64 are skipped), plus sglang itself."""
    meta = next((source_dir(release) / f"sglang-{release}.dist-info").glob("METADATA"), None)
    pins: dict[str, str] = {"sglang": release}
    if meta is None:
        return pins
    for line in meta.read_text(encoding="utf-8").splitlines():
        m = re.match(r"Requires-Dist: ([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^;\s]+)\s*(?:;(.*))?$", line)
        if not m:
            continue
        marker = m.group(3) or ""
        if "extra ==" in marker or ('platform_machine ==' in marker and "x86_64" not in marker):
            continue
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return dict(sorted(pins.items()))


def check_env_packages(release: str) -> list[str]:
    """`PACKAGE_LIST` of the release's `sglang/check_env.py`: the packages `check_env` reports, in order."""
    path = source_dir(release) / "sglang" / "check_env.py"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    m = re.search(r"PACKAGE_LIST = \[(.*?)\]", text, re.S)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else []


def version_toml(release: str, options: list[dict[str, Any]]) -> str:
    """The whole version file of one release: header, one `[[flag]]` per option, the hand-written part."""
    part = PARTS_DIR / f"{release}-release.toml"
    head = (
        f"# Command-line flags of `python -m sglang.launch_server` as of SGLang {release}, written by\n"
        f"# lab/make_versions.py from the release's own parser (sglang/srt/server_args.py,\n"
        f"# ServerArgs.add_cli_args, from the wheel on the package registry): all {len(options)} options.\n"
        f"# The [release] table and [[resolve]] rules at the end are hand-written from the release's\n"
        f"# sources (parts/{part.name}). Format: lab/README.md. Do not edit by hand: regenerate.\n\n"
        f'version = "{release}"\n'
        f"# the packages `python -m sglang.check_env` reports (sglang/check_env.py PACKAGE_LIST)\n"
        f"check_env_packages = {_toml(check_env_packages(release))}\n\n"
    )
    body = "\n\n".join(_flag_block(o) for o in options) + "\n\n"
    pins = installed_packages(release)
    body += (
        "# What `pip install sglang==" + release + "` installs on Linux x86_64 (the wheel's METADATA pins).\n"
        "[installed]\n" + "".join(f"{_toml(k)} = {_toml(v)}\n" for k, v in pins.items()) + "\n"
    )
    tail = part.read_text(encoding="utf-8") if part.is_file() else ""
    return head + body + tail


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m lab.make_versions", description=__doc__.split("\n\n")[0])
    cli.add_argument("releases", nargs="*", help=f"releases to regenerate (default: {' '.join(RELEASES)})")
    cli.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    cli.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.dump:
        json.dump(dump_parser(args.dump), sys.stdout)
        return 0
    stale = 0
    for release in args.releases or RELEASES:
        try:
            text = version_toml(release, parser_of(release))
        except RuntimeError as exc:
            print(f"make_versions: {exc}", file=sys.stderr)
            return 1
        path = VERSIONS_DIR / f"{release}.toml"
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                print(f"{path}: differs from sglang {release}'s parser (run python -m lab.make_versions {release})")
                stale += 1
            continue
        path.write_text(text, encoding="utf-8")
        print(f"{path}: {text.count('[[flag]]')} flags")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
