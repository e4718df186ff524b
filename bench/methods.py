"""The methods the bench compares: the agent, random one-change search, the human sequence, ddmin.

Every method starts by launching the failing baseline (the agent does too), counts every launch it
makes, and stops at the first launch whose probes all pass (the agent also confirms its fix: that
launch counts against it). Host-seconds are modelled the agent's way (wall / time scale per launch).

The agent, the human sequence and ddmin live here; the random search in `bench.random_search`, the
result type and launch cache the methods share in `bench.method_result`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.domain.models import Baseline, Change, value_key
from agent.planning.catalog import load_catalog
from agent.planning.planner import model_features
from agent.planning.served import served_settings  # the agent's own notion of what a deployment is
from agent.record.transcript import read_transcript
from bench.launcher import Launcher, LaunchRecord
from bench.method_result import MethodResult, describe_change, summarize
from bench.worlds import BenchWorld, matching_fix, score_run
from tools.flags import FlagCatalog, FlagError
from tools.host import one_line
from tools.knowledge import Finding, read_findings, relevance

#: The motivating session of field case 1, in order: four changes that did not help, then the fix.
HUMAN_SEQUENCES: dict[str, list[tuple[str, str, str | bool]]] = {
    "glm5-nvfp4-sm120": [
        ("flag", "--attention-backend", "flashinfer"),
        ("flag", "--attention-backend", "triton"),
        ("flag", "--nsa-decode-backend", "flashmla_sparse"),
        ("flag", "--fp8-gemm-backend", "cutlass"),
        ("flag", "--kv-cache-dtype", "bf16"),
    ]
}


# ----------------------------------------------------------------------------------------------- agent


#: The environment variable that points a run at another knowledge folder (issue 10, item 8).
KNOWLEDGE_ENV = "HYPOLOOP_KNOWLEDGE"


def run_agent(
    world: BenchWorld, *, transcripts: Path, seed: str, knowledge: Path | None = None, method: str = "agent"
) -> MethodResult:
    """Run ``hypoloop run CASE --auto --json`` in this process (the real CLI, graph and planner).

    ``knowledge``: a knowledge folder given through HYPOLOOP_KNOWLEDGE (e.g. one whose hypothesis
    catalog is empty); ``extra["catalog_used"]`` then says whether the run still drew hypotheses from
    the catalog (an agent that does not read the variable yet).
    """
    os.environ["HYPOLOOP_LAB_SEED"] = seed
    t0 = time.monotonic()
    code, out, err = _run_cli(
        ["run", str(world.case_path), "--auto", "--json", "--transcript-dir", str(transcripts)], knowledge
    )
    wall = time.monotonic() - t0
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        tail = err.strip().splitlines()[-3:]
        raise RuntimeError(f"agent run on {world.name} printed no result (exit {code}): {' | '.join(tail)}")
    result = json.loads(lines[-1])
    if not result.get("transcript"):  # refused before any run (bad input): a miss with its reason, no crash
        why = one_line(str(result.get("error") or f"no run (exit {code})"))
        return MethodResult(method=method, correct=False, launches=0, host_s=0.0, wall_s=wall, found=None,
                            status=f"{result.get('status', 'error')} (refused: {why})", wrong_isolated=0,
                            extra={"component": None, "transcript": None, "catalog_used": False,
                                   "detection_delay_medians_s": [], "detection_delay_maxes_s": [],
                                   "overhead_steps_s": []})
    fix = (result.get("root_cause") or {}).get("fix")
    ending = read_ending(world, Path(result["transcript"]), result)
    score = score_run(
        world,
        result["status"],
        (fix["kind"], fix["name"], fix["after"]) if fix else None,
        ending["final"],
        ending["named"],
    )
    metrics = transcript_metrics(Path(result["transcript"]))
    adopted = ending["adopted"]
    found = describe_change(fix["kind"], fix["name"], fix["after"]) if fix else None
    if found and adopted:
        found = " + ".join([*adopted, found])
    return MethodResult(
        method=method,
        correct=score.correct,
        launches=result["launches"],
        host_s=result["host_seconds"],
        wall_s=wall,
        found=found,
        status=f"{result['status']} ({score.why})",
        wrong_isolated=int(score.wrong_isolated),
        extra={
            "component": (result.get("root_cause") or {}).get("component"),
            "transcript": result["transcript"],
            "catalog_used": ending["catalog_used"],
            **metrics,
        },
    )


def _run_cli(argv: list[str], knowledge: Path | None) -> tuple[Any, str, str]:
    """Run the hypoloop CLI with `argv` in this process, HYPOLOOP_KNOWLEDGE set to `knowledge` meanwhile
    (when given); returns its exit code, stdout and stderr."""
    from agent.cli import app  # imported late: the CLI installs signal handlers when it runs

    saved = os.environ.get(KNOWLEDGE_ENV)
    if knowledge is not None:
        os.environ[KNOWLEDGE_ENV] = str(knowledge)
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = app(argv, standalone_mode=False)
            except SystemExit as exc:
                code = exc.code
    finally:
        if saved is None:
            os.environ.pop(KNOWLEDGE_ENV, None)
        else:
            os.environ[KNOWLEDGE_ENV] = saved
    return code, out.getvalue(), err.getvalue()


def answer_catalog_ids() -> set[str]:
    """Ledger ids of every knowledge entry that maps a symptom to a remedy, as the repository ships it:
    the hypothesis catalog's ids and the symptom-class rules' (``symptom:`` + id, symptoms.toml). A run
    that adds one of these drew on the catalog (the empty-catalog ablation must not)."""
    from agent.domain.knowledge_dir import default_dir, use_knowledge
    from agent.planning.generators.symptoms import symptom_rules

    with use_knowledge(default_dir()):
        return {e.id for e in load_catalog()} | {f"symptom:{e.id}" for e in symptom_rules()}


def read_ending(world: BenchWorld, path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """From a run's transcript: the configuration it ended on (the last adopted baseline with the fix
    applied), the changes it adopted on the way (blockers passed), the text in which its conclusion
    names what it implicates, and whether any hypothesis came from the hypothesis catalog."""
    events = list(read_transcript(path))
    base = world.case.baseline
    fix = (result.get("root_cause") or {}).get("fix")
    fix_key = (fix["kind"], fix["name"], fix["after"]) if fix else None
    adopted: list[tuple[str, str, Any]] = []
    catalog_ids = answer_catalog_ids()
    catalog_used = False
    conclusion: dict[str, Any] = {}
    for ev in events:
        if ev.type == "baseline.changed":
            base = Baseline.model_validate(ev.data["baseline"])
            change = (ev.data.get("adoption") or {}).get("change")
            if isinstance(change, dict) and change.get("name"):
                key = (change.get("kind", "flag"), change["name"], change.get("after"))
                if key != fix_key:  # the fix itself is adopted before its confirmation
                    adopted.append(key)
        elif ev.type == "hypothesis.added" and ev.data.get("id") in catalog_ids:
            catalog_used = True
        elif ev.type == "conclusion":
            conclusion = ev.data
    final = base
    if fix:
        final = base.apply(Change(kind=fix["kind"], name=fix["name"], before=fix.get("before"), after=fix["after"]))
    # a fix adopted and then left for a better one (a workaround before the root fix) is not on the way
    kept = [describe_change(*k) for k in adopted if value_key(final.value(k[0], k[1])) == value_key(k[2])]
    named_parts = [str(conclusion.get("reason") or ""), json.dumps(conclusion.get("root_cause") or {})]
    named_parts += [json.dumps(v) for k, v in conclusion.items() if "implicat" in k or "package" in k or "component" in k]
    named_parts += [json.dumps(v) for k, v in result.items() if "implicat" in k or "package" in k]
    return {"final": final, "adopted": kept, "named": " ".join(named_parts), "catalog_used": catalog_used}


def transcript_metrics(path: Path) -> dict[str, Any]:
    """Detection delays and orchestrator overhead of one agent run, from its transcript.

    Detection delay: each launch's median and max (line written → read, ``Outcome.timings``).
    Overhead per step: wall time between the end of one host wait (a server stopped and verified gone)
    and the start of the next (the next launch, or the end of the run): analysing the outcome,
    updating the ledger, designing and approving the next experiment, checkpointing, writing the
    transcript. Host waits (launch, watching, probes, stop; the fingerprint queries) are excluded.
    """
    events = list(read_transcript(path))
    medians, maxes, steps = [], [], []
    host_ended: float | None = None
    for ev in events:
        if ev.type == "outcome":
            t = ev.data.get("timings") or {}
            if t.get("detection_delay_median_s") is not None:
                medians.append(float(t["detection_delay_median_s"]))
                maxes.append(float(t["detection_delay_max_s"]))
        elif ev.type == "server.stopped":
            host_ended = ev.ts
        elif (ev.type == "tool.call" and ev.data.get("tool") == "launch_server") or ev.type == "run.ended":
            if host_ended is not None:
                steps.append(ev.ts - host_ended)
                host_ended = None
    return {
        "detection_delay_medians_s": medians,
        "detection_delay_maxes_s": maxes,
        "overhead_steps_s": steps,
    }



# ----------------------------------------------------------------------------------------------- human


def run_human(
    world: BenchWorld, launcher: Launcher, seed_env: Callable[[], dict[str, str]]
) -> MethodResult | None:
    """The motivating session's sequence (world 1 only): each change from the baseline, in order."""
    steps = HUMAN_SEQUENCES.get(world.name)
    if not steps:
        return None
    base = world.case.baseline
    records = [launcher.launch(dict(base.flags), {**base.env, **seed_env()})]
    fix: Change | None = None
    for kind, name, value in steps:
        change = Change(kind=kind, name=name, before=base.value(kind, name), after=value)  # type: ignore[arg-type]
        cfg = base.apply(change)
        rec = launcher.launch(dict(cfg.flags), {**cfg.env, **seed_env()})
        records.append(rec)
        if rec.ok:
            fix = change
            break
    return summarize("human", world, records, fix, "the motivating session's order")


