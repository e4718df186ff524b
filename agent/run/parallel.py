"""Parallel experiments: a batch of one-change experiments against the same baseline, run at once.

The graph's ``--parallel N`` steps (issue 15). The nodes themselves know nothing of batches: the graph
wires `design_or_batch`, `approve_in_batch` and `execute_or_batch` in their place, and each one hands over
to the plain node whenever no batch is involved, so without ``--parallel`` (or with 1) a run is exactly
as before on every host.

- `propose_batch` asks the planner for up to N experiments, each one change against the same baseline,
  testing *different* hypotheses: the planner ranks candidates by probability of fixing per host-second
  (its expected information per launch); after each pick, the picked change is set aside as if it had
  been proposed already (a pseudo-rejection the planner honours), and a candidate whose fixing
  hypothesis is already tested by the batch is skipped, so two slots never test one idea. Baseline and
  confirmation runs are never batched: they are their own steps. The batch leaves room in the launch
  budget for the confirmation run.
- `design_or_batch` proposes a batch (``experiment.proposed`` with ``batch`` for each member);
  `approve_in_batch` asks about each member in turn with the approval screen of one experiment plus the
  batch (approve, edit, reject each; ``all`` approves the rest as proposed) and sends the approved ones
  to execute together; `execute_or_batch` runs them (`run_batch`), writes each ``outcome`` and the
  ledger (``ledger.updated``) as it arrives, and cancels (``experiment.cancelled``) the ones still
  running once an outcome settles the question, i.e. the planner, given the outcomes so far, would
  confirm a fix or conclude: the running ones can no longer change that. A member whose job the
  scheduler ended (an operator's ``scancel``, preemption, node failure: `agent.run.nodes.execute.JobEnded`)
  gets an ``infra_error`` outcome of its own, which moves no hypothesis; the other members' results
  are kept and the run goes on (any other host failure still ends the run). After a kill, the execute step
  runs again: saved results are reused and running servers or jobs adopted by their ids
  (``agent.run.recovery.recover``), never launched twice.
- `run_batch` launches the batch's experiments concurrently (one thread each, each through
  `agent.run.nodes.execute.run_experiment`, so each is one server / one Slurm job with its own log, transcript
  events and verified stop), hands every outcome to `on_outcome` as it arrives, and stops the
  experiments still running when `on_outcome` says the question is settled. A stopped experiment is
  no evidence: it is returned among the cancelled ones, with the host time it used.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Experiment, Outcome, Rejection
from agent.planning.guard import GuardError, check_experiment
from agent.planning.view import HistoryState, PlannerView, Proposal
from agent.record.wire import to_payload
from agent.run.crashsafe import infra_failure
from agent.run.recovery import prior_launch, recover, save_result
from agent.run.runtime import Runtime
from agent.run.state import RunState, case_of, next_step, planner_view
from tools.host import HostError, ProcessHandle

if TYPE_CHECKING:  # the nodes are given by the graph (``Steps``), not imported here
    from agent.run.nodes.approve import Route
    from agent.run.nodes.execute import JobEnded

__all__ = [
    "BatchResult",
    "Steps",
    "approve_in_batch",
    "design_or_batch",
    "execute_or_batch",
    "fixing_hypotheses",
    "propose_batch",
    "run_batch",
]


@dataclass(frozen=True)
class Steps:
    """The plain nodes and launch functions the batch steps hand over to, given by the graph
    (``agent.run.graph.NODE_STEPS``: ``agent.run.nodes``), so this module sits beside the nodes instead
    of above them. ``run_experiment``/``job_ended``: ``agent.run.nodes.execute.run_experiment`` and
    ``JobEnded``; ``classify``: ``agent.run.nodes.analyze.classify_outcome``."""

    design: Callable[[RunState, Runtime], Any]
    approve: Callable[[RunState, Runtime], Command[Route]]
    execute: Callable[[RunState, Runtime], RunState]
    run_experiment: Callable[..., RawEvidence]
    classify: Callable[[RawEvidence], Outcome]
    job_ended: type[JobEnded]


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
    host failed, `ended` the experiments whose job the scheduler ended (`JobEnded`: an infrastructure
    outcome of that experiment alone, its siblings unaffected), and per experiment when it ended
    (`finished_at`, ``time.monotonic()``)."""

    def __init__(self) -> None:
        self.raws: list[RawEvidence] = []
        self.cancelled: list[RawEvidence] = []
        self.errors: dict[str, HostError] = {}
        self.ended: dict[str, JobEnded] = {}
        self.finished_at: dict[str, float] = {}


