"""Planners: turn the history of a run into a hypothesis ledger and the next experiment.

The rule planner is a pure function of the run's history (case, host facts, findings, experiments,
outcomes, rejections): the ledger is rebuilt from the evidence on every step, so a refuted hypothesis
stays refuted for as long as the experiment that refuted it is in the history, and a replay of the same
history gives the same decisions.

Belief update: each hypothesis predicts, for each experiment, whether the symptom is ``fixed`` or
``persists``; the observed outcome (classified against the failing reference run of the same baseline)
multiplies the hypothesis's weight by a likelihood (``_LIKELIHOOD``), i.e. Bayes' rule over the listed
hypotheses plus an "unlisted cause" remainder. Choice of experiment: the probability that the change
fixes the symptom, divided by its estimated cost in host-seconds — the classic ratio rule for
sequential search, which minimises the expected cost of finding the fix when tests are independent.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from agent.case import Case
from agent.catalog import CatalogEntry, EvidenceContext
from agent.models import (
    STAGE_ORDER,
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
)
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, FlagError
from tools.knowledge import Finding, infer_features

#: P(observation | prediction). Rows: what the hypothesis predicts; columns: what was observed.
#: "different" = the run failed earlier than the reference (the symptom's stage was never reached),
#: so it says nothing either way; "infra" = the host failed, no information.
_LIKELIHOOD: dict[str, dict[str, float]] = {
    "fixed": {"fixed": 0.9, "persists": 0.02, "changed": 0.2, "advanced": 0.5, "different": 0.3},
    "may_fix": {"fixed": 0.6, "persists": 0.4, "changed": 0.4, "advanced": 0.5, "different": 0.3},
    "persists": {"fixed": 0.05, "persists": 0.9, "changed": 0.5, "advanced": 0.3, "different": 0.3},
}
#: Weight of "a cause not in the ledger", so that refuting every listed cause does not make the last
#: one certain.
_UNLISTED_WEIGHT = 0.1
#: Performance cost of keeping a fix, as a multiplier on its score (DESIGN: prefer cheap fixes).
_PERF_FACTOR = {"none": 1.0, "low": 1.0, "medium": 0.85, "high": 0.5}
#: Minimum relevance (tools.knowledge.relevance) for a known-good finding's differences to count as
#: evidence: same hardware alone scores 0.55, so this also asks for a model of a similar kind.
_FINDING_MIN_RELEVANCE = 0.6
#: What a deployment *is* rather than how it runs: the model, its checkpoint format, the parallel
#: layout, the devices. A known-good finding of another model differs in these by necessity, so they
#: are never proposed from a finding diff.
_IDENTITY_FLAGS = {
    "--model-path",
    "--model",
    "--served-model-name",
    "--host",
    "--port",
    "--tokenizer-path",
    "--quantization",
    "--tp-size",
    "--tensor-parallel-size",
    "--dp-size",
    "--data-parallel-size",
    "--ep-size",
    "--expert-parallel-size",
    "--pp-size",
    "--pipeline-parallel-size",
    "--context-length",
    "--revision",
}
_IDENTITY_ENV = {"CUDA_VISIBLE_DEVICES", "HF_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
#: Estimated host-seconds of a launch before anything was measured (a large model's load).
DEFAULT_LAUNCH_COST_S = 600.0


class RelevantFinding(BaseModel):
    """A finding with its relevance (0..1) to the case."""

    finding: Finding
    relevance: float


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


class HistoryState(BaseModel):
    """The ledger and baseline derived from a run's history."""

    hypotheses: list[Hypothesis]
    baseline: Baseline
    reference: Outcome | None = None
    confirmed_experiment_id: str | None = None
    confirm_failed: bool = False
    adoptions: list[dict[str, Any]] = Field(default_factory=list)


class Proposal(BaseModel):
    """A planner's answer: one experiment, or a reason to conclude."""

    experiment: Experiment | None = None
    conclude_reason: str | None = None
    considered: list[dict[str, Any]] = Field(default_factory=list)


class Planner(Protocol):
    """Decides: ledger from history, next experiment from ledger (DESIGN.md, "Planners")."""

    name: str

    def history(self, view: PlannerView) -> HistoryState: ...

    def propose(self, view: PlannerView, state: HistoryState) -> Proposal: ...


def model_features(case: Case) -> set[str]:
    """Model features from the case's hints, the model name and the baseline flags (moe, dsa, nvfp4, ...)."""
    text = " ".join([case.model.path, *[f"{k} {v}" for k, v in case.baseline.flags.items()]])
    return set(case.model.features) | infer_features(text)


