"""Planners: turn the history of a run into a hypothesis ledger and the next experiment.

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

import functools
import math
import re
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from agent.domain.case import Case
from agent.domain.models import (
    STAGE_ORDER,
    VALUE_ALIASES,
    Baseline,
    Change,
    Evidence,
    Experiment,
    FlagValue,
    Hypothesis,
    Intervention,
    Outcome,
    Prediction,
    Rejection,
    RelevantFinding,
)
from agent.planning.catalog import CatalogEntry
from agent.planning.generators import Candidate, CandidateGenerator, GeneratorInput
from agent.planning.generators.common import raise_site, specificity, stems
from agent.planning.generators.evidence import failure_evidence, parse_tracebacks
from agent.planning.generators.registry import default_generators
from agent.planning.in_play import InPlay
from agent.planning.served import description_keeps, served_settings
from agent.planning.values import ValueEvidence, derive, moves_in_direction
from agent.planning.weights import weights as tunables
from agent.review.wording import count
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, FlagError
from tools.knowledge import infer_features
from tools.probes import Probe

# The tunable weights and thresholds (likelihoods, score factors, relevance and probability cut-offs,
# the assumed cost of an unmeasured launch) live in knowledge/planner.toml: ``tunables()``.
#: Ranking of performance costs, cheapest first (fixes and a conclusion's alternatives are sorted by it).
COST_ORDER = {"none": 0, "low": 1, "medium": 2, "high": 3}
#: Probe ids of the concurrency probes this planner adds start with this prefix.
LOAD_PROBE_PREFIX = "load:"
#: Burst sizes sent to a baseline that served single requests correctly, before concluding that the
#: failure does not reproduce (one launch; the probes stop at the first burst that kills the server).
BURST_LEVELS = (8, 32, 128)
#: A case description that says the failure does not always happen.
_FLAKY_WORDS = re.compile(
    r"intermittent|sometimes|flaky|randomly|occasional|now and then|not always|not every|"
    r"every (?:few|other)|\b\d+\s*(?:of|in|out of)\s*\d+\s*(?:launches|runs|starts|attempts|times)",
    re.IGNORECASE,
)
#: A word the failing frame shares with a hypothesis's component ties them only when it is this specific
#: (``agent.planning.generators.common.specificity``: ``cache`` is in too many flag names to tie anything).
_RELATED_SPECIFICITY = 0.25


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

    def rank(self) -> tuple[int, int]:
        """Smaller is better: root fixes before workarounds, then cheaper in performance."""
        return (1 if self.workaround else 0, COST_ORDER[self.cost])


class HistoryState(BaseModel):
    """The ledger and baseline derived from a run's history.

    ``reference`` is the latest outcome of the current baseline (failing, or ``ok`` once a fix is
    adopted). ``fixes`` are the changes that fixed ``failing_baseline`` (whose failing outcome is
    ``failing_reference``); the best of them is the current baseline. ``flaky``: the same configuration
    gave different outcomes. ``load_probe``: the failure shows only under concurrent requests, so every
    experiment adds this probe. ``baseline_runs``: launches of the unchanged baseline so far.
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
        (``confirmations_required``); else one."""
        return self.flaky_confirmations if self.flaky or self.intermittent else 1

    def extra_probes(self) -> list[Probe]:
        """Probes every experiment adds to the case's probes: the burst that failed, else the case's
        own load (a load-only failure must see its load on every reproduction, test and confirmation)."""
        if self.load_probe is not None:
            return [self.load_probe]
        return [self.case_load] if self.case_load is not None else []


class Proposal(BaseModel):
    """A planner's answer: one experiment, or a reason to conclude."""

    experiment: Experiment | None = None
    conclude_reason: str | None = None
    considered: list[dict[str, Any]] = Field(default_factory=list)


class Planner(Protocol):
    """Decides: ledger from history, next experiment from ledger (docs/ARCHITECTURE.md, "Planners").

    The graph knows planners only through this protocol; ``agent.planning.llm_planner.make_planner`` builds the
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


def default_launch_cost_s() -> float:
    """Host-seconds a launch is assumed to cost before one was measured (knowledge/planner.toml)."""
    return tunables().choice.default_launch_cost_s


def model_features(case: Case) -> set[str]:
    """Model features from the case's hints, the model name and the baseline flags (moe, dsa, nvfp4, ...)."""
    text = " ".join([case.model.path, *[f"{k} {v}" for k, v in case.baseline.flags.items()]])
    return set(case.model.features) | infer_features(text)


#: The largest chance a confirmation may pass by luck on a flaky failure (issue 20, point 6).
FALSE_CONFIRMATION = 0.05


def confirmations_required(experiments: list[Experiment], outcomes: dict[str, Outcome]) -> int:
    """Passing re-runs a fix needs on a flaky failure so that a false confirmation has at most a 5%
    chance: the failure rate p of the configurations seen failing is estimated from every launch of them
    (Laplace's rule, (failures + 1) / (launches + 2), so one failure is not taken for certainty), and a
    broken configuration passes n launches in a row with chance (1 - p)^n; the fixing launch counts as
    one of the n."""
    runs: dict[str, list[bool]] = {}
    for e in experiments:
        o = outcomes.get(e.id)
        if o is None or o.stage == "infra_error":
            continue
        runs.setdefault(Experiment.make_id(e.config(), None, "config", probes=e.probes), []).append(o.stage == "ok")
    failing = [v for v in runs.values() if False in v]
    fails = sum(v.count(False) for v in failing)
    total = sum(len(v) for v in failing)
    p = min(0.99, (fails + 1) / (total + 2))
    passes = math.ceil(math.log(FALSE_CONFIRMATION) / math.log(1.0 - p))
    return max(1, passes - 1)