def run_batch(
    rt: Runtime,
    case: Any,
    run_id: str,
    batch: Sequence[Experiment],
    *,
    steps: Steps,
    on_outcome: Callable[[Experiment, Outcome, RawEvidence], bool] | None = None,
    launch: dict[str, dict[str, Any]] | None = None,
) -> BatchResult:
    """Run `batch` at once; each experiment as `agent.run.nodes.execute.run_experiment` runs one.

    `launch[exp.id]` are extra `run_experiment` arguments (``adopt``/``record``/``launch_no`` of a
    server an earlier process launched). `steps` gives `run_experiment`, `JobEnded` and `classify(raw)`,
    which turns the evidence into an `Outcome`;
    `on_outcome(exp, outcome, raw)` is called (on the
    calling thread, in arrival order) for each finished experiment and returns True when the outcome
    settles the question, which stops every experiment still running (its server or job stopped and
    verified by its own thread); those come back in `cancelled`. A `HostError` of one experiment is
    kept in `errors` (a `JobEnded` in `ended`) and does not stop the others. Returns when every experiment has ended.
    """
    result = BatchResult()
    settled = threading.Event()

    def one(exp: Experiment) -> RawEvidence:
        return steps.run_experiment(rt, case, run_id, exp, **(launch or {}).get(exp.id, {}))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(batch)), thread_name_prefix="exp")
    try:
        futures = {pool.submit(one, exp): exp for exp in batch}
        for fut in concurrent.futures.as_completed(futures):
            exp = futures[fut]
            result.finished_at[exp.id] = time.monotonic()
            try:
                raw = fut.result()
            except steps.job_ended as exc:
                result.ended[exp.id] = exc
                continue
            except HostError as exc:
                result.errors[exp.id] = exc
                continue
            if settled.is_set():
                result.cancelled.append(raw)
                continue
            result.raws.append(raw)
            if on_outcome is not None and on_outcome(exp, steps.classify(raw), raw):
                settled.set()
                for other, e in futures.items():
                    if not other.done():
                        session = rt.sessions.get(e.id)
                        if session is not None:
                            session.stop(grace_s=2.0)
    finally:
        pool.shutdown(wait=True)
    return result


# ---------------------------------------------------------------------------------------- graph steps


def batch_size(state: RunState) -> int:
    """``--parallel N`` of the run (1 when not given)."""
    return max(1, int(state.get("parallel") or 1))


def design_or_batch(state: RunState, rt: Runtime, steps: Steps) -> dict[str, Any]:
    """The design step: with ``--parallel N`` > 1 and room for it, a batch of test experiments (each
    passing the guard), the first one pending approval; otherwise the plain design node."""
    if batch_size(state) <= 1 or state.get("status") == "error":
        return steps.design(state, rt)
    tr = rt.transcript
    view = planner_view(state)
    pl = rt.planner(state)
    batch, first = propose_batch(pl, view, pl.history(view), batch_size(state))
    checked: list[Experiment] = []
    for exp in batch:
        try:
            check_experiment(exp, view=view, flags=pl.flags)
        except GuardError as exc:  # a planner bug: never executed
            tr.emit("error", {"message": f"planner proposal refused: {exc}"}, node="design")
            continue
        checked.append(exp)
    if len(checked) <= 1:
        return steps.design(state, rt)  # a baseline, a confirmation, or a single test: one experiment as usual
    memo = pl.checkpoint()
    ids = [e.id for e in checked]
    for i, exp in enumerate(checked):
        tr.step = view.next_step + i  # each member is its own experiment, numbered in turn
        tr.emit(
            "experiment.proposed",
            to_payload(
                "experiment.proposed",
                exp,
                considered=first.recorded_considered() if i == 0 else [],
                batch={"position": i + 1, "size": len(checked), "experiment_ids": ids},
            ),
            node="design",
        )
    return {
        **({"planner": memo} if memo is not None else {}),
        "pending": checked[0].model_dump(mode="json"),
        "batch": [e.model_dump(mode="json") for e in checked[1:]],
        "approved": [],
        "batch_ids": ids,
    }


