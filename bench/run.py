"""Run the benchmark: every method on every world, then the aggregate figures and the targets."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.domain.knowledge_dir import knowledge_dir, use_knowledge
from agent.planning.catalog import load_catalog
from agent.review.wording import count
from bench.issue_targets import issue20_rows
from bench.launcher import Launcher
from bench.method_result import LaunchCache, MethodResult
from bench.methods import run_agent, run_ddmin, run_human
from bench.random_search import plausible_changes, run_random
from bench.worlds import BenchWorld, discover
from tools.flags import load_flag_catalog
from tools.host import expand_argv
from tools.knowledge import read_findings
from tools.signatures import load_signatures

#: Targets of issues 7 and 10, in the units the bench reports.
DETECTION_DELAY_TARGET_S = 0.2
OVERHEAD_TARGET_S = 0.050
RANDOM_RATIO_TARGET = 0.5
EMPTY_CATALOG_TARGET = 0.8
METHODS = ("agent", "agent-empty", "random", "human", "ddmin")
KNOWLEDGE_DIR = Path(__file__).resolve().parent.parent / "knowledge"


@dataclass
class Target:
    """One target: what it says, the measured figure, and whether it was met."""

    name: str
    measured: str
    met: bool

    def as_json(self) -> dict[str, Any]:
        return {"target": self.name, "measured": self.measured, "met": self.met}


@dataclass
class WorldResult:
    """Every method on one world."""

    world: str
    expect: str
    methods: dict[str, MethodResult] = field(default_factory=dict)
    world_set: str = "dev"  # "dev" (lab/worlds) or "sealed" (lab/worlds-sealed)
    chain_links: int = 0  # the links of a chain world; 0 for a single fault


@dataclass
class BenchResult:
    """The whole benchmark: per-world results, agent timing figures, targets, total wall time."""

    time_scale: float
    seeds: int
    worlds: list[WorldResult]
    wall_s: float
    detection_median_s: float | None
    detection_max_s: float | None
    overhead_median_s: float | None
    overhead_max_s: float | None
    overhead_steps: int
    targets: list[Target]
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """JSON for machines (``python -m bench --json``)."""
        return {
            "time_scale": self.time_scale,
            "random_seeds": self.seeds,
            "wall_seconds": round(self.wall_s, 1),
            "worlds": {
                w.world: {"expect": w.expect, **{m: r.as_json() for m, r in w.methods.items()}}
                for w in self.worlds
            },
            "agent_detection_delay_s": {
                "median": _round(self.detection_median_s, 4),
                "max": _round(self.detection_max_s, 4),
            },
            "agent_overhead_per_step_ms": {
                "median": _round(self.overhead_median_s and self.overhead_median_s * 1000, 1),
                "max": _round(self.overhead_max_s and self.overhead_max_s * 1000, 1),
                "steps": self.overhead_steps,
            },
            "targets": [t.as_json() for t in self.targets],
            "all_targets_met": all(t.met for t in self.targets),
            "notes": self.notes,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _memory_dir() -> str | None:
    """/dev/shm when writable: checkpoints, transcripts and logs then live in memory, so the overhead
    figure measures the orchestrator, not this machine's disk-flush latency (the transcript and the
    checkpointer flush to disk at every event; on a shared VM one flush took 0.1 to 4 ms)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