def classify_observation(outcome: Outcome, reference: Outcome) -> str:
    """How an outcome compares with the failing reference run: fixed, persists, changed, advanced,
    different (failed earlier, symptom not reached) or infra (no information).

    Within start-up (load failures, stalls) a run that printed progress lines the reference never
    reached got further ("advanced"); one that stopped short of the reference's progress with another
    failure is "different".
    """
    if outcome.stage == "ok":
        return "fixed"
    if outcome.stage == "infra_error" or reference.stage == "infra_error":
        return "infra"
    so, sr = STAGE_ORDER[outcome.stage], STAGE_ORDER[reference.stage]
    if so > sr:
        return "advanced"
    if so < sr:
        return "different"
    po, pr = progress_ids(outcome), progress_ids(reference)
    starting = outcome.stage in ("load_failed", "timeout")
    if starting and po > pr:
        return "advanced"
    fo, fr = set(outcome.failure_signatures()), set(reference.failure_signatures())
    if starting and po < pr and not (fo & fr):
        return "different"
    if (fo & fr) or (not fo and not fr):
        eo, er = exception_keys(outcome), exception_keys(reference)
        if eo and er and not (eo & er):
            return "changed"  # the same wrapper lines, but another exception underneath
        return "persists"
    return "changed"


#: Symptom classes that only say where a failure happened, not what kind it is.
_GENERIC_CLASSES = frozenset({"startup_error", "crash_at_decode"})


def class_gone(reference: Outcome, outcome: Outcome) -> bool:
    """Whether the failure class of ``reference`` (its specific symptom classes: out of memory at load,
    NaN, illegal memory access, an import error, ...) is absent from ``outcome``. Two generic start-up
    errors with different exceptions count as different classes."""
    ref = set(failure_evidence(reference).symptoms) - _GENERIC_CLASSES
    out = set(failure_evidence(outcome).symptoms) - _GENERIC_CLASSES
    if ref & out:
        return False
    # the same error with other values (a quoted name, a figure) is the same failure in other words
    return not (error_templates(reference) & error_templates(outcome))


def error_templates(outcome: Outcome) -> set[str]:
    """The exception lines of an outcome with the values blanked: quoted and parenthesised text and
    numbers (``ValueError: ... (fp8) does not match ... (awq).`` -> ``ValueError: ... (#) does not match
    ... (#).``)."""
    out = set()
    for tb in parse_tracebacks(outcome.log_excerpt):
        if not tb.exception:
            continue
        t = re.sub(r"\([^()]*\)|'[^']*'|\"[^\"]*\"|`[^`]*`", "#", tb.exception)
        out.add(re.sub(r"\d+(?:\.\d+)?", "#", t)[:200])
    return out


def exception_keys(outcome: Outcome) -> set[str]:
    """The exception lines of an outcome's tracebacks with numbers blanked (``RuntimeError: size #``),
    so the same error with other figures is the same error."""
    return {
        re.sub(r"\d+(?:\.\d+)?", "#", tb.exception)[:160]
        for tb in parse_tracebacks(outcome.log_excerpt)
        if tb.exception
    }


def progress_ids(outcome: Outcome) -> set[str]:
    """Ids of the progress signatures a launch printed (how far its start-up got)."""
    return {m.signature_id for m in outcome.matches if m.kind == "progress"}


def load_level(case: Case) -> int | None:
    """How many concurrent requests reproduce the failure, from the case (``[reproduce] concurrency``);
    None when the case does not say."""
    n = case.reproduce.concurrency
    return n if n is not None and n > 1 else None


def speaks_of_flakiness(case: Case) -> bool:
    """Whether the case's description says the failure does not happen every time."""
    return bool(_FLAKY_WORDS.search(case.description or ""))


def load_probe_for(case: Case, level: int) -> Probe:
    """The case's first probe, sent ``level`` times at once."""
    base = case.probes[0]
    return base.model_copy(update={"id": f"{LOAD_PROBE_PREFIX}{base.id}:x{level}", "concurrency": level})


def import_time_failure(outcome: Outcome) -> str | None:
    """The package whose import failed, when the failing traceback is an import error raised while
    modules were being imported (a ``<module>`` frame on the way), else None.

    Not when the installed source shows a variable or argument guarding the path to that import
    (``Outcome.source_reading``): a lazy import behind ``if server_args.x == ...`` or ``if
    envs.X.get()`` is avoided by changing that. The package named is the one the import error names
    (``No module named 'deep_gemm'``) when the reading has it."""
    reading = outcome.source_reading
    if reading is not None and reading.leads:
        return None
    for tb in parse_tracebacks(outcome.log_excerpt):
        if tb.exception_type.rsplit(".", 1)[-1] not in ("ImportError", "ModuleNotFoundError"):
            continue
        if not any(f.function == "<module>" for f in tb.frames):
            continue
        if reading is not None and reading.missing is not None:
            return reading.missing.package
        pkgs = [f.package for f in tb.frames if f.package and f.package != "sglang"]
        return pkgs[-1] if pkgs else "a module"
    return None


def failing_load_probe(exp: Experiment, outcome: Outcome) -> Probe | None:
    """The smallest burst of ``exp`` that failed in ``outcome`` (every later experiment sends it)."""
    failed = {p.probe_id for p in outcome.probes if not p.ok}
    bursts = sorted((p for p in exp.probes if p.concurrency > 1 and p.id in failed), key=lambda p: p.concurrency)
    return bursts[0] if bursts else next((p for p in exp.probes if p.concurrency > 1), None)


def failed_only_under_load(outcome: Outcome) -> bool:
    """Single-request probes passed and a concurrency probe failed."""
    single = [p for p in outcome.probes if not p.probe_id.startswith(LOAD_PROBE_PREFIX)]
    load = [p for p in outcome.probes if p.probe_id.startswith(LOAD_PROBE_PREFIX)]
    return bool(single) and all(p.ok for p in single) and any(not p.ok for p in load)


def _key(baseline: Baseline) -> str:
    """A key of a configuration (flags and env)."""
    return Experiment.make_id(baseline, None, "config")


