"""The methods the bench compares: the agent, random one-change search, the human sequence, ddmin.

Every method starts by launching the failing baseline (the agent does too), counts every launch it
makes, and stops at the first launch whose probes all pass (the agent also confirms its fix: that
launch counts against it). Host-seconds are modelled the agent's way (wall / time scale per launch).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.domain.models import Baseline, Change
from agent.planning.catalog import CatalogEntry, load_catalog
from agent.planning.planner import model_features
from agent.planning.served import served_settings  # the agent's own notion of what a deployment is
from agent.record.transcript import read_transcript
from agent.review.wording import count
from bench.launcher import Launcher, LaunchRecord
from bench.worlds import BenchWorld, matching_fix, score_run
from tools.flags import FlagCatalog, FlagError
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
#: Choices named for other vendors' hardware are not plausible on an NVIDIA host.
_OTHER_VENDORS = re.compile(r"aiter|wave|ascend|intel|xpu|npu|hip|rocm|amx|^cpu$")


@dataclass
class MethodResult:
    """One method on one world. For random, numbers are means over seeds and ``correct_rate`` is the
    share of seeds that ended on a root-cause fix; ``correct`` is then whether most did."""

    method: str
    correct: bool
    launches: float
    host_s: float
    wall_s: float
    found: str | None = None
    status: str = ""
    correct_rate: float | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    wrong_isolated: int = 0  # runs that ended `isolated` on something the truth does not call the fix

    def as_json(self) -> dict[str, Any]:
        """A JSON-plain dict of the result."""
        out = {
            "method": self.method,
            "correct_root_cause": self.correct,
            "launches": round(self.launches, 2),
            "host_seconds": round(self.host_s, 1),
            "wall_seconds": round(self.wall_s, 2),
            "found": self.found,
            "status": self.status,
            "wrong_isolated": self.wrong_isolated,
        }
        if self.correct_rate is not None:
            out["correct_rate"] = round(self.correct_rate, 3)
        if self.runs:
            out["runs"] = self.runs
        out.update(self.extra)
        return out


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
    from agent.cli import app  # imported late: the CLI installs signal handlers when it runs

    os.environ["HYPOLOOP_LAB_SEED"] = seed
    saved = os.environ.get(KNOWLEDGE_ENV)
    if knowledge is not None:
        os.environ[KNOWLEDGE_ENV] = str(knowledge)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = app(
                    ["run", str(world.case_path), "--auto", "--json", "--transcript-dir", str(transcripts)],
                    standalone_mode=False,
                )
            except SystemExit as exc:
                code = exc.code
    finally:
        if saved is None:
            os.environ.pop(KNOWLEDGE_ENV, None)
        else:
            os.environ[KNOWLEDGE_ENV] = saved
    wall = time.monotonic() - t0
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("{")]
    if not lines:
        tail = err.getvalue().strip().splitlines()[-3:]
        raise RuntimeError(f"agent run on {world.name} printed no result (exit {code}): {' | '.join(tail)}")
    result = json.loads(lines[-1])
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
    found = _describe(fix["kind"], fix["name"], fix["after"]) if fix else None
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
    adopted: list[str] = []
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
                    adopted.append(_describe(*key))
        elif ev.type == "hypothesis.added" and ev.data.get("id") in catalog_ids:
            catalog_used = True
        elif ev.type == "conclusion":
            conclusion = ev.data
    final = base
    if fix:
        final = base.apply(Change(kind=fix["kind"], name=fix["name"], before=fix.get("before"), after=fix["after"]))
    named_parts = [str(conclusion.get("reason") or ""), json.dumps(conclusion.get("root_cause") or {})]
    named_parts += [json.dumps(v) for k, v in conclusion.items() if "implicat" in k or "package" in k or "component" in k]
    named_parts += [json.dumps(v) for k, v in result.items() if "implicat" in k or "package" in k]
    return {"final": final, "adopted": adopted, "named": " ".join(named_parts), "catalog_used": catalog_used}


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


# ------------------------------------------------------------------------------------ shared helpers


def _describe(kind: str, name: str, value: Any) -> str:
    if value is None or value is False:
        return f"unset {name}" if kind == "env" else f"no {name}"
    if kind == "env":
        return f"{name}={value}"
    return name if value is True else f"{name} {value}"


class LaunchCache:
    """Launch results per configuration, shared by the random seeds of one world.

    A world whose faults are deterministic gives the same outcome for the same configuration, so a
    configuration another seed already launched is replayed from that launch (its measured wall and
    host seconds are counted again). Flaky worlds are never replayed.
    """

    def __init__(self, launcher: Launcher, *, enabled: bool, seed_env: Callable[[], dict[str, str]]) -> None:
        self.launcher = launcher
        self.enabled = enabled
        self.seed_env = seed_env
        self._seen: dict[str, LaunchRecord] = {}
        self.real = 0

    def run(self, config: Baseline) -> LaunchRecord:
        key = json.dumps([config.flags, config.env], sort_keys=True)
        if self.enabled and key in self._seen:
            rec = self._seen[key]
            return LaunchRecord(rec.ok, rec.status, rec.host_s, rec.wall_s, rec.signatures, replayed=True)
        rec = self.launcher.launch(dict(config.flags), {**config.env, **self.seed_env()})
        self.real += 1
        self._seen[key] = rec
        return rec


def _summary(
    method: str, world: BenchWorld, records: list[LaunchRecord], fix: Change | None, status: str
) -> MethodResult:
    # A baseline method "isolates" when its launches found a working change; a baseline that served
    # at once blames nothing; otherwise it ends not isolated (and names nothing).
    served_at_once = bool(records) and records[0].ok
    ending = "isolated" if fix is not None else ("not_reproduced" if served_at_once else "not_isolated")
    final = world.case.baseline.apply(fix) if fix is not None else world.case.baseline
    score = score_run(world, ending, (fix.kind, fix.name, fix.after) if fix else None, final)
    return MethodResult(
        method=method,
        correct=score.correct,
        wrong_isolated=int(score.wrong_isolated),
        launches=len(records),
        host_s=sum(r.host_s for r in records),
        wall_s=sum(r.wall_s for r in records),
        found=_describe(fix.kind, fix.name, fix.after) if fix else None,
        status=status,
    )


# ---------------------------------------------------------------------------------------------- random


def plausible_changes(
    baseline: Baseline, catalog: list[CatalogEntry], flags: FlagCatalog, findings: list[Finding]
) -> list[Change]:
    """Every one-variable change the flag catalog and the knowledge make plausible, without ranking.

    The values every hypothesis-catalog intervention names (literal values; derived values are
    computed from evidence only by the agent), every choice of the flags those interventions touch
    (choices named for other vendors' hardware left out), each of the baseline's explicit settings
    removed and every other choice of those with choices, and every difference to a known-good
    finding. Changes that leave the baseline as it is are dropped.
    """
    out: dict[str, Change] = {}

    def add(kind: str, name: str, value: Any) -> None:
        if kind == "flag":
            try:
                canon, legal = flags.validate(name, value)
            except FlagError:
                return
            spec = flags.resolve(canon)
            current = baseline.flags.get(canon)
            if current is None and spec.default is not None and str(spec.default) == str(legal):
                return
            name, value = canon, legal
        else:
            current = baseline.env.get(name)
        if current is not None and str(current) == str(value):
            return
        change = Change(kind=kind, name=name, before=current, after=value)  # type: ignore[arg-type]
        out.setdefault(change.key(), change)

    for entry in catalog:
        for iv in entry.intervention:
            if iv.kind == "env":
                for v in iv.values:
                    add("env", iv.names[0], v)
                continue
            name = next((n for n in iv.names if flags.has(n)), None)
            if name is None:
                continue
            for v in iv.values:
                add("flag", name, v)
            spec = flags.resolve(name)
            if spec.choices:
                for choice in spec.choices:
                    if not _OTHER_VENDORS.search(choice):
                        add("flag", name, choice)
            elif not spec.takes_value:
                add("flag", name, True)
    # The baseline's own explicit settings: each removed, and every other choice of a flag with choices
    # (not where it runs and what it loads: knowledge/served.toml's "place" settings; one that defines
    # what is served may be tried, as the agent may, but is never a root fix).
    served = served_settings()
    for name in baseline.flags:
        if flags.has(name) and served.role("flag", flags.resolve(name).name, flags) != "place":
            removal = Change(kind="flag", name=flags.resolve(name).name, before=baseline.flags[name], after=None)
            out.setdefault(removal.key(), removal)
            for choice in flags.resolve(name).choices or ():
                if not _OTHER_VENDORS.search(choice):
                    add("flag", name, choice)
    for name, value in baseline.env.items():
        if served.role("env", name) != "place":
            removal = Change(kind="env", name=name, before=value, after=None)
            out.setdefault(removal.key(), removal)
    for f in findings:
        for name, value in f.flags.items():
            if flags.has(name) and served.role("flag", flags.resolve(name).name, flags) is None:
                add("flag", name, value)
        for name, value in f.env.items():
            if name not in served.env:
                add("env", name, value)
    return sorted(out.values(), key=lambda c: c.key())


#: Launches a random search may spend on one seed (baseline included) before it gives up; None: until a
#: change works or every plausible change was tried.
RANDOM_MAX_LAUNCHES: int | None = None  # no cap by default


def run_random(
    world: BenchWorld,
    cache: LaunchCache,
    changes: list[Change],
    *,
    seeds: int,
    max_launches: int | None = RANDOM_MAX_LAUNCHES,
) -> MethodResult:
    """Uniform one-change search without replacement until the probes pass (at most ``max_launches``
    launches per seed, baseline included).

    On a deterministic world without a launch cap the figures are the exact expectation over every
    order (``random_expectation``: every plausible change is launched once, through the cache); the
    ``seeds`` seeded orders are still run and listed. On a flaky world they are the mean over ``seeds``.
    ``extra["success_rate"]`` is the share of orders (or seeds) that found a correct fix,
    ``extra["success_launches"]`` their mean launches (None when none did) and ``extra["estimate"]``
    says which of the two the figures are.
    """
    base = world.case.baseline
    runs: list[MethodResult] = []
    for s in range(seeds):
        rng = random.Random(f"random:{world.name}:{s}")
        order = list(changes)
        rng.shuffle(order)
        records = [cache.run(base)]
        fix: Change | None = None
        budget = order if max_launches is None else order[: max(max_launches - 1, 0)]
        for change in budget if not records[0].ok else []:  # a baseline that served: nothing to fix
            rec = cache.run(base.apply(change))
            records.append(rec)
            if rec.ok:
                fix = change
                break
        status = "found a working change" if fix else f"no working change in {count(len(records), 'launch')}"
        runs.append(_summary("random", world, records, fix, status))
    seeded = {
        "seed_mean_launches": round(statistics.fmean(r.launches for r in runs), 2),
        "seed_success_rate": round(sum(r.correct for r in runs) / len(runs), 3),
    }
    listed = [
        {"seed": i, "launches": r.launches, "found": r.found, "correct": r.correct} for i, r in enumerate(runs)
    ]
    common: dict[str, Any] = {
        "seeds": seeds,
        "plausible_changes": len(changes),
        **seeded,
    }
    if cache.enabled and max_launches is None:
        exp = random_expectation(world, cache, changes)
        rate, launches, host_s, wall_s = exp.rate, exp.launches, exp.host_s, exp.wall_s
        found = f"{exp.working} of {len(changes)} changes work, {exp.correct} of them a root fix"
        success = exp.launches if exp.correct and world.expect == "isolated" else None
        extra = {"estimate": "exact", "working_changes": exp.working, "baseline_served": exp.launches == 1.0}
    else:
        rate = sum(r.correct for r in runs) / len(runs)
        winners = [r for r in runs if r.correct and world.expect == "isolated"]
        launches = statistics.fmean(r.launches for r in runs)
        host_s = statistics.fmean(r.host_s for r in runs)
        wall_s = statistics.fmean(r.wall_s for r in runs)
        found = f"{sum(r.found is not None for r in runs)} of {seeds} seeds found a working change"
        success = statistics.fmean(r.launches for r in winners) if winners else None
        extra = {"estimate": "seeds"}
    return MethodResult(
        method="random",
        correct=rate > 0.5,
        correct_rate=rate,
        launches=launches,
        host_s=host_s,
        wall_s=wall_s,
        found=found,
        status=f"{len(changes)} plausible changes",
        runs=listed,
        wrong_isolated=sum(r.wrong_isolated for r in runs),
        extra={
            **common,
            **extra,
            "real_launches": cache.real,
            "success_rate": round(rate, 3),
            "success_launches": success,
        },
    )


@dataclass
class RandomExpectation:
    """Random one-change search's exact expectation on a deterministic world (see ``random_expectation``)."""

    launches: float  # expected launches, baseline included
    host_s: float
    wall_s: float
    working: int  # plausible changes that make the probes pass
    correct: int  # of those, the ones the world's truth calls a root fix
    rate: float  # P(the first working change found is a root fix)


def random_expectation(world: BenchWorld, cache: LaunchCache, changes: list[Change]) -> RandomExpectation:
    """The exact expectation of uniform one-change search without replacement over ``changes``.

    Every change is launched once (through ``cache``). With N changes of which k work, the search stops
    at the first working one of a uniformly random order: each failing change comes before every
    working one with probability 1/(k+1), so E[launches] = 1 + (N+1)/(k+1) (the baseline is the 1), and
    each working change is the one found with probability 1/k. Which working change is found does not
    depend on where it stands, so the launches of the orders that end on a root fix have the same
    mean. With k = 0 every change is launched: 1 + N. A baseline that serves ends after one launch.
    """
    base = world.case.baseline
    base_rec = cache.run(base)
    if base_rec.ok:
        ok = score_run(world, "not_reproduced", None, base).correct
        return RandomExpectation(1.0, base_rec.host_s, base_rec.wall_s, 0, 0, 1.0 if ok else 0.0)
    recs = [(c, cache.run(base.apply(c))) for c in changes]
    working = [(c, r) for c, r in recs if r.ok]
    failing = [r for _c, r in recs if not r.ok]
    n, k = len(changes), len(working)
    if k == 0:
        return RandomExpectation(
            1.0 + n,
            base_rec.host_s + sum(r.host_s for _c, r in recs),
            base_rec.wall_s + sum(r.wall_s for _c, r in recs),
            0, 0, 1.0 if score_run(world, "not_isolated", None, base).correct else 0.0,
        )
    correct = sum(
        score_run(world, "isolated", (c.kind, c.name, c.after), base.apply(c)).correct
        for c, _r in working
    )

    def expected(cost: Callable[[LaunchRecord], float]) -> float:
        return (
            cost(base_rec)
            + sum(cost(r) for r in failing) / (k + 1)
            + sum(cost(r) for _c, r in working) / k
        )

    return RandomExpectation(
        1.0 + (n + 1) / (k + 1), expected(lambda r: r.host_s), expected(lambda r: r.wall_s), k, correct, correct / k
    )


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
    return _summary("human", world, records, fix, "the motivating session's order")


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
        res = _summary("ddmin", world, records, None, f"the known-good settings ('{title}') do not fix it")
        res.correct = False
        res.extra = {"finding": finding.title, "differences": [d.describe() for d in diffs]}
        return res
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
    minimal = [diffs[i] for i in items]
    fix = minimal[0] if len(minimal) == 1 else None
    res = _summary(
        "ddmin", world, records, fix, f"minimal subset of {len(diffs)} differences: {len(minimal)} change(s)"
    )
    if fix is None:
        res.correct = False
        res.found = " + ".join(_describe(c.kind, c.name, c.after) for c in minimal)
    res.extra = {
        "finding": finding.title,
        "differences": [d.describe() for d in diffs],
        "minimal": [d.describe() for d in minimal],
        "fix_in_truth": bool(fix and matching_fix(world, fix.kind, fix.name, fix.after)),
    }
    return res