@contextmanager
def _bench_env(workdir: Path, time_scale: float) -> Iterator[None]:
    """Process environment for the run: the lab's time scale, a private HYPOLOOP_HOME and lab state, a
    private Hugging Face cache (``HF_HOME`` under ``workdir``, no ``HF_HUB_CACHE``: the lab writes each
    world's model ``config.json`` into the hub cache, which must never be the developer's own); no
    HYPOLOOP_LAB_WORLD (each case names its own world). Restored afterwards."""
    keys = (
        "HYPOLOOP_HOME",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HYPOLOOP_LAB_TIME_SCALE",
        "HYPOLOOP_LAB_STATE",
        "HYPOLOOP_LAB_SEED",
        "HYPOLOOP_LAB_WORLD",
    )
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["HYPOLOOP_HOME"] = str(workdir / "home")
    os.environ["HYPOLOOP_LAB_TIME_SCALE"] = repr(time_scale)
    os.environ["HYPOLOOP_LAB_STATE"] = str(workdir / "lab-state")
    os.environ["HF_HOME"] = str(workdir / "hf")
    os.environ.pop("HF_HUB_CACHE", None)
    os.environ.pop("HYPOLOOP_LAB_WORLD", None)
    os.environ.pop("HYPOLOOP_LAB_SEED", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: Knowledge files that map a symptom to a remedy (the answer catalogs): the empty-catalog ablation
#: empties every one of them.
ANSWER_FILES = ("hypotheses.toml", "symptoms.toml")


def empty_catalog_knowledge(root: Path) -> Path:
    """A knowledge folder like the repository's (signatures, limits, risky changes, subsystems, what a
    deployment is) in which every file that maps a symptom to a remedy (``ANSWER_FILES``: the hypothesis
    catalog and the symptom-class rules) is empty: what the agent knows without priors. The localising
    experiments (``localisers.toml``) are kept: a localiser never fixes anything, it only makes a
    failure's report true, as the failing log itself says to do. Returns it."""
    folder = root / "knowledge-empty-catalog"
    folder.mkdir(parents=True, exist_ok=True)
    for src in knowledge_dir().glob("*.toml"):
        if src.name not in ANSWER_FILES:
            shutil.copy2(src, folder / src.name)
    for name in ANSWER_FILES:
        (folder / name).write_text("# emptied by the ablation: the agent reasons from the evidence alone\n")
    return folder


def swept_knowledge(root: Path, name: str, value: str) -> Path:
    """A copy of the knowledge folder in force whose ``planner.toml`` sets the tunable ``name``
    (``SECTION.KEY``, e.g. ``ledger.elsewhere_factor``) to ``value`` (TOML text). Raises ValueError when
    the file has no such key."""
    section, _, key = name.partition(".")
    if not section or not key:
        raise ValueError(f"--sweep {name}: expected SECTION.KEY, e.g. ledger.elsewhere_factor")
    folder = root / f"knowledge-{name}={value}"
    folder.mkdir(parents=True, exist_ok=True)
    for src in knowledge_dir().glob("*.toml"):
        shutil.copy2(src, folder / src.name)
    text = (folder / "planner.toml").read_text(encoding="utf-8")
    head = re.search(rf"(?m)^\[{re.escape(section)}\]\s*$", text)
    if head is None:
        raise ValueError(f"--sweep {name}: planner.toml has no [{section}] section")
    nxt = re.search(r"(?m)^\[", text[head.end():])
    end = head.end() + (nxt.start() if nxt else len(text) - head.end())
    body, n = re.subn(rf"(?m)^{re.escape(key)}\s*=.*$", f"{key} = {value}", text[head.end():end])
    if n != 1:
        raise ValueError(f"--sweep {name}: planner.toml's [{section}] has no key {key}")
    (folder / "planner.toml").write_text(text[: head.end()] + body + text[end:], encoding="utf-8")
    from agent.planning.weights import load_weights

    load_weights(folder / "planner.toml")  # a value out of range is one line here, not a crash later
    return folder


def run_sweep(name: str, values: list[str], *, workdir: Path, **kw: Any) -> list[tuple[str, BenchResult]]:
    """The bench over the same worlds once per value of one tunable (``swept_knowledge``): a tunable
    changes only with the figures of every world in front of it (issue 20)."""
    out = []
    for value in values:
        folder = swept_knowledge(workdir, name, value)
        sub = workdir / f"run-{name}={value}"
        sub.mkdir(parents=True, exist_ok=True)
        with use_knowledge(folder):
            out.append((value, run_bench(workdir=sub, **kw)))
    return out


def run_bench(
    names: list[str] | None = None,
    *,
    seeds: int = 5,
    time_scale: float = 0.001,
    methods: tuple[str, ...] = METHODS,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    world_set: str = "dev",
) -> BenchResult:
    """Run the bench on the named worlds (when None, every world of ``world_set``: "dev", the
    development worlds of lab/worlds; "sealed", lab/worlds-sealed; "all", both). ``workdir`` keeps
    logs and transcripts (a temporary folder, removed afterwards, when None). Raises ValueError for
    an unknown world or world set."""
    say = progress or (lambda _msg: None)
    worlds = discover(names, world_set)
    own = workdir is None
    root = Path(tempfile.mkdtemp(prefix="hypoloop-bench-", dir=_memory_dir())) if workdir is None else workdir
    t0 = time.monotonic()
    results: list[WorldResult] = []
    try:
        with _bench_env(root, time_scale):
            catalog = load_catalog()
            sigs = load_signatures()
            empty = empty_catalog_knowledge(root)
            for w in worlds:
                results.append(_run_world(w, root, catalog, sigs, seeds, methods, say, empty))
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)
    wall = time.monotonic() - t0
    return _aggregate(results, time_scale, seeds, wall)


