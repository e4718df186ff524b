"""What a planner sees and says: the run's history (``PlannerView``), the ledger and baseline derived
from it (``HistoryState``, with the fixes found so far; ``HistoryPass``, what one pass over it carries),
the answer (``Proposal``), the ``Planner`` protocol the graph knows planners by and the ``PlannerFactory``
the CLI gives the run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field

from agent.domain.case import Case
from agent.domain.models import Baseline, Change, Experiment, Hypothesis, Outcome, Rejection, RelevantFinding
from agent.planning.weights import weights as tunables
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog
from tools.knowledge import infer_features
from tools.probes import Probe

if TYPE_CHECKING:
    from agent.planning.candidate_memo import CandidateMemo
    from agent.planning.catalog import CatalogEntry
    from agent.planning.llm_client import ChatClient
    from agent.record.transcript import Transcript

# The tunable weights and thresholds (likelihoods, score factors, relevance and probability cut-offs,
# the assumed cost of an unmeasured launch) live in knowledge/planner.toml: ``tunables()``.
#: Ranking of performance costs, cheapest first (fixes and a conclusion's alternatives are sorted by it).
COST_ORDER = {"none": 0, "low": 1, "medium": 2, "high": 3}


class PlannerView(BaseModel):
    """Everything a planner may look at: the run's history, never the host or the lab."""

    case: Case
    fingerprint: HostFingerprint | None = None
    findings: list[RelevantFinding] = Field(default_factory=list)
    experiments: list[Experiment] = Field(default_factory=list)
    outcomes: list[Outcome] = Field(default_factory=list)
    rejections: list[Rejection] = Field(default_factory=list)
    launches: int = 0
    host_seconds: float = 0.0

    @property
    def next_step(self) -> int:
        """The number the next experiment is shown with: the experiments run so far + 1. An experiment
        launched again after its server was lost counts once (``launches`` counts every server start)."""
        return len(self.experiments) + 1

    def outcome_of(self, experiment_id: str) -> Outcome | None:
        """The outcome of an experiment, if it ran."""
        return next((o for o in self.outcomes if o.experiment_id == experiment_id), None)


class Fix(BaseModel):
    """A change that made the failing configuration serve correctly, and how good a fix it is."""

    experiment_id: str
    change: Change
    config: Baseline
    workaround: bool = False
    cost: Literal["none", "low", "medium", "high"] = "low"
    #: it gives another value to a setting the user chose, or drops a feature the user configured, while
    #: the user's own setting there was not yet reverted (``agent.planning.own_revert``)
    around_own: bool = False

    def rank(self) -> tuple[int, int, int]:
        """Smaller is better: root fixes before workarounds, then the user's own setting reverted before a
        change that goes around it, then cheaper in performance."""
        return (1 if self.workaround else 0, 1 if self.around_own else 0, COST_ORDER[self.cost])


class HistoryState(BaseModel):
    """The ledger and baseline derived from a run's history.

    ``reference`` is the latest outcome of the current baseline (failing, or ``ok`` once a fix is
    adopted). ``fixes`` are the changes that fixed ``failing_baseline`` (whose failing outcome is
    ``failing_reference``); the best of them is the current baseline. ``flaky``: the same configuration
    gave different outcomes. ``load_probe``: the failure shows only under concurrent requests, so every
    experiment adds this probe. ``baseline_runs``: launches of the unchanged baseline so far.
    ``localised``: see the field.
    """

    hypotheses: list[Hypothesis]
    baseline: Baseline
    reference: Outcome | None = None
    confirmed_experiment_id: str | None = None
    confirm_failed: bool = False
    adoptions: list[dict[str, Any]] = Field(default_factory=list)
    fixes: list[Fix] = Field(default_factory=list)
    failing_baseline: Baseline | None = None
    failing_reference: Outcome | None = None
    confirmations: int = 0
    flaky: bool = False
    intermittent: bool = False
    load_probe: Probe | None = None
    load_tried: bool = False
    baseline_runs: int = 0
    #: Subsystems (knowledge/subsystems.toml ids) a localising launch's true frames name for the current
    #: failure (``agent.planning.localise``): the next changes are narrowed to them while any is left.
    localised: list[str] = Field(default_factory=list)
    #: The baseline was adopted past a blocker on a launch whose only failure was a request timing out
    #: (``agent.domain.failure.timed_out_only``), and that configuration has not been launched again:
    #: the timeout is weak evidence (host load), so it is reproduced before anything is tested against it.
    unreproduced: bool = False
    #: The failure now being fixed is such a timeout: a fix of it is confirmed as on a flaky failure, and
    #: against it: the configuration without the fix is launched again (a control) and must still fail.
    weak: bool = False
    #: A control launch failed again (``controlled``), or served (its id in ``control_served``).
    controlled: bool = False
    control_served: str | None = None

    @property
    def best_fix(self) -> Fix | None:
        """The fix to keep: root over workaround, then cheapest; the earliest among equals."""
        return min(self.fixes, key=lambda f: f.rank()) if self.fixes else None

    #: Passing re-runs a fix needs on a flaky or intermittent failure (``confirmations_required``).
    flaky_confirmations: int = 2
    #: The case's own load (``[reproduce] concurrency``): every launch sends it.
    case_load: Probe | None = None

    @property
    def confirmations_needed(self) -> int:
        """Passing re-runs a fix needs: on a failure that is flaky (seen) or intermittent (said), as many
        as make a false confirmation at most 5% likely at the failure rate observed so far
        (``confirmations_required``), and so on a request timeout a change moved the failure to (``weak``);
        else one."""
        return self.flaky_confirmations if self.flaky or self.intermittent or self.weak else 1

    def extra_probes(self) -> list[Probe]:
        """Probes every experiment adds to the case's probes: the burst that failed, and the case's own
        load whenever the case has one (a load-only failure must see its load on every reproduction, test
        and confirmation; a smaller burst that failed first does not stand in for the case's full load,
        which a second blocker of a chain may need to show, issue 20 point 6)."""
        out = [self.load_probe] if self.load_probe is not None else []
        if self.case_load is not None and all(p.id != self.case_load.id for p in out):
            out.append(self.case_load)
        return out


