"""What every ``hypoloop`` command shares: the typer app, the error console, the one-line failure
(``fail``) with its exit codes, the state folder, the command line's shared options (knowledge folder,
host settings) and the readers of the files a command is given.

Exit codes: 0 finished (isolated, not isolated or stopped), 1 the run ended in error, 2 bad input
(case file, log file, flags, a refused answer), 3 waiting for an approval with no terminal attached, 4 the
run is in use by another hypoloop process, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Literal, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from agent.domain.case import Case, CaseError, HostSpec, load_case
from agent.record.redact import redact_data, run_redactor
from agent.record.transcript import NewerFormat, SkippedLines, TranscriptError
from tools.sanitize import SafeConsole, visible_line, without_credentials

if TYPE_CHECKING:
    from agent.record.recorded import RecordedRun
    from agent.record.runs import GraphReader, RunInfo

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # click's plain help: wraps every word at any width; rich's table cut names with '…'
    help="hypoloop: find why an LLM inference deployment fails, one experiment at a time.",
)
err_console = SafeConsole(stderr=True)


def _source_commit() -> str | None:
    """The short commit of the git checkout hypoloop runs from (``git rev-parse``, 2 s at most), or None:
    installed elsewhere than a checkout's top folder, git absent, or anything git says wrong."""
    import subprocess

    top = Path(__file__).resolve().parents[2]  # agent/cli/common.py -> the checkout's top folder
    if not (top / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "--show-toplevel", "--short", "HEAD"],
            capture_output=True, text=True, timeout=2, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != top:
        return None
    return lines[1]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        commit = _source_commit()
        at = f" (commit {commit})" if commit else ""
        try:
            print(f"hypoloop {version('hypoloop')}{at}")
        except PackageNotFoundError:
            print(f"hypoloop (not installed: run from a source tree){at}")
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option("--version", help="print the version and exit", callback=_version, is_eager=True),
    ] = False,
) -> None:
    """hypoloop: find why an LLM inference deployment fails, one experiment at a time."""

#: The choices of the command line's enumerated options, declared once: typer shows them in the help
#: (``--approve each|risky|auto``) and refuses anything else.
PlannerName = Literal["rules", "llm"]
#: `resume --decision`: an approval answer, or approve-all (the experiment and the rest of its batch).
DecisionOption = Literal["approve", "approve-all", "edit", "reject", "stop"]
ReportFormat = Literal["md", "html"]


class JsonResult:
    """Whether this command promised a JSON result line (``run``/``resume`` with ``--json``) that has
    not been printed yet: a failure then prints ``{"status": "error", "error", "exit_code"}`` as that
    line, so a script reading the last stdout line always finds one."""

    pending = False
    run_id: str | None = None
    #: a command's own JSON went out (``hypoloop show --json``): an error after it adds no second line
    printed = False
    #: the command keeps its own promise (``run``/``resume`` set ``pending``): no line is added for it
    managed = False


class ReaderGone(KeyboardInterrupt):
    """The reader of hypoloop's output went away while a run was driven (``hypoloop run CASE | head``, a
    closed pipe): the run ends as after Ctrl-C (its servers stopped, ``run.ended`` says why, exit 130)
    rather than running on with nobody reading (``agent.cli.entry.QuietPipe`` raises it)."""


class OutputWatch:
    """Whether a closed output now stops the command (``ReaderGone``): set while a run is driven."""

    stop_run = False
    #: the reader went away while a run was driven (the interrupt the main thread gets is this one)
    reader_gone = False