def _run_world(
    w: BenchWorld,
    root: Path,
    catalog: Any,
    sigs: Any,
    seeds: int,
    methods: tuple[str, ...],
    say: Callable[[str], None],
    empty_knowledge: Path | None = None,
) -> WorldResult:
    out = WorldResult(world=w.name, expect=w.expect, world_set=w.world_set, chain_links=len(w.chain))
    out.methods.update(_run_agents(w, root, methods, say, empty_knowledge))
    launcher = Launcher(w.case, sigs, root / "launches" / w.name)
    counter = iter(range(1_000_000))

    def seed_env() -> dict[str, str]:
        # A fixed seed name: the lab numbers the launches under it, so a bench run replays exactly.
        next(counter)
        return {"HYPOLOOP_LAB_SEED": f"bench:{w.name}:baselines"}

    try:
        flags = load_flag_catalog(
            launcher.host,
            expand_argv(w.case.launcher.argv, launcher.host),
            cache_dir=root / "flag-cache",
            version=None,
        )
        if "random" in methods:
            findings = [
                f
                for p in w.case.knowledge
                for f in read_findings(w.case.resolve_path(p))
                if f.outcome == "works"
            ]
            changes = plausible_changes(w.case.baseline, catalog, flags, findings)
            say(f"{w.name}: random over {len(changes)} plausible changes, {seeds} seeds")
            cache = LaunchCache(launcher, enabled=not w.flaky, seed_env=seed_env)
            out.methods["random"] = r = run_random(w, cache, changes, seeds=seeds)
            say(f"{w.name}: random: {r.launches:.1f} launches on average, {count(cache.real, 'real launch')}")
        if "human" in methods and (h := run_human(w, launcher, seed_env)) is not None:
            out.methods["human"] = h
            say(f"{w.name}: human: {count(h.launches, 'launch', fmt='g')}")
        if "ddmin" in methods and (d := run_ddmin(w, launcher, flags, seed_env)) is not None:
            out.methods["ddmin"] = d
            say(f"{w.name}: ddmin: {count(d.launches, 'launch', fmt='g')}, {d.status}")
    finally:
        launcher.close()
    return out


def _run_agents(
    w: BenchWorld, root: Path, methods: tuple[str, ...], say: Callable[[str], None], empty_knowledge: Path | None
) -> dict[str, MethodResult]:
    """The agent's run on one world (method "agent") and, with an empty-catalog knowledge folder, its
    ablation ("agent-empty"), as `methods` asks."""
    out: dict[str, MethodResult] = {}
    if "agent" in methods:
        say(f"{w.name}: agent")
        out["agent"] = r = run_agent(
            w, transcripts=root / "transcripts", seed=f"bench:{w.name}:agent"
        )
        say(f"{w.name}: agent: {r.status}, {r.found}, {count(r.launches, 'launch', fmt='g')}, {r.wall_s:.1f} s")
    if "agent-empty" in methods and empty_knowledge is not None:
        say(f"{w.name}: agent, empty catalog")
        # The ablation faces the same draws as the agent: the same seed name, its own launch counter (a
        # flaky world's n-th launch is live or not alike for both, whether or not the agent ran first).
        saved_state = os.environ.get("HYPOLOOP_LAB_STATE")
        os.environ["HYPOLOOP_LAB_STATE"] = str(root / "lab-state-empty")
        try:
            out["agent-empty"] = r = run_agent(
                w,
                transcripts=root / "transcripts-empty",
                seed=f"bench:{w.name}:agent",
                knowledge=empty_knowledge,
                method="agent-empty",
            )
        finally:
            if saved_state is None:
                os.environ.pop("HYPOLOOP_LAB_STATE", None)
            else:
                os.environ["HYPOLOOP_LAB_STATE"] = saved_state
        say(f"{w.name}: agent, empty catalog: {r.status}, {r.found}, {count(r.launches, 'launch', fmt='g')}")
    return out


def _aggregate(results: list[WorldResult], time_scale: float, seeds: int, wall: float) -> BenchResult:
    medians = _agent_figures(results, "detection_delay_medians_s")
    maxes = _agent_figures(results, "detection_delay_maxes_s")
    steps = _agent_figures(results, "overhead_steps_s")
    notes: list[str] = []
    targets = [t for w in results for t in _world_targets(w)]
    targets += _catalog_targets(results, notes)
    targets += [Target(r.name, r.measured, r.met) for r in issue20_rows(results)]
    det_med = statistics.median(medians) if medians else None
    det_max = max(maxes) if maxes else None
    ovh_med = statistics.median(steps) if steps else None
    if det_med is not None:
        targets.append(
            Target(
                "agent detection delay median < 0.2 s",
                f"median {det_med:.3f} s, max {det_max:.3f} s over {count(len(medians), 'launch')}",
                det_med < DETECTION_DELAY_TARGET_S,
            )
        )
    if ovh_med is not None:
        targets.append(
            Target(
                "agent overhead per step median < 50 ms",
                f"median {ovh_med * 1000:.1f} ms, max {max(steps) * 1000:.1f} ms over {count(len(steps), 'step')}",
                ovh_med < OVERHEAD_TARGET_S,
            )
        )
    return BenchResult(
        time_scale=time_scale,
        seeds=seeds,
        worlds=results,
        wall_s=wall,
        detection_median_s=det_med,
        detection_max_s=det_max,
        overhead_median_s=ovh_med,
        overhead_max_s=max(steps) if steps else None,
        overhead_steps=len(steps),
        targets=targets,
        notes=notes,
    )


