"""The ``hypoloop`` command line: run, analyze, flags, replay.

Exit codes: 0 finished (isolated, not isolated or stopped), 1 the run ended in error, 2 bad input
(case file, log file, flags, a refused answer), 3 waiting for an approval with no terminal attached, 4 the
run is in use by another hypoloop process, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import json
import os
import re
import secrets
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.domain.case import Case, CaseError, HostSpec, LauncherSpec, ModelSpec, load_case, outside_warnings
from agent.domain.knowledge_dir import chosen_dir, knowledge_dir, knowledge_file
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.catalog import CatalogError
from agent.planning.planner import PlannerView, RulePlanner, model_features
from agent.planning.values import effective_before, suggestions_in_log
from agent.record.redact import redact_data, run_redactor
from agent.record.transcript import Transcript, TranscriptError, damaged_lines, read_transcript
from agent.review.render import EventRenderer, print_hanging, shown_line
from agent.review.wording import count
from agent.run.approval import (
    ApprovalAnswer,
    ApprovalMode,
    ApprovalRequest,
    EditError,
    approval_panel,
    ask,
    describe_experiment,
)
from agent.run.progress import ProgressBoard
from tools.connect import connect_host
from tools.engines import detect_log
from tools.fingerprint import HostFingerprint, fingerprint
from tools.flags import FlagCatalog, FlagError, catalog_from_server_args, parse_help
from tools.flags import load_catalog as load_flag_catalog
from tools.host import HostError, expand_argv
from tools.knowledge import KnowledgeError, check_knowledge_files, infer_features
from tools.sanitize import SafeConsole, without_credentials
from tools.signatures import for_engine, load_signatures

if TYPE_CHECKING:  # the heavy modules (LangGraph, the LLM client) load only in the commands that need them
    from agent.domain.models import Hypothesis, Outcome, RelevantFinding
    from agent.planning.catalog import CatalogEntry
    from agent.planning.planner import Proposal
    from agent.record.runs import RunInfo
    from agent.run.runtime import Runtime
    from tools.signatures import Signature

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # click's plain help: wraps every word at any width; rich's table cut names with '…'
    help="hypoloop: find why an LLM inference deployment fails, one experiment at a time.",
)
err_console = SafeConsole(stderr=True)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"hypoloop {version('hypoloop')}")
        except PackageNotFoundError:
            print("hypoloop (not installed: run from a source tree)")
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


class _JsonResult:
    """Whether this command promised a JSON result line (``run``/``resume`` with ``--json``) that has
    not been printed yet: a failure then prints ``{"status": "error", "error", "exit_code"}`` as that
    line, so a script reading the last stdout line always finds one."""

    pending = False
    run_id: str | None = None


def _fail(message: str, code: int = 2) -> NoReturn:
    message = without_credentials(message)  # a URL's password is never echoed (nor in the --json line)
    # soft_wrap: a one-line error stays one line however long its paths are.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if _JsonResult.pending:
        _JsonResult.pending = False
        print(json.dumps({"run_id": _JsonResult.run_id, "status": "error", "error": message, "exit_code": code}))
    raise typer.Exit(code)


def _owner_only(home: Path) -> None:
    """Make the state folder (and the store, lock and run folders in it, made by an older hypoloop
    with 0755/0644) private to its owner; a folder owned by someone else is left as it is."""
    for path in (home, home / "checkpoints.sqlite", home / "locks", home / "runs"):
        with contextlib.suppress(OSError):
            st = path.stat()
            if st.st_uid == os.getuid():
                path.chmod(0o700 if path.is_dir() else 0o600)


def _private_files() -> None:
    """Every file and folder hypoloop creates (checkpoints.sqlite holding the case as given, locks,
    runs/*, server logs, transcripts, caches) is private: 0600 files in 0700 folders (umask 077). The
    servers it launches keep the user's own umask (``tools.host.SERVER_UMASK``)."""
    import tools.host

    user = os.umask(0o077)
    if tools.host.SERVER_UMASK < 0:
        tools.host.SERVER_UMASK = user


def state_dir() -> Path:
    """Where checkpoints, locks, run logs and caches live: ``$HYPOLOOP_HOME`` or ``~/.hypoloop``.

    Created if missing; an unusable location is a one-line error (exit 2)."""
    home = Path(os.environ.get("HYPOLOOP_HOME", "~/.hypoloop")).expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True)
        _owner_only(home)
        # A uniquely named probe, removed on close: concurrent hypoloop processes (two `resume`s
        # answering the same run) must not delete each other's probe.
        with tempfile.TemporaryFile(dir=home, prefix=".write-test-"):
            pass
    except OSError as exc:
        _fail(f"HYPOLOOP_HOME={home}: cannot use it as hypoloop's state folder: {exc.strerror or exc}")
    return home


def _redacted(obj: Any, values: dict[str, Any] | None = None) -> Any:
    """``obj`` (text or JSON-like data) as it may be printed: the run's redaction, with the case in the
    run's checkpointed ``values`` (if any) and this process's environment."""
    case = None
    if values and values.get("case"):
        try:
            case = Case.model_validate(values["case"])
        except ValidationError:
            case = None
    return redact_data(obj, run_redactor(case))


def _interrupted(rt: Runtime, tr: Transcript, tpath: Path, run_id: str, *, json_out: bool) -> NoReturn:
    """End a run cut short by Ctrl-C or SIGTERM: stop its servers (recorded), say so, exit 130."""
    rt.close()
    tr.emit("run.ended", {"status": "interrupted", "reason": "interrupted (Ctrl-C or SIGTERM)"})
    err_console.print(f"interrupted; every server this run launched is stopped. transcript: {tpath}")
    if json_out:  # the promised last line; "stopped" because the user ended it
        print(json.dumps({"run_id": run_id, "status": "stopped", "reason": "interrupted", "root_cause": None,
                          "transcript": str(tpath)}))
    raise typer.Exit(130)


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    # A closed terminal (SIGHUP) ends the run the same way: its servers are stopped, not left running.
    signal.signal(signal.SIGHUP, handler)


def _waiting_json(request: ApprovalRequest, transcript: Path) -> str:
    """The ``--json`` line of a run that waits for an approval (exit 3), as the README documents it."""
    exp = request.experiment
    return json.dumps(
        {
            "run_id": request.run_id,
            "status": "waiting_for_approval",
            "pending": {
                "experiment_id": exp.id,
                "purpose": exp.purpose,
                "change": exp.change.model_dump(mode="json") if exp.change else None,
                "tests": request.tests,
                "risky": request.risky,
                "error": request.error,
            },
            "launches": request.launches,
            "host_seconds": request.host_seconds,
            "transcript": str(transcript),
        }
    )


def _pause(
    tr: Transcript,
    request: ApprovalRequest,
    console: Console,
    *,
    json_out: bool,
    why: str,
    code: int = 3,
    panel: bool = True,
) -> NoReturn:
    """Leave the run waiting for approval (its state is already checkpointed) and exit with ``code``."""
    exp = request.experiment
    tr.emit("run.paused", {"waiting_for": exp.id, "reason": why}, node="approve")
    if panel:
        console.print(approval_panel(request))
    print_hanging(
        console,
        f"run [bold]{request.run_id}[/] waits for approval of {exp.id} ({escape(describe_experiment(exp))}); "
        f"{why}. Answer with: hypoloop resume {request.run_id} --decision approve|edit|reject|stop "
        "[--reason TEXT] [--set NAME=VALUE]",
    )
    if json_out:
        print(_waiting_json(request, tr.path))
    raise typer.Exit(code)


def _drive(
    graph: Any,
    config: dict[str, Any],
    first: Any,
    *,
    rt: Runtime,
    console: Console,
    json_out: bool,
    mode: str | None = None,
) -> dict[str, Any]:
    """Run the graph and answer its approval requests until the run ends.

    At a terminal each request shows the approval screen and waits for an answer (an edit is checked
    before it is sent, and asked again if refused). With no terminal, or at end of input, the run is
    left waiting (exit 3); Ctrl-C at the prompt leaves it waiting too (exit 130). ``mode`` switches the
    approval mode with the first answer.
    """
    from langgraph.types import Command

    from agent.run.nodes.approve import edit_experiment
    # durability="sync": each step's checkpoint is on disk before the next step starts (and so before
    # its side effects); LangGraph's default ("async") can lose the checkpoint after a step to a kill -9.
    result: dict[str, Any] = graph.invoke(first, config, durability="sync")
    while result.get("__interrupt__"):
        request = ApprovalRequest.model_validate(result["__interrupt__"][0].value)
        if not sys.stdin.isatty():
            _pause(rt.transcript, request, console, json_out=json_out, why="no terminal is attached")
        values = graph.get_state(config).values
        try:
            answer = ask(
                request,
                console,
                check_edit=functools.partial(edit_experiment, rt, values, request.experiment),  # type: ignore[arg-type]
            )
        except (EOFError, KeyboardInterrupt) as exc:
            console.print()
            eof = isinstance(exc, EOFError)
            _pause(
                rt.transcript,
                request,
                console,
                json_out=json_out,
                why="the terminal closed its input" if eof else "interrupted at the prompt",
                code=3 if eof else 130,
                panel=False,
            )
        if mode:
            answer.mode, mode = mode, None  # type: ignore[assignment]
        result = graph.invoke(
            Command(resume=answer.model_dump(mode="json", exclude_none=True)), config, durability="sync"
        )
    return result


def _drive_guarded(
    graph: Any,
    config: dict[str, Any],
    first: Any,
    *,
    rt: Runtime,
    tr: Transcript,
    tpath: Path,
    run_id: str,
    console: Console,
    json_out: bool,
    mode: str | None = None,
) -> dict[str, Any]:
    """``_drive``, ending the run properly when it is cut short: on Ctrl-C/SIGTERM (exit 130), unusable
    knowledge (exit 2) or a bug (exit 1, traceback kept in the transcript), the run's servers are stopped
    and ``run.ended`` says why."""
    try:
        return _drive(graph, config, first, rt=rt, console=console, json_out=json_out, mode=mode)
    except KeyboardInterrupt:
        _interrupted(rt, tr, tpath, run_id, json_out=json_out)
    except (CatalogError, CaseError) as exc:
        rt.close()
        tr.emit("error", {"message": str(exc)})
        tr.emit("run.ended", {"status": "error", "reason": str(exc)})
        _fail(str(exc))
    except typer.Exit:
        raise
    except Exception as exc:
        full = _no_space(exc)
        if full is not None:  # hypoloop's own files (transcript, results, checkpoints): not a bug
            _out_of_space(rt, tr, run_id, full)
        # a bug: keep the details in the transcript, tell the user in one line
        rt.close()
        tr.emit("error", {"message": f"internal error: {exc!r}", "traceback": traceback.format_exc()})
        tr.emit("run.ended", {"status": "error", "reason": f"internal error: {exc!r}"})
        _fail(f"internal error: {exc!r} (traceback in {tpath})", code=1)


def _no_space(exc: BaseException) -> str | None:
    """What could not be written, when ``exc`` (or an exception it came from) is a full disk or quota:
    an OSError ENOSPC/EDQUOT (the transcript, a saved result) or SQLite's "database or disk is full"
    (the checkpoint store); else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            what = current.filename or "hypoloop's files"
            return f"cannot write {what} ({current.strerror or 'no space left on device'})"
        if isinstance(current, sqlite3.OperationalError) and "full" in str(current).lower():
            return f"cannot write the checkpoint store ({current})"
        current = current.__cause__ or current.__context__
    return None


def _out_of_space(rt: Runtime, tr: Transcript, run_id: str, what: str) -> NoReturn:
    """End a run whose own files could not be written (the disk is full): stop its servers, say so in one
    line (exit 1). Its checkpoint keeps every step completed before, so ``resume`` continues it once there
    is room; what cannot be written now is not written."""
    message = (
        f"the disk is full: {what}; every server this run launched is stopped and its state is kept up to "
        f"its last completed step: free some space in {rt.state_dir} and beside the transcript, then "
        f"continue with: hypoloop resume {run_id}"
    )
    with contextlib.suppress(OSError):
        rt.close()
    tr.listeners.clear()  # the one line below says it; the transcript gets it too if it has room
    with contextlib.suppress(OSError):
        tr.emit("error", {"message": message})
        tr.emit("run.ended", {"status": "error", "reason": message})
    _fail(message, code=1)


def _command_for(run: Any) -> str:
    """The copy-paste launch command of a finished run's working configuration (host env included)."""
    from agent.review.findings import working_command

    return working_command(run, host_env=True)


def _check_knowledge() -> None:
    """Load the knowledge folder's signatures and hypothesis catalog once; a file that cannot be used is
    one line and exit 2 (CatalogError/ValueError name the file and the entry)."""
    from agent.planning.catalog import load_catalog

    try:
        load_signatures(knowledge_file("signatures.toml"))
        load_catalog()
        check_knowledge_files()
    except (CatalogError, KnowledgeError, ValueError) as exc:
        _fail(str(exc))


def _report(result: dict[str, Any], run_id: str, tpath: Path, *, json_out: bool, console: Console) -> None:
    """Print how the run ended (a JSON line with ``--json``); exit 1 if it ended in error."""
    from agent.planning.llm_planner import describe_usage
    conclusion = result.get("conclusion") or {}
    status = conclusion.get("status", "error")
    llm_usage = conclusion.get("llm_usage")
    if llm_usage:  # the tokens the LLM planner spent (stderr with --json, so stdout stays one JSON line)
        console.print(escape(describe_usage(llm_usage)), highlight=False)
    if json_out:
        _JsonResult.pending = False  # this is the line; an error exit after it adds none
        root = conclusion.get("root_cause")
        fix = conclusion.get("fix")
        out = {
            "run_id": run_id,
            "status": status,
            "root_cause": None
            if not root
            else {
                "component": root["component"],
                "statement": root["statement"],
                "fix": {k: fix[k] for k in ("kind", "name", "before", "after")} if fix else None,
                # a chain: the changes adopted before the fix; the working configuration needs them all
                "blockers": [
                    {k: b.get(k) for k in ("kind", "name", "before", "after")} for b in conclusion.get("blockers", [])
                ],
                # other changes that avoid it: root fixes first, then cheapest in performance
                "alternatives": [
                    {k: a.get(k) for k in ("kind", "name", "change", "workaround", "cost", "decisive", "result")}
                    for a in conclusion.get("alternatives", [])
                ],
            },
            "launches": conclusion.get("launches", 0),
            "host_seconds": conclusion.get("host_seconds", 0.0),
            "transcript": str(tpath),
            "rejected": conclusion.get("rejected", []),
            "edited": conclusion.get("edited", []),
            "reason": conclusion.get("reason", ""),  # why the run ended as it did
            # not_isolated: the component and package the failure points at (None: nothing failed)
            "implicated": conclusion.get("implicated"),
            # what the run ruled out, each with the evidence that did; what stayed open, and why
            "ruled_out": [
                {"id": r["id"], "component": r.get("component"),
                 "evidence": [e.get("detail") for e in r.get("evidence", [])]}
                for r in conclusion.get("refuted", [])
            ],
            "untested": [{"id": u["id"], "why": u.get("why")} for u in conclusion.get("untested", [])],
        }
        if llm_usage:
            out["llm_usage"] = llm_usage
        if status == "error":
            out["error"] = conclusion.get("reason")
        print(json.dumps(_redacted(out, result)))
    else:
        print_hanging(console, f"transcript: {escape(str(tpath))}")
    if status == "error":
        if result.get("error_kind") == "input":
            # Nothing was launched: the case's host, launcher or baseline is unusable as written.
            _fail(str(conclusion.get("reason")))
        raise typer.Exit(1)  # the error itself was printed as it happened


# Host options shared by `run` and `flags`; they win over the case file's [host] fields.
_KnowledgeOpt = Annotated[
    Path | None,
    typer.Option(
        "--knowledge",
        help="a knowledge folder (signatures.toml, hypotheses.toml, symptoms.toml, limits.toml, risky.toml; "
        "a file it lacks is the repository's); default $HYPOLOOP_KNOWLEDGE, else knowledge/",
    ),
]


def _use_knowledge(folder: Path | str | None) -> contextlib.AbstractContextManager[Path | None]:
    """Within the block, the knowledge folder is ``folder`` (a bad folder: one line, exit 2)."""
    from agent.domain.knowledge_dir import KnowledgeDirError, check_dir, use_knowledge

    try:
        return use_knowledge(check_dir(folder) if folder is not None else None)
    except KnowledgeDirError as exc:
        _fail(str(exc))


_HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        help="local, ssh://[USER@]HOST[:PORT] (HOST may be an ~/.ssh/config alias), slurm://PARTITION or "
        "slurm+ssh://[USER@]LOGIN[:PORT]/PARTITION",
    ),
]
_KeyOpt = Annotated[Path | None, typer.Option("--ssh-key", help="private key for the SSH host")]
_KnownOpt = Annotated[
    Path | None, typer.Option("--known-hosts", help="known_hosts file to check the SSH host key against")
]
_InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure-accept-host-key",
        help="accept any SSH host key (throwaway hosts only; written to the transcript)",
    ),
]
_PythonOpt = Annotated[
    str | None, typer.Option("--remote-python", help="what {python} means on the SSH host (default python3)")
]


def _with_host_options(
    c: Case,
    host: str | None,
    ssh_key: Path | None,
    known_hosts: Path | None,
    insecure: bool,
    remote_python: str | None,
) -> Case:
    """The case with the command line's host settings applied (paths made absolute)."""
    update: dict[str, Any] = {}
    if host is not None:
        update["target"] = host
    if ssh_key is not None:
        update["ssh_key"] = str(ssh_key.expanduser().resolve())
    if known_hosts is not None:
        update["known_hosts"] = str(known_hosts.expanduser().resolve())
    if insecure:
        update["insecure_accept_host_key"] = True
    if remote_python is not None:
        update["remote_python"] = remote_python
    if not update:
        return c
    try:
        spec = HostSpec.model_validate({**c.host.model_dump(), **update})
    except ValidationError as exc:
        _fail(_host_option_error(exc))
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


def _load_case(ref: str, host: str | None) -> Case:
    """The case file, with ``--host`` (checked first, so its errors name the option) in place of the
    file's host.target: a host given on the command line wins even over an unusable one in the file."""
    if host is not None:
        try:
            HostSpec.model_validate({"target": host})
        except ValidationError as exc:
            _fail(_host_option_error(exc))
    try:
        return load_case(ref, host_target=host)
    except CaseError as exc:
        _fail(str(exc))


def _host_notices(console: Console) -> Any:
    """A transcript listener that shows what happens to the connection and to orphaned servers."""

    def show(ev: Any) -> None:
        d = ev.data
        if ev.type == "host.connected" and not d.get("host_key_checked", True):
            console.print(
                f"[yellow]warning:[/] host key of {escape(str(d.get('hostname')))} NOT checked "
                f"(--insecure-accept-host-key): {escape(str(d.get('host_key')))}"
            )
        elif ev.type == "host.connection_lost":
            console.print(
                f"[yellow]connection to the host lost[/] ({escape(str(d.get('reason')))}); reconnecting"
            )
        elif ev.type == "host.reconnected":
            console.print("[green]reconnected[/] to the host")
        elif ev.type == "host.orphans" and d.get("orphans"):
            for o in d["orphans"]:
                what = (
                    f"Slurm job {o['job_id']} of run {escape(str(o.get('run_id')))} ({escape(str(o.get('state')))})"
                    if o.get("job_id") is not None
                    else f"process group {o['pgid']}"
                )
                console.print(
                    f"[yellow]orphaned server[/] on the host: {what}, log {escape(o['log_path'])}"
                    f" ({escape(o['why'])})"
                )
        elif ev.type == "host.orphans_left":
            console.print(
                f"left {count(d.get('count'), 'orphaned server')} running: {escape(str(d.get('reason')))}"
            )
        elif ev.type == "host.orphan_stopped":
            what = f"Slurm job {d.get('job_id')}" if d.get("job_id") is not None else f"process group {d.get('pgid')}"
            console.print(
                f"stopped orphaned server ({what})"
                + ("" if d.get("verified") else " [red]but could not verify it is gone[/]")
            )

    return show


def _confirm_orphans(orphans: list[dict[str, Any]]) -> bool:
    """Ask at the terminal whether to stop the orphaned servers just listed."""
    what = "the orphaned server" if len(orphans) == 1 else f"the {len(orphans)} orphaned servers"
    err_console.print(f"stop {what}? [y/N]: ", end="")
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _approval_mode(approve: str | None, auto: bool) -> str | None:
    return "auto" if auto else approve


@app.command()
def run(
    case: Annotated[
        str, typer.Argument(help="a case TOML file, or lab:WORLD for a case shipped with the lab")
    ],
    auto: Annotated[
        bool, typer.Option("--auto", help="approve every experiment without asking (--approve auto)")
    ] = False,
    approve: Annotated[
        ApprovalMode | None,
        typer.Option(
            "--approve",
            help="each: ask before every launch; risky: ask only for changes knowledge/risky.toml "
            "marks risky; auto: never ask",
            show_default="the case file's approval, else each",
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the result as one JSON line at the end")
    ] = False,
    transcript_dir: Annotated[Path, typer.Option(help="where the run's transcript is written")] = Path(
        "transcripts"
    ),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates too")] = False,
    host: _HostOpt = None,
    ssh_key: _KeyOpt = None,
    known_hosts: _KnownOpt = None,
    insecure_accept_host_key: _InsecureOpt = False,
    remote_python: _PythonOpt = None,
    planner: Annotated[
        PlannerName,
        typer.Option("--planner", help="rules: the rule planner, no network; llm: a model behind an "
                     "OpenAI-compatible endpoint chooses the experiments"),
    ] = "rules",
    model: Annotated[str | None, typer.Option("--model", help="llm: the model name the endpoint serves")] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="llm: OpenAI-compatible URL ending in /v1 (default api.openai.com)"),
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option("--api-key-env", help="llm: variable holding the API key (OPENAI_API_KEY)")
    ] = None,
    llm_context_tokens: Annotated[
        int | None, typer.Option("--llm-context-tokens", help="llm: prompt budget per request (12000)")
    ] = None,
    llm_token_budget: Annotated[
        int | None, typer.Option("--llm-token-budget", help="llm: tokens the whole run may spend (300000)")
    ] = None,
    llm_timeout: Annotated[
        float | None, typer.Option("--llm-timeout", help="llm: seconds per request (180)")
    ] = None,
    redact_hosts: Annotated[
        bool, typer.Option("--redact-hosts", help="llm: also mask host names and IP addresses it is sent")
    ] = False,
    knowledge: _KnowledgeOpt = None,
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel",
            help="run up to N one-change experiments at once, each for a different hypothesis (e.g. one "
            "Slurm job each); 1: one at a time",
        ),
    ] = 1,
) -> None:
    """Debug a deployment: hypothesize, run one-change experiments, conclude with the root cause."""
    _JsonResult.pending = json_out
    with _use_knowledge(knowledge):
        _run(case, auto, approve, json_out, transcript_dir, verbose, host, ssh_key, known_hosts,
             insecure_accept_host_key, remote_python, planner, model, base_url, api_key_env,
             llm_context_tokens, llm_token_budget, llm_timeout, redact_hosts, parallel)


def _run(
    case: str, auto: bool, approve: str | None, json_out: bool, transcript_dir: Path, verbose: bool,
    host: str | None, ssh_key: Path | None, known_hosts: Path | None, insecure_accept_host_key: bool,
    remote_python: str | None, planner: str, model: str | None, base_url: str | None,
    api_key_env: str | None, llm_context_tokens: int | None, llm_token_budget: int | None,
    llm_timeout: float | None, redact_hosts: bool, parallel: int = 1,
) -> None:
    from agent.planning.llm_planner import llm_notices, planner_spec_from_options
    from agent.record.runs import RunError, RunLock, open_checkpointer
    from agent.run.graph import build_graph
    from agent.run.runtime import Runtime
    from agent.run.state import initial_state
    mode = _approval_mode(approve, auto)
    if parallel < 1:
        _fail(f"--parallel {parallel}: expected a whole number of at least 1")
    try:
        planner_spec = planner_spec_from_options(
            planner,
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            context_tokens=llm_context_tokens,
            token_budget=llm_token_budget,
            timeout_s=llm_timeout,
            redact_hosts=redact_hosts,
        )
    except ValueError as exc:
        _fail(str(exc))
    c = _load_case(case, host)
    c = _with_host_options(c, host, ssh_key, known_hosts, insecure_accept_host_key, remote_python)
    _check_knowledge()  # unusable knowledge is refused before a run (and its checkpoint) exists
    for warning in outside_warnings(c):
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    run_id = time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    tpath = (transcript_dir / f"{run_id}.jsonl").absolute()  # printed and recorded: usable from anywhere
    _JsonResult.run_id = run_id
    sdir = state_dir()
    store = open_checkpointer(sdir)
    try:
        saver = store.__enter__()
    except RunError as exc:  # a damaged store: nothing was started yet
        _fail(str(exc))
    lock = RunLock(sdir, run_id).acquire()  # `runs` shows it running; a concurrent `resume` is refused
    try:
        tr = Transcript(tpath, run_id, redact=run_redactor(c))
    except OSError as exc:
        store.__exit__(None, None, None)
        lock.release()
        _fail(f"{transcript_dir}: cannot write the transcript: {exc.strerror}")
    console = SafeConsole(stderr=json_out)
    tr.listeners.append(
        EventRenderer(console, verbose=verbose, show_input_errors=False, launch_progress=True, command_for=_command_for)
    )
    tr.listeners.append(_host_notices(err_console))
    tr.listeners.append(llm_notices(console))
    rt = Runtime(tr, sdir, progress=ProgressBoard(console))
    # Servers that crashed runs left on the host: stopped with --auto, else after a yes at the terminal.
    rt.stop_orphans = auto
    rt.confirm_orphans = _confirm_orphans if sys.stdin.isatty() else None
    graph = build_graph(rt, saver)
    config: dict[str, Any] = {"configurable": {"thread_id": run_id}, "recursion_limit": 1000}
    _sigterm_as_interrupt()
    result: dict[str, Any] = {}
    try:
        initial = initial_state(
            run_id,
            c.model_dump(mode="json"),
            approval=mode or c.approval,
            transcript=str(tpath.resolve()),
            planner=planner_spec,
            host_option=host,
            knowledge_dir=chosen_dir(),
            **({"parallel": parallel} if parallel > 1 else {}),
        )
        result = _drive_guarded(graph, config, initial, rt=rt, tr=tr, tpath=tpath, run_id=run_id,
                                console=console, json_out=json_out)
    finally:
        rt.close()
        tr.close()
        store.__exit__(None, None, None)
        lock.release()
    _report(result, run_id, tpath, json_out=json_out, console=console)


@app.command()
def analyze(
    logfile: Annotated[Path, typer.Argument(help="a server log (e.g. a crash log you already have)")],
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    case: Annotated[
        str | None, typer.Option(help="take model, baseline and knowledge from this case file")
    ] = None,
    compute_capability: Annotated[
        str | None, typer.Option(help="the host's GPU compute capability, e.g. 12.0")
    ] = None,
    gpu_name: Annotated[str | None, typer.Option(help="the host's GPU name")] = None,
    cpu_only: Annotated[bool, typer.Option("--cpu-only", help="the host has no GPU or other accelerator")] = False,
    cpus: Annotated[int | None, typer.Option(help="the host's CPU count (checks values such as CPU lists)")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="also list progress and fact signatures")] = False,
    knowledge: _KnowledgeOpt = None,
) -> None:
    """Read a log without launching anything: signatures, stage, facts, ranked hypotheses, first experiment.

    With --case, the case's host is asked for its GPUs (a query, no launch) unless --compute-capability
    or --gpu-name is given, and the case's knowledge files count as evidence. Without a host, the log's
    own lines that show the platform (``log_says`` in knowledge/subsystems.toml, e.g. SGLang's "No
    accelerator [name] is available") or --cpu-only say the host is CPU-only.
    """
    if cpu_only and (gpu_name or compute_capability):
        _fail("--cpu-only: a CPU-only host has no --gpu-name or --compute-capability; give one or the other")
    if cpus is not None and cpus < 1:
        _fail(f"--cpus {cpus}: expected the host's CPU count, a whole number of at least 1")
    if compute_capability is not None and not re.fullmatch(r"\d{1,2}\.\d", compute_capability.strip()):
        _fail(f"--compute-capability {compute_capability!r}: expected MAJOR.MINOR as nvidia-smi shows it, e.g. 12.0 or 9.0")
    if gpu_name is not None and not gpu_name.strip():
        _fail("--gpu-name: expected the GPU's name as nvidia-smi shows it, not an empty string")
    with _use_knowledge(knowledge):
        _analyze(logfile, json_out, case, compute_capability and compute_capability.strip(), gpu_name, show_all,
                 cpu_only=cpu_only, cpus=cpus)


def _analyze(
    logfile: Path, json_out: bool, case: str | None, compute_capability: str | None, gpu_name: str | None,
    show_all: bool, *, cpu_only: bool = False, cpus: int | None = None,
) -> None:
    from agent.domain.evidence import RawEvidence
    from agent.run.nodes.analyze import classify_outcome
    text = _read_text(logfile, what="log")
    if not text.strip():
        _fail(f"{logfile}: the log is empty")
    c, sigs, catalog = _analyze_setup(logfile, case, text)
    if not c.model.features:
        c.model.features = sorted(infer_features(text[:20000]))
    exp = Experiment(
        id=Experiment.make_id(c.baseline, None, "baseline"),
        purpose="baseline",
        baseline=c.baseline,
        status="done",
    )
    evidence = RawEvidence.from_log(exp.id, text, sigs, str(logfile))
    outcome = classify_outcome(evidence)
    fp = HostFingerprint(gpu_name=gpu_name, compute_capability=compute_capability,
                         gpu_vendor="none" if cpu_only else None, gpu_count=0 if cpu_only else None,
                         cpu_count=cpus)
    notes: list[str] = []
    if case and not (gpu_name or compute_capability or cpu_only):
        fp = _analyze_host_fingerprint(c, fp, notes)
    if not (fp.gpu_vendor or fp.gpu_name or fp.compute_capability):
        fp = _analyze_platform_from_log(text, fp, notes)
    findings = _analyze_findings(c, fp) if case else []
    view = PlannerView(case=c, fingerprint=fp, findings=findings, experiments=[exp], outcomes=[outcome])
    # Without the host's --help, the log's own server-args line says which release's flag spellings apply.
    planner = RulePlanner(catalog, catalog_from_server_args(text))
    hist = planner.history(view)
    proposal = planner.propose(view, hist)
    ranked = sorted(hist.hypotheses, key=lambda h: -h.posterior)
    verdict = _log_verdict(outcome)
    suggestions = suggestions_in_log(text.split("\n"))
    if json_out:
        doc = _analyze_json(logfile, outcome, verdict, ranked, proposal, suggestions)
        pkg = None if doc["first_experiment"] else _package_only(ranked, catalog)
        doc["package_change"] = {"hypothesis": pkg[0].id, "package": pkg[0].package, "what": pkg[1]} if pkg else None
        print(json.dumps(doc))
        return
    console = SafeConsole()
    print_hanging(console, f"[bold]{escape(str(logfile))}[/]: stage reached [bold]{outcome.stage}[/] — {verdict}")
    for note in notes:
        console.print(f"[dim]{escape(note)}[/]")
    _print_log_findings(console, outcome, ranked, show_all)
    _print_log_advice(console, outcome, proposal, suggestions, text, ranked, catalog)
    from agent.planning.generators.remedies import left_out

    unfit = left_out(planner.generator_input(view, outcome, c.baseline))
    if unfit:  # an error's example for another machine is never proposed as read: say what became of it
        console.print("\n[bold]values checked against this host[/]")
        for why in unfit:
            print_hanging(console, f"  {escape(why)}")


def _analyze_setup(logfile: Path, case: str | None, text: str) -> tuple[Case, list[Signature], list[CatalogEntry]]:
    """(the case, log signatures, hypothesis catalog) for ``analyze``; bad input ends the command in one line."""
    try:
        c = load_case(case) if case else Case(
            name=logfile.name, model=_model_from_log(text), launcher=LauncherSpec.model_validate({"engine": detect_log(text)})
        )
        # A log of unknown origin whose engine cannot be told is read with every signature.
        engine = c.launcher.engine if case or detect_log(text) else None
        sigs = for_engine(load_signatures(knowledge_file("signatures.toml")), engine)
        from agent.planning.catalog import load_catalog

        catalog = load_catalog()
    except (CaseError, CatalogError, ValueError) as exc:
        _fail(str(exc))
    return c, sigs, catalog


def _analyze_host_fingerprint(c: Case, fp: HostFingerprint, notes: list[str]) -> HostFingerprint:
    """The case's host's GPUs (asked over its connection), else ``fp``; a note says which, for the user."""
    from agent.run.runtime import ssh_options
    try:
        qhost = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
        try:
            fp = fingerprint(
                qhost, gpu_query_argv=expand_argv(c.launcher.gpu_query_argv, qhost), version_argv=None
            )
        finally:
            qhost.close()
        notes.append(f"host {c.host.target}: {fp.gpu_count} x {fp.gpu_name} (compute capability "
                     f"{fp.compute_capability})")
    except HostError as exc:
        notes.append(f"could not ask the case's host for its GPUs ({exc}); give --compute-capability")
    return fp


def _analyze_platform_from_log(text: str, fp: HostFingerprint, notes: list[str]) -> HostFingerprint:
    """``fp`` with the platform a line of the log shows (knowledge/subsystems.toml ``log_says``), when
    nothing else told it; a note quotes the line, for the user."""
    from agent.planning.in_play import SubsystemsError, gpu_vendor_of, load_subsystems, platform_in_log

    try:
        know = load_subsystems()
        found = platform_in_log(text, know)
    except SubsystemsError as exc:
        _fail(str(exc))
    if found is None:
        return fp
    platform, line = found
    vendor = gpu_vendor_of(platform, know)
    if vendor is None:
        return fp
    notes.append(f"the log shows a {platform} host (no host was asked): {line}")
    return fp.model_copy(update={"gpu_vendor": vendor, "gpu_count": 0 if vendor == "none" else fp.gpu_count})


def _analyze_findings(c: Case, fp: HostFingerprint) -> list[RelevantFinding]:
    """The case's knowledge files' findings, each with its relevance to this model and GPU."""
    from agent.planning.planner import RelevantFinding
    from tools.knowledge import read_findings, relevance

    findings: list[RelevantFinding] = []
    for p in c.knowledge:
        for f in read_findings(c.resolve_path(p)):
            findings.append(
                RelevantFinding(
                    finding=f,
                    relevance=relevance(
                        f, model=c.model.path, features=model_features(c), gpu_name=fp.gpu_name
                    ),
                )
            )
    return findings


def _analyze_json(
    logfile: Path, outcome: Outcome, verdict: str, ranked: list[Hypothesis], proposal: Proposal,
    suggestions: list[tuple[int, str]],
) -> dict[str, Any]:
    """The ``analyze --json`` document: stage, verdict, signatures, facts, hypotheses and the advice."""
    return {
        "log": str(logfile),
        "stage": outcome.stage,
        "verdict": verdict,
        "signatures": [
            {"id": m.signature_id, "kind": m.kind, **_bounded_lines(m.line_numbers),
             "text": m.first_line}
            for m in outcome.matches
        ],
        "facts": outcome.facts,
        "hypotheses": [
            {
                "id": h.id,
                "component": h.component,
                "statement": h.statement,
                "posterior": h.posterior,
            }
            for h in ranked
        ],
        "first_experiment": {
            **proposal.experiment.change.model_dump(),
            "effective_before": effective_before(
                proposal.experiment.change.kind,
                proposal.experiment.change.name,
                proposal.experiment.change.before,
                outcome.facts,
            ),
        }
        if proposal.experiment and proposal.experiment.change
        else None,
        "alternatives": [
            {"change": a["change"], "p_fix": a["p_fix"]}
            for a in proposal.considered
            if a.get("change")
            and not (proposal.experiment and proposal.experiment.change
                     and a["change"] == proposal.experiment.change.describe())
        ],
        "sglang_suggestions": [{"line": n, "text": t} for n, t in suggestions],
        "reason": proposal.conclude_reason,
    }


def _print_log_findings(console: Console, outcome: Outcome, ranked: list[Hypothesis], show_all: bool) -> None:
    """Print the log's matched signatures, effective config and ranked hypotheses."""
    shown = [m for m in outcome.matches if m.kind in ("fatal", "error", "warning", "ready") or show_all]
    console.print("\n[bold]signatures[/] (first line number, kind, id: first matching line)")
    for m in shown:
        style = {"fatal": "red", "error": "red", "warning": "yellow", "ready": "green"}.get(m.kind, "dim")
        more = f" (+{len(m.line_numbers) - 1} more)" if len(m.line_numbers) > 1 else ""
        print_hanging(
            console,
            f"  L{m.line_numbers[0] if m.line_numbers else '?':<5} [{style}]{m.kind:<8}[/] {m.signature_id}{more}: "
            f"[dim]{escape(shown_line(m.first_line).strip())}[/]",
        )
    hidden = len(outcome.matches) - len(shown)
    if hidden:
        console.print(f"  [dim]({count(hidden, 'progress or fact signature')} not shown; --all shows them)[/]")
    if outcome.facts:
        console.print("\n[bold]effective config[/]")
        for k, v in outcome.facts.items():
            print_hanging(console, f"  {k} = {escape(str(v))}")
    if not ranked:  # never an empty heading: say what the catalog made of the log
        console.print("\n[bold]hypotheses[/]: none — no entry of the hypothesis catalog explains these log lines")
        return
    console.print("\n[bold]hypotheses[/] (probability, id, component)")
    for hy in ranked:
        print_hanging(console, f"  {hy.posterior:.2f}  {escape(hy.id)}  [dim]({escape(hy.component)})[/]")
        print_hanging(console, f"        {escape(hy.statement)}", hang=0)


def _package_only(ranked: list[Hypothesis], catalog: list[CatalogEntry]) -> tuple[Hypothesis, str] | None:
    """The most probable open hypothesis whose cause no launch setting reaches (a catalog entry with a
    ``package``, knowledge/hypotheses.toml) and what to change instead, or None."""
    fixes = {e.id: e.package_fix for e in catalog if e.package}
    for h in ranked:
        if h.status == "open" and h.package and not h.interventions and h.id in fixes:
            return h, fixes[h.id] or f"a release of {h.package} that does not have this cause"
    return None


def _print_log_advice(
    console: Console, outcome: Outcome, proposal: Proposal, suggestions: list[tuple[int, str]], log_text: str = "",
    ranked: list[Hypothesis] | None = None, catalog: list[CatalogEntry] | None = None,
) -> None:
    """Print the first experiment (or why none: when a failed import stops the server before any flag is
    read, that only a package change can help, naming the package), the planner's alternatives and
    SGLang's own suggestions."""
    from agent.planning.values import clean_value
    from tools.tracebacks import missing_import

    console.print()
    first = proposal.experiment.change if proposal.experiment else None
    if proposal.experiment and first:
        print_hanging(
            console,
            f"first experiment: [bold magenta]{escape(_advice_text(first, outcome.facts))}[/] — "
            f"{escape(proposal.experiment.rationale)}",
        )
    else:
        missing = missing_import(log_text) if log_text else None
        if missing is not None:  # no flag or variable reaches an import: say plainly what can help
            print_hanging(
                console,
                f"[bold]only a package change can help[/]: the server fails importing {escape(missing.module)} "
                f"(log line {missing.log_line}: {escape(missing.text)}) before it reads any launch flag; "
                f"install or fix the package [bold]{escape(missing.package)}[/] in the server's Python, then "
                "launch again",
            )
        elif (pkg := _package_only(ranked or [], catalog or [])) is not None:
            hyp, fix = pkg
            print_hanging(
                console,
                f"[bold]only a package or model change can help[/]: {escape(hyp.statement)}; no launch flag or "
                f"variable reaches this cause. Change the package [bold]{escape(str(hyp.package))}[/]: {escape(fix)}",
            )
        else:
            print_hanging(console, f"no experiment to propose: {escape(str(proposal.conclude_reason))}")
    others = [a for a in proposal.considered if a.get("change") and (first is None or a["change"] != first.describe())]
    if others:
        console.print("\n[bold]alternatives[/] (the planner's other candidates, P(fix))")
        for alt in others:
            shown = str(clean_value(str(alt["change"])))  # a value copied from prose loses the sentence's full stop
            print_hanging(console, f"  {alt['p_fix']:.2f}  {escape(_with_log_before(shown, outcome.facts))}")
    if suggestions:
        lines = f"{suggestions[0][0]}-{suggestions[-1][0]}" if len(suggestions) > 1 else str(suggestions[0][0])
        console.print(f"\n[bold]SGLang's own suggestions[/] (log line{'s' if len(suggestions) > 1 else ''} {lines})")
        for n, text in suggestions:
            print_hanging(console, f"  L{n:<5} {escape(text)}")


def _with_log_before(described: str, facts: dict[str, str]) -> str:
    """``name: (unset) → v`` (``Change.describe``) with the log's effective value as the "before"."""
    m = re.match(r"^(?P<name>--\S+): \(unset\) → (?P<after>.*)$", described)
    if m is None:
        return described
    before = effective_before("flag", m["name"], None, facts)
    return described if before is None else f"{m['name']}: {before} (in the log) → {m['after']}"


def _advice_text(change: Change, facts: dict[str, str]) -> str:
    """A proposed change as advice: its "before" is the value the log shows the server ran with when
    the baseline leaves the flag unset (``--cuda-graph-max-bs: 160 (in the log) → 112``); a value
    copied out of a sentence is shown without its punctuation."""
    from agent.planning.values import clean_value

    change = change.model_copy(update={"after": clean_value(change.after)})  # no sentence's full stop
    if change.kind != "flag" or change.before is not None:
        return change.describe()
    return _with_log_before(change.describe(), facts)


#: ``analyze --json``: at most this many line numbers and line ranges per signature (a log that repeats
#: one warning a million times must not give a million-number JSON line).
LINES_CAP = 20


def _bounded_lines(lines: list[int]) -> dict[str, Any]:
    """``lines`` (the first LINES_CAP line numbers), ``line_count`` (all of them), ``line_ranges``
    (consecutive runs as [first, last], the first LINES_CAP of them) and ``truncated``."""
    ranges: list[list[int]] = []
    for n in sorted(set(lines)):
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return {
        "lines": lines[:LINES_CAP],
        "line_count": len(lines),
        "line_ranges": ranges[:LINES_CAP],
        "truncated": len(lines) > LINES_CAP or len(ranges) > LINES_CAP,
    }


def _read_text(path: Path, *, what: str) -> str:
    """A text file's content, or a one-line error (exit 2) for a missing, unreadable or binary file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        _fail(f"{path}: cannot read: {exc.strerror or exc}")
    if b"\0" in data[:65536]:
        _fail(f"{path}: not a text file (expected a {what})")
    return data.decode("utf-8", errors="replace")


def _log_verdict(outcome: Any) -> str:
    """One sentence on what a log alone shows (no probes were sent, so "ready" is as far as it can tell)."""
    failing = outcome.failure_signatures()
    if outcome.stage == "ready" and not failing:
        return "the server reached ready and no failure signature appears"
    if outcome.stage == "load_failed" and not failing:
        return "the log ends before the server was ready and shows no error (still loading, or cut off)"
    if failing:
        return f"failure: {', '.join(dict.fromkeys(failing))}"
    return "no failure signature found"


def _model_from_log(text: str) -> Any:
    import re

    from agent.domain.case import ModelSpec

    # SGLang's server_args (model_path='M'); vLLM's "non-default args: {'model': 'M'" / "serving model M".
    m = (
        re.search(r"model_path=['\"]([^'\"]+)['\"]", text)
        or re.search(r"non-default args: \{.*?'model': '([^']+)'", text)
        or re.search(r"serving model (\S+)", text)
    )
    return ModelSpec(path=m.group(1) if m else "unknown")


@app.command()
def flags(
    host: _HostOpt = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="a saved `launch_server --help` output")
    ] = None,
    case: Annotated[str | None, typer.Option(help="use this case's host and launcher")] = None,
    launcher: Annotated[
        str, typer.Option(help="launcher command on the host")
    ] = "python -m sglang.launch_server",
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    ssh_key: _KeyOpt = None,
    known_hosts: _KnownOpt = None,
    insecure_accept_host_key: _InsecureOpt = False,
    remote_python: _PythonOpt = None,
) -> None:
    """The flag catalog of a host's engine, parsed from its own help (SGLang `launch_server --help`,
    vLLM `vllm serve --help=all`; the engine is the case's, or told from `--launcher`)."""
    from agent.run.runtime import ssh_options
    try:
        if from_file is not None:
            catalog: FlagCatalog = parse_help(_read_text(from_file, what="help text"), source=str(from_file))
            if not any(catalog.has(f) for f in ("--model-path", "--model")):
                _fail(
                    f"{from_file}: no --model-path or --model flag: expected the output of "
                    "`launch_server --help` or `vllm serve --help=all`"
                )
        elif case is not None or host is not None:
            c = (
                _load_case(case, host)
                if case
                else Case(
                    name="flags", model=ModelSpec(path="-"), launcher=LauncherSpec(argv=launcher.split())
                )
            )
            c = _with_host_options(c, host, ssh_key, known_hosts, insecure_accept_host_key, remote_python)
            h = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
            try:
                argv = expand_argv(c.launcher.argv, h)
                catalog = load_flag_catalog(
                    h, argv, cache_dir=state_dir() / "flag-cache", version=None,
                    help_args=c.launcher.engine_impl().data.help_args,
                )
            finally:
                h.close()
        else:
            _fail("give --host HOST, --case CASE or --from-file HELP.txt")
    except (CaseError, FlagError, HostError) as exc:
        _fail(str(exc))
    if json_out:
        print(catalog.model_dump_json())
        return
    _print_flags(catalog)


def _print_flags(catalog: FlagCatalog) -> None:
    """The catalog for a person: a table when the terminal holds its names and aliases on one line each
    with room for the choices; otherwise a list, one flag a line (its names, value type, default) with
    its choices under it, since a five-column table at 80 columns cut the flag names (``--tokenizer-p…``).
    Piped with no COLUMNS: as on an 80-column terminal. Nothing is cut."""
    console = _piped_console()
    specs = list(catalog.flags.values())
    widest = max((len(s.name) for s in specs), default=4) + max(
        (len(", ".join(s.aliases)) for s in specs), default=0
    )
    if console.width >= widest + 16 + 10 + 40:  # borders, the value column, 40 for choices and default
        t = Table("flag", "aliases", "value", "choices", "default", title=count(len(catalog.flags), "flag"))
        for col in t.columns:
            col.overflow = "fold"
        t.columns[0].no_wrap = t.columns[1].no_wrap = True
        for spec in specs:
            t.add_row(
                spec.name,
                ", ".join(spec.aliases),
                spec.value_type if spec.takes_value else "(switch)",
                escape(", ".join(spec.choices or [])),
                escape(str(spec.default or "")),
            )
        console.print(t)
        return
    console.print(count(len(catalog.flags), "flag"), style="bold", highlight=False)
    for spec in specs:
        value = spec.value_type if spec.takes_value else "(switch)"
        default = f"  [default: {spec.default}]" if spec.default else ""
        names = escape(", ".join([spec.name, *spec.aliases]))
        print_hanging(console, f"[bold]{names}[/]  {value}{escape(default)}")
        if spec.choices:
            print_hanging(console, f"    [dim]choices:[/] {escape(', '.join(spec.choices))}")


@app.command()
def replay(
    transcript: Annotated[Path, typer.Argument(help="a transcript JSONL file")],
    step: Annotated[int, typer.Option("--step", help="jump to this experiment step", min=0)] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep showing a run still being written, until it ends")
    ] = False,
    speed: Annotated[
        float | None,
        typer.Option(help="replay with the recorded timing, this many times faster (pauses capped at 3 s)"),
    ] = None,
    redecide: Annotated[
        bool,
        typer.Option(
            "--redecide",
            help="feed the recorded observations to the current planner and compare its decisions with the "
            "recorded ones (exit 0 when all match, 1 at the first divergence)",
        ),
    ] = False,
    planner: Annotated[
        PlannerName, typer.Option(help="the planner to re-decide with (llm replays the model's recorded answers)")
    ] = "rules",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates and tool calls too, and every open hypothesis of a waiting approval")] = False,
    knowledge: _KnowledgeOpt = None,
) -> None:
    """A recorded run step by step as it looked live, with the evidence behind each hypothesis and the
    alternatives each step weighed; or (--redecide) checked against the current planner, with the
    knowledge folder the run read (or --knowledge)."""
    from agent.review.replay import replay as replay_run

    console = SafeConsole()
    if redecide:
        _redecide(transcript, planner, console, verbose=verbose, knowledge=knowledge)
        return
    if knowledge is not None:
        _fail("--knowledge is for --redecide (a replay shows what the run recorded)")
    if speed is not None and speed <= 0:
        _fail(f"--speed {speed}: expected a positive number")
    if speed is not None and follow:
        _fail("--speed replays a finished recording; --follow shows a live run at its own pace")
    if (not follow or transcript.exists()) and not transcript.is_file():
        _fail(f"{transcript}: no such transcript file")
    if follow and not transcript.exists():
        err_console.print(f"waiting for {transcript} to appear (Ctrl-C to stop)")
    try:
        summary = replay_run(transcript, console, from_step=step, follow=follow, speed=speed, verbose=verbose)
    except TranscriptError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        err_console.print(f"stopped following {transcript}")
        raise typer.Exit(130) from None
    if step and summary.shown == 0:
        raise typer.Exit(2)


def _redecide_knowledge(recorded: object, option: Path | None) -> tuple[Path | str | None, str | None]:
    """The knowledge folder a re-decision reads: ``--knowledge``, else the one the run recorded (a
    transcript records one only when the run read a folder other than the repository's), else the folder
    in force; with a warning when the recorded folder is gone."""
    if option is not None:
        return option, None
    if isinstance(recorded, str) and recorded:
        if Path(recorded).is_dir():
            return recorded, None
        return None, (
            f"the run read the knowledge folder {recorded}, which is not here: re-deciding with "
            f"{knowledge_dir()} (give the folder with --knowledge)"
        )
    return None, None


def _redecide(
    transcript: Path, planner_name: str, console: Console, *, verbose: bool, knowledge: Path | None = None
) -> None:
    from agent.record.recorded import RecordedRun
    from agent.review.replay import RedecideError, redecide_planner, redecide_table
    from agent.review.replay import redecide as redecide_run

    try:
        recorded = RecordedRun.load(transcript)
    except TranscriptError as exc:
        _fail(str(exc))
    folder, note = _redecide_knowledge(recorded.started.get("knowledge_dir"), knowledge)
    try:
        with _use_knowledge(folder):
            planner, flags, warnings = redecide_planner(planner_name, recorded)
            result = redecide_run(recorded, planner, flags, warnings=[*([note] if note else []), *warnings])
    except (TranscriptError, RedecideError) as exc:
        _fail(str(exc))
    for w in result.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    console.print(redecide_table(result, verbose=verbose))
    if result.unfinished:
        console.print("[yellow]the run is unfinished (no run.ended): only the decisions recorded so far are compared[/]")
    if result.matched:
        n = len(result.decisions)
        matched = "the one decision matches" if n == 1 else f"all {n} decisions match"
        console.print(f"[green]{matched}[/] ({result.planner} planner)")
        return
    console.print(
        f"[bold red]diverges at seq {result.stopped_at}[/]: stopped there, since later observations were made "
        "under the recorded decision and no longer apply to this planner",
        highlight=False,
    )
    raise typer.Exit(1)


@app.command()
def report(
    transcript: Annotated[Path, typer.Argument(help="a transcript JSONL file")],
    fmt: Annotated[
        ReportFormat, typer.Option("--format", help="md: Markdown; html: one self-contained page with charts")
    ] = "md",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write here instead of stdout")] = None,
) -> None:
    """A review document of a run: root cause, fix, evidence with log excerpts, experiments, timelines."""
    from agent.record.recorded import RecordedRun
    from agent.review.report import render

    try:
        text = render(RecordedRun.load(transcript), fmt)
    except TranscriptError as exc:
        _fail(str(exc))
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"{output}: cannot write: {exc.strerror}")
    err_console.print(f"report written to {output}")


@app.command()
def doctor(
    host: _HostOpt = None,
    case: Annotated[str | None, typer.Option(help="use this case's host and launcher")] = None,
    launcher: Annotated[
        str, typer.Option(help="launcher command on the host")
    ] = "python -m sglang.launch_server",
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
    ssh_key: _KeyOpt = None,
    known_hosts: _KnownOpt = None,
    insecure_accept_host_key: _InsecureOpt = False,
    remote_python: _PythonOpt = None,
) -> None:
    """The host's fingerprint in one screen: GPUs (or CPU only), driver, CUDA/ROCm, SGLang and its kernel
    packages' versions, and `python -m sglang.check_env` where it runs. Launches nothing."""
    from agent.run.runtime import ssh_options
    from tools.fingerprint import fingerprint, package_versions, runtime_versions

    try:
        c = (
            _load_case(case, host)
            if case
            else Case(name="doctor", model=ModelSpec(path="-"), launcher=LauncherSpec(argv=launcher.split()))
        )
        c = _with_host_options(c, host, ssh_key, known_hosts, insecure_accept_host_key, remote_python)
        h = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
    except (CaseError, HostError) as exc:
        _fail(str(exc))
    try:
        fp = fingerprint(h, gpu_query_argv=c.launcher.gpu_query_argv, version_argv=None,
                         check_env_argv=c.launcher.check_env() or None)  # fmt: skip
        if fp.sglang_version is None:  # no check_env: ask the version command; its failure is a finding
            try:
                fp.sglang_version = fingerprint(
                    h, gpu_query_argv=["true"], version_argv=c.launcher.version_argv
                ).sglang_version
            except HostError as exc:
                code = re.search(r"exit code (\d+)", str(exc))
                fp.notes.append(
                    f"no SGLang version: {' '.join(c.launcher.version_argv)} failed"
                    + (f" with exit code {code.group(1)}" if code else "") + " (is SGLang installed in that Python?)"
                )
    except HostError as exc:
        _fail(str(exc), code=1)
    finally:
        h.close()
    data = {
        "host": c.host.target,
        "gpu_vendor": fp.gpu_vendor,
        "gpus": None if not fp.gpu_count else {
            "name": fp.gpu_name, "count": fp.gpu_count, "compute_capability": fp.compute_capability,
            "arch": fp.gpu_arch, "memory_total_mib": fp.memory_total_mib,
        },
        "driver_version": fp.driver_version,
        "runtime": runtime_versions(fp),
        "sglang_version": fp.sglang_version,
        "packages": package_versions(fp),
        "check_env": fp.check_env,
        "notes": fp.notes,
    }  # fmt: skip
    if json_out:
        print(json.dumps(_redacted(data)))
        return
    console = _piped_console()
    rows: list[tuple[str, str]] = [("host", c.host.target)]
    if fp.gpu_count:
        where = f"compute capability {fp.compute_capability}" if fp.compute_capability else f"arch {fp.gpu_arch}"
        mem = f", {fp.memory_total_mib} MiB each" if fp.memory_total_mib else ""
        rows.append(("GPUs", f"{fp.gpu_count} × {fp.gpu_name} ({where}{mem})"))
    else:
        rows.append(("GPUs", "none found: a CPU-only host"))
    rows.append(("driver", fp.driver_version or "—"))
    rows += [(k, v) for k, v in runtime_versions(fp).items()]
    rows.append(("SGLang", fp.sglang_version or "not found"))
    pkgs = package_versions(fp)
    if pkgs:
        rows.append(("packages", ", ".join(f"{k} {v}" for k, v in pkgs.items())))
    rows.append(("check_env", "ran" if fp.check_env else "did not run"))
    missing = [n.removeprefix("command not found: ") for n in fp.notes if n.startswith("command not found: ")]
    if missing:
        rows.append(("note", f"not found on the host: {', '.join(missing)}"))
    for note in fp.notes:
        if not note.startswith("command not found: "):
            rows.append(("note", note))
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for k, v in rows:
        t.add_row(escape(k), escape(v))
    console.print(t)


lab_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="the built-in lab: simulated SGLang hosts, one world each (run one with `hypoloop run lab:WORLD`).",
)
app.add_typer(lab_app, name="lab")


@lab_app.command("list")
def lab_list(json_out: Annotated[bool, typer.Option("--json", help="one JSON list")] = False) -> None:
    """The lab worlds, each with its one-line description (the `description` of its case.toml)."""
    import tomllib

    from agent.domain.case import lab_worlds_dir

    worlds = lab_worlds_dir()
    if worlds is None:
        _fail("the lab is not installed (pip install -e . from the repository)")
    rows: list[dict[str, str]] = []
    for path in sorted(worlds.glob("*/case.toml")):
        try:
            description = str(tomllib.loads(path.read_text(encoding="utf-8")).get("description") or "")
        except (OSError, tomllib.TOMLDecodeError) as exc:
            description = f"(unreadable case file: {exc})"
        rows.append({"world": path.parent.name, "case": f"lab:{path.parent.name}", "description": description})
    if json_out:
        print(json.dumps(rows))
        return
    console = _piped_console()
    for r in rows:
        print_hanging(console, f"[bold]{escape(r['case'])}[/]  {escape(r['description'])}", hang=4)


findings_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="FINDINGS.md notes: append what a run found, in the style the reader parses."
)
app.add_typer(findings_app, name="findings")


