"""Driving a run's graph for ``run`` and ``resume``: answering its approval requests at the terminal,
leaving it waiting (exit 3), ending it properly when cut short (Ctrl-C, SIGTERM, a full disk, a bug) and
printing how it ended (a JSON line with ``--json``)."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import signal
import sqlite3
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.common import (
    JsonResult,
    OutputWatch,
    ReaderGone,
    err_console,
    fail,
    redacted,
    resume_command,
)
from agent.domain.case import CaseError
from agent.domain.knowledge_dir import knowledge_file
from agent.planning.catalog import CatalogError
from agent.record.transcript import Transcript
from agent.review.render import print_hanging
from agent.review.text import print_command
from agent.review.wording import count
from agent.run.approval.request import ApprovalRequest
from agent.run.approval.screen import answer_hint, approval_panel, ask, describe_experiment
from tools import interrupts
from tools.knowledge import KnowledgeError, check_knowledge_files
from tools.probe_set import load_probe_set
from tools.signatures import load_signatures

if TYPE_CHECKING:  # the heavy modules (LangGraph, the LLM client) load only in the commands that need them
    from agent.run.runtime import Runtime


@dataclass(frozen=True)
class RunSession:
    """A run as ``run``/``resume`` drive it: its runtime, its transcript (open to append) and where it is,
    its id, the console its events show on, and whether the result is one JSON line (``--json``)."""

    rt: Runtime
    tr: Transcript
    tpath: Path
    run_id: str
    console: Console
    json_out: bool


def _interrupted(session: RunSession, reason: str = "interrupted (Ctrl-C or SIGTERM)") -> NoReturn:
    """End a run cut short by Ctrl-C, SIGTERM or a reader that went away: stop its servers (recorded),
    say so, exit 130."""
    rt, tr, tpath, run_id = session.rt, session.tr, session.tpath, session.run_id
    OutputWatch.stop_run = False
    rt.close()
    tr.emit("run.ended", {"status": "interrupted", "reason": reason})
    err_console.print(f"{reason}; every server this run launched is stopped. transcript: {tpath}")
    err_console.print(f"continue it with: {escape(resume_command(run_id))}", soft_wrap=True)
    if session.json_out:  # the promised last line; "stopped" because the user ended it
        launches, host_s = _spent(tpath)
        print(json.dumps({"run_id": run_id, "status": "stopped", "reason": "interrupted", "root_cause": None,
                          "launches": launches, "host_seconds": host_s, "transcript": str(tpath)}))
    raise typer.Exit(130)


def _spent(tpath: Path) -> tuple[int, float]:
    """Launches and host-seconds the run's transcript records (a launch cut short counts), as the README's
    result line gives them; (0, 0.0) when it cannot be read."""
    from agent.record.recorded import RecordedRun
    from agent.record.transcript import TranscriptError

    try:
        run = RecordedRun.load(tpath, on_bad=lambda _exc: None)
    except (TranscriptError, OSError):
        return 0, 0.0
    return run.launches(), run.host_seconds()


def sigterm_as_interrupt() -> None:
    """From now on SIGTERM and SIGHUP end the run as Ctrl-C does (``KeyboardInterrupt``: its servers are
    stopped, exit 130); a closed terminal (SIGHUP) too. An interrupt Python drops (raised inside a
    weakref callback) is raised again until the run catches it (tools/interrupts.py)."""
    interrupts.install((signal.SIGINT, signal.SIGTERM, signal.SIGHUP))


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
        console.print(approval_panel(request, keys=False))
    print_hanging(
        console,
        f"run [bold]{request.run_id}[/] waits for approval of {exp.id} ({escape(describe_experiment(exp))}); "
        f"{why}. Answer with:",
    )
    print_command(console, answer_hint(request, resume_command(request.run_id)))
    if json_out:
        print(_waiting_json(request, tr.path))
    raise typer.Exit(code)


def _drive(graph: Any, config: dict[str, Any], first: Any, session: RunSession, mode: str | None) -> dict[str, Any]:
    """Run the graph and answer its approval requests until the run ends.

    At a terminal each request shows the approval screen and waits for an answer (an edit is checked
    before it is sent, and asked again if refused). With no terminal, or at end of input, the run is
    left waiting (exit 3); Ctrl-C at the prompt leaves it waiting too (exit 130). ``mode`` switches the
    approval mode with the first answer.
    """
    from langgraph.types import Command

    from agent.run.nodes.approve import edit_experiment

    rt, console, json_out = session.rt, session.console, session.json_out
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
            interrupts.delivered()
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


def drive_guarded(
    graph: Any, config: dict[str, Any], first: Any, session: RunSession, mode: str | None = None
) -> dict[str, Any]:
    """Run the graph (``first``: its input, or the resume command carrying an answer) and answer its
    approval requests until the run ends (``mode``: the approval mode the first answer switches to),
    ending the run properly when it is cut short: on Ctrl-C/SIGTERM (exit 130), unusable
    knowledge (exit 2) or a bug (exit 1, traceback kept in the transcript), the run's servers are stopped
    and ``run.ended`` says why."""
    rt, tr = session.rt, session.tr
    OutputWatch.stop_run = True  # a reader that goes away now ends the run (ReaderGone), as Ctrl-C does
    try:
        return _drive(graph, config, first, session, mode)
    except KeyboardInterrupt as exc:  # ReaderGone, or the main thread's interrupt for it, or Ctrl-C
        interrupts.delivered()
        if isinstance(exc, ReaderGone) or OutputWatch.reader_gone:
            _interrupted(session, "stopped: the reader of its output went away (broken pipe)")
        _interrupted(session)
    except (CatalogError, CaseError) as exc:
        rt.close()
        tr.emit("error", {"message": str(exc)})
        tr.emit("run.ended", {"status": "error", "reason": str(exc)})
        fail(str(exc))
    except typer.Exit:
        raise
    except Exception as exc:
        full = _no_space(exc)
        if full is not None:  # hypoloop's own files (transcript, results, checkpoints): not a bug
            _out_of_space(rt, tr, session.run_id, full)
        refused = _not_writable(exc, (str(session.tpath), str(rt.state_dir)))
        if refused is not None:  # the same files made read-only under the run: not a bug either
            _out_of_space(rt, tr, session.run_id, refused, full=False)
        # a bug: keep the details in the transcript, tell the user in one line
        rt.close()
        with contextlib.suppress(OSError):
            tr.emit("error", {"message": f"internal error: {exc!r}", "traceback": traceback.format_exc()})
            tr.emit("run.ended", {"status": "error", "reason": f"internal error: {exc!r}"})
        fail(f"internal error: {exc!r} (traceback in {session.tpath})", code=1)
    finally:
        OutputWatch.stop_run = False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it came from (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _no_space(exc: BaseException) -> str | None:
    """What could not be written, when ``exc`` (or an exception it came from) is a full disk or quota:
    an OSError ENOSPC/EDQUOT (the transcript, a saved result) or SQLite's "database or disk is full"
    (the checkpoint store); else None."""
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            what = current.filename or "hypoloop's files"
            return f"cannot write {what} ({current.strerror or 'no space left on device'})"
        if isinstance(current, sqlite3.OperationalError) and "full" in str(current).lower():
            return f"cannot write the checkpoint store ({current})"
    return None


def _not_writable(exc: BaseException, own: tuple[str, ...]) -> str | None:
    """What could not be written, when ``exc`` (or an exception it came from) is a permission or read-only
    file system error (EACCES, EPERM, EROFS) on one of hypoloop's own files (a path starting with one of
    ``own``: the transcript, the state folder); else None."""
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno in (errno.EACCES, errno.EPERM, errno.EROFS) \
                and str(current.filename or "").startswith(own):
            return f"cannot write {current.filename} ({current.strerror})"
    return None


def _out_of_space(rt: Runtime, tr: Transcript, run_id: str, what: str, *, full: bool = True) -> NoReturn:
    """End a run whose own files could not be written (the disk is full, or ``full`` False: a file or
    folder of it was made read-only): stop its servers, say so in one line (exit 1). Its checkpoint keeps
    every step completed before, so ``resume`` continues it once the files can be written; what cannot be
    written now is not written."""
    first, then = (("the disk is full", f"free some space in {rt.state_dir} and beside the transcript") if full
                   else ("hypoloop's own files are not writable", "make them writable again"))
    message = (
        f"{first}: {what}; every server this run launched is stopped and its state is kept up to its last "
        f"completed step: {then}, then continue with: {resume_command(run_id)}"
    )
    with contextlib.suppress(OSError):
        rt.close()
    tr.listeners.clear()  # the one line below says it; the transcript gets it too if it has room
    with contextlib.suppress(OSError):
        tr.emit("error", {"message": message})
        tr.emit("run.ended", {"status": "error", "reason": message})
    fail(message, code=1)


def command_for(run: Any) -> str:
    """The copy-paste launch command of a finished run's working configuration (host env included)."""
    from agent.review.findings import working_command

    return working_command(run, host_env=True)