def approve_in_batch(state: RunState, rt: Runtime, steps: Steps) -> Command[Route]:
    """The approve step: the plain approve node for the pending experiment; inside a batch, its answer
    moves on to the next member (approved or edited ones are kept, a rejected one dropped) and, once
    every member is answered, sends the approved ones to execute together (none: back to design)."""
    cmd = steps.approve(state, rt)
    if state.get("batch") is None:
        return cmd
    update = dict(cmd.update or {})
    if cmd.goto == "approve":
        return cmd  # the answer was refused: the same member is asked about again
    if cmd.goto == "conclude":
        return Command(goto="conclude", update={**update, "batch": None, "approved": []})
    rest = list(state.get("batch") or [])
    approved = list(state.get("approved") or [])
    if cmd.goto == "execute":
        approved.append(update["pending"])
        if update.pop("approve_batch", False):
            for data in rest:
                rt.transcript.emit(
                    "approval.decided",
                    {"experiment_id": data["id"], "decision": "approve", "by": "batch",
                     "why": "approved with the whole batch"},
                    node="approve",
                )
                approved.append({**data, "status": "approved"})
            rest = []
    if rest:
        return Command(
            goto="approve", update={**update, "pending": rest[0], "batch": rest[1:], "approved": approved}
        )
    if approved:
        return Command(goto="execute", update={**update, "pending": None, "batch": None, "approved": approved})
    return Command(goto="design", update={**update, "pending": None, "batch": None, "approved": []})


def execute_or_batch(state: RunState, rt: Runtime, steps: Steps) -> RunState:
    """The execute step: the plain execute node, or the approved batch run at once (see the module
    docstring). Returns the state update: every member in ``experiments`` (done, or skipped when
    cancelled or lost to a host error), the outcomes that arrived, launches and host-seconds of all."""
    approved = [Experiment.model_validate(e) for e in state.get("approved") or []]
    if not approved:
        return steps.execute(state, rt)
    tr = rt.transcript
    case = case_of(state)
    run_id = state["run_id"]
    tr.step = next_step(state)
    tally = _Tally()
    try:
        launch = _recover_batch(rt, case, run_id, approved, tally)
    except HostError as exc:
        tr.emit("error", {"message": str(exc)}, node="execute")
        return {"pending": None, "batch": None, "approved": [], "status": "error", "error": str(exc)}
    view = planner_view(state)
    pl = rt.planner(state)
    for exp_id, ev in tally.evidence_of.items():  # recovered results count as arrived
        tally.outcomes.append(_arrived(rt, next(e for e in approved if e.id == exp_id), steps.classify(ev)))

    def on_outcome(exp: Experiment, outcome: Outcome, raw: RawEvidence) -> bool:
        save_result(rt.state_dir, run_id, raw)
        tally.evidence_of[exp.id] = raw
        tally.outcomes.append(_arrived(rt, exp, outcome))
        return _settled(rt, pl, view, approved, tally.outcomes)

    todo = [e for e in approved if e.id not in tally.evidence_of]
    result = run_batch(rt, case, run_id, todo, steps=steps, on_outcome=on_outcome, launch=launch)
    _record_losses(rt, case, approved, result, tally, steps.classify)
    return _batch_update(
        state, approved, tally.evidence_of, tally.outcomes, tally.earlier, tally.earlier_host_s, tally.update
    )


@dataclass
class _Tally:
    """What a batch has produced so far: the outcomes as they arrived (JSON), each member's evidence,
    the launches and host-seconds of earlier attempts that gave no outcome, and the state update of a
    host failure (empty while there is none)."""

    outcomes: list[dict[str, Any]] = field(default_factory=list)
    evidence_of: dict[str, RawEvidence] = field(default_factory=dict)
    earlier: int = 0
    earlier_host_s: float = 0.0
    update: RunState = field(default_factory=lambda: RunState())


def _recover_batch(
    rt: Runtime, case: Case, run_id: str, approved: list[Experiment], tally: _Tally
) -> dict[str, dict[str, Any]]:
    """What an earlier process of this run left of the batch: results it finished (into ``tally``) and
    servers it left running (to adopt). Returns the launch arguments of each member still to run.
    Raises HostError."""
    host = rt.host(case)
    launch: dict[str, dict[str, Any]] = {}
    for exp in approved:
        prior = prior_launch(rt.transcript.path, exp.id)
        found, adopt, record = recover(rt, host, run_id, exp.id, prior=prior)
        if found is not None:
            tally.evidence_of[exp.id] = found
            continue
        if adopt is None:
            tally.earlier += prior.attempts
            tally.earlier_host_s += prior.host_s(host.time_scale)
        launch[exp.id] = _launch_args(adopt, record, prior.attempts + 1)
    return launch