@findings_app.command("add")
def findings_add(
    transcript: Annotated[Path, typer.Argument(help="the transcript of a run that isolated a fix")],
    to: Annotated[Path, typer.Option("--to", help="the FINDINGS.md file to append to (created if missing)")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the entry, write nothing")] = False,
) -> None:
    """Append a dated entry (model, hardware, symptom, root cause, working command, ruled-out ideas, the
    run) to a findings file, never changing what is already there."""
    from agent.domain.models import command_text
    from agent.record.recorded import RecordedRun
    from agent.review.findings import FindingsWriteError, add_finding

    try:
        entry, finding = add_finding(RecordedRun.load(transcript), to, dry_run=dry_run)
    except (TranscriptError, FindingsWriteError) as exc:
        _fail(str(exc))
    sys.stdout.write(entry)
    flags = command_text(finding.flags)
    what = "would read back" if dry_run else f"appended to {to}; it reads back"
    err_console.print(
        f"{what} as: outcome {finding.outcome}, model {finding.model}, hardware {finding.hardware}, flags {flags}",
        highlight=False,
    )


def _redacted_info(info: RunInfo) -> RunInfo:
    """A run as ``runs``/``show`` print it: pending request and result redacted (values kept for use)."""
    safe = _redacted(info.model_dump(mode="json", exclude={"values"}), info.values)
    return info.model_validate({**safe, "values": info.values})


_STATUS_STYLE = {
    "running": "cyan",
    "waiting_for_approval": "bold yellow",
    "finished": "green",
    "interrupted": "red",
}


def _said(status: str) -> str:
    """A status as a person reads it (``waiting_for_approval`` → "waiting for approval")."""
    return status.replace("_", " ")


def _piped_console() -> Console:
    """The console of a listing command: the terminal's width; piped with no COLUMNS, 80 columns (the
    listings then use their one-record-a-few-lines layout, whose lines wrap and are never cut)."""
    return SafeConsole() if sys.stdout.isatty() or os.environ.get("COLUMNS") else SafeConsole(width=80)


def _run_detail(info: RunInfo) -> str:
    left = ""
    if info.leftovers:  # servers of a run nobody drives: resume adopts or stops them, a new run offers to
        pids = ", ".join(str(x["pid"]) for x in info.leftovers)
        pid_word = "pid" if len(info.leftovers) == 1 else "pids"
        left = f"; {count(len(info.leftovers), 'server')} left running ({pid_word} {pids})"
    if info.pending:
        req = ApprovalRequest.model_validate(info.pending)
        return f"{req.experiment.id}: {describe_experiment(req.experiment)}{left}"
    if info.status == "running":
        return f"pid {info.holder}" if info.holder and info.holder > 0 else ""
    if info.status == "interrupted":
        return f"hypoloop resume {info.run_id}{left}"
    return (info.result or "") + left


@app.command("runs")
def runs_(
    json_out: Annotated[bool, typer.Option("--json", help="one JSON list")] = False,
) -> None:
    """List the runs in $HYPOLOOP_HOME: running, waiting for approval, interrupted or finished."""
    from agent.record.runs import RunError, list_runs
    home = state_dir()
    try:
        infos = list_runs(home)
    except RunError as exc:
        _fail(str(exc))
    if json_out:
        print(json.dumps([_redacted(i.model_dump(mode="json", exclude={"values"}), i.values) for i in infos]))
        return
    infos = [_redacted_info(i) for i in infos]
    console = _piped_console()
    if not infos:
        console.print(f"no runs in {home}")
        return
    if console.width < 110:  # a narrow terminal: two lines per run, so no id is ever cut or split
        console.print(f"runs in {home}", style="bold")
        for i in infos:
            style = _STATUS_STYLE.get(i.status, "white")
            console.print(f"{i.run_id}  [{style}]{_said(i.status)}[/]  {count(i.launches, 'launch')}", soft_wrap=True)
            console.print(
                f"  {escape(i.case)}, updated {i.updated[:19].replace('T', ' ')}", soft_wrap=True, highlight=False
            )
            console.print(f"  {escape(_run_detail(i))}", soft_wrap=True, highlight=False)
        return
    t = Table("run", "case", "status", "waiting for / result", "launches", "updated", title=f"runs in {home}")
    for col in t.columns:  # ids are what the user copies into `resume --experiment`: wrap, never cut
        col.overflow = "fold"
    t.columns[0].no_wrap = True
    for i in infos:
        style = _STATUS_STYLE.get(i.status, "white")
        t.add_row(
            i.run_id,
            escape(i.case),
            f"[{style}]{_said(i.status)}[/]",
            escape(_run_detail(i)),
            str(i.launches),
            i.updated[:19].replace("T", " "),
        )
    console.print(t)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="a run id (see `hypoloop runs`)")],
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates and tool calls too")] = False,
) -> None:
    """A run's story so far (from its transcript) and the approval it waits for, if any."""
    from agent.record.runs import RunError, load_run
    try:
        info = load_run(state_dir(), run_id)
    except RunError as exc:
        _fail(str(exc))
    if json_out:
        out = info.model_dump(mode="json", exclude={"values"})
        out["conclusion"] = info.values.get("conclusion")
        out["rejections"] = info.values.get("rejections", [])
        out["edits"] = info.values.get("edits", [])
        print(json.dumps(_redacted(out, info.values)))
        return
    info = _redacted_info(info)
    console = SafeConsole()
    render = EventRenderer(console, verbose=verbose)
    if info.transcript and Path(info.transcript).exists():
        try:
            for ev in read_transcript(Path(info.transcript)):
                render(ev)
        except TranscriptError as exc:
            err_console.print(f"[yellow]warning:[/] {escape(str(exc))}")
    else:
        console.print(f"[dim](no transcript at {escape(str(info.transcript))})[/]")
    console.print()
    style = _STATUS_STYLE.get(info.status, "white")
    print_hanging(
        console,
        f"run [bold]{info.run_id}[/] ({escape(info.case)}): [{style}]{_said(info.status)}[/], "
        f"{count(info.launches, 'launch')}, {count(info.host_seconds, 'host-second', fmt='.0f')}; "
        f"transcript {escape(str(info.transcript))}",
    )
    if info.pending:
        # -v lists every open hypothesis with its statement (the screen's [h]); without it, the screen as asked
        console.print(approval_panel(ApprovalRequest.model_validate(info.pending), full=verbose))
        print_hanging(
            console,
            f"answer with: hypoloop resume {info.run_id} [--decision approve|edit|reject|stop] "
            "[--reason TEXT] [--set NAME=VALUE]",
        )
    elif info.status == "interrupted":
        console.print(f"nothing is driving it: continue with hypoloop resume {info.run_id}")


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="a run id (see `hypoloop runs`)")],
    decision: Annotated[
        DecisionOption | None,
        typer.Option(
            help="the answer to the experiment waiting for approval (approve-all: it and the rest of its "
            "--parallel batch)",
            show_default="ask at the terminal",
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="why (required to reject; recorded)")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="edit: the one change to run instead: NAME=VALUE for an env var, --flag=VALUE, or a bare "
            "value for the proposed variable",
        ),
    ] = None,
    experiment: Annotated[
        str | None,
        typer.Option(help="answer only if this experiment is the one waiting (guards a repeated answer)"),
    ] = None,
    approve: Annotated[
        ApprovalMode | None,
        typer.Option("--approve", help="switch the approval mode for the rest of the run",
                     show_default="the run's mode"),
    ] = None,
    auto: Annotated[bool, typer.Option("--auto", help="approve the rest without asking")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the result as one JSON line at the end")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates too")] = False,
    knowledge: _KnowledgeOpt = None,
) -> None:
    """Continue a run: answer the approval it waits for, or pick it up where an ended process left it.

    The run keeps the knowledge folder it started with unless --knowledge names another."""
    _JsonResult.pending, _JsonResult.run_id = json_out, run_id
    from agent.record.runs import RunError, RunInUse, RunLock, load_run
    mode = _approval_mode(approve, auto)
    edits = list(set_ or [])
    if edits and decision in ("reject", "stop"):
        _fail(f"--set edits the experiment to run; it cannot go with --decision {decision}")
    if decision == "edit" and not edits:
        _fail("--decision edit needs the change: --set NAME=VALUE")
    if decision == "reject" and not reason:
        _fail("a rejection needs a reason: --reason TEXT (the planner is told why)")
    if edits and decision is None:
        decision = "edit"
    home = state_dir()
    try:
        load_run(home, run_id)
        lock = RunLock(home, run_id).acquire()
    except RunInUse as exc:
        _fail(str(exc), code=4)
    except RunError as exc:
        _fail(str(exc))
    try:
        recorded = (load_run(home, run_id).values or {}).get("knowledge_dir")
        folder = knowledge or (recorded if recorded and Path(recorded).is_dir() else None)
        with _use_knowledge(folder):
            _resume_locked(
                home,
                run_id,
                decision=decision,
                reason=reason,
                edits=edits,
                experiment=experiment,
                mode=mode,
                json_out=json_out,
                verbose=verbose,
            )
    finally:
        lock.release()


