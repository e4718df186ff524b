"""`python -m bench [--worlds NAME ... | --sealed | --all-worlds] [--json]`: the agent against baselines on the lab worlds.

Prints a table for people (progress on stderr while it runs) or, with ``--json``, one JSON object for
machines. Exit code 0 when the run finished (``all_targets_met`` in the JSON says whether every target
was met), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bench.method_result import MethodResult
from bench.run import METHODS, BenchResult, run_bench, run_sweep


def render(result: BenchResult, console: Console) -> None:
    """The rich tables: every world and method, then the targets with measured figures."""
    t = Table(
        title=f"hypoloop bench — lab time scale {result.time_scale:g}, random = exact expectation over every "
        f"order (flaky worlds: mean of {result.seeds} seeds), "
        f"{result.wall_s:.0f} s wall",
        show_lines=False,
    )
    for col, just in (
        ("world", "left"),
        ("method", "left"),
        ("correct root cause", "center"),
        ("launches", "right"),
        ("host-s (modelled)", "right"),
        ("wall s", "right"),
        ("fix found", "left"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for w in result.worlds:
        for i, (name, m) in enumerate(w.methods.items()):
            correct = _correct_cell(m)
            style = "green" if m.correct else "red"
            t.add_row(
                w.world if i == 0 else "",
                name,
                f"[{style}]{correct}[/]",
                f"{m.launches:.1f}" if m.correct_rate is not None else f"{m.launches:g}",
                f"{m.host_s:,.0f}",
                f"{m.wall_s:.1f}",
                escape(m.found or m.status or "—"),
                end_section=i == len(w.methods) - 1,
            )
    console.print(t)
    g = Table(title="targets")
    g.add_column("target")
    g.add_column("measured")
    g.add_column("met", justify="center")
    for target in result.targets:
        g.add_row(
            escape(target.name), escape(target.measured), "[green]yes[/]" if target.met else "[red]NO[/]"
        )
    console.print(g)
    for note in result.notes:
        console.print(f"note: {escape(note)}", highlight=False)
    console.print(
        "host-s: modelled GPU-host seconds (each launch's load phase, to ready or to its end, in wall seconds / time "
        "scale; its request phase in real seconds plus its timed traffic and unanswered requests' host time: "
        "tools/host_time.py). random: uniform one-change "
        "search over the plausible changes, stopping at the first that passes (no confirmation launch); on a "
        "deterministic world every change is launched once and the figures are the exact expectation over all "
        "orders, 1 + (N+1)/(k+1) launches for k working changes of N (p: the chance the change found is a root "
        "fix); a launch of a configuration already run is replayed from that run. "
        "overhead per step: wall time between a server stopped and the next launch (analyse, update, design, "
        "approve, checkpoint, transcript), host waits excluded. agent-empty: the agent with a knowledge folder "
        "whose hypothesis catalog is empty (HYPOLOOP_KNOWLEDGE). correct: chains need every link, not_isolated "
        "worlds the implicated package named, the control nothing blamed.",
        style="dim",
    )


def _correct_cell(m: MethodResult) -> str:
    """The "correct root cause" cell: yes/no, with the exact chance (p=) or the seeds that were right."""
    if m.correct_rate is not None and m.extra.get("estimate") == "exact":
        return f"{'yes' if m.correct else 'no'} (p={m.correct_rate:.2f})"
    if m.correct_rate is not None:
        return f"{'yes' if m.correct else 'no'} ({m.correct_rate * m.extra.get('seeds', 1):.0f}/{m.extra.get('seeds', 1)})"
    return "yes" if m.correct else "no"


def render_real(result: dict, console: Console) -> None:
    """The real-engine table: each case and method with its ending, launches, host-seconds and wall."""
    t = Table(title=f"hypoloop on real engines ({result['bed']}), {result['wall_s']:.0f} s wall")
    for col, just in (("case", "left"), ("engine", "left"), ("method", "left"), ("correct", "center"),
                      ("launches", "right"), ("host-s", "right"), ("ending / fix found", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in result["cases"]:
        for i, (name, m) in enumerate(row["methods"].items()):
            ok = m["correct_root_cause"]
            t.add_row(
                row["case"] if i == 0 else "", row["engine"] if i == 0 else "", name,
                f"[{'green' if ok else 'red'}]{'yes' if ok else 'no'}[/]", f"{m['launches']:g}",
                f"{m['host_seconds']:,.0f}", escape(f"{m.get('status') or ''}: {m.get('found') or '—'}"),
                end_section=i == len(row["methods"]) - 1,
            )
    console.print(t)
    console.print(
        "real launches on this host's CPU (host-s = wall seconds of the launches). random: uniform one-change "
        "search, at most chain length + 3 launches per seed, stopping at the first change that serves.",
        style="dim",
    )


def main_real(args: argparse.Namespace, err: Console) -> int:
    """``python -m bench --real``: the real-engine cases (bench/real.py)."""
    import tempfile

    from bench.real import bed_missing, run_real

    missing = bed_missing()
    if missing is not None:
        if args.json:
            print(json.dumps({"skipped": missing}))
        print(f"bench --real: {missing}", file=sys.stderr)
        return 0
    methods = tuple(m for m in args.methods if m in ("agent", "random")) or ("agent", "random")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="hypoloop-real-"))

    def progress(msg: str) -> None:
        if not args.quiet:
            err.print(f"[dim]bench --real:[/] {escape(msg)}", highlight=False)

    try:
        result = run_real(args.engines, args.worlds, methods=methods, seeds=args.seeds if args.seeds_set else 1,
                          workdir=workdir, progress=progress)
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=160)
        render_real(result, out)
    return 0


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench``."""
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--worlds",
        nargs="+",
        metavar="WORLD",
        help="world names (lab/worlds, then lab/worlds-sealed) or world directories "
        "(default: every development world under lab/worlds)",
    )
    which = ap.add_mutually_exclusive_group()
    which.add_argument(
        "--sealed",
        action="store_true",
        help="run the sealed worlds (lab/worlds-sealed) instead of the development worlds",
    )
    which.add_argument(
        "--all-worlds", action="store_true", help="run the development worlds, then the sealed worlds"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--seeds", type=int, default=None, help="random-baseline seeds (default 3; 1 with --real)")
    ap.add_argument(
        "--real", action="store_true",
        help="run the real-engine cases (bench/real) on this host instead of the lab worlds "
        "(needs the bed of .ci/real-engines); --worlds then names real cases",
    )
    ap.add_argument(
        "--engines", nargs="+", metavar="ENGINE", help="with --real: the engines whose cases run (sglang, vllm)"
    )
    ap.add_argument("--time-scale", type=float, default=0.001, help="lab time scale (default 0.001)")
    ap.add_argument(
        "--methods",
        nargs="+",
        default=list(METHODS),
        choices=list(METHODS),
        help="methods to run (default: all)",
    )
    ap.add_argument("--keep", type=Path, metavar="DIR", help="keep logs and transcripts in DIR")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument(
        "--sweep",
        metavar="NAME=V1,V2",
        help="run the bench once per value of one tunable of knowledge/planner.toml (SECTION.KEY, e.g. "
        "ledger.elsewhere_factor=0.25,0.5,1.0) and print every world's figures for each",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench``."""
    ap = _parser()
    args = ap.parse_args(argv)
    args.seeds_set = args.seeds is not None
    if args.seeds is None:
        args.seeds = 3
    if args.seeds < 1 or not args.time_scale > 0:
        ap.error("--seeds must be >= 1 and --time-scale > 0")
    if args.worlds and (args.sealed or args.all_worlds):
        ap.error("--worlds names the worlds to run; it cannot be combined with --sealed or --all-worlds")
    world_set = "sealed" if args.sealed else "all" if args.all_worlds else "dev"
    err = Console(stderr=True)
    if args.real:
        return main_real(args, err)
    if args.engines:
        ap.error("--engines needs --real")

    def progress(msg: str) -> None:
        if not args.quiet:
            err.print(f"[dim]bench:[/] {escape(msg)}", highlight=False)

    if args.sweep:
        return _sweep(args, ap, err, progress)
    try:
        result = run_bench(
            args.worlds,
            seeds=args.seeds,
            time_scale=args.time_scale,
            methods=tuple(args.methods),
            workdir=args.keep,
            progress=progress,
            world_set=world_set,
        )
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    if args.json:
        print(json.dumps(result.as_json()))
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=160)
        render(result, out)
    return 0


def _sweep(args: argparse.Namespace, ap: argparse.ArgumentParser, err: Console, progress: Any) -> int:
    """``--sweep NAME=V1,V2``: one bench per value, then one table: world x value (correct, launches)."""
    import tempfile

    name, sep, vals = args.sweep.partition("=")
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not sep or not values:
        ap.error("--sweep expects NAME=V1,V2 (e.g. ledger.elsewhere_factor=0.25,0.5,1.0)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="hypoloop-sweep-"))
    try:
        runs = run_sweep(name, values, workdir=root, names=args.worlds, seeds=args.seeds,
                         time_scale=args.time_scale, methods=tuple(args.methods), progress=progress)
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    if args.json:
        print(json.dumps({"sweep": name, "runs": {v: r.as_json() for v, r in runs}}))
        return 0
    t = Table(title=f"sweep of {name}: correct / launches per world and method")
    t.add_column("world")
    t.add_column("method")
    for v, _ in runs:
        t.add_column(f"{name}={v}", justify="center")
    first = runs[0][1]
    for w in first.worlds:
        for m in w.methods:
            cells = []
            for _, r in runs:
                rw = next((x for x in r.worlds if x.world == w.world), None)
                mm = rw.methods.get(m) if rw else None
                cells.append("—" if mm is None else f"{'yes' if mm.correct else 'no'} / {mm.launches:g}")
            t.add_row(w.world, m, *cells)
    for m in first.worlds[0].methods if first.worlds else []:
        cells = []
        for _, r in runs:
            ms = [w.methods[m] for w in r.worlds if m in w.methods]
            wrong = sum(1 for x in ms if x.status == "isolated" and not x.correct)
            cells.append(f"{sum(x.correct for x in ms)}/{len(ms)} correct, {wrong} wrong isolated, "
                         f"{sum(x.launches for x in ms) / max(1, len(ms)):.2f} launches")
        t.add_row("[b]all worlds[/]", m, *cells)
    out = Console()
    if not out.is_terminal:
        out = Console(width=200)
    out.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