def classify_observation(outcome: Outcome, reference: Outcome) -> str:
    """How an outcome compares with the failing reference run: fixed, persists, changed, advanced,
    different (failed earlier, symptom not reached) or infra (no information)."""
    if outcome.stage == "ok":
        return "fixed"
    if outcome.stage == "infra_error" or reference.stage == "infra_error":
        return "infra"
    so, sr = STAGE_ORDER[outcome.stage], STAGE_ORDER[reference.stage]
    if so > sr:
        return "advanced"
    if so < sr:
        return "different"
    fo, fr = set(outcome.failure_signatures()), set(reference.failure_signatures())
    if (fo & fr) or (not fo and not fr):
        return "persists"
    return "changed"


class RulePlanner:
    """The default planner: catalog + findings + Bayes-style updates + probability-per-cost choice.

    ``catalog``: hypothesis catalog entries; ``flags``: the host's flag catalog (legal names and values).
    """

    name = "rules"

    def __init__(self, catalog: list[CatalogEntry], flags: FlagCatalog | None) -> None:
        self.catalog = catalog
        self.flags = flags

    # ----- names and values -------------------------------------------------------------------------

    def _canon(self, kind: str, name: str) -> str | None:
        """Canonical flag name on this host (``None`` if unknown); env names are returned as they are."""
        if kind == "env":
            return name
        if self.flags is None:
            return name
        try:
            return self.flags.resolve(name).name
        except FlagError:
            return None

    def _legal(self, name: str, value: FlagValue) -> FlagValue | None:
        """The normalised value if legal for the flag on this host, else ``None``."""
        if self.flags is None:
            return value
        try:
            return self.flags.validate(name, value)[1]
        except FlagError:
            return None

    def _matches(self, change: Change, iv: Intervention) -> bool:
        if change.kind != iv.kind:
            return False
        names = {self._canon(iv.kind, n) for n in iv.names}
        if change.name not in names:
            return False
        return any(_same_value(change.after, v) for v in iv.values)

    def realize(self, iv: Intervention, baseline: Baseline) -> tuple[Change | None, str]:
        """Turn an intervention into a concrete change on this host, or say why it cannot be."""
        name = next((c for n in iv.names if (c := self._canon(iv.kind, n))), None)
        if name is None:
            return None, f"no flag among {iv.names} on this host"
        for value in iv.values:
            legal = value if iv.kind == "env" else self._legal(name, value)
            if legal is None:
                continue
            before = baseline.value(iv.kind, name)
            if _same_value(before, legal):
                return None, f"{name} is already {legal} in the baseline"
            return Change(kind=iv.kind, name=name, before=before, after=legal), ""
        return None, f"none of {iv.values} is a legal value of {name}"

    # ----- history -> ledger ------------------------------------------------------------------------

    def _context(self, view: PlannerView, outcome: Outcome) -> EvidenceContext:
        fp = view.fingerprint
        return EvidenceContext(
            signatures=outcome.signature_ids(),
            facts=dict(outcome.facts),
            features=model_features(view.case),
            compute_capability=fp.compute_capability if fp else None,
            gpu_name=fp.gpu_name if fp else None,
            stage=outcome.stage,
        )

    def _create(
        self, view: PlannerView, outcome: Outcome, ledger: dict[str, Hypothesis], weights: dict[str, float]
    ) -> list[str]:
        """Add catalog hypotheses that the failing ``outcome`` triggers, then finding-based ones."""
        ctx = self._context(view, outcome)
        created: list[str] = []
        for entry in self.catalog:
            if entry.id in ledger:
                continue
            fired = entry.triggered(ctx)
            if fired is None:
                continue
            weight, boosts = entry.weight(ctx)
            statement, component = entry.render(ctx)
            evidence = [self._condition_evidence(c.describe(), c.signature, outcome) for c in fired]
            evidence += [
                self._condition_evidence(
                    f"{b.why or b.describe()} (x{b.factor:g})",
                    b.signature,
                    outcome,
                    effect="supports" if b.factor >= 1 else "weakens",
                )
                for b in boosts
            ]
            ledger[entry.id] = Hypothesis(
                id=entry.id,
                statement=statement,
                component=component,
                rationale=entry.rationale,
                prior=0.0,
                posterior=0.0,
                source="signature" if any(c.signature for c in fired) else "catalog",
                evidence=evidence,
                interventions=list(entry.intervention),
                cause_signatures=list(entry.cause_signatures),
                stage=entry.stage,
            )
            weights[entry.id] = weight
            created.append(entry.id)
        created += self._apply_findings(view, ctx, ledger, weights, only=set(created))
        return created

    def _condition_evidence(
        self, detail: str, signature: str | None, outcome: Outcome, effect: str = "supports"
    ) -> Evidence:
        lines: list[int] = []
        kind: Literal["signature", "fact"] = "fact"
        if signature:
            kind = "signature"
            m = next((m for m in outcome.matches if m.signature_id == signature), None)
            if m is not None:
                lines = list(m.line_numbers[:5])
                detail = f"{detail}: {m.first_line.strip()[:160]}"
        return Evidence(
            kind=kind, detail=detail, experiment_id=outcome.experiment_id, lines=lines, effect=effect
        )  # type: ignore[arg-type]

    def _finding_diffs(
        self, rf: RelevantFinding, ctx: EvidenceContext, baseline: Baseline
    ) -> list[tuple[str, str, FlagValue, str]]:
        """(kind, name, value, why) differences between a known-good finding and the failing run."""
        f = rf.finding
        diffs: list[tuple[str, str, FlagValue, str]] = []
        for name, value in f.flags.items():
            canon = self._canon("flag", name)
            if canon is None or canon in _IDENTITY_FLAGS:
                continue
            if not _same_value(baseline.flags.get(canon), value):
                diffs.append(("flag", canon, value, f"known-good '{f.title}' runs with {canon} {value}"))
        for name, value in f.env.items():
            if name not in _IDENTITY_ENV and baseline.env.get(name) != value:
                diffs.append(("env", name, value, f"known-good '{f.title}' runs with {name}={value}"))
        for fact, value in f.facts.items():
            ours = ctx.facts.get(fact)
            if ours is not None and not _same_value(ours, value):
                diffs.append(
                    ("fact", fact, value, f"known-good '{f.title}' had {fact}={value}; this run has {ours}")
                )
        return diffs

    def _apply_findings(
        self,
        view: PlannerView,
        ctx: EvidenceContext,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        only: set[str],
    ) -> list[str]:
        created: list[str] = []
        baseline = view.case.baseline
        for rf in view.findings:
            if rf.finding.outcome != "works" or rf.relevance < _FINDING_MIN_RELEVANCE:
                continue
            for kind, name, value, why in self._finding_diffs(rf, ctx, baseline):
                covering = [
                    h
                    for h in ledger.values()
                    if h.id in only
                    and any(self._diff_matches(kind, name, value, iv) for iv in h.interventions)
                ]
                for h in covering:
                    weights[h.id] *= 1.0 + rf.relevance
                    h.evidence.append(
                        Evidence(kind="finding", detail=f"{why} (relevance {rf.relevance:.2f})")
                    )
                if covering or kind == "fact":
                    continue
                hid = f"finding:{name}={value}"
                if hid in ledger:
                    continue
                ledger[hid] = Hypothesis(
                    id=hid,
                    statement=f"The failing configuration differs from a known-good one in {name}; "
                    f"setting it to {value} avoids the failure",
                    component=f"config.{name.lstrip('-').replace('-', '_')}",
                    rationale=why,
                    prior=0.0,
                    posterior=0.0,
                    source="finding",
                    evidence=[Evidence(kind="finding", detail=f"{why} (relevance {rf.relevance:.2f})")],
                    interventions=[Intervention(kind=kind, names=[name], values=[value], decisive=False)],  # type: ignore[arg-type]
                )
                weights[hid] = 0.05 * (1.0 + rf.relevance)
                created.append(hid)
                only.add(hid)
        return created

    def _diff_matches(self, kind: str, name: str, value: FlagValue, iv: Intervention) -> bool:
        if kind == "fact":
            return iv.fact == name and any(_same_value(value, v) for v in iv.values)
        return self._matches(Change(kind=kind, name=name, after=value), iv)  # type: ignore[arg-type]

    def history(self, view: PlannerView) -> HistoryState:
        """Rebuild the ledger and the current baseline from the run's history (see module docstring)."""
        ledger: dict[str, Hypothesis] = {}
        weights: dict[str, float] = {}
        baseline = view.case.baseline
        reference: Outcome | None = None
        confirmed: str | None = None
        confirm_failed = False
        adoptions: list[dict[str, Any]] = []
        for exp in view.experiments:
            out = view.outcome_of(exp.id)
            if out is None or exp.status != "done":
                continue
            if exp.purpose == "baseline":
                reference = out
                if out.stage != "ok":
                    self._create(view, out, ledger, weights)
                self._normalise(ledger, weights, set(ledger))
                continue
            if reference is None:
                continue
            if exp.purpose == "confirm":
                if out.stage == "ok":
                    confirmed = exp.id
                    for h in ledger.values():
                        if h.status == "supported":
                            h.status = "confirmed"
                            h.evidence.append(
                                Evidence(
                                    kind="experiment",
                                    experiment_id=exp.id,
                                    effect="confirms",
                                    detail="the fixing configuration served correctly again",
                                )
                            )
                else:
                    confirm_failed = True
                    for h in ledger.values():
                        if h.status == "supported":
                            h.status = "open"
                            weights[h.id] *= 0.3
                            h.evidence.append(
                                Evidence(
                                    kind="experiment",
                                    experiment_id=exp.id,
                                    effect="weakens",
                                    detail=f"the fix did not reproduce: {out.stage}",
                                )
                            )
                self._refute_by_cause_signature(ledger, out)
                self._normalise(ledger, weights, set())
                continue
            obs = classify_observation(out, reference)
            self._update(ledger, weights, exp, out, obs)
            if out.stage == "ok":
                self._refute_by_cause_signature(ledger, out)
            if obs in ("fixed", "advanced"):
                adoptions.append(
                    {
                        "experiment_id": exp.id,
                        "change": exp.change.model_dump() if exp.change else None,
                        "from_stage": reference.stage,
                        "to_stage": out.stage,
                    }
                )
                baseline = exp.config()
                reference = out
            created = self._create(view, out, ledger, weights) if out.stage != "ok" else []
            self._normalise(ledger, weights, set(created))
        return HistoryState(
            hypotheses=list(ledger.values()),
            baseline=baseline,
            reference=reference,
            confirmed_experiment_id=confirmed,
            confirm_failed=confirm_failed,
            adoptions=adoptions,
        )

    def prediction(self, h: Hypothesis, change: Change | None) -> str:
        """What ``h`` predicts for a change: fixed, may_fix or persists."""
        if change is not None:
            for iv in h.interventions:
                if self._matches(change, iv):
                    return "fixed" if iv.decisive else "may_fix"
        return "persists"

    def _update(
        self,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        exp: Experiment,
        out: Outcome,
        obs: str,
    ) -> None:
        if obs == "infra":
            return
        for h in ledger.values():
            if h.status in ("refuted", "confirmed"):
                continue
            pred = self.prediction(h, exp.change)
            weights[h.id] *= _LIKELIHOOD[pred][obs]
            change = exp.change.describe() if exp.change else "no change"
            if pred == "fixed" and obs == "persists":
                h.status = "refuted"
                h.evidence.append(
                    Evidence(
                        kind="experiment",
                        experiment_id=exp.id,
                        effect="refutes",
                        detail=f"predicted {change} would fix the symptom; it persisted ({out.stage}: "
                        f"{', '.join(out.failure_signatures()[:3]) or out.stage})",
                    )
                )
            elif pred in ("fixed", "may_fix") and obs == "fixed":
                h.status = "supported"
                h.evidence.append(
                    Evidence(
                        kind="experiment",
                        experiment_id=exp.id,
                        effect="supports",
                        detail=f"{change} fixed the symptom, as predicted",
                    )
                )
            elif pred in ("fixed", "may_fix") and obs == "advanced":
                h.evidence.append(
                    Evidence(
                        kind="experiment",
                        experiment_id=exp.id,
                        effect="supports",
                        detail=f"{change} moved the failure to a later stage ({out.stage})",
                    )
                )
            elif pred == "persists" and obs == "fixed":
                h.evidence.append(
                    Evidence(
                        kind="experiment",
                        experiment_id=exp.id,
                        effect="weakens",
                        detail=f"the symptom went away with {change}, which this hypothesis does not explain",
                    )
                )
            elif obs == "different":
                h.evidence.append(
                    Evidence(
                        kind="experiment",
                        experiment_id=exp.id,
                        effect="neutral",
                        detail=f"{change} failed earlier ({out.stage}); the symptom was not reached",
                    )
                )

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
        total = sum(weights[h.id] for h in live) + _UNLISTED_WEIGHT
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
        cost = ref.timings.host_seconds if ref and ref.timings.host_seconds > 0 else DEFAULT_LAUNCH_COST_S

        def within_budget(slots: int) -> str | None:
            if view.launches + slots > budget.experiments:
                return f"experiment budget spent ({view.launches} of {budget.experiments} launches)"
            if view.host_seconds + cost > budget.host_seconds:
                return (
                    f"host-second budget spent ({view.host_seconds:.0f} of {budget.host_seconds:.0f} s; "
                    f"next launch ~{cost:.0f} s)"
                )
            return None

        if ref is None:
            exp_id = Experiment.make_id(baseline, None, "baseline")
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
                    cost_estimate_s=cost,
                    rationale="reproduce the failure on the baseline to collect its log evidence",
                )
            )
        if ref.stage == "ok":
            if not state.adoptions:
                return Proposal(
                    conclude_reason="the baseline serves correctly: there is no failure to isolate"
                )
            if state.confirmed_experiment_id:
                return Proposal(conclude_reason="fix found and confirmed")
            if state.confirm_failed:
                return Proposal(conclude_reason="the fix did not reproduce on its confirmation run")
            exp_id = Experiment.make_id(baseline, None, "confirm")
            if exp_id in rejected_ids:
                return Proposal(conclude_reason="the confirmation run was rejected")
            if why := within_budget(1):
                return Proposal(conclude_reason=why)
            return Proposal(
                experiment=Experiment(
                    id=exp_id,
                    purpose="confirm",
                    baseline=baseline,
                    cost_estimate_s=cost,
                    rationale="re-run the fixing configuration once to confirm the fix is not luck",
                    predictions=[
                        Prediction(hypothesis_id=h.id, expect="fixed")
                        for h in state.hypotheses
                        if h.status == "supported"
                    ],
                )
            )
        if why := within_budget(2):
            return Proposal(conclude_reason=why + " (a test needs room for its confirmation run)")
        return self._best_test(view, state, cost, done, rejected_ids)

    def _best_test(
        self, view: PlannerView, state: HistoryState, cost: float, done: set[str], rejected_ids: set[str]
    ) -> Proposal:
        baseline, ref = state.baseline, state.reference
        assert ref is not None
        rejected_keys = {r.change_key for r in view.rejections if r.change_key}
        live = [h for h in state.hypotheses if h.status in ("open", "supported")]
        candidates: dict[str, tuple[Change, Intervention]] = {}
        considered: list[dict[str, Any]] = []
        for h in sorted(live, key=lambda h: -h.posterior):
            for iv in h.interventions:
                if iv.fact and any(_same_value(ref.facts.get(iv.fact), v) for v in iv.values):
                    considered.append(
                        {"hypothesis": h.id, "skipped": f"{iv.fact} is already {ref.facts[iv.fact]}"}
                    )
                    continue
                change, why = self.realize(iv, baseline)
                if change is None:
                    considered.append({"hypothesis": h.id, "skipped": why})
                    continue
                exp_id = Experiment.make_id(baseline, change, "test")
                if exp_id in done:
                    continue
                if exp_id in rejected_ids or change.key() in rejected_keys:
                    considered.append({"hypothesis": h.id, "skipped": f"{change.describe()} was rejected"})
                    continue
                candidates.setdefault(change.key(), (change, iv))
        if not candidates:
            return Proposal(
                conclude_reason="no untested change is left that an open hypothesis predicts would fix "
                "the failure",
                considered=considered,
            )
        scored = []
        for order, (change, iv) in enumerate(candidates.values()):
            p_fix = 0.0
            for h in live:
                pred = self.prediction(h, change)
                p_fix += h.posterior * {"fixed": 0.9, "may_fix": 0.5, "persists": 0.0}[pred]
            score = p_fix / max(cost, 1.0) * _PERF_FACTOR[iv.cost]
            scored.append((score, -order, change, p_fix))
            considered.append({"change": change.describe(), "p_fix": round(p_fix, 3), "score": score})
        scored.sort(key=lambda t: (t[0], t[1]), reverse=True)
        score, _, change, p_fix = scored[0]
        predictions = [Prediction(hypothesis_id=h.id, expect=self.prediction(h, change)) for h in live]  # type: ignore[arg-type]
        tested = [p.hypothesis_id for p in predictions if p.expect != "persists"]
        rationale = (
            f"tests {', '.join(tested)}: P(fix) = {p_fix:.2f} for ~{cost:.0f} host-seconds; "
            f"the best probability per host-second among {len(scored)} candidate changes"
        )
        return Proposal(
            experiment=Experiment(
                id=Experiment.make_id(baseline, change, "test"),
                purpose="test",
                baseline=baseline,
                change=change,
                predictions=predictions,
                rationale=rationale,
                cost_estimate_s=cost,
                score=score,
                proposed_by=self.name,
            ),
            considered=considered,
        )


def _same_value(a: Any, b: Any) -> bool:
    """Flag values compared as text, with bf16/bfloat16-style spellings of one dtype treated as equal."""
    if a is None or b is None:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or str(a).lower() == str(b).lower()
    sa, sb = str(a).strip().lower(), str(b).strip().lower()
    return _DTYPE_ALIASES.get(sa, sa) == _DTYPE_ALIASES.get(sb, sb)


_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