def _resume_locked(
    home: Path,
    run_id: str,
    *,
    decision: str | None,
    reason: str | None,
    edits: list[str],
    experiment: str | None,
    mode: str | None,
    json_out: bool,
    verbose: bool,
) -> None:
    from agent.planning.llm_planner import llm_notices
    from agent.record.runs import load_run, open_checkpointer
    from agent.run.graph import build_graph
    from agent.run.runtime import Runtime
    info = load_run(home, run_id)  # read again under the lock: another process may have moved it on
    request = ApprovalRequest.model_validate(info.pending) if info.pending else None
    waiting = f"{request.experiment.id} ({describe_experiment(request.experiment)})" if request else None
    if info.status == "finished":
        msg = f"run {run_id} has finished ({info.result}); nothing waits for a decision"
        if decision or experiment:
            _fail(msg)
        err_console.print(msg)
        _report(info.values, run_id, Path(info.transcript or "?"), json_out=json_out, console=SafeConsole())
        return
    _refuse_wrong_decision(run_id, request, waiting, decision=decision, experiment=experiment)
    tr, tpath = _continue_transcript(info, run_id)
    console = SafeConsole(stderr=json_out)
    tr.listeners.append(EventRenderer(console, verbose=verbose, launch_progress=True, command_for=_command_for))
    tr.listeners.append(llm_notices(console))
    rt = Runtime(tr, home, progress=ProgressBoard(console))
    if request is None:  # continuing an interrupted run: --auto / --approve apply from the next approval
        rt.approval_override = mode
    config: dict[str, Any] = {"configurable": {"thread_id": run_id}, "recursion_limit": 1000}
    _sigterm_as_interrupt()
    result: dict[str, Any] = {}
    try:
        with open_checkpointer(home) as saver:
            graph = build_graph(rt, saver)
            first: Any = None
            if request is not None and decision is not None:
                first = _resume_command(
                    rt, info, request, decision, reason=reason, edits=edits, mode=mode, run_id=run_id,
                    waiting=waiting,
                )
            elif request is not None and not sys.stdin.isatty():
                _pause_quietly(request, console, json_out=json_out, tpath=tpath)
            tr.emit(
                "run.resumed",
                {
                    "pid": os.getpid(),
                    "status_before": info.status,
                    "answer": first.resume if first is not None else None,
                },
            )
            if request is None and not info.next:
                # No conclusion and nothing next: the checkpoint after the last step was lost (a kill
                # under an older hypoloop). End the run honestly; its servers are stopped on the way.
                from agent.run.crashsafe import end_lost_run

                end_lost_run(rt, graph, config, info.values)
            result = _drive_guarded(graph, config, first, rt=rt, tr=tr, tpath=tpath, run_id=run_id,
                                    console=console, json_out=json_out, mode=mode)
    finally:
        rt.close()
        tr.close()
    _report(result, run_id, tpath, json_out=json_out, console=console)