def print_error(message: str) -> None:
    """``message`` as one ``error:`` line on stderr: a newline or other control character in it (a path
    given on the command line) shown visibly (`tools.sanitize.visible_line`), so it stays one line."""
    # soft_wrap: a one-line error stays one line however long its paths are.
    err_console.print(f"[bold red]error:[/] {escape(visible_line(message))}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """End the command: ``message`` as one line on stderr (credentials masked, control characters shown,
    `print_error`), the pending ``--json`` line if one was promised, exit ``code`` (2: bad input, see the
    module's exit codes)."""
    message = without_credentials(message)  # a URL's password is never echoed (nor in the --json line)
    print_error(message)
    if JsonResult.pending or (json_asked() and not JsonResult.printed and not JsonResult.managed):
        JsonResult.pending, JsonResult.printed = False, True
        print(json.dumps({"run_id": JsonResult.run_id, "status": "error", "error": message, "exit_code": code}))
    raise typer.Exit(code)


def json_asked(argv: list[str] | None = None) -> bool:
    """Whether the command line (``sys.argv`` by default) asks for ``--json`` before a ``--``: a usage error
    or a failure before the command printed its own JSON then gives the error's JSON line, so a script
    reading the last stdout line always finds one."""
    args = (sys.argv if argv is None else argv)[1:]
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def warn_skipped(skipped: SkippedLines) -> None:
    """The damaged lines a command read past in a transcript, as one warning line on stderr (none: nothing)."""
    if (text := skipped.summary()) is not None:
        err_console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def load_recorded(path: Path) -> RecordedRun:
    """The run a transcript records, read past damaged lines (a torn last line, a line a crash or an edit
    broke), which one warning line tells; a file with no whole event, a newer format or none to read
    ends the command in one line (``fail``)."""
    from agent.record.recorded import RecordedRun

    skipped = SkippedLines()
    try:
        run = RecordedRun.load(path, on_bad=skipped)
    except TranscriptError as exc:
        unreadable(exc, skipped)
    warn_skipped(skipped)
    return run


def unreadable(exc: TranscriptError, skipped: SkippedLines) -> NoReturn:
    """End a command that could not read a transcript (``exc``) in one line: with the first damaged line
    ``skipped`` holds when no line of the file was whole (which is then what is wrong with it)."""
    if skipped.problems and not isinstance(exc, NewerFormat):
        fail(f"{skipped.problems[0]} (no line of the file is a whole transcript event)")
    fail(str(exc))


def _owner_only(home: Path, created: bool) -> None:
    """Make the state folder (and the store, lock and run folders in it, made by an older hypoloop
    with 0755/0644) private to its owner. The folder itself only when hypoloop made it (now, or before:
    it holds hypoloop's store or run folders): a folder the user pointed HYPOLOOP_HOME at (``/tmp``, a project folder)
    keeps its mode. A path owned by someone else is left as it is."""
    state = (home / "checkpoints.sqlite", home / "locks", home / "runs")
    mine = created or any(p.exists() for p in state)
    for path in ((home,) if mine else ()) + state:
        with contextlib.suppress(OSError):
            st = path.stat()
            if st.st_uid == os.getuid():
                path.chmod(0o700 if path.is_dir() else 0o600)

def state_home() -> Path:
    """Where ``state_dir`` is, not created: ``$HYPOLOOP_HOME`` or ``~/.hypoloop``."""
    return Path(os.environ.get("HYPOLOOP_HOME") or "~/.hypoloop").expanduser()


def no_state_yet() -> bool:
    """Whether the state folder does not exist while it could be made (its nearest existing parent is a
    folder): the commands that only read (``runs``, ``show``) then report it rather than create it, so a
    mistyped ``HYPOLOOP_HOME`` is seen. A path through a file is left to ``state_dir``'s one-line error."""
    home = state_home()
    if home.exists():
        return False
    parent = next((p for p in home.parents if p.exists()), None)
    return parent is not None and parent.is_dir()


def state_dir() -> Path:
    """Where checkpoints, locks, run logs and caches live: ``$HYPOLOOP_HOME`` or ``~/.hypoloop`` (also
    when the variable is set but empty: never the current folder).

    Created if missing; an unusable location is a one-line error (exit 2)."""
    home = state_home()
    try:
        created = not home.exists()
        home.mkdir(parents=True, exist_ok=True)
        _owner_only(home, created)
        # A uniquely named probe, removed on close: concurrent hypoloop processes (two `resume`s
        # answering the same run) must not delete each other's probe.
        with tempfile.TemporaryFile(dir=home, prefix=".write-test-"):
            pass
    except OSError as exc:
        fail(f"HYPOLOOP_HOME={home}: cannot use it as hypoloop's state folder: {_why_not_a_folder(home, exc)}")
    return home


def _why_not_a_folder(home: Path, exc: OSError) -> str:
    """Why ``home`` cannot be a folder, in words: a file where the folder should be (mkdir's "File
    exists"), a file among its parents, else the system's own reason."""
    if home.exists() and not home.is_dir():
        return "it is a file, not a folder; set HYPOLOOP_HOME to a folder (created if missing)"
    parent = next((p for p in home.parents if p.exists() and not p.is_dir()), None)
    if parent is not None:
        return f"{parent} is a file, not a folder; set HYPOLOOP_HOME to a folder (created if missing)"
    return str(exc.strerror or exc)


def transcript_of(arg: Path, read_graph: GraphReader) -> Path:
    """The transcript a review command reads: ``arg`` itself when it is a file, else, when ``arg`` is a
    bare run id (no folder, no ``.jsonl``, printable text), that run's transcript from the state folder
    (``hypoloop runs`` lists the ids; a folder of that name, such as the run's own folder under
    ``runs/``, does not hide the run). Ends with a one-line error (``fail``) when it is a run id the
    store does not know or whose transcript is gone, or a name the system refuses (too long); any other
    path is returned as given, for the caller to report. The state folder is not created to look.
    ``read_graph``: ``agent.run.graph.read_graph``, given by the command (kept out of this module's imports)."""
    text = str(arg)
    try:
        is_file, is_dir = arg.is_file(), arg.is_dir()
    except OSError as exc:
        fail(f"{text}: cannot read: {exc.strerror}")
    if is_file or arg.suffix == ".jsonl" or "/" in text or "\\" in text or not text.isprintable() \
            or not text.strip() or text in (".", ".."):
        return arg
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return arg
    from agent.record.runs import RunError, home_dir, load_run

    home = home_dir()
    if not (home / "checkpoints.sqlite").is_file():
        if is_dir:
            return arg
        fail(f"{text}: no such transcript file, and no run store at {home} (see `hypoloop runs`)")
    try:
        info = load_run(state_dir(), text, read_graph)
    except RunError as exc:
        if is_dir:
            return arg
        fail(f"{text}: no such transcript file, and {exc}")
    if not info.transcript or not Path(info.transcript).exists():
        fail(f"{text}: the run's transcript {info.transcript or '(none recorded)'} is gone")
    return Path(info.transcript)


def redacted(obj: Any, values: dict[str, Any] | None = None) -> Any:
    """``obj`` (text or JSON-like data) as it may be printed: the run's redaction, with the case in the
    run's checkpointed ``values`` (if any) and this process's environment."""
    case = None
    if values and values.get("case"):
        try:
            case = Case.model_validate(values["case"])
        except ValidationError:
            case = None
    return redact_data(obj, run_redactor(case))

# Host options shared by `run` and `flags`; they win over the case file's [host] fields.
KnowledgeOpt = Annotated[
    Path | None,
    typer.Option(
        "--knowledge",
        help="a knowledge folder holding any of the files of knowledge/ (a file it lacks is the "
        "repository's); default $HYPOLOOP_KNOWLEDGE, else knowledge/",
    ),
]


def redacted_info(info: RunInfo) -> RunInfo:
    """A run as ``runs``/``show`` print it: pending request and result redacted (values kept for use)."""
    safe = redacted(info.model_dump(mode="json", exclude={"values"}), info.values)
    return info.model_validate({**safe, "values": info.values})


STATUS_STYLE = {
    "running": "cyan",
    "waiting_for_approval": "bold yellow",
    "finished": "green",
    "interrupted": "red",
}


#: ``HYPOLOOP_*`` variables that are no user's setting: hypoloop sets them on the servers it launches
#: (``tools.leftovers``), and the tests' fault injection must never follow a pasted command.
_NOT_SETTINGS = ("HYPOLOOP_LAUNCH_LOG", "HYPOLOOP_ORCHESTRATOR", "HYPOLOOP_FAULT_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def resume_command(run_id: str) -> str:
    """``hypoloop resume RUN_ID`` to paste into another terminal: preceded by this process's own
    ``HYPOLOOP_*`` settings (``HYPOLOOP_HOME`` says where the run is at all; the lab's clock and world,
    the knowledge folder), shell-quoted, a relative path made absolute; none when none is set. A
    variable whose name says it holds a secret is left out (it is never printed)."""
    import shlex

    words = []
    for name in sorted(os.environ):
        value = os.environ[name]
        if not name.startswith("HYPOLOOP_") or name.startswith(_NOT_SETTINGS):
            continue
        if any(w in name for w in _SECRET_WORDS):
            continue
        if value and not os.path.isabs(value) and (value.startswith("~") or Path(value).exists()):
            value = str(Path(value).expanduser().resolve())
        words.append(f"{name}={shlex.quote(value)}")
    return " ".join([*words, "hypoloop", "resume", run_id])


def held_elsewhere(holder: int) -> str:
    """What a run held by another live hypoloop process (``RunInfo.holder``, its pid; -1 when its lock file
    names none) is doing, for ``runs`` and ``show``: it runs there, not waiting for ``resume``."""
    who = f" (pid {holder})" if holder > 0 else ""
    return f"running in another hypoloop process{who}, which holds the run and asks for the answer"


def said(status: str) -> str:
    """A status as a person reads it (``waiting_for_approval`` → "waiting for approval")."""
    return status.replace("_", " ")


def using_knowledge(
    folder: Path | str | None, *, given: bool = True
) -> contextlib.AbstractContextManager[Path | None]:
    """Within the block, the knowledge folder is ``folder`` (a bad folder: one line, exit 2). ``given``:
    the user named it (``--knowledge``), so a file in it hypoloop would not read is refused the same way
    (a folder a run recorded is used as it is)."""
    from agent.domain.knowledge_dir import KnowledgeDirError, check_dir, check_known_files, use_knowledge

    try:
        checked = check_dir(folder) if folder is not None else None
        if checked is not None and given:
            check_known_files(checked)
        return use_knowledge(checked)
    except KnowledgeDirError as exc:
        fail(str(exc))


HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        help="local, ssh://[USER@]HOST[:PORT] (HOST may be an ~/.ssh/config alias), slurm://PARTITION or "
        "slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION",
    ),
]
KeyOpt = Annotated[Path | None, typer.Option("--ssh-key", help="private key for the SSH host")]
KnownOpt = Annotated[
    Path | None, typer.Option("--known-hosts", help="known_hosts file to check the SSH host key against")
]
InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure-accept-host-key",
        help="accept any SSH host key (throwaway hosts only; written to the transcript)",
    ),
]
PythonOpt = Annotated[
    str | None, typer.Option("--remote-python", help="what {python} means on the SSH host (default python3)")
]
CaseHostOpt = Annotated[str | None, typer.Option("--case", help="use this case's host and launcher")]
LauncherOpt = Annotated[str, typer.Option("--launcher", help="launcher command on the host")]
#: The launcher ``flags`` and ``doctor`` ask when neither ``--case`` nor ``--launcher`` says another.
DEFAULT_LAUNCHER = "python -m sglang.launch_server"


