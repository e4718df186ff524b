"""Benchmark of ``--parallel N`` on a real one-node Slurm cluster: wall-clock to the right answer.

For every lab world and every N (default 1, 2, 4) it runs ``hypoloop run CASE --auto --parallel N
--host slurm://PARTITION --json`` as a user would (a separate process, its own state folder), each
experiment one Slurm job, and reports: whether the answer is the world's root-cause fix (scored against
the world's ``[truth]``, which only the bench reads), wall-clock seconds (real, and in the lab's modelled
seconds: real / time scale), launches, GPU-host-seconds (modelled, counted from each job's start) and
queue seconds; then per world the speed-up of N over 1 (modelled wall-clock) and the extra launches
parallelism spent.

The cluster is the test cluster of ``.ci/slurm.py`` (slurmctld + slurmd on loopback, 8 CPUs and 8
fake GPUs on one node), started here and stopped at the end; ``--slurm-conf`` uses a running cluster
instead. Needs Debian's slurm-wlm (``.ci/run`` installs it).

    python -m bench.parallel [--worlds W ...] [--parallel 1 2 4] [--time-scale 0.01] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.record.transcript import read_transcript
from bench.worlds import BenchWorld, discover, is_root_fix

REPO = Path(__file__).resolve().parent.parent


@dataclass
class ParallelRun:
    """One run of one world with one --parallel N."""

    world: str
    parallel: int
    correct: bool
    status: str
    found: str | None
    launches: int
    host_s: float
    wall_s: float
    wall_model_s: float
    queued_s: float
    max_jobs_at_once: int


def _cluster_helper() -> Any:
    """The `.ci/slurm.py` module (a script directory, not a package)."""
    name = "hypoloop_ci_slurm"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / ".ci" / "slurm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered before it runs: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _jobs_at_once(events: list[dict[str, Any]]) -> int:
    """The most jobs that ran at the same time, from the transcript's job start/end times."""
    spans = [
        (e["data"]["job"]["started_wall"], e["data"]["job"]["ended_wall"])
        for e in events
        if e["type"] == "server.stopped"
        and (e["data"].get("job") or {}).get("started_wall")
        and (e["data"].get("job") or {}).get("ended_wall")
    ]
    points = sorted([(s, 1) for s, _ in spans] + [(t, -1) for _, t in spans])
    most = now = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most


def _hypoloop_run(
    world: BenchWorld, n: int, *, partition: str, env: dict[str, str], time_scale: float
) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    """Run ``hypoloop run --parallel n --host slurm://partition`` on `world` in a fresh home; returns its
    result line, its transcript's events and the wall seconds it took. Raises RuntimeError when it
    printed no result."""
    with tempfile.TemporaryDirectory(prefix="hl-par-") as tmp:
        run_env = {
            **env,
            "HYPOLOOP_HOME": str(Path(tmp) / "home"),
            "HYPOLOOP_LAB_TIME_SCALE": str(time_scale),
        }
        run_env.pop("OPENAI_API_KEY", None)
        t0 = time.monotonic()
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                "from agent.cli import main; main()",
                "run",
                str(world.case_path),
                "--auto",
                "--json",
                "--parallel",
                str(n),
                "--host",
                f"slurm://{partition}",
                "--transcript-dir",
                "tr",
            ],
            cwd=tmp,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=1800,
            stdin=subprocess.DEVNULL,
        )
        wall = time.monotonic() - t0
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            tail = " | ".join(r.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"{world.name} --parallel {n}: no result (exit {r.returncode}): {tail}")
        result = json.loads(lines[-1])
        events = [e.model_dump() for e in read_transcript(Path(result["transcript"]))]
    return result, events, wall


def run_one(
    world: BenchWorld, n: int, *, partition: str, env: dict[str, str], time_scale: float
) -> ParallelRun:
    """``hypoloop run`` of `world` with ``--parallel n`` over Slurm, scored."""
    result, events, wall = _hypoloop_run(world, n, partition=partition, env=env, time_scale=time_scale)
    fix = (result.get("root_cause") or {}).get("fix")
    if world.expect == "not_isolated":
        correct = result["status"] == "not_isolated"
    else:
        correct = result["status"] == "isolated" and bool(
            fix and is_root_fix(world, fix["kind"], fix["name"], fix["after"])
        )
    queued = sum(
        float((e["data"].get("timings") or {}).get("queued_s") or 0.0)
        for e in events
        if e["type"] == "outcome"
    )
    return ParallelRun(
        world=world.name,
        parallel=n,
        correct=correct,
        status=result["status"],
        found=f"{fix['name']}={fix['after']}" if fix else None,
        launches=int(result["launches"]),
        host_s=float(result["host_seconds"]),
        wall_s=round(wall, 2),
        wall_model_s=round(wall / time_scale, 1),
        queued_s=round(queued, 1),
        max_jobs_at_once=_jobs_at_once(events),
    )


