"""The ``hypoloop`` command line: run, analyze, flags, replay.

Exit codes: 0 finished (isolated, not isolated or stopped), 1 the run ended in error, 2 bad input
(case file, log file, flags), 3 waiting for an approval with no terminal attached, 130 interrupted.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.case import Case, CaseError, load_case
from agent.catalog import CatalogError
from agent.graph import Runtime, build_graph, classify_outcome
from agent.models import Baseline, Experiment
from agent.planner import PlannerView, RulePlanner, model_features
from agent.render import EventRenderer, _change_text
from agent.transcript import Transcript, TranscriptError, read_transcript
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, FlagError, parse_help
from tools.flags import load_catalog as load_flag_catalog
from tools.host import HostError, LocalHost, expand_argv
from tools.knowledge import infer_features
from tools.signatures import load_signatures, scan_text

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="hypoloop: find why an LLM inference deployment fails, one experiment at a time.",
)
err_console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def state_dir() -> Path:
    """Where checkpoints and caches live: ``$HYPOLOOP_HOME`` or ``~/.hypoloop``."""
    return Path(os.environ.get("HYPOLOOP_HOME", "~/.hypoloop")).expanduser()


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _ask(proposal: dict[str, Any], console: Console) -> dict[str, Any]:
    exp = proposal["experiment"]
    what = {"baseline": "reproduce the baseline", "confirm": "confirm the fix"}.get(
        exp["purpose"], _change_text(exp.get("change"))
    )
    while True:
        console.print(
            f"[bold]Run experiment {exp['id']} ({escape(what)})?[/] [y]es / [n]o (reject) / [s]top: ", end=""
        )
        answer = sys.stdin.readline().strip().lower()
        if answer in ("y", "yes", ""):
            return {"decision": "approve", "by": "user"}
        if answer in ("n", "no"):
            console.print("reason: ", end="")
            return {"decision": "reject", "by": "user", "reason": sys.stdin.readline().strip() or "rejected"}
        if answer in ("s", "stop", "q"):
            return {"decision": "stop", "by": "user"}


@app.command()
def run(
    case: Annotated[
        str, typer.Argument(help="a case TOML file, or lab:WORLD for a case shipped with the lab")
    ],
    auto: Annotated[bool, typer.Option("--auto", help="approve every experiment without asking")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the result as one JSON line at the end")
    ] = False,
    transcript_dir: Annotated[Path, typer.Option(help="where the run's transcript is written")] = Path(
        "transcripts"
    ),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates too")] = False,
) -> None:
    """Debug a deployment: hypothesize, run one-change experiments, conclude with the root cause."""
    try:
        c = load_case(case)
    except CaseError as exc:
        _fail(str(exc))
    run_id = time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    tpath = transcript_dir / f"{run_id}.jsonl"
    try:
        tr = Transcript(tpath, run_id)
    except OSError as exc:
        _fail(f"{transcript_dir}: cannot write the transcript: {exc.strerror}")
    console = Console(stderr=json_out)
    tr.listeners.append(EventRenderer(console, verbose=verbose))
    sdir = state_dir()
    sdir.mkdir(parents=True, exist_ok=True)
    rt = Runtime(tr, sdir)
    conn = sqlite3.connect(sdir / "checkpoints.sqlite", check_same_thread=False)
    graph = build_graph(rt, SqliteSaver(conn))
    config: dict[str, Any] = {"configurable": {"thread_id": run_id}, "recursion_limit": 1000}
    _sigterm_as_interrupt()
    result: dict[str, Any] = {}
    try:
        result = graph.invoke(
            {
                "run_id": run_id,
                "case": c.model_dump(mode="json"),
                "approval": "auto" if auto else c.approval,
                "launches": 0,
                "host_seconds": 0.0,
                "experiments": [],
                "outcomes": [],
                "rejections": [],
                "hypotheses": [],
            },
            config,
        )
        while result.get("__interrupt__"):
            proposal = result["__interrupt__"][0].value
            if not sys.stdin.isatty():
                console.print(
                    f"waiting for approval of {proposal['experiment']['id']} in run {run_id}; "
                    "no terminal attached (use --auto to approve every experiment)"
                )
                raise typer.Exit(3)
            result = graph.invoke(Command(resume=_ask(proposal, console)), config)
    except KeyboardInterrupt:
        rt.close()
        tr.emit("run.ended", {"status": "interrupted", "reason": "interrupted (Ctrl-C or SIGTERM)"})
        err_console.print(f"interrupted; every server this run launched is stopped. transcript: {tpath}")
        raise typer.Exit(130) from None
    except (CatalogError, CaseError) as exc:
        rt.close()
        tr.emit("error", {"message": str(exc)})
        tr.emit("run.ended", {"status": "error", "reason": str(exc)})
        _fail(str(exc))
    except typer.Exit:
        raise
    except Exception as exc:  # a bug: keep the details in the transcript, tell the user in one line
        rt.close()
        tr.emit("error", {"message": f"internal error: {exc!r}", "traceback": traceback.format_exc()})
        tr.emit("run.ended", {"status": "error", "reason": f"internal error: {exc!r}"})
        _fail(f"internal error: {exc!r} (traceback in {tpath})", code=1)
    finally:
        rt.close()
        tr.close()
        conn.close()
    conclusion = result.get("conclusion") or {}
    status = conclusion.get("status", "error")
    if json_out:
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
            },
            "launches": conclusion.get("launches", 0),
            "host_seconds": conclusion.get("host_seconds", 0.0),
            "transcript": str(tpath),
        }
        if status == "error":
            out["error"] = conclusion.get("reason")
        print(json.dumps(out))
    else:
        console.print(f"transcript: {tpath}")
    if status == "error":
        if not json_out:
            err_console.print(f"[bold red]error:[/] {escape(str(conclusion.get('reason')))}")
        raise typer.Exit(1)


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
) -> None:
    """Read a log without launching anything: signatures, stage, facts, ranked hypotheses, first experiment."""
    try:
        text = logfile.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        _fail(f"{logfile}: cannot read: {exc.strerror}")
    try:
        c = load_case(case) if case else Case(name=logfile.name, model=_model_from_log(text))
        sigs = load_signatures()
        from agent.catalog import load_catalog

        catalog = load_catalog()
    except (CaseError, CatalogError, ValueError) as exc:
        _fail(str(exc))
    if not c.model.features:
        c.model.features = sorted(infer_features(text[:20000]))
    matches, facts = scan_text(text, sigs)
    exp = Experiment(
        id=Experiment.make_id(c.baseline, None, "baseline"),
        purpose="baseline",
        baseline=c.baseline,
        status="done",
    )
    outcome = classify_outcome(
        {
            "experiment_id": exp.id,
            "status": "observed",
            "exit_code": None,
            "matches": [m.model_dump(mode="json") for m in matches],
            "facts": facts,
            "probes": [],
            "timings": {},
            "log_path": str(logfile),
        }
    )
    fp = HostFingerprint(
        gpu_name=gpu_name,
        gpu_count=None,
        compute_capability=compute_capability,
        memory_total_mib=None,
        driver_version=None,
        sglang_version=None,
    )
    findings = []
    if case:
        from agent.planner import RelevantFinding
        from tools.knowledge import read_findings, relevance

        for p in c.knowledge:
            for f in read_findings(c.resolve_path(p)):
                findings.append(
                    RelevantFinding(
                        finding=f,
                        relevance=relevance(
                            f, model=c.model.path, features=model_features(c), gpu_name=gpu_name
                        ),
                    )
                )
    view = PlannerView(case=c, fingerprint=fp, findings=findings, experiments=[exp], outcomes=[outcome])
    planner = RulePlanner(catalog, None)
    hist = planner.history(view)
    proposal = planner.propose(view, hist)
    ranked = sorted(hist.hypotheses, key=lambda h: -h.posterior)
    if json_out:
        print(
            json.dumps(
                {
                    "log": str(logfile),
                    "stage": outcome.stage,
                    "signatures": [
                        {"id": m.signature_id, "kind": m.kind, "lines": m.line_numbers, "text": m.first_line}
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
                    "first_experiment": proposal.experiment.change.model_dump()
                    if proposal.experiment and proposal.experiment.change
                    else None,
                    "reason": proposal.conclude_reason,
                }
            )
        )
        return
    console = Console()
    console.print(f"[bold]{escape(str(logfile))}[/]: stage reached [bold]{outcome.stage}[/]")
    t = Table("signature", "kind", "lines", "first line", title="signatures")
    for m in outcome.matches:
        t.add_row(
            m.signature_id, m.kind, ",".join(map(str, m.line_numbers[:6])), escape(m.first_line.strip()[:90])
        )
    console.print(t)
    if outcome.facts:
        console.print("effective config: " + ", ".join(f"{k}={v}" for k, v in outcome.facts.items()))
    h = Table("p", "hypothesis", "component", "statement", title="hypotheses")
    for hy in ranked:
        h.add_row(f"{hy.posterior:.2f}", hy.id, hy.component, escape(hy.statement))
    console.print(h)
    if proposal.experiment and proposal.experiment.change:
        console.print(
            f"first experiment: [bold magenta]{escape(proposal.experiment.change.describe())}[/] — "
            f"{escape(proposal.experiment.rationale)}"
        )
    else:
        console.print(f"no experiment to propose: {proposal.conclude_reason}")


def _model_from_log(text: str) -> Any:
    import re

    from agent.case import ModelSpec

    m = re.search(r"model_path=['\"]([^'\"]+)['\"]", text)
    return ModelSpec(path=m.group(1) if m else "unknown")


@app.command()
def flags(
    host: Annotated[
        str | None, typer.Option("--host", help="local (ssh:// arrives with SSH support)")
    ] = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="a saved `launch_server --help` output")
    ] = None,
    case: Annotated[str | None, typer.Option(help="use this case's host and launcher")] = None,
    launcher: Annotated[
        str, typer.Option(help="launcher command on the host")
    ] = "python -m sglang.launch_server",
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The flag catalog of a host's SGLang, parsed from `launch_server --help`."""
    try:
        if from_file is not None:
            try:
                catalog: FlagCatalog = parse_help(
                    from_file.read_text(encoding="utf-8"), source=str(from_file)
                )
            except OSError as exc:
                _fail(f"{from_file}: cannot read: {exc.strerror}")
        elif case is not None or host is not None:
            c = load_case(case) if case else None
            target = c.host.target if c else (host or "local")
            if target != "local":
                _fail(f"{target}: only local hosts are supported in this version")
            h = LocalHost(env=c.host.env if c else None)
            argv = expand_argv(c.launcher.argv if c else launcher.split(), h)
            catalog = load_flag_catalog(h, argv, cache_dir=state_dir() / "flag-cache", version=None)
        else:
            _fail("give --host HOST, --case CASE or --from-file HELP.txt")
    except (CaseError, FlagError, HostError) as exc:
        _fail(str(exc))
    if json_out:
        print(catalog.model_dump_json())
        return
    t = Table("flag", "aliases", "value", "choices", "default", title=f"{len(catalog.flags)} flags")
    for spec in catalog.flags.values():
        t.add_row(
            spec.name,
            ", ".join(spec.aliases),
            spec.value_type if spec.takes_value else "(switch)",
            escape(", ".join(spec.choices or [])),
            escape(str(spec.default or "")),
        )
    Console().print(t)


@app.command()
def replay(
    transcript: Annotated[Path, typer.Argument(help="a transcript JSONL file")],
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Print a recorded run step by step."""
    console = Console()
    render = EventRenderer(console, verbose=verbose)
    try:
        for ev in read_transcript(transcript):
            render(ev)
    except TranscriptError as exc:
        _fail(str(exc))


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main", "Baseline"]
