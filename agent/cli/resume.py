"""``hypoloop resume``: answer the approval a run waits for, or continue a run an ended process left."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from agent.cli.common import (
    DecisionOption,
    JsonResult,
    KnowledgeOpt,
    approval_mode,
    err_console,
    fail,
    resume_command,
    state_dir,
    using_knowledge,
)
from agent.cli.drive import (
    RunSession,
    check_knowledge,
    command_for,
    drive_guarded,
    pause_quietly,
    report_result,
    sigterm_as_interrupt,
)
from agent.domain.case import Case
from agent.planning.planner import make_planner
from agent.record.recorded import RecordedRun
from agent.record.redact import run_redactor
from agent.record.transcript import Transcript, TranscriptError, damaged_lines
from agent.review.render import EventRenderer
from agent.run.approval.edit import EditError
from agent.run.approval.policy import ApprovalMode
from agent.run.approval.request import ApprovalAnswer, ApprovalRequest
from agent.run.approval.screen import describe_experiment
from agent.run.progress import ProgressBoard
from tools.sanitize import SafeConsole

if TYPE_CHECKING:  # the heavy modules (LangGraph, the LLM client) load only in the commands that need them
    from agent.record.runs import RunInfo
    from agent.run.runtime import Runtime

_DecisionOpt = Annotated[
    DecisionOption | None,
    typer.Option(
        help="the answer to the experiment waiting for approval (approve-all: it and the rest of its "
        "--parallel batch)",
        show_default="ask at the terminal",
    ),
]
_SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="edit: the one change to run instead: NAME=VALUE for an env var, --flag=VALUE, or a bare "
        "value for the proposed variable",
    ),
]
_ExperimentOpt = Annotated[
    str | None,
    typer.Option(help="answer only if this experiment is the one waiting (guards a repeated answer)"),
]
_ApproveOpt = Annotated[
    ApprovalMode | None,
    typer.Option("--approve", help="switch the approval mode for the rest of the run",
                 show_default="the run's mode"),
]


def resume(
    run_id: Annotated[str, typer.Argument(help="a run id (see `hypoloop runs`)")],
    decision: _DecisionOpt = None,
    reason: Annotated[str | None, typer.Option(help="why (required to reject; recorded)")] = None,
    set_: _SetOpt = None,
    experiment: _ExperimentOpt = None,
    approve: _ApproveOpt = None,
    auto: Annotated[bool, typer.Option("--auto", help="approve the rest without asking")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the result as one JSON line at the end")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates too")] = False,
    knowledge: KnowledgeOpt = None,
) -> None:
    """Continue a run: answer the approval it waits for, or pick it up where an ended process left it.

    The run keeps the knowledge folder it started with unless --knowledge names another."""
    JsonResult.pending, JsonResult.run_id, JsonResult.managed = json_out, run_id, True
    from agent.record.runs import RunError, RunInUse, RunLock, load_run
    from agent.run.graph import read_graph
    mode = approval_mode(approve, auto)
    edits = list(set_ or [])
    options = ResumeOptions(_checked_decision(decision, reason, edits), reason, edits, experiment, mode, json_out,
                            verbose)
    home = state_dir()
    try:
        load_run(home, run_id, read_graph)
        lock = RunLock(home, run_id).acquire()
    except RunInUse as exc:
        fail(str(exc), code=4)
    except RunError as exc:
        fail(str(exc))
    try:
        recorded = (load_run(home, run_id, read_graph).values or {}).get("knowledge_dir")
        folder = knowledge or (recorded if recorded and Path(recorded).is_dir() else None)
        with using_knowledge(folder, given=knowledge is not None):
            check_knowledge()  # unusable knowledge is refused before anything is launched, as by `run`
            _resume_locked(home, run_id, options)
    finally:
        lock.release()


@dataclass(frozen=True)
class ResumeOptions:
    """``resume``'s answer, checked: the decision (None: ask at the terminal), its reason, the ``--set``
    edits, the experiment it must be for (None: whichever waits), the approval mode to switch to (None:
    the run's), and output (one JSON line, verbosity)."""

    decision: str | None
    reason: str | None
    edits: list[str]
    experiment: str | None
    mode: str | None
    json_out: bool
    verbose: bool


def _checked_decision(decision: str | None, reason: str | None, edits: list[str]) -> str | None:
    """The decision the options make (``--set`` alone is an edit); a contradictory one is one line, exit 2."""
    if edits and decision in ("reject", "stop"):
        fail(f"--set edits the experiment to run; it cannot go with --decision {decision}")
    if decision == "edit" and not edits:
        fail("--decision edit needs the change: --set NAME=VALUE")
    if decision == "reject" and not reason:
        fail("a rejection needs a reason: --reason TEXT (the planner is told why)")
    if reason is not None and decision is None and not edits:  # never dropped unread
        fail("--reason says why of an answer: give it with --decision (reject needs one; approve, edit and "
             "stop record it) or with --set; nothing was decided")
    if edits and decision is None:
        decision = "edit"
    return decision


def _resume_locked(home: Path, run_id: str, options: ResumeOptions) -> None:
    """Continue run ``run_id`` (its lock held) from its checkpoint in ``home``: report a finished one,
    refuse a decision that does not fit, else drive it on with the answer given."""
    from agent.record.runs import load_run
    from agent.run.graph import read_graph

    info = load_run(home, run_id, read_graph)  # read again under the lock: another process may have moved it on
    request = ApprovalRequest.model_validate(info.pending) if info.pending else None
    waiting = f"{request.experiment.id} ({describe_experiment(request.experiment)})" if request else None
    if info.status == "finished":
        msg = f"run {run_id} has finished ({info.result}); nothing waits for a decision"
        if options.decision or options.experiment:
            fail(msg)
        err_console.print(msg)
        report_result(info.values, run_id, Path(info.transcript or "?"), json_out=options.json_out,
                      console=SafeConsole())
        return
    _refuse_wrong_decision(run_id, request, waiting, decision=options.decision, experiment=options.experiment)
    session = _session(home, info, run_id, options)
    if request is None:  # continuing an interrupted run: --auto / --approve apply from the next approval
        session.rt.approval_override = options.mode
    result: dict[str, Any] = {}
    try:
        result = _continue(session, info, request, waiting, options)
    finally:
        session.rt.close()
        session.tr.close()
    report_result(result, run_id, session.tpath, json_out=options.json_out, console=session.console)


def _session(home: Path, info: RunInfo, run_id: str, options: ResumeOptions) -> RunSession:
    """The resumed run's session: its transcript continued, its events shown on the console (stderr with
    ``--json``)."""
    from agent.planning.llm_spec import llm_notices
    from agent.run.runtime import Runtime

    tr, tpath = _continue_transcript(info, run_id)
    console = SafeConsole(stderr=options.json_out)
    renderer = EventRenderer(console, verbose=options.verbose, launch_progress=True, command_for=command_for)
    # the working command at the end needs what the run did before this process: its case, launches
    with contextlib.suppress(OSError, TranscriptError):
        renderer.run = RecordedRun.load(tpath)
    tr.listeners.append(renderer)
    tr.listeners.append(llm_notices(console))
    rt = Runtime(tr, home, make_planner, progress=ProgressBoard(console, redact=tr.redact))
    return RunSession(rt, tr, tpath, run_id, console, options.json_out)


def _continue(
    session: RunSession, info: RunInfo, request: ApprovalRequest | None, waiting: str | None,
    options: ResumeOptions,
) -> dict[str, Any]:
    """Drive the run on from its checkpoint: with the answer given, else asking at the terminal (none
    attached: left waiting, exit 3); a run whose last checkpoint was lost is ended honestly."""
    from agent.record.runs import open_checkpointer
    from agent.run.graph import build_graph

    config: dict[str, Any] = {"configurable": {"thread_id": session.run_id}, "recursion_limit": 1000}
    sigterm_as_interrupt()
    with open_checkpointer(session.rt.state_dir) as saver:
        graph = build_graph(session.rt, saver)
        first: Any = None
        if request is not None and options.decision is not None:
            first = _resume_command(session.rt, info, request, options, waiting=waiting)
        elif request is not None and not sys.stdin.isatty():
            pause_quietly(request, session.console, json_out=options.json_out, tpath=session.tpath)
        session.tr.emit(
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

            end_lost_run(session.rt, graph, config, info.values)
        return drive_guarded(graph, config, first, session, mode=options.mode)


def _refuse_wrong_decision(
    run_id: str, request: ApprovalRequest | None, waiting: str | None, *, decision: str | None,
    experiment: str | None,
) -> None:
    """End the command in one line when the decision names an experiment that is not waiting, or the run waits
    for no approval."""
    if experiment and (request is None or request.experiment.id != experiment):
        now = f"waiting: {waiting}" if waiting else "it waits for no approval"
        fail(f"{experiment} is not waiting for approval in run {run_id} ({now}); nothing was decided")
    if request is None and decision:
        fail(
            f"run {run_id} is not waiting for an approval (it stopped in the middle of a step); "
            f"continue it with: {resume_command(run_id)}"
        )


def _continue_transcript(info: RunInfo, run_id: str) -> tuple[Transcript, Path]:
    """(the run's transcript opened to append, its path), warning about damaged lines; a transcript that
    cannot be continued ends the command in one line."""
    if not info.transcript:
        fail(f"run {run_id}: its checkpoint names no transcript; it cannot be resumed by this version")
    tpath = Path(info.transcript)
    if not tpath.is_file():  # a new file would hold the rest of the run without its start: no report could read it
        fail(f"{tpath}: the transcript of run {run_id} is gone (moved or deleted); put it back there to resume "
             "the run: a resumed run continues its own transcript")
    try:
        tr = Transcript(tpath, run_id, redact=run_redactor(Case.model_validate(info.values["case"])))
    except (OSError, TranscriptError) as exc:
        fail(f"{tpath}: cannot continue the transcript: {exc}")
    for problem in damaged_lines(tpath)[:3]:  # recovery reads past them; the file stays as it is
        err_console.print(f"[yellow]warning:[/] {escape(problem)} (skipped; the run continues after it)")
    tr.step = len(info.values.get("experiments", [])) + 1
    return tr, tpath


def _resume_command(
    rt: Runtime, info: RunInfo, request: ApprovalRequest, options: ResumeOptions, *, waiting: str | None
) -> Any:
    """The graph's resume command carrying the user's answer; an edit is applied first (refused in one line)."""
    from langgraph.types import Command

    from agent.run.nodes.approve import edit_experiment
    answer = ApprovalAnswer(
        decision="approve" if options.decision == "approve-all" else options.decision,  # type: ignore[arg-type]
        all=options.decision == "approve-all",
        reason=options.reason,
        set=options.edits,
        experiment_id=request.experiment.id,
        mode=options.mode,  # type: ignore[arg-type]
        by="user",
    )
    if answer.decision == "edit":
        try:
            edit_experiment(rt, info.values, request.experiment, answer.set)  # type: ignore[arg-type]
        except EditError as exc:
            fail(f"edit refused: {exc}; run {info.run_id} still waits for approval of {waiting}")
    return Command(resume=answer.model_dump(mode="json", exclude_none=True))