def _refuse_wrong_decision(
    run_id: str, request: ApprovalRequest | None, waiting: str | None, *, decision: str | None,
    experiment: str | None,
) -> None:
    """End the command in one line when the decision names an experiment that is not waiting, or the run waits
    for no approval."""
    if experiment and (request is None or request.experiment.id != experiment):
        now = f"waiting: {waiting}" if waiting else "it waits for no approval"
        _fail(f"{experiment} is not waiting for approval in run {run_id} ({now}); nothing was decided")
    if request is None and decision:
        _fail(
            f"run {run_id} is not waiting for an approval (it stopped in the middle of a step); "
            f"continue it with: hypoloop resume {run_id}"
        )


def _continue_transcript(info: RunInfo, run_id: str) -> tuple[Transcript, Path]:
    """(the run's transcript opened to append, its path), warning about damaged lines; a transcript that
    cannot be continued ends the command in one line."""
    if not info.transcript:
        _fail(f"run {run_id}: its checkpoint names no transcript; it cannot be resumed by this version")
    tpath = Path(info.transcript)
    try:
        tr = Transcript(tpath, run_id, redact=run_redactor(Case.model_validate(info.values["case"])))
    except (OSError, TranscriptError) as exc:
        _fail(f"{tpath}: cannot continue the transcript: {exc}")
    for problem in damaged_lines(tpath)[:3]:  # recovery reads past them; the file stays as it is
        err_console.print(f"[yellow]warning:[/] {escape(problem)} (skipped; the run continues after it)")
    tr.step = info.launches + 1
    return tr, tpath