def _agent_figures(results: list[WorldResult], key: str) -> list[float]:
    """The agent's per-launch (or per-step) figures `key` over every world, in world order."""
    return [x for w in results if "agent" in w.methods for x in w.methods["agent"].extra[key]]


def _world_targets(w: WorldResult) -> list[Target]:
    """One world's targets: the agent correct, its launches against random's and the human sequence's."""
    out: list[Target] = []
    agent, rnd, human = w.methods.get("agent"), w.methods.get("random"), w.methods.get("human")
    if agent is not None:
        out.append(
            Target(
                f"{w.world}: agent finds the correct root cause",
                "yes" if agent.correct else f"no: {agent.status}",
                agent.correct,
            )
        )
    if agent is not None and rnd is not None and w.expect == "isolated":
        # Efficiency counts correct runs only: the agent's, against random's successful orders.
        won = rnd.extra.get("success_launches")
        name = f"{w.world}: agent launches <= 1/2 of random's mean"
        if not agent.correct:
            out.append(Target(name, "the agent was not correct (only correct runs count)", False))
        elif won is None:
            seeds = rnd.extra.get("seeds", 0)
            never = (
                "no plausible change is a root fix" if rnd.extra.get("estimate") == "exact"
                else f"no fix in {seeds} seeds"
            )
            out.append(Target(name, f"{agent.launches:g} vs random: {never}", True))
        else:
            out.append(
                Target(
                    name,
                    f"{agent.launches:g} vs {won:.1f} "
                    + ("(random's exact expectation) " if rnd.extra.get("estimate") == "exact"
                       else "over random's successful seeds ")
                    + f"(ratio {agent.launches / won:.2f})",
                    agent.launches <= RANDOM_RATIO_TARGET * won,
                )
            )
    if agent is not None and human is not None:
        out.append(
            Target(
                f"{w.world}: agent launches < the human sequence",
                f"{agent.launches:g} vs {human.launches:g}",
                agent.launches < human.launches,
            )
        )
    return out


def _catalog_targets(results: list[WorldResult], notes: list[str]) -> list[Target]:
    """Issue 10's aggregate targets: correct on every world with the catalog, on >= 80% with an empty
    catalog, and never a wrong `isolated` (a fix claimed that the truth does not call the fix)."""
    out: list[Target] = []
    agents = [w.methods["agent"] for w in results if "agent" in w.methods]
    empties = [w.methods["agent-empty"] for w in results if "agent-empty" in w.methods]
    if agents:
        n = sum(a.correct for a in agents)
        out.append(Target("agent with the catalog correct on every world", f"{n}/{len(agents)}", n == len(agents)))
    if empties:
        n = sum(a.correct for a in empties)
        out.append(
            Target(
                "agent with an empty catalog correct on >= 80% of worlds",
                f"{n}/{len(empties)} ({n / len(empties):.0%})",
                n >= EMPTY_CATALOG_TARGET * len(empties),
            )
        )
        if any(a.extra.get("catalog_used") for a in empties):
            notes.append(
                "empty catalog: this agent still drew hypotheses from the catalog (it does not read "
                "HYPOLOOP_KNOWLEDGE yet), so the agent-empty rows show the catalog's result"
            )
    runs = agents + empties
    if runs:
        wrong = [f"{w.world} ({m})" for w in results for m, r in w.methods.items() if m.startswith("agent") and r.wrong_isolated]
        out.append(Target("agent never ends with a wrong `isolated`", ", ".join(wrong) or "none", not wrong))
    for w in results:
        rnd = w.methods.get("random")
        if rnd is not None:
            if rnd.extra.get("estimate") == "exact" and rnd.extra.get("baseline_served"):
                notes.append(
                    f"{w.world}: the baseline served, so random stops after it, blaming nothing "
                    f"({'correct' if rnd.correct else 'not correct'} here)"
                )
            elif rnd.extra.get("estimate") == "exact":
                notes.append(
                    f"{w.world}: random finds the correct fix with probability {rnd.extra.get('success_rate', 0):.0%} "
                    f"({rnd.extra.get('working_changes', 0)} of {rnd.extra.get('plausible_changes', 0)} plausible "
                    f"changes work; its {rnd.extra.get('seeds', 0)} seeded orders: {rnd.extra.get('seed_mean_launches')} "
                    f"launches on average, {rnd.extra.get('seed_success_rate', 0):.0%} correct)"
                )
            else:
                notes.append(
                    f"{w.world}: random found the correct fix on {rnd.extra.get('success_rate', 0):.0%} of "
                    f"{rnd.extra.get('seeds', 0)} seeds"
                )
    return out
