"""The console-script entry point: help screens tidied, usage mistakes as one line, exit codes."""

from __future__ import annotations

import _thread
import contextlib
import inspect
import json
import os
import sys
import threading
from typing import Any

import typer

from agent.cli.common import (
    OutputWatch,
    ReaderGone,
    app,
    json_asked,
    print_error,
)
from agent.domain.knowledge_dir import knowledge_dir


def _private_files() -> None:
    """Every file and folder hypoloop creates (checkpoints.sqlite holding the case as given, locks,
    runs/*, server logs, transcripts, caches) is private: 0600 files in 0700 folders (umask 077). The
    servers it launches keep the user's own umask (``tools.host.SERVER_UMASK``)."""
    import tools.host

    user = os.umask(0o077)
    if tools.host.SERVER_UMASK < 0:
        tools.host.SERVER_UMASK = user


class QuietPipe:
    """``sys.stdout`` or ``sys.stderr`` that goes quiet once its reader has gone (``hypoloop runs | head
    -1``): the rest of the output is dropped instead of a BrokenPipeError traceback and exit 1. While a
    run is driven (``OutputWatch.stop_run``) the reader's going raises ``ReaderGone`` once, so the run
    ends as after Ctrl-C: every server it launched stopped, the transcript ended with the reason, exit
    130; SIGPIPE stays ignored (Python's default) so that this cleanup runs. Everything else is the
    wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self.gone = True
        # what is still buffered goes to /dev/null, so the interpreter's last flush at exit cannot fail
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        if OutputWatch.stop_run:
            OutputWatch.stop_run = False  # once: the cleanup's own output is then dropped quietly
            OutputWatch.reader_gone = True
            if threading.current_thread() is not threading.main_thread():
                _thread.interrupt_main()  # a watcher thread printed: the run itself is in the main thread
                return
            raise ReaderGone

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _click_errors  # type: ignore[no-redef]


def tidy_help(command: Any) -> None:
    """Help that names values, not Python types: a switch shows nothing after its name, a choice shows
    its choices (``each|risky|auto``), any other value its name in capitals (``PATH``, ``N``); a command's
    line in its group's list is its whole first paragraph (click would cut it with '...'); applied to every
    command and subcommand."""
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)
        if sub.help and not sub.short_help:
            sub.short_help = " ".join(inspect.cleandoc(sub.help).split("\n\n")[0].split())
    params = list(getattr(command, "params", []))
    help_option = command.get_help_option(typer.Context(command))
    if help_option is not None:
        params.append(help_option)
    for param in params:
        if param.metavar is not None:
            continue
        desc = param.type_descriptor
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif desc.is_choice:
            param.metavar = "|".join(str(getattr(c, "value", c)) for c in desc.choices or ())
        elif param.param_type_name == "argument":
            param.metavar = (param.name or "value").upper()
            param.display_type_rich = lambda ctx: None  # the name already says what to give
        elif desc.is_path:
            param.metavar = "PATH"
        else:
            ann = desc.annotation
            param.metavar = "N" if ann is int else "X" if ann is float else "TEXT"


def repeated_option(command: Any, args: list[str]) -> str | None:
    """One line naming an option ``args`` give twice to the command they run, or None. click would keep
    the last value without a word (``--parallel 2 --parallel 3`` ran 3 at once), so a repeat is refused, as an
    unknown option is; an option meant to repeat (``--set``, ``multiple``) may. Reads ``args`` the way
    click does: subcommand names, ``--name value`` and ``--name=value``, nothing after ``--``."""
    seen: dict[str, tuple[str, str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        sub = getattr(command, "commands", {}).get(arg) if not arg.startswith("-") else None
        if sub is not None:
            command, seen = sub, {}
            i += 1
            continue
        name, eq, inline = arg.partition("=")
        param = next((p for p in getattr(command, "params", []) if getattr(p, "param_type_name", "") == "option"
                      and name in (*p.opts, *p.secondary_opts)), None) if arg.startswith("-") else None
        if param is None:
            i += 1
            continue
        takes_value = not param.is_flag and not param.count
        value = inline if eq else (args[i + 1] if takes_value and i + 1 < len(args) else "")
        if not param.multiple and not param.count:
            if param.name in seen:
                first, before = seen[param.name]
                said = f"{first} {before!r} and {name} {value!r}" if takes_value else f"{first} and {name}"
                return f"{said}: one option given twice (the last would win silently); give it once"
            seen[param.name] = (name, value)
        i += 2 if takes_value and not eq else 1
    return None


def main() -> None:
    """Console-script entry point. Usage mistakes (an unknown option, a value that is not one of the
    choices) are one line on stderr naming the option and what it takes, exit code 2; so is a bad
    planner tunables file (knowledge/planner.toml) and a $HYPOLOOP_KNOWLEDGE that is no folder."""
    from agent.domain.knowledge_dir import KnowledgeDirError
    from agent.planning.weights import PlannerWeightsError, weights

    _private_files()
    if not isinstance(sys.stdout, QuietPipe):
        sys.stdout = QuietPipe(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, QuietPipe):
        sys.stderr = QuietPipe(sys.stderr)  # type: ignore[assignment]
    try:
        weights()  # the planner's tunables: a bad file is one line, not a traceback
        knowledge_dir()  # a $HYPOLOOP_KNOWLEDGE that is no folder: one line
    except (PlannerWeightsError, KnowledgeDirError) as exc:
        print_error(str(exc))
        sys.exit(2)
    command = typer.main.get_command(app)
    tidy_help(command)
    if (twice := repeated_option(command, sys.argv[1:])) is not None:
        print_error(twice)
        raise SystemExit(2)
    try:
        code = command.main(standalone_mode=False, prog_name="hypoloop")
    except _click_errors.NoArgsIsHelpError as exc:
        # the help is the error's message (click prints it on stderr in standalone mode, which is off here):
        # a bare `hypoloop` or `hypoloop findings` shows what there is to run, on stdout, exit code 2 as in click
        sys.stdout.write(exc.format_message().rstrip("\n") + "\n")
        raise SystemExit(2) from None
    except _click_errors.UsageError as exc:
        hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        message = exc.format_message().replace("Value error, ", "")
        print_error(message + hint)
        if json_asked():
            # the promised last line, as any other failure of a --json command gives it (JsonResult)
            print(json.dumps({"run_id": None, "status": "error", "error": message + hint, "exit_code": exc.exit_code}))
        raise SystemExit(exc.exit_code) from None
    except _click_errors.ClickException as exc:
        print_error(exc.format_message())
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else 0)