def _resume_command(
    rt: Runtime, info: RunInfo, request: ApprovalRequest, decision: str, *, reason: str | None, edits: list[str],
    mode: str | None, run_id: str, waiting: str | None,
) -> Any:
    """The graph's resume command carrying the user's answer; an edit is applied first (refused in one line)."""
    from langgraph.types import Command

    from agent.run.nodes.approve import edit_experiment
    answer = ApprovalAnswer(
        decision="approve" if decision == "approve-all" else decision,  # type: ignore[arg-type]
        all=decision == "approve-all",
        reason=reason,
        set=edits,
        experiment_id=request.experiment.id,
        mode=mode,  # type: ignore[arg-type]
        by="user",
    )
    if answer.decision == "edit":
        try:
            edit_experiment(rt, info.values, request.experiment, answer.set)  # type: ignore[arg-type]
        except EditError as exc:
            _fail(f"edit refused: {exc}; run {run_id} still waits for approval of {waiting}")
    return Command(resume=answer.model_dump(mode="json", exclude_none=True))


def _pause_quietly(request: ApprovalRequest, console: Console, *, json_out: bool, tpath: Path) -> NoReturn:
    """`resume` without --decision and without a terminal: show what waits, change nothing, exit 3."""
    console.print(approval_panel(request))
    console.print(
        f"run {request.run_id} still waits for approval; no terminal is attached. Answer with: "
        f"hypoloop resume {request.run_id} --decision approve|edit|reject|stop [--reason TEXT] [--set NAME=VALUE]"
    )
    if json_out:
        print(_waiting_json(request, tpath))
    raise typer.Exit(3)