def launcher_words(launcher: str) -> list[str]:
    """``--launcher``'s command as argv words; an empty one is one line and exit 2."""
    words = launcher.split()
    if not words:
        fail(f"--launcher {launcher!r}: expected the launcher command, e.g. {DEFAULT_LAUNCHER}")
    return words


@dataclass(frozen=True)
class HostOptions:
    """The command line's host settings (``--host``, ``--ssh-key``, ``--known-hosts``,
    ``--insecure-accept-host-key``, ``--remote-python``) as given; None/False: not given."""

    host: str | None = None
    ssh_key: Path | None = None
    known_hosts: Path | None = None
    insecure_accept_host_key: bool = False
    remote_python: str | None = None


def with_host_options(c: Case, options: HostOptions) -> Case:
    """The case with the command line's host settings applied (paths made absolute)."""
    update: dict[str, Any] = {}
    if options.host is not None:
        update["target"] = options.host
    if options.ssh_key is not None:
        update["ssh_key"] = str(options.ssh_key.expanduser().resolve())
    if options.known_hosts is not None:
        update["known_hosts"] = str(options.known_hosts.expanduser().resolve())
    if options.insecure_accept_host_key:
        update["insecure_accept_host_key"] = True
    if options.remote_python is not None:
        update["remote_python"] = options.remote_python
    if not update:
        return c
    try:
        spec = HostSpec.model_validate({**c.host.model_dump(), **update})
    except ValidationError as exc:
        fail(_host_option_error(exc))
    return c.model_copy(update={"host": spec})