class RulePlanner:
    """The default planner: catalog + findings + Bayes-style updates + probability-per-cost choice.

    ``catalog``: hypothesis catalog entries; ``flags``: the host's flag catalog (legal names and values).
    """

    name = "rules"

    def __init__(
        self,
        catalog: list[CatalogEntry],
        flags: FlagCatalog | None,
        generators: list[CandidateGenerator] | None = None,
    ) -> None:
        self.catalog = catalog
        self.flags = flags
        #: The candidate generators (``agent.planning.generators.registry``); the catalog is one of them.
        self.generators = generators if generators is not None else default_generators()
        #: The case of the history being read (its intent decides which changes alter the deployment).
        self._case: Case | None = None
        self._checkpoint: dict[str, str] = {}

    def checkpoint(self) -> None:
        """Nothing to keep: the rule planner decides from the run's state alone."""
        return None

    # ----- names and values -------------------------------------------------------------------------

    def _canon(self, kind: str, name: str) -> str | None:
        """Canonical flag name on this host (``None`` if unknown); env names are returned as they are."""
        if kind == "env":
            return name
        if self.flags is None:
            return name
        memo = _flag_memo(self.flags)
        key = ("canon", name)
        if key not in memo:
            try:
                memo[key] = self.flags.resolve(name).name
            except FlagError:
                memo[key] = None
        return memo[key]

    def _role(self, iv: Intervention) -> str | None:
        """This host's spelling of the intervention's flag role (exact, non-deprecated first); without a
        flag catalog, the newest spelling."""
        if self.flags is None:
            return iv.names[0]
        spec = self.flags.resolve_role(iv.names)
        return spec.name if spec is not None else None

    def _legal(self, name: str, value: FlagValue) -> FlagValue | None:
        """The normalised value if legal for the flag on this host, else ``None``."""
        if self.flags is None:
            return value
        memo = _flag_memo(self.flags)
        key = ("legal", name, value)
        if key not in memo:
            try:
                memo[key] = self.flags.validate(name, value)[1]
            except FlagError:
                memo[key] = None
        return memo[key]

    def _matches(self, change: Change, iv: Intervention, facts: dict[str, str] | None = None) -> bool:
        """Whether ``change`` is the intervention ``iv``: same variable and one of its values, or for a
        derived value, a move in the rule's direction (``facts`` give the effective value when the
        change's ``before`` is unset)."""
        if change.kind != iv.kind:
            return False
        names = {self._canon(iv.kind, n) for n in iv.names} if iv.role is None else {self._role(iv)}
        if change.name not in names:
            return False
        # ``false`` in the catalog is a removal, as realize() makes it (after = None).
        if any(_same_value(change.after, None if v is False else v) for v in iv.values):
            return True
        if iv.derive and change.after is not None:  # a removal's effective value is unknown here
            before: Any = change.before
            if before is None and iv.fact and facts:
                before = facts.get(iv.fact)
            return moves_in_direction(iv.derive, before, change.after) is not False
        return False

    def realize(
        self, iv: Intervention, baseline: Baseline, evidence: ValueEvidence | None = None
    ) -> tuple[Change | None, str]:
        """Turn an intervention into a concrete change on this host, or say why it cannot be.

        A derived value comes from ``evidence`` (see ``agent/planning/values.py``); when the evidence lacks the
        figures, the intervention's literal values are the fallback. For a derived change the returned
        text says how the value was computed.
        """
        name = (
            next((c for n in iv.names if (c := self._canon(iv.kind, n))), None) if iv.role is None else self._role(iv)
        )
        if name is None:
            return None, f"no flag among {iv.names} on this host"
        candidates: list[FlagValue] = list(iv.values)
        how = ""
        if iv.derive:
            derived, how = derive(iv.derive, evidence or ValueEvidence(flags=baseline.flags))
            if derived is not None:
                candidates = [derived]
            elif not candidates:
                return None, f"{name}: no value from the evidence ({how})"
            else:
                how = f"fallback value; the evidence gave none ({how})"
        for value in candidates:
            # A reversion: remove the setting so the engine's default applies (``values = [false]`` in
            # the catalog, as a truth's ``value = false`` means removed; for a switch, off is unset too).
            if value is None or value is False:
                before = baseline.value(iv.kind, name)
                if before is None:
                    return None, f"{name} is not set in the baseline"
                return Change(kind=iv.kind, name=name, before=before, after=None), how
            legal = value if iv.kind == "env" else self._legal(name, value)
            if legal is None:
                continue
            before = baseline.value(iv.kind, name)
            if _same_value(before, legal):
                return None, f"{name} is already {legal} in the baseline"
            return Change(kind=iv.kind, name=name, before=before, after=legal), how
        return None, f"none of {candidates} is a legal value of {name}"

    # ----- history -> ledger ------------------------------------------------------------------------

    def _generator_input(
        self, view: PlannerView, outcome: Outcome, config: Baseline
    ) -> GeneratorInput:
        """What the generators see of one failing launch: its evidence, the run so far up to it, the
        host's facts and flag catalog, the knowledge catalog and the relevant findings."""
        upto = next((i for i, o in enumerate(view.outcomes) if o.experiment_id == outcome.experiment_id), None)
        outcomes = view.outcomes[: upto + 1] if upto is not None else [*view.outcomes, outcome]
        return GeneratorInput(
            case=view.case,
            baseline=config,
            evidence=failure_evidence(outcome),
            reference=outcome,
            fingerprint=view.fingerprint,
            flags=self.flags,
            catalog=self.catalog,
            findings=view.findings,
            features=model_features(view.case),
            experiments=view.experiments,
            outcomes=outcomes,
        )

    def _create(
        self,
        view: PlannerView,
        outcome: Outcome,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        config: Baseline | None = None,
        refresh: bool = False,
    ) -> list[str]:
        """Add the hypotheses the generators propose for the failing ``outcome`` of ``config``.

        ``refresh``: ``outcome`` is a new blocker the run moved on to; an open hypothesis that its
        evidence proposes again gets at least the weight this evidence gives it (it was weighed against
        the old blocker before).

        A candidate that only corroborates (``Candidate.support``: a known-good deployment's difference)
        multiplies the weight of the new candidates that already make the same change, and is added on
        its own only when none does.
        """
        inp = self._generator_input(view, outcome, config or view.case.baseline)
        new: dict[str, Candidate] = {}
        supporting: list[Candidate] = []
        for gen in self.generators:
            for cand in gen.generate(inp):
                if cand.id in ledger:
                    old = ledger[cand.id]
                    if refresh and old.status == "open" and cand.support is None and cand.weight > weights[cand.id]:
                        weights[cand.id] = cand.weight
                        old.evidence.extend(cand.evidence[:2])
                    continue
                if cand.id in new:
                    continue
                if cand.support is not None:
                    supporting.append(cand)
                else:
                    new[cand.id] = cand
        facts = dict(outcome.facts)
        for cand in supporting:
            iv0 = cand.interventions[0]
            covering = [
                c for c in new.values()
                if c.support is None and any(self._covers(iv0, iv, facts) for iv in c.interventions)
            ]
            for c in covering:
                c.weight *= 1.0 + (cand.support or 0.0)
                c.evidence.extend(cand.evidence[:1])
            if not covering and cand.id not in new:
                new[cand.id] = cand
        self._weigh_by_raise_site(list(new.values()), inp)
        for cand in new.values():
            ledger[cand.id] = cand.to_hypothesis()
            weights[cand.id] = cand.weight
        return list(new)

    def _weigh_by_raise_site(self, cands: list[Candidate], inp: GeneratorInput) -> None:
        """Weaken the catalog's general suspects that the traceback does not point at.

        A catalog or symptom-class entry that fired on the kind of failure alone (``Candidate.symptom_only``:
        no signature, setting, model feature or host fact of this deployment backs it), about a component
        the innermost SGLang frame of the failure does not name, is multiplied by
        ``ledger.elsewhere_factor``: an engineer reads the frame where the error surfaced before the
        general suspects of that kind of failure. Entries tied to this deployment and the evidence
        generators' own candidates are left as they are.
        """
        site = raise_site(inp)
        factor = tunables().ledger.elsewhere_factor
        if site is None or factor >= 1.0:
            return
        for cand in cands:
            if not cand.symptom_only:
                continue
            shared = stems(cand.component) & site.words
            if shared and (self.flags is None or specificity(self.flags, shared) >= _RELATED_SPECIFICITY):
                continue  # the frame names this component
            cand.weight *= factor
            cand.evidence.append(
                Evidence(
                    kind="fact",
                    detail=f"the error surfaced in {site.where}, which is not this component "
                    f"({cand.component}) (x{factor:g})",
                    experiment_id=inp.evidence.experiment_id,
                    lines=[site.line],
                    effect="weakens",
                )
            )

    def _covers(self, diff: Intervention, iv: Intervention, facts: dict[str, str]) -> bool:
        """Whether intervention ``iv`` makes the change ``diff`` names (same fact and value, or the same
        variable with that value / in the rule's direction)."""
        value = diff.values[0] if diff.values else True
        if diff.fact and iv.fact == diff.fact and any(_same_value(value, v) for v in iv.values):
            return True
        if diff.fact:
            return False
        name = self._canon(diff.kind, diff.names[0]) or diff.names[0]
        return self._matches(Change(kind=diff.kind, name=name, after=value), iv, facts)

    def history(self, view: PlannerView) -> HistoryState:
        """Rebuild the ledger and the current baseline from the run's history (see module docstring)."""
        self._case = view.case
        self._checkpoint = view.fingerprint.checkpoint if view.fingerprint else {}
        ledger: dict[str, Hypothesis] = {}
        weights: dict[str, float] = {}
        st = HistoryState(
            hypotheses=[],
            baseline=view.case.baseline,
            intermittent=view.case.reproduce.intermittent or speaks_of_flakiness(view.case),
            flaky_confirmations=confirmations_required(
                [e for e in view.experiments if e.status == "done"], {o.experiment_id: o for o in view.outcomes}
            ),
            case_load=load_probe_for(view.case, level) if (level := load_level(view.case)) else None,
        )
        refs: dict[str, Outcome] = {}  # configuration -> its failing outcome
        for exp in view.experiments:
            out = view.outcome_of(exp.id)
            if out is None or exp.status != "done":
                continue
            if exp.purpose == "baseline":
                self._baseline_run(view, st, exp, out, ledger, weights, refs)
                continue
            if st.reference is None:
                continue
            if exp.purpose == "confirm":
                self._confirm_run(view, st, exp, out, ledger, weights)
                continue
            ref = refs.get(_key(exp.baseline))
            if ref is None:  # a test of a configuration this history never saw fail
                continue
            obs = classify_observation(out, ref)
            self._update(ledger, weights, exp, out, obs, ref.facts)
            if out.stage == "ok":
                self._refute_by_cause_signature(ledger, out)
            if obs == "fixed" and exp.change is not None:
                self._adopt_fix(st, exp, exp.change, ref, out, ledger)
            elif obs == "advanced" or (obs == "changed" and class_gone(ref, out)):
                # Past a blocker: a later stage, further progress lines at the same stage, or another
                # error once the failure's class is gone (a chain of blockers is solved one link per
                # launch). An error of the same class in other words is not progress (issue 20, point
                # 4): adopting it would lose the evidence of the first.
                st.adoptions.append(self._adoption(exp, ref, out))
                st.baseline, st.reference = exp.config(), out
                refs[_key(st.baseline)] = out
                for h in ledger.values():  # they explained the blocker that is gone
                    if h.status != "open":
                        continue
                    own = exp.change is not None and self.prediction(h, exp.change, ref.facts) != "persists"
                    # Its own variable is set now: its other values would only undo the step past it.
                    weights[h.id] *= tunables().ledger.passed_blocker_own if own else tunables().ledger.passed_blocker
                st.fixes, st.failing_baseline, st.failing_reference = [], None, None
                st.confirmations = 0
            blocker = obs == "advanced" or (obs == "changed" and class_gone(ref, out))
            # Against the current baseline: a failed test that was not adopted leaves the baseline as it
            # was, so its own change is not "the baseline's setting" to revert or to diff (after an
            # adoption the current baseline is this test's configuration).
            created = self._create(view, out, ledger, weights, st.baseline, refresh=blocker) if out.stage != "ok" else []
            self._normalise(ledger, weights, set(created))
        st.hypotheses = list(ledger.values())
        return st

    def _baseline_run(
        self,
        view: PlannerView,
        st: HistoryState,
        exp: Experiment,
        out: Outcome,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        refs: dict[str, Outcome],
    ) -> None:
        """A launch of the unchanged baseline: the reference run, or a repeat after a passing one."""
        st.baseline_runs += 1
        st.load_tried = st.load_tried or any(p.concurrency >= BURST_LEVELS[-1] for p in exp.probes)
        if st.reference is not None and st.reference.stage != "ok":
            return  # the failure is already reproduced; nothing new to learn here
        passed_before = st.reference is not None
        st.reference = out
        if out.stage != "ok":
            if failed_only_under_load(out):
                st.load_probe = failing_load_probe(exp, out)
            elif passed_before:
                st.flaky = True
            refs[_key(exp.baseline)] = out
            self._create(view, out, ledger, weights, exp.baseline)
        self._normalise(ledger, weights, set(ledger))

    def _confirm_run(
        self,
        view: PlannerView,
        st: HistoryState,
        exp: Experiment,
        out: Outcome,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
    ) -> None:
        """A re-run of the best fix: one more confirmation, or the fix did not hold (flaky)."""
        best = st.best_fix
        if best is None:
            return
        facts = st.failing_reference.facts if st.failing_reference else {}
        backing = [h for h in ledger.values() if self.prediction(h, best.change, facts) != "persists"]
        if out.stage == "ok":
            st.confirmations += 1
            if st.confirmations >= st.confirmations_needed:
                st.confirmed_experiment_id = exp.id
                for h in backing:
                    if h.status == "supported":
                        h.status = "confirmed"
                        h.evidence.append(
                            Evidence(
                                kind="experiment",
                                experiment_id=exp.id,
                                effect="confirms",
                                detail=f"the fixing configuration ({best.change.describe()}) served "
                                "correctly again",
                            )
                        )
            self._refute_by_cause_signature(ledger, out)
            self._normalise(ledger, weights, set())
            return
        # The fix did not hold: the symptom came back with nothing changed, so the outcome is flaky.
        st.confirm_failed = True
        st.flaky = True
        st.confirmations = 0
        for h in backing:
            if h.status in ("refuted", "confirmed"):
                continue
            decisive = self.prediction(h, best.change, facts) == "fixed"
            h.status = "refuted" if decisive else "open"
            lw = tunables().ledger
            weights[h.id] *= lw.failed_confirmation_decisive if decisive else lw.failed_confirmation_may_fix
            h.evidence.append(
                Evidence(
                    kind="experiment",
                    experiment_id=exp.id,
                    effect="refutes" if decisive else "weakens",
                    detail=f"{best.change.describe()} did not hold on a re-run ({out.stage}): its earlier "
                    "success was luck in a flaky failure",
                )
            )
        st.fixes = [f for f in st.fixes if f.experiment_id != best.experiment_id]
        nxt = st.best_fix
        if nxt is not None:
            st.baseline = nxt.config
        elif st.failing_baseline is not None:
            st.baseline, st.reference = st.failing_baseline, st.failing_reference
        self._create(view, out, ledger, weights, exp.baseline)
        self._normalise(ledger, weights, set())

    def _adopt_fix(
        self,
        st: HistoryState,
        exp: Experiment,
        change: Change,
        ref: Outcome,
        out: Outcome,
        ledger: dict[str, Hypothesis],
    ) -> None:
        """Record a fix of ``exp.baseline``; the best fix so far becomes the baseline."""
        if st.failing_baseline is None or _key(st.failing_baseline) != _key(exp.baseline):
            st.failing_baseline, st.failing_reference, st.fixes = exp.baseline, ref, []
        workaround, cost = self._fix_kind(change, ledger, ref.facts)
        before = st.best_fix
        st.fixes.append(
            Fix(experiment_id=exp.id, change=change, config=exp.config(), workaround=workaround, cost=cost)
        )
        best = st.best_fix
        assert best is not None
        if before is None or best.experiment_id != before.experiment_id:
            st.adoptions.append(self._adoption(exp, ref, out))
            st.baseline, st.reference = best.config, out
            st.confirmations = 0

    def _fix_kind(
        self, change: Change, ledger: dict[str, Hypothesis], facts: dict[str, str]
    ) -> tuple[bool, Literal["none", "low", "medium", "high"]]:
        """Whether a change is a workaround and its performance cost, from the interventions it matches."""
        if served_settings().changes_deployment(change.kind, change.name, change.after, self.flags,
                                                description_keeps(self._case) if self._case else set(),
                                                self._checkpoint, change.before):
            return True, "high"  # it changes what is served: at most a workaround (knowledge/served.toml)
        ivs = [iv for h in ledger.values() for iv in h.interventions if self._matches(change, iv, facts)]
        if not ivs:
            return False, "low"
        worst = max(ivs, key=lambda iv: COST_ORDER[iv.cost])
        return any(iv.workaround for iv in ivs), worst.cost

    @staticmethod
    def _adoption(exp: Experiment, ref: Outcome, out: Outcome) -> dict[str, Any]:
        return {
            "experiment_id": exp.id,
            "change": exp.change.model_dump() if exp.change else None,
            "from_stage": ref.stage,
            "to_stage": out.stage,
        }

    def prediction(self, h: Hypothesis, change: Change | None, facts: dict[str, str] | None = None) -> str:
        """What ``h`` predicts for a change: fixed, may_fix or persists."""
        if change is not None:
            for iv in h.interventions:
                if self._matches(change, iv, facts):
                    return "fixed" if iv.decisive else "may_fix"
        return "persists"

    def _update(
        self,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        exp: Experiment,
        out: Outcome,
        obs: str,
        facts: dict[str, str] | None = None,
    ) -> None:
        if obs == "infra":
            return
        for h in ledger.values():
            if h.status in ("refuted", "confirmed"):
                continue
            pred = self.prediction(h, exp.change, facts)
            change = exp.change.describe() if exp.change else "no change"
            side = self._side_change(h, facts or {}, out.facts) if pred == "persists" else None
            if side is not None:
                # Auto-resolution moved this hypothesis's own variable too: the run cannot tell the two
                # causes apart, so it neither supports nor refutes this one on its own.
                weights[h.id] *= tunables().likelihood["may_fix"][obs]
                h.evidence.append(
                    Evidence(
                        kind="experiment",
                        experiment_id=exp.id,
                        effect="neutral",
                        detail=f"confounded: {change} also changed {side} (auto-resolved), which this "
                        f"hypothesis implicates; the run does not separate the two ({out.stage})",
                    )
                )
                continue
            weights[h.id] *= tunables().likelihood[pred][obs]
            judged = _judgement(pred, obs, change, out)
            if judged is not None:
                status, effect, detail = judged
                if status is not None:
                    h.status = status
                h.evidence.append(Evidence(kind="experiment", experiment_id=exp.id, effect=effect, detail=detail))

    @staticmethod
    def _side_change(h: Hypothesis, before: dict[str, str], after: dict[str, str]) -> str | None:
        """``fact old → new`` when an experiment changed, as a side effect, an effective-config fact that
        one of ``h``'s interventions sets (e.g. a bf16 KV cache also switching the sparse decode backend)."""
        for iv in h.interventions:
            if iv.fact and iv.fact in before and iv.fact in after and not _same_value(before[iv.fact], after[iv.fact]):
                return f"{iv.fact} {before[iv.fact]} → {after[iv.fact]}"
        return None

    def _refute_by_cause_signature(self, ledger: dict[str, Hypothesis], out: Outcome) -> None:
        seen = out.signature_ids()
        for h in ledger.values():
            if h.status in ("refuted", "confirmed"):
                continue
            hit = [s for s in h.cause_signatures if s in seen]
            if not hit:
                continue
            m = next(m for m in out.matches if m.signature_id == hit[0])
            h.status = "refuted"
            h.evidence.append(
                Evidence(
                    kind="signature",
                    experiment_id=out.experiment_id,
                    effect="refutes",
                    lines=list(m.line_numbers[:5]),
                    detail=f"'{hit[0]}' also appears in a run that served correctly, so the "
                    f"condition it reports is not what breaks the deployment",
                )
            )

    @staticmethod
    def _normalise(ledger: dict[str, Hypothesis], weights: dict[str, float], new: set[str]) -> None:
        live = [h for h in ledger.values() if h.status != "refuted"]
        total = sum(weights[h.id] for h in live) + tunables().ledger.unlisted_weight
        for h in ledger.values():
            h.posterior = 0.0 if h.status == "refuted" else round(weights[h.id] / total, 4)
            if h.id in new:
                h.prior = h.posterior

    # ----- ledger -> next experiment ----------------------------------------------------------------

    def propose(self, view: PlannerView, state: HistoryState) -> Proposal:
        """The next experiment, or the reason to conclude. Never repeats an experiment or a rejection."""
        budget = view.case.budget
        baseline, ref = state.baseline, state.reference
        done = {e.id for e in view.experiments if e.status == "done"}
        rejected_ids = {r.experiment_id for r in view.rejections}
        cost = ref.timings.host_seconds if ref and ref.timings.host_seconds > 0 else default_launch_cost_s()
        probes = state.extra_probes()

        def within_budget(slots: int) -> str | None:
            if view.launches + slots > budget.experiments:
                return f"experiment budget spent ({view.launches} of {count(budget.experiments, 'launch')})"
            if view.host_seconds + cost > budget.host_seconds:
                return (
                    f"host-second budget spent ({view.host_seconds:.0f} of {budget.host_seconds:.0f} s; "
                    f"next launch ~{cost:.0f} s)"
                )
            return None

        if ref is None:
            level = load_level(view.case)
            if level is not None:  # the case says how many requests at once reproduce it
                probes = [load_probe_for(view.case, level)]
            exp_id = Experiment.make_id(baseline, None, "baseline", probes=probes)
            if exp_id in done:
                return Proposal(conclude_reason="the baseline run gave no usable outcome")
            if exp_id in rejected_ids:
                return Proposal(conclude_reason="the baseline run was rejected; nothing to compare against")
            if why := within_budget(1):
                return Proposal(conclude_reason=why)
            return Proposal(
                experiment=Experiment(
                    id=exp_id,
                    purpose="baseline",
                    baseline=baseline,
                    probes=probes,
                    cost_estimate_s=cost,
                    rationale="reproduce the failure on the baseline to collect its log evidence"
                    + (f" (with a burst of {probes[0].concurrency} concurrent requests, as the case says)"
                       if probes else ""),
                )
            )
        if ref.stage == "ok":
            if not state.fixes:
                return self._reproduce(view, state, cost, within_budget, rejected_ids)
            if state.confirmed_experiment_id:
                return Proposal(conclude_reason="fix found and confirmed")
            alternative = self._alternative(view, state, cost, done, rejected_ids)
            if alternative is not None:
                return alternative
            best = state.best_fix
            assert best is not None
            attempt = state.confirmations + 1
            exp_id = Experiment.make_id(baseline, None, "confirm", attempt=attempt, probes=probes)
            if exp_id in rejected_ids:
                return Proposal(conclude_reason="the confirmation run was rejected")
            if why := within_budget(1):
                return Proposal(conclude_reason=why)
            facts = state.failing_reference.facts if state.failing_reference else {}
            nth = ""
            if state.confirmations_needed > 1:
                nth = f" ({attempt} of {state.confirmations_needed}: this run has seen a flaky outcome)"
            return Proposal(
                experiment=Experiment(
                    id=exp_id,
                    purpose="confirm",
                    baseline=baseline,
                    attempt=attempt,
                    probes=probes,
                    cost_estimate_s=cost,
                    rationale=f"re-run the fixing configuration ({best.change.describe()}) to confirm the fix "
                    f"is not luck{nth}",
                    predictions=[
                        Prediction(hypothesis_id=h.id, expect="fixed")
                        for h in state.hypotheses
                        if h.status == "supported" and self.prediction(h, best.change, facts) != "persists"
                    ],
                )
            )
        if why := within_budget(2):
            return Proposal(conclude_reason=why + " (a test needs room for its confirmation run)")
        return self._best_test(view, state, cost, done, rejected_ids)

    def _reproduce(
        self,
        view: PlannerView,
        state: HistoryState,
        cost: float,
        within_budget: Callable[[int], str | None],
        rejected_ids: set[str],
    ) -> Proposal:
        """The baseline served correctly although a failure was reported: launch it again with bursts
        of concurrent requests (``BURST_LEVELS``, escalating within one launch), then plainly (the
        failure may be intermittent; more repeats when the case says so); after that, conclude that it
        could not be reproduced."""
        case = view.case
        runs = state.baseline_runs
        plain_runs = 3 if state.intermittent else 2
        probes: list[Probe] = []
        if not state.load_tried:
            probes = [load_probe_for(case, n) for n in BURST_LEVELS]
            why = (
                "single requests pass: send bursts of "
                f"{', '.join(map(str, BURST_LEVELS))} concurrent requests to the unchanged baseline"
            )
        elif runs < plain_runs + 1:
            why = (
                f"the baseline served correctly in {runs} launch{'es' if runs > 1 else ''} (bursts "
                "included) although a failure was reported: launch it again in case the failure is "
                "intermittent"
            )
        else:
            return Proposal(
                conclude_reason=f"the baseline served correctly in {count(runs, 'launch')} (one with bursts of up "
                f"to {BURST_LEVELS[-1]} concurrent requests): the failure could not be reproduced"
            )
        exp_id = Experiment.make_id(state.baseline, None, "baseline", attempt=runs + 1, probes=probes)
        if exp_id in rejected_ids:
            return Proposal(conclude_reason="the repeat of the baseline was rejected")
        if why_not := within_budget(1):
            return Proposal(conclude_reason=why_not)
        return Proposal(
            experiment=Experiment(
                id=exp_id,
                purpose="baseline",
                baseline=state.baseline,
                attempt=runs + 1,
                probes=probes,
                cost_estimate_s=cost,
                rationale=why,
            )
        )

    def _evidence(self, view: PlannerView, ref: Outcome, baseline: Baseline) -> ValueEvidence:
        fp = view.fingerprint
        total = fp.memory_total_mib / 1024 if fp and fp.memory_total_mib else None
        return ValueEvidence(facts=dict(ref.facts), total_gib=total, flags=dict(baseline.flags))

    def _candidates(
        self,
        view: PlannerView,
        state: HistoryState,
        baseline: Baseline,
        ref: Outcome,
        done: set[str],
        rejected_ids: set[str],
        considered: list[dict[str, Any]],
    ) -> dict[str, tuple[Change, Intervention, str]]:
        """Untested one-variable changes that an open or supported hypothesis predicts may fix ``ref``."""
        rejected_keys = {r.change_key for r in view.rejections if r.change_key}
        probes = state.extra_probes()
        evidence = self._evidence(view, ref, baseline)
        live = [h for h in state.hypotheses if h.status in ("open", "supported")]
        # SGLang's printed settings of the failing run, parsed from its log at most once per step
        server_args = functools.cache(lambda: failure_evidence(ref).server_args)
        in_play = functools.cache(lambda: InPlay(view.fingerprint, baseline, server_args(), self.flags))
        out: dict[str, tuple[Change, Intervention, str]] = {}
        for h in sorted(live, key=lambda h: -h.posterior):
            for iv in h.interventions:
                if (
                    iv.fact
                    and not iv.derive
                    and any(_same_value(ref.facts.get(iv.fact), v) for v in iv.values)
                ):
                    considered.append(
                        {"hypothesis": h.id, "skipped": f"{iv.fact} is already {ref.facts[iv.fact]}"}
                    )
                    continue
                change, how = self.realize(iv, baseline, evidence)
                if change is None:
                    considered.append({"hypothesis": h.id, "skipped": how})
                    continue
                if (off := self._inert(change, baseline, ref, server_args)) is not None:
                    considered.append({"hypothesis": h.id, "skipped": off})
                    continue
                if (off := in_play().why_not(change)) is not None:
                    considered.append({"hypothesis": h.id, "skipped": off})
                    continue
                exp_id = Experiment.make_id(baseline, change, "test", probes=probes)
                if exp_id in done:
                    continue
                if exp_id in rejected_ids or change.key() in rejected_keys:
                    considered.append({"hypothesis": h.id, "skipped": f"{change.describe()} was rejected"})
                    continue
                out.setdefault(change.key(), (change, iv, how))
        return out

    def _inert(
        self, change: Change, baseline: Baseline, ref: Outcome, server_args: Callable[[], dict[str, str]]
    ) -> str | None:
        """Why changing a flag cannot change the run, or None: it configures a feature whose
        switch (``FlagCatalog.feature_switch``: ``--enable-X`` or an ``--X-mode``) is off in the baseline and the effective
        configuration SGLang printed, so the feature's code never runs."""
        if change.kind != "flag" or self.flags is None:
            return None
        switch = self.flags.feature_switch(change.name)
        if switch is None:
            return None
        off = ("", "none", "null", "false", "0", "off", "disabled")
        if any(str(baseline.flags.get(o, "")).strip().lower() not in off for o in switch.option_strings):
            return None
        dest = switch.name.lstrip("-").replace("-", "_")
        effective = ref.facts.get(dest)
        if effective is None:
            effective = server_args().get(dest)
        if effective is not None and str(effective).strip().lower() not in off:
            return None
        if switch.default is not None and str(switch.default).strip().lower() not in off:
            return None
        return f"{change.name} configures {switch.name}'s feature, which is off here: changing it changes nothing"

    def _score(
        self, state: HistoryState, change: Change, iv: Intervention, cost: float, facts: dict[str, str]
    ) -> tuple[float, float]:
        """(score, P(fix)): P(fix) per host-second, times the performance factor, halved for workarounds."""
        p_fix = 0.0
        for h in state.hypotheses:
            if h.status not in ("open", "supported"):
                continue
            pred = self.prediction(h, change, facts)
            p_fix += h.posterior * tunables().choice.p_fix[pred]
        score = p_fix / max(cost, 1.0) * tunables().choice.performance_factor[iv.cost]
        if iv.workaround:
            score *= tunables().choice.workaround_factor
        return score, p_fix

    def _test(
        self,
        state: HistoryState,
        baseline: Baseline,
        scored: tuple[float, int, Change, float, str],
        cost: float,
        facts: dict[str, str],
        why: str,
        considered: list[dict[str, Any]],
    ) -> Proposal:
        score, _, change, p_fix, how = scored
        live = [h for h in state.hypotheses if h.status in ("open", "supported")]
        probes = state.extra_probes()
        predictions = [
            Prediction(hypothesis_id=h.id, expect=self.prediction(h, change, facts))  # type: ignore[arg-type]
            for h in live
        ]
        tested = [p.hypothesis_id for p in predictions if p.expect != "persists"]
        rationale = f"tests {', '.join(tested)}: P(fix) = {p_fix:.2f} for ~{count(cost, 'host-second', fmt='.0f')}; {why}"
        if how:
            rationale += f"; value: {how}"
        return Proposal(
            experiment=Experiment(
                id=Experiment.make_id(baseline, change, "test", probes=probes),
                purpose="test",
                baseline=baseline,
                change=change,
                probes=probes,
                predictions=predictions,
                rationale=rationale,
                cost_estimate_s=cost,
                score=score,
                proposed_by=self.name,
            ),
            considered=considered,
        )

    def _best_test(
        self, view: PlannerView, state: HistoryState, cost: float, done: set[str], rejected_ids: set[str]
    ) -> Proposal:
        baseline, ref = state.baseline, state.reference
        assert ref is not None
        # Signatures whose component is the case itself (a wrong model path, say) name a fault no launch
        # flag can fix: spending GPU time on flag changes would only repeat the same failure.
        case_faults = [m for m in ref.matches if m.kind in ("fatal", "error")
                       and any(c.startswith("case.") for c in m.components)]
        if case_faults:
            m = case_faults[0]
            lines = f" (log line {m.line_numbers[0]})" if m.line_numbers else ""
            return Proposal(conclude_reason=f"the failure is in the case, not the server's configuration: "
                            f"{m.meaning}{lines}; fix the case and run again")
        considered: list[dict[str, Any]] = []
        candidates = self._candidates(view, state, baseline, ref, done, rejected_ids, considered)
        importing = import_time_failure(ref)
        if importing is not None and not any(h.generator == "remedies" for h in state.hypotheses):
            # Python failed while importing a package, before SGLang read a single argument: no launch
            # flag reaches that code, so launches spent on flags would repeat the same failure.
            return Proposal(
                conclude_reason=f"the failure happens while Python imports {importing}, before any launch "
                "flag is read: the installed packages are broken or mismatched (no flag change can fix it)",
                considered=considered,
            )
        if not candidates:
            reason = "no untested change is left that an open hypothesis predicts would fix the failure"
            refuted = [h.id for h in state.hypotheses if h.status == "refuted"]
            if refuted:
                reason += (
                    f"; each change tested alone left the symptom in place ({', '.join(refuted)}), so the "
                    "failure may need several changes at once, or a cause outside the catalog"
                )
            return Proposal(conclude_reason=reason, considered=considered)
        scored = []
        for order, (change, iv, how) in enumerate(candidates.values()):
            score, p_fix = self._score(state, change, iv, cost, ref.facts)
            scored.append((score, -order, change, p_fix, how))
            considered.append({"change": change.describe(), "p_fix": round(p_fix, 3), "score": score})
        scored.sort(key=lambda t: (t[0], t[1]), reverse=True)
        why = f"the best probability per host-second among {count(len(scored), 'candidate change')}"
        return self._test(state, baseline, scored[0], cost, ref.facts, why, considered)

    def _alternative(
        self, view: PlannerView, state: HistoryState, cost: float, done: set[str], rejected_ids: set[str]
    ) -> Proposal | None:
        """After a workaround (or a costly change) fixed the failure: the best untested root-cause change
        from the same failing baseline, if one is likely enough and the budget leaves room for it and a
        confirmation."""
        best = state.best_fix
        base, ref = state.failing_baseline, state.failing_reference
        if best is None or base is None or ref is None or not (best.workaround or best.cost == "high"):
            return None
        budget = view.case.budget
        if view.launches + 2 > budget.experiments or view.host_seconds + 2 * cost > budget.host_seconds:
            return None
        considered: list[dict[str, Any]] = []
        candidates = self._candidates(view, state, base, ref, done, rejected_ids, considered)
        scored = []
        for order, (change, iv, how) in enumerate(candidates.values()):
            if iv.workaround or COST_ORDER[iv.cost] >= COST_ORDER[best.cost]:
                continue
            score, p_fix = self._score(state, change, iv, cost, ref.facts)
            if p_fix < tunables().choice.min_alternative_p:
                continue
            scored.append((score, -order, change, p_fix, how))
        if not scored:
            return None
        scored.sort(key=lambda t: (t[0], t[1]), reverse=True)
        why = (
            f"{best.change.describe()} fixed the failure but is a "
            f"{'workaround' if best.workaround else 'costly change'}: a root-cause fix is tested first"
        )
        return self._test(state, base, scored[0], cost, ref.facts, why, considered)