# ----------------------------------------------------------------------------------------------- ddmin


def known_good_diffs(world: BenchWorld, flags: FlagCatalog) -> tuple[Finding | None, list[Change]]:
    """The most relevant known-good finding of the case's knowledge and its one-variable differences
    to the baseline (model, parallel layout and devices excluded, as for the agent)."""
    case = world.case
    base = case.baseline
    best: tuple[float, Finding] | None = None
    for p in case.knowledge:
        for f in read_findings(case.resolve_path(p)):
            if f.outcome != "works":
                continue
            r = relevance(
                f,
                model=case.model.path,
                features=model_features(case),
                gpu_name=world.world.hardware.gpu_name,
            )
            if best is None or r > best[0]:
                best = (r, f)
    if best is None:
        return None, []
    finding = best[1]
    diffs: list[Change] = []
    for name, value in finding.flags.items():
        if not flags.has(name):
            continue
        canon = flags.resolve(name).name
        if served_settings().role("flag", canon, flags) is not None:
            continue
        try:
            _, legal = flags.validate(canon, value)
        except FlagError:
            continue
        if str(base.flags.get(canon)) != str(legal):
            diffs.append(Change(kind="flag", name=canon, before=base.flags.get(canon), after=legal))
    for name, value in finding.env.items():
        if name not in served_settings().env and base.env.get(name) != value:
            diffs.append(Change(kind="env", name=name, before=base.env.get(name), after=value))
    return finding, diffs