_HOST_OPTIONS = {
    "target": "--host",
    "ssh_key": "--ssh-key",
    "known_hosts": "--known-hosts",
    "remote_python": "--remote-python",
}


def _host_option_error(exc: ValidationError) -> str:
    """One line naming the command-line option behind a host setting that does not validate."""
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else "target"
    return f"{_HOST_OPTIONS.get(field, 'host.' + field)}: {err['msg'].removeprefix('Value error, ')}"


def read_case(ref: str, host: str | None) -> Case:
    """The case file, with ``--host`` (checked first, so its errors name the option) in place of the
    file's host.target: a host given on the command line wins even over an unusable one in the file."""
    if host is not None:
        try:
            HostSpec.model_validate({"target": host})
        except ValidationError as exc:
            fail(_host_option_error(exc))
    try:
        return load_case(ref, host_target=host)
    except CaseError as exc:
        fail(str(exc))


def approval_mode(approve: str | None, auto: bool) -> str | None:
    """The approval mode the command line asks for (``--auto`` is ``--approve auto``), or None. ``--auto``
    with another ``--approve`` mode is a contradiction: one line, exit 2 (never the less careful one)."""
    if auto and approve not in (None, "auto"):
        fail(f"--auto and --approve {approve} contradict each other (--auto is --approve auto): give one")
    return "auto" if auto else approve