@dataclass
class HistoryPass:
    """One pass over a run's history (``agent.planning.history``): what the rule planner's parts read and
    update for every launch of it. ``ledger``: hypothesis id -> hypothesis; ``weights``: hypothesis id ->
    unnormalised weight; ``refs``: configuration key (``config_key``) -> its failing outcome."""

    view: PlannerView
    state: HistoryState
    ledger: dict[str, Hypothesis] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    refs: dict[str, Outcome] = field(default_factory=dict)
    #: Experiments already read with an earlier one (a timeout's re-run, ``HistoryReader._rerun``).
    consumed: set[str] = field(default_factory=set)


class Proposal(BaseModel):
    """A planner's answer: one experiment, or a reason to conclude."""

    experiment: Experiment | None = None
    conclude_reason: str | None = None
    considered: list[dict[str, Any]] = Field(default_factory=list)

    def recorded_considered(self, limit: int = 12) -> list[dict[str, Any]]:
        """What the transcript keeps of ``considered``: the chosen change (a rule other than the score may
        have picked it: a localising launch first), then the changes weighed with the best score, ``limit``
        in all, then up to ``limit`` distinct reasons a candidate was skipped (one
        entry per hypothesis and reason: several values of one flag skipped alike are one), then, when
        anything was left out, ``{"omitted": N}`` so a reader knows the list is not whole."""
        chosen = self.experiment.change.describe() if self.experiment and self.experiment.change else None
        scored = sorted((c for c in self.considered if "change" in c),
                        key=lambda c: (c["change"] != chosen, -float(c.get("score", 0.0))))
        skipped: list[dict[str, Any]] = []
        for c in self.considered:
            if "change" not in c and c not in skipped:
                skipped.append(c)
        kept = scored[:limit] + skipped[:limit]
        distinct = len(scored) + len(skipped)
        return kept + ([{"omitted": distinct - len(kept)}] if distinct > len(kept) else [])


class Planner(Protocol):
    """Decides: ledger from history, next experiment from ledger (docs/ARCHITECTURE.md, "Planners").

    The graph knows planners only through this protocol; ``agent.planning.planner.make_planner`` builds the
    one a run's ``PlannerSpec`` names.
    """

    name: str
    #: The host's flag catalog the planner's proposals are checked against (None: names unchecked).
    flags: FlagCatalog | None

    def history(self, view: PlannerView) -> HistoryState: ...

    def propose(self, view: PlannerView, state: HistoryState) -> Proposal: ...

    def prediction(self, h: Hypothesis, change: Change | None, facts: dict[str, str] | None = None) -> str:
        """What ``h`` predicts for ``change``: fixed, may_fix or persists (a person's edit is re-predicted)."""
        ...

    def checkpoint(self) -> dict[str, Any] | None:
        """What to keep in the run's checkpoint after a step (``PlannerSpec`` as JSON), or None."""
        ...


class PlannerFactory(Protocol):
    """Builds the planner a run's checkpointed spec names (``agent.planning.planner.make_planner``): the
    CLI hands it to the run's ``Runtime``, so the run's modules know planners only by this protocol.
    ``memo``: the generators' answers for the run's past launches, which the runtime keeps from one step
    to the next (``agent.planning.candidate_memo``)."""

    def __call__(
        self,
        spec: Mapping[str, Any] | None,
        catalog: list[CatalogEntry],
        flags: FlagCatalog | None,
        *,
        transcript: Transcript | None = None,
        client: ChatClient | None = None,
        memo: CandidateMemo | None = None,
    ) -> Planner: ...


def default_launch_cost_s() -> float:
    """Host-seconds a launch is assumed to cost before one was measured (knowledge/planner.toml)."""
    return tunables().choice.default_launch_cost_s


def model_features(case: Case) -> set[str]:
    """Model features from the case's hints, the model name and the baseline flags (moe, dsa, nvfp4, ...)."""
    text = " ".join([case.model.path, *[f"{k} {v}" for k, v in case.baseline.flags.items()]])
    return set(case.model.features) | infer_features(text)