#: Flag-catalog lookups of the planner, per catalog object (held here, so its id is not reused while
#: cached). The planner asks the same few dozen names on every step; ``FlagCatalog.resolve`` rebuilds
#: its option index per call and computes close-match suggestions for unknown spellings.
_FLAG_MEMOS: dict[int, tuple[FlagCatalog, dict[tuple[Any, ...], Any]]] = {}


def _flag_memo(flags: FlagCatalog) -> dict[tuple[Any, ...], Any]:
    entry = _FLAG_MEMOS.get(id(flags))
    if entry is None or entry[0] is not flags:
        if len(_FLAG_MEMOS) >= 8:
            _FLAG_MEMOS.pop(next(iter(_FLAG_MEMOS)))
        entry = (flags, {})
        _FLAG_MEMOS[id(flags)] = entry
    return entry[1]


def _judgement(
    pred: str, obs: str, change: str, out: Outcome
) -> tuple[Literal["supported", "refuted"] | None, EvidenceEffect, str] | None:
    """(new status or None, evidence effect, detail) of an observation against a hypothesis's prediction;
    None when the observation says nothing about it."""
    if pred == "fixed" and obs == "persists":
        return (
            "refuted",
            "refutes",
            f"predicted {change} would fix the symptom; it persisted ({out.stage}: "
            f"{', '.join(out.failure_signatures()[:3]) or _stall_text(out) or out.stage})",
        )
    if pred in ("fixed", "may_fix") and obs == "fixed":
        return "supported", "supports", f"{change} fixed the symptom, as predicted"
    if pred == "may_fix" and obs in ("persists", "changed"):
        return None, "weakens", f"{change} did not fix the symptom ({out.stage}); this hypothesis allowed that"
    if pred in ("fixed", "may_fix") and obs == "advanced":
        return None, "supports", f"{change} moved the failure to a later stage ({out.stage})"
    if pred == "persists" and obs == "fixed":
        return None, "weakens", f"the symptom went away with {change}, which this hypothesis does not explain"
    if obs == "different":
        return None, "neutral", f"{change} failed earlier ({out.stage}); the symptom was not reached"
    return None


def _stall_text(out: Outcome) -> str:
    after = out.facts.get("stalled_after")
    return f"stalled after {after}" if after else ""


def _same_value(a: Any, b: Any) -> bool:
    """Flag values compared as text, with bf16/bfloat16-style spellings of one dtype treated as equal."""
    if a is None or b is None:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or str(a).lower() == str(b).lower()
    sa, sb = str(a).strip().lower(), str(b).strip().lower()
    return _DTYPE_ALIASES.get(sa, sa) == _DTYPE_ALIASES.get(sb, sb)


EvidenceEffect = Literal["supports", "weakens", "refutes", "confirms", "neutral"]

_DTYPE_ALIASES = VALUE_ALIASES
