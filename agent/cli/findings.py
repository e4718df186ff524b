"""``hypoloop findings add``: append what a run found to a FINDINGS.md file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.cli.common import (
    err_console,
    fail,
    load_recorded,
    transcript_of,
)
from agent.record.transcript import TranscriptError

findings_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="FINDINGS.md notes: append what a run found, in the style the reader parses."
)


@findings_app.command("add")
def findings_add(
    transcript: Annotated[Path, typer.Argument(help="the transcript of a run that isolated a fix, or its run id (see `hypoloop runs`)")],
    to: Annotated[Path, typer.Option("--to", help="the FINDINGS.md file to append to (created if missing; its folder must exist)")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the entry, write nothing")] = False,
) -> None:
    """Append a dated entry (model, hardware, symptom, root cause, working command, ruled-out ideas, the
    run) to a findings file, never changing what is already there."""
    from agent.domain.models import command_text
    from agent.review.findings import FindingsWriteError, add_finding

    try:
        entry, finding = add_finding(load_recorded(transcript_of(transcript, _read_graph)), to, dry_run=dry_run)
    except (TranscriptError, FindingsWriteError) as exc:
        fail(str(exc))
    sys.stdout.write(entry)
    flags = command_text(finding.flags)
    what = "would read back" if dry_run else f"appended to {to}; it reads back"
    err_console.print(
        f"{what} as: outcome {finding.outcome}, model {finding.model}, hardware {finding.hardware}, flags {flags}"
        + (f", {len(finding.packages)} package versions" if finding.packages else ""),
        highlight=False,
    )



def _read_graph(home: Path, saver: Any) -> Any:
    """``agent.run.graph.read_graph``, imported only when a run id is looked up (as ``report`` does)."""
    from agent.run.graph import read_graph

    return read_graph(home, saver)