def read_text(path: Path, *, what: str) -> str:
    """A text file's content, or a one-line error (exit 2) for a missing, unreadable or binary file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}")
    if b"\0" in data[:65536]:
        fail(f"{path}: not a text file (expected a {what})")
    return data.decode("utf-8", errors="replace")


def read_log_text(path: Path) -> str:
    """A server log's text for reading whole (``analyze``): ``-`` is standard input, a FIFO is read as a
    stream to its end (a note on stderr while no writer has opened it), any other file that is not a
    regular file is refused. A line over 64 KiB is cut to its first 64 KiB and a note
    (``tools.logwatch.read_capped``, as a run's watcher reads it). Stray NUL and invalid UTF-8 bytes are
    replaced (``tools.logtext.decode_log``), with a note on stderr saying what and where. A missing,
    unreadable, special or mostly binary file, or a text with no line a server writes
    (``tools.log_records.looks_like_log``: a README, notes), is a one-line error (exit 2)."""
    from tools.engines import engines_data
    from tools.log_records import looks_like_log
    from tools.logtext import NotText, decode_log
    from tools.logwatch import read_capped

    try:
        if str(path) == "-":
            if sys.stdin.isatty():
                err_console.print("reading the log from standard input (end it with Ctrl-D)", highlight=False)
            data = read_capped(sys.stdin.buffer)
        else:
            with _regular_or_fifo(path) as f:
                data = read_capped(f)
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}")
    try:
        decoded = decode_log(data)
    except NotText as exc:
        fail(f"{path}: not a text file: {exc} (expected a log)")
    if (note := decoded.note()) is not None:
        err_console.print(f"note: {escape(str(path))}: {escape(note)}", highlight=False, soft_wrap=True)
    if decoded.text.strip() and not looks_like_log(decoded.text):  # a README's quoted errors are no failure
        engines = " or ".join(d.display for d in engines_data().values())
        fail(f"{path}: does not look like a server log: none of its lines is a log record (a time or level "
             "header), a Python traceback or error, or a command-line error; nothing to analyze (expected the "
             f"output of an inference server such as {engines})")
    return decoded.text


@contextlib.contextmanager
def _regular_or_fifo(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened for reading when it is a regular file or a FIFO (read to its writer's end, see
    `_read_fifo`); anything else (a directory, a device, a socket: read forever or not at all) is a
    one-line error (exit 2). Raises OSError when the file cannot be read."""
    import io
    import stat

    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        fail(f"{path}: is a directory (expected a log file)")
    if stat.S_ISFIFO(mode):
        yield io.BytesIO(_read_fifo(path))
    elif stat.S_ISREG(mode):
        with path.open("rb") as f:
            yield f
    else:
        fail(f"{path}: not a regular file (expected a log file, a FIFO, or - for standard input)")


def _read_fifo(path: Path) -> bytes:
    """What a FIFO's writer sends, to its end (the writer closes it). Opened without blocking and read
    when the FIFO shows data or its writer's end (a blocking open would wait unseen, and a reopen could
    miss a writer that came and went in between); while no writer has come for 0.3 s, stderr says so."""
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    try:
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        if not poll.poll(300):
            err_console.print(f"{escape(str(path))} is a FIFO: waiting for a writer to send the log (Ctrl-C to stop)",
                              highlight=False, soft_wrap=True)
        while True:
            poll.poll()  # data, or the writer's end (Linux reports a hang-up only once a writer has come)
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def piped_console() -> Console:
    """The console of a listing command: the terminal's width; piped with no COLUMNS, 80 columns (the
    listings then use their one-record-a-few-lines layout, whose lines wrap and are never cut)."""
    return SafeConsole() if sys.stdout.isatty() or os.environ.get("COLUMNS") else SafeConsole(width=80)

