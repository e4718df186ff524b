"""``hypoloop runs``: the runs in $HYPOLOOP_HOME and how each stands."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from agent.cli.common import (
    STATUS_STYLE,
    fail,
    held_elsewhere,
    no_state_yet,
    piped_console,
    redacted,
    redacted_info,
    resume_command,
    said,
    state_dir,
    state_home,
)
from agent.review.text import print_hanging
from agent.review.wording import count
from agent.run.approval.request import ApprovalRequest
from agent.run.approval.screen import describe_experiment

if TYPE_CHECKING:  # the heavy modules (LangGraph, the LLM client) load only in the commands that need them
    from agent.record.runs import RunInfo


def _run_detail(info: RunInfo) -> str:
    left = ""
    if info.leftovers:  # servers of a run nobody drives: resume adopts or stops them, a new run offers to
        pids = ", ".join(str(x["pid"]) for x in info.leftovers)
        pid_word = "pid" if len(info.leftovers) == 1 else "pids"
        left = f"; {count(len(info.leftovers), 'server')} left running ({pid_word} {pids})"
    if info.pending:
        req = ApprovalRequest.model_validate(info.pending)
        held = f"; {held_elsewhere(info.holder)}" if info.holder else ""
        return f"{req.experiment.id}: {describe_experiment(req.experiment)}{held}{left}"
    if info.status == "running":
        return f"pid {info.holder}" if info.holder and info.holder > 0 else ""
    if info.status == "interrupted":
        return f"{resume_command(info.run_id)}{left}"
    return (info.result or "") + left


def runs(
    json_out: Annotated[bool, typer.Option("--json", help="one JSON list")] = False,
) -> None:
    """List the runs in $HYPOLOOP_HOME: running, waiting for approval, interrupted or finished."""
    from agent.record.runs import RunError, list_runs
    from agent.run.graph import read_graph
    if no_state_yet():  # nothing to list: a mistyped HYPOLOOP_HOME is not created by a reader
        if json_out:
            print("[]")
        else:
            piped_console().print(f"no runs in {state_home()} (no such folder)")
        return
    home = state_dir()
    try:
        infos = list_runs(home, read_graph)
    except RunError as exc:
        fail(str(exc))
    if json_out:
        print(json.dumps([redacted(i.model_dump(mode="json", exclude={"values"}), i.values) for i in infos]))
        return
    infos = [redacted_info(i) for i in infos]
    console = piped_console()
    if not infos:
        console.print(f"no runs in {home}")
        return
    if console.width < 110:  # a narrow terminal: two lines per run, so no id is ever cut or split
        console.print(f"runs in {home}", style="bold")
        for i in infos:
            style = STATUS_STYLE.get(i.status, "white")
            # each line wraps at spaces within the terminal (a hanging indent); the run id is never split
            state = f"[{style}]{said(i.status)}[/]  {count(i.launches, 'launch')}"
            if len(i.run_id) + 2 + Text.from_markup(state).cell_len <= console.width:
                console.print(f"{i.run_id}  {state}", highlight=False)
            else:  # the id alone, its state below it
                console.print(i.run_id, highlight=False)
                print_hanging(console, f"  {state}")
            print_hanging(console, f"  {escape(i.case)}, updated {i.updated[:19].replace('T', ' ')}")
            print_hanging(console, f"  {escape(_run_detail(i))}")
        return
    t = Table("run", "case", "status", "waiting for / result", "launches", "updated", title=f"runs in {home}")
    for col in t.columns:  # ids are what the user copies into `resume --experiment`: wrap, never cut
        col.overflow = "fold"
    t.columns[0].no_wrap = True
    for i in infos:
        style = STATUS_STYLE.get(i.status, "white")
        t.add_row(
            i.run_id,
            escape(i.case),
            f"[{style}]{said(i.status)}[/]",
            escape(_run_detail(i)),
            str(i.launches),
            i.updated[:19].replace("T", " "),
        )
    console.print(t)