def _record_losses(
    rt: Runtime,
    case: Case,
    approved: list[Experiment],
    result: BatchResult,
    tally: _Tally,
    classify: Callable[[RawEvidence], Outcome],
) -> None:
    """Record the members the batch lost: cancelled (an earlier outcome settled the question), ended by
    the scheduler (this one's infrastructure outcome), or under a host failure (which ends the run)."""
    tr = rt.transcript
    for raw in result.cancelled:
        tally.evidence_of[raw.experiment_id] = raw
        tr.emit(
            "experiment.cancelled",
            {"experiment_id": raw.experiment_id, "host_seconds": raw.timings.host_seconds,
             "reason": "an outcome that arrived first settled the question (the planner confirms a fix or "
             "concludes); this experiment could no longer change the conclusion, so it was stopped"},
            node="execute",
        )
    for exp_id, ended in result.ended.items():
        # The scheduler (or an operator's scancel) ended this one job: an infrastructure outcome of this
        # experiment alone, no evidence about any hypothesis; its siblings' results stand and the run
        # goes on. Its launch and host time count (its saved result says so, for a resume too).
        tally.evidence_of[exp_id] = ended.evidence
        tr.emit(
            "error",
            {"message": f"{ended}; only experiment {exp_id} is lost to it (an infrastructure outcome, not "
             "evidence about any hypothesis): the other results of the batch are kept and the run goes on",
             "experiment_id": exp_id},
            node="execute",
        )
        tally.outcomes.append(_arrived(rt, next(e for e in approved if e.id == exp_id), classify(ended.evidence)))
    for exp_id, err in result.errors.items():  # the host failed under this one: an infrastructure error
        tr.emit("error", {"message": str(err), "experiment_id": exp_id}, node="execute")
        lost = prior_launch(tr.path, exp_id)
        tally.earlier += lost.attempts
        tally.earlier_host_s += lost.host_s(rt.host(case).time_scale)
        infra = RawEvidence.infra_error(exp_id, str(err))
        tally.outcomes.append(_arrived(rt, next(e for e in approved if e.id == exp_id), classify(infra)))
        # Any host failure ends the run, as for one experiment (agent.run.crashsafe.infra_failure): an
        # infra_error outcome must never be followed by more experiments.
        tally.update = tally.update or infra_failure(rt, exp_id, err)


def _launch_args(adopt: ProcessHandle | None, record: dict[str, Any] | None, launch_no: int) -> dict[str, Any]:
    return {"adopt": adopt, "record": record, "launch_no": launch_no}


def _arrived(rt: Runtime, exp: Experiment, outcome: Outcome) -> dict[str, Any]:
    """Record an outcome the moment it arrives."""
    data = outcome.model_dump(mode="json")
    rt.transcript.emit("outcome", data, node="analyze")
    return data


def _settled(
    rt: Runtime, pl: Any, view: PlannerView, batch: Sequence[Experiment], outcomes: list[dict[str, Any]]
) -> bool:
    """Update the ledger with the outcomes so far (``ledger.updated``) and tell whether the question is
    settled: given them, the planner's next step is a confirmation run or a conclusion."""
    arrived = {o["experiment_id"] for o in outcomes}
    done = [e.model_copy(update={"status": "done"}) for e in batch if e.id in arrived]
    partial = view.model_copy(
        update={
            "experiments": [*view.experiments, *done],
            "outcomes": [*view.outcomes, *(Outcome.model_validate(o) for o in outcomes)],
            "launches": view.launches + len(batch),
        }
    )
    hist = pl.history(partial)
    rt.transcript.emit(
        "ledger.updated",
        {"after": sorted(arrived), "hypotheses": [
            {"id": h.id, "status": h.status, "posterior": round(h.posterior, 4)} for h in hist.hypotheses
        ]},
        node="analyze",
    )
    if len(arrived) == len(batch):
        return False
    nxt = pl.propose(partial, hist).experiment
    return nxt is None or nxt.purpose == "confirm"


def _batch_update(
    state: RunState,
    approved: Sequence[Experiment],
    evidence_of: dict[str, RawEvidence],
    outcomes: list[dict[str, Any]],
    earlier: int,
    earlier_host_s: float,
    extra: RunState,
) -> RunState:
    arrived = {o["experiment_id"] for o in outcomes}
    members = []
    for exp in approved:
        exp.status = "done" if exp.id in arrived else "skipped"
        members.append(exp.model_dump(mode="json"))
    launched = sum(1 for ev in evidence_of.values() if ev.launched)
    host_s = sum(ev.timings.host_seconds for ev in evidence_of.values())
    return {
        **extra,
        "pending": None,
        "raw": None,
        "batch": None,
        "approved": [],
        "experiments": [*state.get("experiments", []), *members],
        "outcomes": [*state.get("outcomes", []), *outcomes],
        "launches": state.get("launches", 0) + launched + earlier,
        "host_seconds": round(state.get("host_seconds", 0.0) + host_s + earlier_host_s, 3),
    }
