"""Parallel experiments: a batch of one-change experiments against the same baseline, run at once.

Two building blocks for ``--parallel N`` (issue 15), kept out of the graph so the graph needs only small
hooks:

- `propose_batch` asks the planner for up to N experiments, each one change against the same baseline,
  testing *different* hypotheses: the planner ranks candidates by probability of fixing per host-second
  (its expected information per launch); after each pick, the picked change is set aside as if it had
  been proposed already (a pseudo-rejection the planner honours), and a candidate whose fixing
  hypothesis is already tested by the batch is skipped, so two slots never test one idea. Baseline and
  confirmation runs are never batched: they are their own steps. The batch leaves room in the launch
  budget for the confirmation run.
- `run_batch` launches the batch's experiments concurrently (one thread each, each through
  `agent.nodes.execute.run_experiment`, so each is one server / one Slurm job with its own log, transcript
  events and verified stop), hands every outcome to `on_outcome` as it arrives, and stops the
  experiments still running when `on_outcome` says the question is settled. A stopped experiment is
  no evidence: it is returned among the cancelled ones, with the host time it used.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from agent.evidence import RawEvidence
from agent.models import Experiment, Outcome, Rejection
from agent.nodes.execute import run_experiment
from agent.planner import HistoryState, PlannerView, Proposal
from agent.runtime import Runtime
from tools.host import HostError

__all__ = ["BatchResult", "fixing_hypotheses", "propose_batch", "run_batch"]


def fixing_hypotheses(exp: Experiment) -> set[str]:
    """The hypotheses an experiment tests: those predicting its change fixes (or may fix) the failure."""
    return {p.hypothesis_id for p in exp.predictions if p.expect in ("fixed", "may_fix")}


def propose_batch(
    planner: Any, view: PlannerView, history: HistoryState, n: int
) -> tuple[list[Experiment], Proposal]:
    """Up to `n` test experiments against the current baseline, each for a different hypothesis.

    Returns the batch (possibly one experiment, or none) and the planner's first proposal (which carries
    the conclude reason when the batch is empty). A baseline or confirmation proposal is returned alone.
    Never proposes a change already run, rejected or in the batch; keeps ``launches + batch + 1``
    (the confirmation) within the case's experiment budget.
    """
    first = planner.propose(view, history)
    if first.experiment is None:
        return [], first
    if n <= 1 or first.experiment.purpose != "test":
        return [first.experiment], first
    batch = [first.experiment]
    covered = fixing_hypotheses(first.experiment)
    set_aside = [_aside(first.experiment, "already in this batch")]
    for _ in range(4 * n):
        if len(batch) >= n or view.launches + len(batch) + 2 > view.case.budget.experiments:
            break  # each slot is a launch, and the confirmation run needs one more
        trial = view.model_copy(
            update={"rejections": [*view.rejections, *set_aside], "launches": view.launches + len(batch)}
        )
        nxt = planner.propose(trial, history).experiment
        if nxt is None or nxt.purpose != "test" or nxt.change is None:
            break
        tests = fixing_hypotheses(nxt)
        if tests and tests & covered:
            set_aside.append(_aside(nxt, "its hypothesis is already tested in this batch"))
            continue
        batch.append(nxt)
        covered |= tests
        set_aside.append(_aside(nxt, "already in this batch"))
    return batch, first


def _aside(exp: Experiment, why: str) -> Rejection:
    assert exp.change is not None
    return Rejection(experiment_id=exp.id, change_key=exp.change.key(), reason=why, change=exp.change)


class BatchResult:
    """What a batch came to: `raws` the evidence of the experiments that finished (in arrival order),
    `cancelled` the evidence of those stopped because the question was settled (not evidence about
    the deployment: only their host time counts), `errors` the `HostError` lines of experiments the
    host failed, and per experiment when it ended (`finished_at`, ``time.monotonic()``)."""

    def __init__(self) -> None:
        self.raws: list[RawEvidence] = []
        self.cancelled: list[RawEvidence] = []
        self.errors: dict[str, str] = {}
        self.finished_at: dict[str, float] = {}


def run_batch(
    rt: Runtime,
    case: Any,
    run_id: str,
    batch: Sequence[Experiment],
    *,
    classify: Callable[[RawEvidence], Outcome],
    on_outcome: Callable[[Experiment, Outcome], bool] | None = None,
) -> BatchResult:
    """Run `batch` at once; each experiment as `agent.nodes.execute.run_experiment` runs one.

    `classify(raw)` turns a raw result into an `Outcome`; `on_outcome(exp, outcome)` is called (on the
    calling thread, in arrival order) for each finished experiment and returns True when the outcome
    settles the question, which stops every experiment still running (its server or job stopped and
    verified by its own thread); those come back in `cancelled`. A `HostError` of one experiment is
    kept in `errors` and does not stop the others. Returns when every experiment has ended.
    """
    result = BatchResult()
    settled = threading.Event()

    def one(exp: Experiment) -> RawEvidence:
        return run_experiment(rt, case, run_id, exp)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(batch)), thread_name_prefix="exp")
    try:
        futures = {pool.submit(one, exp): exp for exp in batch}
        for fut in concurrent.futures.as_completed(futures):
            exp = futures[fut]
            result.finished_at[exp.id] = time.monotonic()
            try:
                raw = fut.result()
            except HostError as exc:
                result.errors[exp.id] = str(exc)
                continue
            if settled.is_set():
                result.cancelled.append(raw)
                continue
            result.raws.append(raw)
            if on_outcome is not None and on_outcome(exp, classify(raw)):
                settled.set()
                for other, e in futures.items():
                    if not other.done():
                        session = rt.sessions.get(e.id)
                        if session is not None:
                            session.stop(grace_s=2.0)
    finally:
        pool.shutdown(wait=True)
    return result
