"""``hypoloop show``: a run's story so far and the approval it waits for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from agent.cli.common import (
    STATUS_STYLE,
    err_console,
    fail,
    held_elsewhere,
    no_state_yet,
    redacted,
    redacted_info,
    resume_command,
    said,
    state_dir,
    state_home,
    warn_skipped,
)
from agent.record.transcript import SkippedLines, TranscriptError, read_transcript
from agent.review.render import EventRenderer, print_hanging
from agent.review.text import print_command
from agent.review.wording import count
from agent.run.approval.request import ApprovalRequest
from agent.run.approval.screen import answer_hint, approval_panel
from tools.sanitize import SafeConsole


def show(
    run_id: Annotated[str, typer.Argument(help="a run id (see `hypoloop runs`)")],
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates and tool calls too")] = False,
) -> None:
    """A run's story so far (from its transcript) and the approval it waits for, if any."""
    from agent.record.runs import RunError, load_run
    from agent.run.graph import read_graph
    if no_state_yet():
        fail(f"no run {run_id}: HYPOLOOP_HOME {state_home()} does not exist")
    try:
        info = load_run(state_dir(), run_id, read_graph)
    except RunError as exc:
        fail(str(exc))
    if json_out:
        out = info.model_dump(mode="json", exclude={"values"})
        out["conclusion"] = info.values.get("conclusion")
        out["rejections"] = info.values.get("rejections", [])
        out["edits"] = info.values.get("edits", [])
        print(json.dumps(redacted(out, info.values)))
        return
    info = redacted_info(info)
    console = SafeConsole()
    render = EventRenderer(console, verbose=verbose)
    if info.transcript and Path(info.transcript).exists():
        skipped = SkippedLines()  # damaged lines are read past, and told in one line
        try:
            for ev in read_transcript(Path(info.transcript), on_bad=skipped):
                render(ev)
        except TranscriptError as exc:
            err_console.print(f"[yellow]warning:[/] {escape(str(exc))}")
        warn_skipped(skipped)
    else:
        console.print(f"[dim](no transcript at {escape(str(info.transcript))})[/]")
    console.print()
    style = STATUS_STYLE.get(info.status, "white")
    print_hanging(
        console,
        f"run [bold]{info.run_id}[/] ({escape(info.case)}): [{style}]{said(info.status)}[/], "
        f"{count(info.launches, 'launch')}, {count(info.host_seconds, 'host-second', fmt='.0f')}; "
        f"transcript {escape(str(info.transcript))}",
    )
    if info.pending:
        # -v lists every open hypothesis with its statement (the screen's [h]); without it, the screen as asked
        request = ApprovalRequest.model_validate(info.pending)
        console.print(approval_panel(request, full=verbose, keys=False))
        if info.holder:  # asked at that process's terminal: `resume` would be refused while it holds the run
            print_hanging(console, f"{held_elsewhere(info.holder)}: answer there")
            return
        console.print("answer with:")
        print_command(console, answer_hint(request, resume_command(info.run_id), decision_optional=True))
    elif info.status == "interrupted":
        console.print(f"nothing is driving it: continue with {escape(resume_command(info.run_id))}")