def summarize(runs: list[ParallelRun]) -> list[dict[str, Any]]:
    """Per world and N > 1: speed-up of modelled wall-clock over N = 1 and the extra launches spent."""
    out = []
    base = {r.world: r for r in runs if r.parallel == 1}
    for r in runs:
        b = base.get(r.world)
        if r.parallel == 1 or b is None:
            continue
        out.append(
            {
                "world": r.world,
                "parallel": r.parallel,
                "speedup": round(b.wall_s / r.wall_s, 2) if r.wall_s else None,
                "extra_launches": r.launches - b.launches,
                "extra_host_s": round(r.host_s - b.host_s, 1),
                "both_correct": b.correct and r.correct,
            }
        )
    return out


def _print_summary(summary: list[dict[str, Any]]) -> None:
    """The people's summary: each world's speed-up and extra launches per N, then the means per N."""
    print()
    for s in summary:
        print(
            f"{s['world']:30} N={s['parallel']}  speed-up x{s['speedup']}  extra launches {s['extra_launches']:+d}  "
            f"extra GPU-host-s {s['extra_host_s']:+.0f}  {'both right' if s['both_correct'] else 'an answer was wrong'}"
        )
    for n in sorted({s["parallel"] for s in summary}):
        rows = [s for s in summary if s["parallel"] == n and s["speedup"]]
        if rows:
            mean = sum(s["speedup"] for s in rows) / len(rows)
            extra = sum(s["extra_launches"] for s in rows) / len(rows)
            print(
                f"N={n}: mean speed-up x{mean:.2f}, mean extra launches {extra:+.1f} over {len(rows)} worlds"
            )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench.parallel``: 0 when the runs finished, 2 for bad arguments or no Slurm."""
    ap = argparse.ArgumentParser(prog="python -m bench.parallel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", nargs="*", help="lab worlds (default: all)")
    ap.add_argument("--parallel", nargs="*", type=int, default=[1, 2, 4], help="values of N (default 1 2 4)")
    ap.add_argument("--time-scale", type=float, default=0.01, help="lab clock: real s per modelled s (0.01)")
    ap.add_argument("--slurm-conf", help="use this running cluster (its slurm.conf) instead of starting one")
    ap.add_argument("--partition", default=None, help="with --slurm-conf: the partition (default: debug)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    try:
        worlds = discover(args.worlds)
    except ValueError as exc:
        print(f"bench.parallel: {exc}", file=sys.stderr)
        return 2
    helper = _cluster_helper()
    cluster = None
    if args.slurm_conf:
        conf, partition = args.slurm_conf, args.partition or "debug"
    else:
        if not helper.slurm_available():
            print(
                "bench.parallel: no Slurm here (apt-get install -y slurm-wlm, as .ci/run does)",
                file=sys.stderr,
            )
            return 2
        cluster = helper.start_cluster(Path(tempfile.mkdtemp(prefix="hl-slurm-")))
        conf, partition = str(cluster.conf), cluster.partition
    env = {**os.environ, "SLURM_CONF": conf}
    runs: list[ParallelRun] = []
    try:
        for w in worlds:
            for n in args.parallel:
                run = run_one(w, n, partition=partition, env=env, time_scale=args.time_scale)
                runs.append(run)
                if not args.json:
                    print(
                        f"{run.world:30} N={run.parallel}  {'right' if run.correct else 'WRONG':5}  "
                        f"wall {run.wall_s:6.1f} s ({run.wall_model_s:7.0f} modelled s)  "
                        f"launches {run.launches:2}  GPU-host-s {run.host_s:7.0f}  queued {run.queued_s:5.1f} modelled s  "
                        f"jobs at once {run.max_jobs_at_once}",
                        flush=True,
                    )
    finally:
        if cluster is not None:
            cluster.stop()
    summary = summarize(runs)
    if args.json:
        print(
            json.dumps({"time_scale": args.time_scale, "runs": [asdict(r) for r in runs], "summary": summary})
        )
        return 0
    _print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
