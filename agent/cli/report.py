"""``hypoloop report``: a review document (Markdown or HTML) of a recorded run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.cli.common import (
    ReportFormat,
    err_console,
    fail,
    load_recorded,
    transcript_of,
)
from agent.record.transcript import TranscriptError


def report(
    transcript: Annotated[Path, typer.Argument(help="a transcript JSONL file, or a run id (see `hypoloop runs`)")],
    fmt: Annotated[
        ReportFormat | None,
        typer.Option("--format", help="md: Markdown; html: one self-contained page with charts "
                     "[default: html for an --output ending in .html or .htm, else md]"),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write here instead of stdout")] = None,
) -> None:
    """A review document of a run: root cause, fix, evidence with log excerpts, experiments, timelines."""
    from agent.review.report import render

    suffix = output.suffix.lower() if output is not None else ""
    if fmt is None and suffix not in _MARKDOWN + _HTML:  # `-o r.pdf`: Markdown bytes under a PDF's name
        fail(f"--output {output}: a report is Markdown ({', '.join(_MARKDOWN[1:])}) or HTML "
             f"({', '.join(_HTML)}); give --format to write it under another name")
    if fmt is None:  # `-o report.html` asks for HTML
        fmt = "html" if suffix in _HTML else "md"
    try:
        text = render(load_recorded(transcript_of(transcript, _read_graph)), fmt)
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


#: File name endings that say which format a report written with ``-o`` is ("" is a name without one).
_MARKDOWN = ("", ".md", ".markdown", ".txt")
_HTML = (".html", ".htm")


def _read_graph(home: Path, saver: Any) -> Any:
    """``agent.run.graph.read_graph``, imported only when a run id is looked up (a transcript file needs no
    graph; compiling it is most of the command's start-up)."""
    from agent.run.graph import read_graph

    return read_graph(home, saver)