def run_ddmin(
    world: BenchWorld, launcher: Launcher, flags: FlagCatalog, seed_env: Callable[[], dict[str, str]]
) -> MethodResult | None:
    """Delta debugging (Zeller's ddmin) over the differences to the known-good finding: the smallest
    subset of them that makes the baseline serve. None when the world has no known-good finding."""
    finding, diffs = known_good_diffs(world, flags)
    if finding is None or not diffs:
        return None
    base = world.case.baseline
    records: list[LaunchRecord] = []
    tested: dict[frozenset[int], bool] = {}

    def passes(subset: list[int]) -> bool:
        key = frozenset(subset)
        if key not in tested:
            cfg = base
            for i in subset:
                cfg = cfg.apply(diffs[i])
            rec = launcher.launch(dict(cfg.flags), {**cfg.env, **seed_env()})
            records.append(rec)
            tested[key] = rec.ok
        return tested[key]

    records.append(launcher.launch(dict(base.flags), {**base.env, **seed_env()}))
    items = list(range(len(diffs)))
    title = finding.title[:60]
    if not passes(items):
        res = summarize("ddmin", world, records, None, f"the known-good settings ('{title}') do not fix it")
        res.correct = False
        res.extra = {"finding": finding.title, "differences": [d.describe() for d in diffs]}
        return res
    items = _ddmin(items, passes)
    minimal = [diffs[i] for i in items]
    fix = minimal[0] if len(minimal) == 1 else None
    res = summarize(
        "ddmin", world, records, fix, f"minimal subset of {len(diffs)} differences: {len(minimal)} change(s)"
    )
    if fix is None:
        res.correct = False
        res.found = " + ".join(describe_change(c.kind, c.name, c.after) for c in minimal)
    res.extra = {
        "finding": finding.title,
        "differences": [d.describe() for d in diffs],
        "minimal": [d.describe() for d in minimal],
        "fix_in_truth": bool(fix and matching_fix(world, fix.kind, fix.name, fix.after)),
    }
    return res


def _ddmin(items: list[int], passes: Callable[[list[int]], bool]) -> list[int]:
    """Zeller's ddmin: a 1-minimal subset of `items` (which pass) that still passes."""
    n = 2
    while len(items) >= 2:
        chunks = [items[i * len(items) // n : (i + 1) * len(items) // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        for c in chunks:
            if passes(c):
                items, n = c, 2
                break
        else:
            for c in chunks:
                rest = [i for i in items if i not in c]
                if rest and passes(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(2 * n, len(items))
    return items
