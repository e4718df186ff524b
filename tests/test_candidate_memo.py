"""The rule planner keeps the candidate generators' answers for a run's past launches from one step to the next
(agent/planning/candidate_memo.py, issue 7: the orchestrator's own time per step must not grow with the run).

In process, on real-shaped SGLang logs: a run whose every test fails as the baseline did, step after step.
The planner that keeps its memo across the steps decides exactly what a planner built afresh at each step
decides (a run resumed in a new process, whose memo starts empty), and asks the generators about the new
launch only: the number of generator calls per step does not grow with the number of launches before it,
except for a generator that reads the whole run, which still sees every launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner_steps import after_failed_launch, baseline_failed_with, fingerprint_with_model
from test_kv_allocator_blocker import DENSE, FLAGS, FLAGS_SET, GPU_HOST, SPEC_BLOCKER

from agent.domain.models import Hypothesis
from agent.planning.candidate_memo import reads_run
from agent.planning.catalog import load_catalog
from agent.planning.generators import GeneratorInput
from agent.planning.generators.registry import default_generators
from agent.planning.planner import RulePlanner
from agent.planning.view import HistoryState, PlannerView, Proposal


class Counted:
    """A real generator, its calls counted by name."""

    def __init__(self, gen: Any, calls: list[str]) -> None:
        self.gen, self.calls, self.name, self.reads_run = gen, calls, gen.name, reads_run(gen)

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        self.calls.append(self.name)
        return self.gen.generate(inp)


def _planner(calls: list[str]) -> RulePlanner:
    return RulePlanner(load_catalog(), FLAGS, generators=[Counted(g, calls) for g in default_generators()])


def _decided(planner: RulePlanner, view: PlannerView) -> tuple[HistoryState, Proposal]:
    hist = planner.history(view)
    return hist, planner.propose(view, hist)


def _ledger(hist: HistoryState) -> list[tuple[str, str, float, int]]:
    return [(h.id, h.status, h.posterior, len(h.evidence)) for h in hist.hypotheses]


def test_a_step_decides_as_a_fresh_planner_and_asks_only_about_the_new_launch(tmp_path: Path) -> None:
    fp, model = fingerprint_with_model(tmp_path, DENSE, GPU_HOST)
    log = SPEC_BLOCKER.replace("MODEL", model)
    kept_calls: list[str] = []
    kept = _planner(kept_calls)  # one planner through the whole run: its memo fills step by step
    _, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS_SET}, log, FLAGS)
    whole_run = {g.name for g in default_generators() if reads_run(g)}
    assert whole_run, "no generator reads the whole run: the exception this test checks is gone"
    per_step: list[tuple[int, int, int]] = []  # (failing launches, calls of kept answers, fresh planner's)
    for _ in range(5):
        exp = prop.experiment
        if exp is None:
            break
        # the next proposal from a planner built afresh (a resumed run in a new process) and from the one
        # that kept its answers: the same experiment, the same ledger
        prop = after_failed_launch(kept, view, exp, log)
        before = len(kept_calls)
        hist, again = _decided(kept, view)
        step = kept_calls[before:]
        fresh_calls: list[str] = []
        fresh_hist, fresh = _decided(_planner(fresh_calls), view)
        assert again == fresh == prop
        assert _ledger(hist) == _ledger(fresh_hist)
        kept_per_launch = [c for c in step if c not in whole_run]
        per_step.append((len(view.outcomes), len(kept_per_launch), len([c for c in fresh_calls if c not in whole_run])))
        # a generator that reads the whole run is still asked about every failing launch
        assert step.count(next(iter(whole_run))) == fresh_calls.count(next(iter(whole_run))) >= len(view.outcomes) - 1
    assert len(per_step) >= 3, f"the run ended too soon to compare steps: {per_step}"
    # asked again, the planner that kept its answers asks nothing it already asked; the fresh one asks about
    # every failing launch, so its calls grow with the run
    assert all(kept_n == 0 for _, kept_n, _ in per_step), per_step
    assert per_step[-1][2] > per_step[0][2] > 0, per_step


def test_a_launch_asked_about_for_the_first_time_costs_one_call_per_generator(tmp_path: Path) -> None:
    fp, model = fingerprint_with_model(tmp_path, DENSE, GPU_HOST)
    log = SPEC_BLOCKER.replace("MODEL", model)
    calls: list[str] = []
    planner = _planner(calls)
    _, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS_SET}, log, FLAGS)
    planner.history(view)
    new_per_step = []
    for _ in range(4):
        if prop.experiment is None:
            break
        before = len(calls)
        prop = after_failed_launch(planner, view, prop.experiment, log)
        new_per_step.append(sum(1 for c in calls[before:] if c not in {g.name for g in planner.generators
                                                                       if g.reads_run}))
    assert len(new_per_step) >= 3
    # the same for the 2nd launch as for the 5th: one call of each generator that keeps its answers
    assert len(set(new_per_step)) == 1, new_per_step