def check_knowledge() -> None:
    """Load every file of the knowledge folder in force (engines, signatures, hypothesis catalog and flag
    roles, symptom rules, localising experiments, toolchain, planner weights, implementations, packages, native libraries, limits, risk rules, what a deployment
    is, budgets, argument resolution, value types, subsystems, hardware, model families, config facts, the probe set) once, before anything is
    launched; a file that cannot be used is one line and exit 2 (the errors, all ValueErrors, name the file
    and the entry)."""
    from agent.planning.budgets import load_budgets
    from agent.planning.catalog import load_catalog
    from agent.planning.evidence_packages import libraries
    from agent.planning.generators.implementations import implementations
    from agent.planning.generators.symptoms import symptom_rules
    from agent.planning.guard import value_limits
    from agent.planning.in_play import load_subsystems
    from agent.planning.localise import load_localisers
    from agent.planning.package_changes import packages_knowledge
    from agent.planning.quoted import load_value_types
    from agent.planning.resolution import load_resolution
    from agent.planning.served import served_settings
    from agent.planning.switches import load_switches
    from agent.planning.toolchain import load_tools
    from agent.planning.weights import weights
    from agent.run.approval.policy import load_risk_rules
    from tools.engines import engines_data

    try:
        engines_data()
        load_signatures(knowledge_file("signatures.toml"))
        load_catalog()
        symptom_rules()
        load_localisers()
        load_switches()
        load_tools()
        weights()
        implementations()
        packages_knowledge()
        libraries()
        value_limits()
        load_risk_rules()
        served_settings()
        load_budgets()
        load_resolution()
        load_value_types()
        load_subsystems()
        check_knowledge_files()
        load_probe_set()
    except (CatalogError, KnowledgeError, ValueError) as exc:
        fail(str(exc))


