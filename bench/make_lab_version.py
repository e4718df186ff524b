"""Write a lab version file from a real SGLang install: its `launch_server` parser, verbatim.

Run it with the Python of a throwaway venv that has the release installed (no GPU needed; nothing of
SGLang is imported anywhere else in hypoloop):

    python3 -m venv /root/.cache/hypoloop/sglang-0.5.23-full
    /root/.cache/hypoloop/sglang-0.5.23-full/bin/pip install sglang==0.5.23
    /root/.cache/hypoloop/sglang-0.5.23-full/bin/python bench/make_lab_version.py \
        --release lab/versions/release-0.5.23.toml > lab/versions/0.5.23.toml

Every `[[flag]]` comes from `ServerArgs.add_cli_args` (sglang/srt/server_args.py): option strings,
dest, type (int/float, anything else parses as a string), choices, default (where TOML can hold it),
nargs, `required`, the help text, argparse's `BooleanOptionalAction` (`--x/--no-x`), and SGLang's
deprecated-flag actions (arg_groups/argparse_actions.py), whose warning text is reproduced. The file
given with `--release` (the `[release]` table and the version's `[[resolve]]` rules, which are
hand-written from the release's sources) is appended as it is.

Standard library plus the installed SGLang only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


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


def _scalar(value: Any) -> bool:
    if isinstance(value, bool | int | float | str):
        return True
    return isinstance(value, list | tuple) and bool(value) and all(
        isinstance(v, type(value[0])) and isinstance(v, bool | int | float | str) for v in value
    )


def _deprecation(action: argparse.Action) -> str | None:
    """The warning SGLang's Deprecated*Action prints (`'{option}' is deprecated and will be removed in
    a future release. Use '<new>' instead.`), with `{option}` standing for the spelling used."""
    kind = type(action).__name__
    if not kind.startswith("Deprecated"):
        return None
    new = getattr(action, "new_flag", None)
    replacement = f" Use '{new}' instead." if new else ""
    return "'{option}' is deprecated and will be removed in a future release." + replacement


def flag_entries(parser: argparse.ArgumentParser) -> list[str]:
    """One `[[flag]]` block per option of `parser` (help and positionals skipped)."""
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        longs = [o for o in action.option_strings if o.startswith("--")]
        name = longs[0] if longs else action.option_strings[0]
        boolean_optional = isinstance(action, argparse.BooleanOptionalAction)
        aliases = [
            o for o in action.option_strings
            if o != name and not (boolean_optional and o == "--no-" + name[2:])
        ]
        kind = type(action).__name__
        if boolean_optional:
            act = "boolean_optional"
        elif kind in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
            act = "store_true"
        elif kind == "_StoreFalseAction":
            act = "store_false"
        else:
            act = "store"
        lines = ["[[flag]]", f"name = {_toml(name)}"]
        if aliases:
            lines.append(f"aliases = {_toml(aliases)}")
        if action.dest != name[2:].replace("-", "_"):
            lines.append(f"dest = {_toml(action.dest)}")
        if act != "store":
            lines.append(f'action = "{act}"')
        ftype = {int: "int", float: "float"}.get(action.type, "str")  # type: ignore[call-overload]
        if act == "store":
            lines.append(f'type = "{ftype}"')
            if action.choices is not None:
                choices = sorted(action.choices) if isinstance(action.choices, set) else list(action.choices)
                caster = {"int": int, "float": float, "str": str}[ftype]
                lines.append(f"choices = {_toml([caster(c) for c in choices])}")
            if action.nargs in ("+", "*", "?"):
                lines.append(f'nargs = "{action.nargs}"')
            if action.required:
                lines.append("required = true")
        default = action.default
        if default is not None and default is not argparse.SUPPRESS and _scalar(default):
            if not (act == "store_true" and default is False):
                lines.append(f"default = {_toml(default)}")
        message = _deprecation(action)
        if message:
            lines.append(f"deprecated = {_toml(message)}")
        if action.help and action.help is not argparse.SUPPRESS:
            lines.append(f"help = {_toml(' '.join(str(action.help).split()))}")
        out.append("\n".join(lines))
    return out


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--release", type=Path, required=True, help="the hand-written [release] + [[resolve]] part")
    args = cli.parse_args()
    import importlib.metadata

    from sglang.srt.server_args import ServerArgs  # the real parser of the installed release

    version = importlib.metadata.version("sglang")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    blocks = flag_entries(parser)
    sys.stdout.write(
        f"# Command-line flags of `python -m sglang.launch_server` as of SGLang {version}, written by\n"
        f"# bench/make_lab_version.py from the installed release's parser (ServerArgs.add_cli_args):\n"
        f"# all {len(blocks)} options, verbatim. The [release] table and [[resolve]] rules at the end are\n"
        f"# hand-written from the release's sources ({args.release.name}). Format: lab/README.md.\n\n"
        f'version = "{version}"\n\n'
    )
    sys.stdout.write("\n\n".join(blocks) + "\n\n")
    sys.stdout.write(args.release.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
