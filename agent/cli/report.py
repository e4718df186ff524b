"""``hypoloop report``: a review document (Markdown or HTML) of a recorded run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import (
    ReportFormat,
    err_console,
    fail,
    transcript_of,
)
from agent.record.transcript import TranscriptError


def report(
    transcript: Annotated[Path, typer.Argument(help="a transcript JSONL file, or a run id (see `hypoloop runs`)")],
    fmt: Annotated[
        ReportFormat, typer.Option("--format", help="md: Markdown; html: one self-contained page with charts")
    ] = "md",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write here instead of stdout")] = None,
) -> None:
    """A review document of a run: root cause, fix, evidence with log excerpts, experiments, timelines."""
    from agent.record.recorded import RecordedRun
    from agent.review.report import render

    try:
        text = render(RecordedRun.load(transcript_of(transcript)), fmt)
    except TranscriptError as exc:
        fail(str(exc))
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"{output}: cannot write: {exc.strerror}")
    err_console.print(f"report written to {output}")

