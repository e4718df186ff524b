"""Planners: turn the history of a run into a hypothesis ledger and the next experiment.

The rule planner is assembled from the modules that do each part: ``view`` (what a planner sees and
says), ``matching`` (changes against interventions on a host), ``ledger`` (weighing hypotheses by
evidence), ``confirm`` (fixes and confirmation runs), ``history`` (a run's history read into a ledger and
baseline, blocker chains included), ``chooser`` (the next experiment) and ``observations`` (how one launch
compares with another).

The rule planner is a pure function of the run's history (case, host facts, findings, experiments,
outcomes, rejections): the ledger is rebuilt from the evidence on every step, so a refuted hypothesis
stays refuted for as long as the experiment that refuted it is in the history, and a replay of the same
history gives the same decisions.

Belief update: each hypothesis predicts, for each experiment, whether the symptom is ``fixed`` or
``persists``; the observed outcome (classified against the failing reference run of the same baseline)
multiplies the hypothesis's weight by a likelihood (``likelihood`` in knowledge/planner.toml), i.e.
Bayes' rule over the listed hypotheses plus an "unlisted cause" remainder. Choice of experiment: the probability that the change
fixes the symptom, divided by its estimated cost in host-seconds — the classic ratio rule for
sequential search, which minimises the expected cost of finding the fix when tests are independent.
A workaround (a change that avoids the broken component, e.g. ``--disable-cuda-graph``) scores half,
so root-cause fixes are tested first.

Beyond one change at a time:
- Values: an intervention may derive its value from the evidence (``agent/planning/values.py``: memory figures
  in the log and the GPU size), e.g. the smallest ``--mem-fraction-static`` that leaves a KV cache.
- Progress: a change after which the launch got further (a later stage, or the same stage with progress
  lines the reference never reached) is adopted into the baseline.
- Several fixes: when the first fix found is a workaround or costly, cheaper root-cause candidates are
  tested from the same failing baseline while the budget allows; the best fix (root over workaround,
  then cheapest) is the one confirmed.
- Flakiness: a baseline that serves correctly although a failure was reported is launched again (with a
  concurrency probe first when the case's symptom speaks of load); a fix whose confirmation fails is
  dropped and its decisive hypotheses refuted; once the run has seen a flaky outcome, a fix needs two
  passing confirmations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.domain.models import Baseline, Change, Hypothesis, Outcome, RelevantFinding
from agent.planning.candidate_memo import CandidateMemo
from agent.planning.catalog import CatalogEntry
from agent.planning.chooser import Chooser
from agent.planning.confirm import FixKeeper
from agent.planning.generators import CandidateGenerator, GeneratorInput
from agent.planning.generators.registry import default_generators
from agent.planning.graded import judged_against_failure
from agent.planning.history import HistoryReader, class_gone
from agent.planning.ledger import LedgerBook
from agent.planning.llm_client import ChatClient
from agent.planning.llm_planner import LLMPlanner
from agent.planning.llm_spec import PlannerSpec
from agent.planning.observations import (
    BURST_LEVELS,
    FALSE_CONFIRMATION,
    LOAD_PROBE_PREFIX,
    classify_observation,
    confirmations_required,
    error_templates,
    exception_keys,
    failed_only_under_load,
    failing_load_probe,
    import_time_failure,
    load_level,
    load_probe_for,
    progress_ids,
    speaks_of_flakiness,
)
from agent.planning.view import (
    COST_ORDER,
    Fix,
    HistoryState,
    Planner,
    PlannerView,
    Proposal,
    default_launch_cost_s,
    model_features,
)
from agent.record.transcript import Transcript
from tools.flags import FlagCatalog
from tools.knowledge_files import steady

__all__ = [
    "BURST_LEVELS",
    "COST_ORDER",
    "FALSE_CONFIRMATION",
    "LOAD_PROBE_PREFIX",
    "Fix",
    "HistoryState",
    "Planner",
    "PlannerView",
    "Proposal",
    "RelevantFinding",
    "RulePlanner",
    "class_gone",
    "classify_observation",
    "confirmations_required",
    "default_launch_cost_s",
    "error_templates",
    "exception_keys",
    "failed_only_under_load",
    "failing_load_probe",
    "import_time_failure",
    "load_level",
    "load_probe_for",
    "make_planner",
    "model_features",
    "progress_ids",
    "speaks_of_flakiness",
]


class RulePlanner:
    """The default planner: catalog + findings + Bayes-style updates + probability-per-cost choice.

    ``catalog``: hypothesis catalog entries; ``flags``: the host's flag catalog (legal names and values);
    ``generators``: the candidate generators (default ``agent.planning.generators.registry``; the
    catalog is one of them); ``memo``: the generators' answers for past launches, kept from one step of a run
    to the next (``agent.planning.candidate_memo``; None: this planner's own). Composed of its parts, each
    given what it works with: the ledger (``LedgerBook``), the fixes and confirmations (``FixKeeper``), the
    history reader (``HistoryReader``) and the chooser of the next experiment (``Chooser``).
    """

    name = "rules"

    def __init__(
        self,
        catalog: list[CatalogEntry],
        flags: FlagCatalog | None,
        generators: list[CandidateGenerator] | None = None,
        memo: CandidateMemo | None = None,
    ) -> None:
        self.flags = flags
        self.catalog = catalog
        self.generators = generators if generators is not None else default_generators()
        self.book = LedgerBook(flags, catalog, self.generators, memo)
        self.reader = HistoryReader(self.book, FixKeeper(self.book))
        self.chooser = Chooser(flags, self.name)

    def history(self, view: PlannerView) -> HistoryState:
        """Rebuild the ledger and the current baseline from the run's history (``agent.planning.history``);
        the knowledge files are looked up on disk once meanwhile (``tools.knowledge_files.steady``)."""
        with steady():
            return self.reader.history(judged_view(view))

    def propose(self, view: PlannerView, state: HistoryState) -> Proposal:
        """The next experiment, or the reason to conclude (``agent.planning.chooser``), the knowledge files
        looked up on disk once meanwhile."""
        with steady():
            return self.chooser.propose(judged_view(view), state)

    def prediction(self, h: Hypothesis, change: Change | None, facts: dict[str, str] | None = None) -> str:
        """What ``h`` predicts for a change: fixed, may_fix or persists (``agent.planning.matching``)."""
        return self.book.prediction(h, change, facts)

    def generator_input(self, view: PlannerView, outcome: Outcome, config: Baseline) -> GeneratorInput:
        """What the generators see of one failing launch (``LedgerBook.generator_input``)."""
        return self.book.generator_input(view, outcome, config)

    def checkpoint(self) -> None:
        """Nothing to keep: the rule planner decides from the run's state alone."""
        return None


# ---------------------------------------------------------------------------------------------- wiring


def make_planner(
    spec: Mapping[str, Any] | None,
    catalog: list[CatalogEntry],
    flags: FlagCatalog | None,
    *,
    transcript: Transcript | None = None,
    client: ChatClient | None = None,
    memo: CandidateMemo | None = None,
) -> Planner:
    """The planner a run's checkpointed ``spec`` names (``None``: the rule planner); the one factory
    (``agent.planning.view.PlannerFactory``: the CLI gives it to the run's runtime). ``transcript``: where
    the LLM planner writes its exchanges; ``client``: its chat client (e.g. recorded answers); ``memo``:
    the generators' answers for the run's past launches, kept by the run's runtime from one step to the
    next (``agent.planning.candidate_memo``; None: the planner's own).

    Raises ValueError for a spec of kind ``llm`` without its options."""
    s = PlannerSpec.model_validate(spec or {})
    if s.kind == "rules":
        return RulePlanner(catalog, flags, memo=memo)
    if s.llm is None:
        raise ValueError("planner kind 'llm' needs its options (model, base_url, ...)")

    def rules(entries: list[CatalogEntry], flags: FlagCatalog | None) -> RulePlanner:
        return RulePlanner(entries, flags, memo=memo)

    return LLMPlanner(catalog, flags, s.llm, rules=rules, memory=s.memory, transcript=transcript, client=client)


def judged_view(view: PlannerView) -> PlannerView:
    """``view`` with its outcomes read by ``agent.planning.graded.judged_against_failure`` (a graded pass that
    does not beat the failing launch is that failure again); the same object when none changes."""
    judged = judged_against_failure(view.outcomes)
    if all(a is b for a, b in zip(judged, view.outcomes, strict=True)):
        return view
    return view.model_copy(update={"outcomes": judged})
