"""``hypoloop replay``: a recorded run step by step, or (``--redecide``) checked against the current
planner."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.common import (
    KnowledgeOpt,
    PlannerName,
    err_console,
    fail,
    load_recorded,
    state_dir,
    transcript_of,
    unreadable,
    using_knowledge,
    warn_skipped,
)
from agent.cli.drive import check_knowledge
from agent.domain.knowledge_dir import knowledge_dir
from agent.record.runs import lock_holder
from agent.record.transcript import SkippedLines, TranscriptError
from tools.sanitize import SafeConsole


def replay(
    transcript: Annotated[Path, typer.Argument(help="a transcript JSONL file, or a run id (see `hypoloop runs`)")],
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
    knowledge: KnowledgeOpt = None,
) -> None:
    """A recorded run step by step as it looked live, with the evidence behind each hypothesis and the
    alternatives each step weighed; or (--redecide) checked against the current planner, with the
    knowledge folder the run read (or --knowledge)."""
    from agent.review.replay import no_step
    from agent.review.replay import replay as replay_run

    console = SafeConsole()
    transcript = transcript_of(transcript, _read_graph)
    if redecide:
        _redecide(transcript, planner, console, verbose=verbose, knowledge=knowledge)
        return
    if knowledge is not None:
        fail("--knowledge is for --redecide (a replay shows what the run recorded)")
    if speed is not None and not (math.isfinite(speed) and speed > 0):  # nan compares false with everything
        fail(f"--speed {speed}: expected a positive finite number (how many times faster than recorded)")
    if speed is not None and follow:
        fail("--speed replays a finished recording; --follow shows a live run at its own pace")
    if transcript.is_dir():
        fail(f"{transcript}: is a directory (expected a run's transcript, a .jsonl file)")
    if (not follow or transcript.exists()) and not transcript.is_file():
        fail(f"{transcript}: no such transcript file")
    if follow and not transcript.exists():
        err_console.print(f"waiting for {transcript} to appear (Ctrl-C to stop)")
    skipped = SkippedLines()  # damaged lines are read past, and told once the replay stops
    try:
        summary = replay_run(transcript, console, from_step=step, follow=follow, speed=speed, verbose=verbose,
                             on_bad=skipped, driven=lambda: lock_holder(state_dir(), transcript.stem) is not None)
    except TranscriptError as exc:
        unreadable(exc, skipped)
    except KeyboardInterrupt:
        warn_skipped(skipped)
        err_console.print(f"stopped following {transcript}")
        raise typer.Exit(130) from None
    warn_skipped(skipped)
    if step and summary.shown == 0:
        fail(no_step(step, summary))


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
    from agent.planning.planner import make_planner
    from agent.review.redecide import RedecideError, redecide_planner, redecide_table
    from agent.review.redecide import redecide as redecide_run

    recorded = load_recorded(transcript)
    folder, note = _redecide_knowledge(recorded.started.get("knowledge_dir"), knowledge)
    try:
        with using_knowledge(folder, given=knowledge is not None):
            check_knowledge()
            planner, flags, warnings = redecide_planner(planner_name, recorded, make_planner)
            result = redecide_run(recorded, planner, flags, warnings=[*([note] if note else []), *warnings])
    except (TranscriptError, RedecideError) as exc:
        fail(str(exc))
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


def _read_graph(home: Path, saver: Any) -> Any:
    """``agent.run.graph.read_graph``, imported only when a run id is looked up (a transcript file needs no
    graph; compiling it is most of the command's start-up)."""
    from agent.run.graph import read_graph

    return read_graph(home, saver)