try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _click_errors  # type: ignore[no-redef]


def _tidy_help(command: Any) -> None:
    """Help that names values, not Python types: a switch shows nothing after its name, a choice shows
    its choices (``each|risky|auto``), any other value its name in capitals (``PATH``, ``N``); a command's
    line in its group's list is its whole first paragraph (click would cut it with '...'); applied to every
    command and subcommand."""
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)
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


def main() -> None:
    """Console-script entry point. Usage mistakes (an unknown option, a value that is not one of the
    choices) are one line on stderr naming the option and what it takes, exit code 2; so is a bad
    planner tunables file (knowledge/planner.toml) and a $HYPOLOOP_KNOWLEDGE that is no folder."""
    from agent.domain.knowledge_dir import KnowledgeDirError, knowledge_dir
    from agent.planning.weights import PlannerWeightsError, weights

    _private_files()
    try:
        weights()  # the planner's tunables: a bad file is one line, not a traceback
        knowledge_dir()  # a $HYPOLOOP_KNOWLEDGE that is no folder: one line
    except (PlannerWeightsError, KnowledgeDirError) as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    command = typer.main.get_command(app)
    _tidy_help(command)
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
        err_console.print(f"[bold red]error:[/] {escape(message)}{hint}", highlight=False, soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except _click_errors.ClickException as exc:
        err_console.print(f"[bold red]error:[/] {escape(exc.format_message())}", highlight=False, soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else 0)


__all__ = ["app", "main", "Baseline"]