def _root_json(conclusion: dict[str, Any]) -> dict[str, Any] | None:
    """The ``root_cause`` of the ``--json`` result line: component, statement, fix, blockers and
    alternatives of an isolated ending; None for any other."""
    root, fix = conclusion.get("root_cause"), conclusion.get("fix")
    if not root:
        return None
    return {
        "component": root["component"],
        "statement": root["statement"],
        "fix": {k: fix[k] for k in ("kind", "name", "before", "after")} if fix else None,
        # a chain: the changes adopted before the fix; the working configuration needs them all
        "blockers": [{k: b.get(k) for k in ("kind", "name", "before", "after")} for b in conclusion.get("blockers", [])],
        # other changes that avoid it: root fixes first, then cheapest in performance
        "alternatives": [
            {k: a.get(k) for k in ("kind", "name", "change", "workaround", "cost", "decisive", "result")}
            for a in conclusion.get("alternatives", [])
        ],
    }


def report_result(result: dict[str, Any], run_id: str, tpath: Path, *, json_out: bool, console: Console) -> None:
    """Print how the run ended (a JSON line with ``--json``); exit 1 if it ended in error."""
    from agent.planning.llm_spec import describe_usage
    conclusion = result.get("conclusion") or {}
    status = conclusion.get("status", "error")
    llm_usage = conclusion.get("llm_usage")
    if llm_usage:  # the tokens the LLM planner spent (stderr with --json, so stdout stays one JSON line)
        console.print(escape(describe_usage(llm_usage)), highlight=False)
    if json_out:
        JsonResult.pending = False  # this is the line; an error exit after it adds none
        out = {
            "run_id": run_id,
            "status": status,
            "root_cause": _root_json(conclusion),
            # changes that served but avoid the cause (a check silenced, a part off, what is served
            # changed), apart from the root fix above, whatever the ending
            "workarounds": [
                {k: a.get(k) for k in ("kind", "name", "change", "cost", "experiment_id")}
                for a in conclusion.get("alternatives", []) if a.get("workaround") and a.get("result") == "fixed"
            ],
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
        print(json.dumps(redacted(out, result)))
    else:
        print_hanging(console, f"transcript: {escape(str(tpath))}")
    if status == "error":
        if result.get("error_kind") == "input":
            # Nothing was launched: the case's host, launcher or baseline is unusable as written.
            fail(str(conclusion.get("reason")))
        raise typer.Exit(1)  # the error itself was printed as it happened


def host_notices(console: Console) -> Any:
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


def confirm_orphans(orphans: list[dict[str, Any]]) -> bool:
    """Ask at the terminal whether to stop the orphaned servers just listed."""
    what = "the orphaned server" if len(orphans) == 1 else f"the {len(orphans)} orphaned servers"
    err_console.print(f"stop {what}? [y/N]: ", end="")
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def pause_quietly(request: ApprovalRequest, console: Console, *, json_out: bool, tpath: Path) -> NoReturn:
    """`resume` without --decision and without a terminal: show what waits, change nothing, exit 3."""
    console.print(approval_panel(request, keys=False))
    console.print(f"run {request.run_id} still waits for approval; no terminal is attached. Answer with:")
    print_command(console, answer_hint(request, resume_command(request.run_id)))
    if json_out:
        print(_waiting_json(request, tpath))
    raise typer.Exit(3)

