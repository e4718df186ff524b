"""The hypothesis ledger: what the evidence of one launch does to it.

The candidate generators propose hypotheses for a failing launch (``create``, weighed down when the
traceback points elsewhere); an observation multiplies each hypothesis's weight by the likelihood of
what it predicted (``update``, ``likelihood`` in knowledge/planner.toml); a cause signature seen in a
run that served refutes its hypothesis; the weights are normalised into posteriors with an "unlisted
cause" remainder (``normalise``). The ledger is a pair of dicts (id -> hypothesis, id -> weight) that
``agent.planning.history`` rebuilds from the run's history on every step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from agent.domain.models import Baseline, Evidence, Experiment, Hypothesis, Outcome
from agent.planning.candidate_memo import CandidateMemo
from agent.planning.catalog import CatalogEntry
from agent.planning.generators import CandidateGenerator, GeneratorInput
from agent.planning.generators.common import RaiseSite, raise_site, site_owner, specificity, stems
from agent.planning.generators.settings import implicated_setting
from agent.planning.in_play import Subsystem, subsystems_of_frame
from agent.planning.matching import FlagMatcher, same_value
from agent.planning.view import PlannerView, model_features
from agent.planning.weights import weights as tunables
from tools.flags import FlagCatalog

#: A word the failing frame shares with a hypothesis's component ties them only when it is this specific
#: (``agent.planning.generators.common.specificity``: ``cache`` is in too many flag names to tie anything).
_RELATED_SPECIFICITY = 0.25
#: Generators whose candidates the failure names itself (a remedy the error text states) or whose priors
#: are weighed by the raise site already (``Hypothesis.symptom_only``): never weakened by where it surfaced.
_DIRECT = frozenset({"remedies", "quoted", "catalog", "symptom_class", "localiser"})


class LedgerBook(FlagMatcher):
    """Adds hypotheses to a ledger and weighs them by the evidence of launches (one part of the rule
    planner, ``agent.planning.planner.RulePlanner``; the ledger's dicts are passed in).

    ``flags``: the host's flag catalog (None: names and values unchecked); ``catalog``: hypothesis
    catalog entries; ``generators``: the candidate generators (``agent.planning.generators.registry``);
    the catalog is one of them; ``memo``: their answers for past launches, kept from one step of a run to
    the next (``agent.planning.candidate_memo``; None: this book's own).
    """

    def __init__(
        self, flags: FlagCatalog | None, catalog: list[CatalogEntry], generators: list[CandidateGenerator],
        memo: CandidateMemo | None = None,
    ) -> None:
        super().__init__(flags)
        self.catalog = catalog
        self.generators = generators
        self.memo = memo if memo is not None else CandidateMemo()

    def generator_input(
        self, view: PlannerView, outcome: Outcome, config: Baseline
    ) -> GeneratorInput:
        """What the generators see of one failing launch: its evidence, the run so far up to it, the
        host's facts and flag catalog, the knowledge catalog and the relevant findings."""
        upto = next((i for i, o in enumerate(view.outcomes) if o.experiment_id == outcome.experiment_id), None)
        outcomes = view.outcomes[: upto + 1] if upto is not None else [*view.outcomes, outcome]
        return GeneratorInput(
            case=view.case,
            baseline=config,
            reference=outcome,
            fingerprint=view.fingerprint,
            flags=self.flags,
            catalog=self.catalog,
            findings=view.findings,
            features=model_features(view.case),
            experiments=view.experiments,
            outcomes=outcomes,
            run_outcomes=list(view.outcomes),
        )

    def create(self, view: PlannerView, outcome: Outcome, ledger: dict[str, Hypothesis], weights: dict[str, float],
               config: Baseline | None = None, refresh: bool = False,
               only: Callable[[Hypothesis], bool] | None = None) -> list[str]:
        """Add the hypotheses the generators propose for the failing ``outcome`` of ``config`` (those ``only``
        keeps, when given).

        ``refresh``: ``outcome`` is a new blocker the run moved on to; an open hypothesis that its
        evidence proposes again gets at least the weight this evidence gives it (it was weighed against
        the old blocker before), weighed as a new candidate is (``_raise_to``): by where the new error
        surfaced and the user's settings it implicates, which also count it when they weaken the new ones.

        A candidate that only corroborates (``Hypothesis.support``: a known-good deployment's difference)
        multiplies the weight of the new candidates that already make the same change, and is added on
        its own only when none does.
        """
        inp = self.generator_input(view, outcome, config or view.case.baseline)
        in_run = any(o is outcome for o in view.outcomes)
        new: dict[str, Hypothesis] = {}
        supporting: list[Hypothesis] = []
        #: this evidence's candidates for open hypotheses already in the ledger (``refresh``)
        again: dict[str, Hypothesis] = {}
        for answer in self.memo.answers(self.generators, inp, in_run):
            for cand in answer:
                if only is not None and not only(cand):
                    continue
                if cand.id in ledger:
                    old = ledger[cand.id]
                    if refresh and old.status == "refuted" and (why := _refuted_before(view, old, cand, inp)):
                        old.status, weights[cand.id] = "open", cand.weight
                        old.evidence.append(Evidence(kind="fact", experiment_id=inp.evidence.experiment_id,
                                                     effect="supports", detail=why))
                    elif refresh and old.status == "open" and cand.support is None and \
                            (cand.id not in again or cand.weight > again[cand.id].weight):
                        again[cand.id] = cand.model_copy(update={"evidence": list(cand.evidence)})
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
                if c.support is None and any(self.covers(iv0, iv, facts) for iv in c.interventions)
            ]
            for c in covering:
                c.weight *= 1.0 + (cand.support or 0.0)
                c.evidence.extend(cand.evidence[:1])
            if not covering and cand.id not in new:
                new[cand.id] = cand
        self._weigh_by_raise_site([*new.values(), *again.values()], inp)
        self._weigh_by_user_changes([*new.values(), *again.values()], inp)
        _raise_to(again, ledger, weights)
        for cand in new.values():
            ledger[cand.id] = _entry(cand)
            weights[cand.id] = cand.weight
        return list(new)

    def _weigh_by_raise_site(self, cands: list[Hypothesis], inp: GeneratorInput) -> None:
        """Weaken the catalog's general suspects that the traceback does not point at.

        A catalog or symptom-class entry that fired on the kind of failure alone (``Hypothesis.symptom_only``:
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
        self._weigh_by_site_subsystem(cands, inp, site, factor)
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

    def _weigh_by_user_changes(self, cands: list[Hypothesis], inp: GeneratorInput) -> None:
        """Weaken the general suspects of this kind of failure when the failure implicates a setting the
        user changed away from the engine's default (``implicated_setting``: the error quotes its value,
        the code where it surfaced or the failure's class points at its subsystem): an engineer first asks
        what was changed that touches what failed. A catalog or symptom-class prior that fired on the kind
        of failure alone (``Hypothesis.symptom_only``) and changes none of those settings is multiplied by
        ``ledger.elsewhere_factor``, once (not again when the raise site weakened it already)."""
        factor = tunables().ledger.elsewhere_factor
        own = {(iv.kind, n) for c in cands if implicated_setting(c) for iv in c.interventions for n in iv.names}
        if not own or factor >= 1.0:
            return
        said = ", ".join(sorted(n for _, n in own))
        for cand in cands:
            if not cand.symptom_only or any((iv.kind, n) in own for iv in cand.interventions for n in iv.names):
                continue
            if any(e.effect == "weakens" and e.experiment_id == inp.evidence.experiment_id for e in cand.evidence):
                continue
            cand.weight *= factor
            cand.evidence.append(Evidence(
                kind="fact", experiment_id=inp.evidence.experiment_id, effect="weakens",
                detail=f"the failure implicates the user's own {said}, set by the case; this general "
                f"suspect of the kind of failure changes none of it (x{factor:g})"))

    def _weigh_by_site_subsystem(
        self, cands: list[Hypothesis], inp: GeneratorInput, site: RaiseSite, factor: float
    ) -> None:
        """The error surfaced in the code of a subsystem (``modules`` in knowledge/subsystems.toml) and a
        candidate changes a setting of it: the other candidates, which change nothing there and whose
        component the frame does not name, are multiplied by ``factor`` (``ledger.elsewhere_factor``), as
        a localising launch narrows the ledger to the subsystem its true frame is code of
        (``weigh_by_localiser``). Left as they are: what the error text itself names (``_DIRECT``), the
        catalog priors (weighed above by ``symptom_only``), and every candidate when the log says its
        stack may be wrong (a localiser is proposed: the frame is then no evidence)."""
        subs = subsystems_of_frame(site.where)
        if not subs or any(c.generator == "localiser" for c in cands):
            return
        inside = [c for c in cands if self._points_at(c, set(), subs)]
        if not inside:
            return
        names = ", ".join(s.id for s in subs)
        for cand in cands:
            if cand in inside or cand.generator in _DIRECT or self._points_at(cand, site.words, subs):
                continue
            cand.weight *= factor
            cand.evidence.append(Evidence(
                kind="fact", experiment_id=inp.evidence.experiment_id, lines=[site.line], effect="weakens",
                detail=f"the error surfaced in {site.where}, code of the {names} subsystem, which this "
                f"hypothesis changes nothing in (x{factor:g})"))

    def weigh_by_localiser(
        self,
        view: PlannerView,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        exp: Experiment,
        surfaced: Outcome,
        true: Outcome,
    ) -> list[str]:
        """A localising launch (``exp``, ``agent.planning.localise``) made the failure's report true: read
        its innermost engine frame (``true``) against the one the error surfaced in (``surfaced``).

        When the two differ, the localiser's own hypothesis is supported and the ledger narrows to the
        subsystem the true frame is code of (``modules`` in knowledge/subsystems.toml): every open
        hypothesis none of whose changes configures that subsystem, and whose component the frame does not
        name, is multiplied by ``ledger.elsewhere_factor``, as a general suspect is against the frame an
        error surfaced in (``_weigh_by_raise_site``). When they are the same, the printed frame was the
        true one: the localiser's hypothesis is refuted and nothing else moves. Returns the ids of the
        subsystems the true frame is code of when it moved, else ``[]``.
        """
        real, seen = self._sites(view, exp, surfaced, true)
        change = exp.change.describe() if exp.change else "the localiser"
        moved = real is not None and (seen is None or seen.where != real.where)
        subs = subsystems_of_frame(real.where) if real is not None else []
        if real is None:
            detail = f"the report of {change} names no frame of the engine's own code: nothing is localised"
        else:
            where = real.where + (f" (the {', '.join(s.id for s in subs)} subsystem)" if subs else "")
            detail = f"with {change} the failure is raised in {where}" + (
                f", not in {seen.where} where it surfaced" if moved and seen is not None else
                ", where it surfaced: the printed frame was the true one")
        factor = tunables().ledger.elsewhere_factor
        for h in ledger.values():
            if h.generator == "localiser" and exp.change is not None and any(
                    self.matches(exp.change, iv, surfaced.facts) for iv in h.interventions):
                h.status = "supported" if moved else ("refuted" if real is not None else h.status)
                h.evidence.append(Evidence(kind="experiment", experiment_id=exp.id, detail=detail,
                                           effect="supports" if moved else "neutral" if real is None else "refutes"))
                continue
            if not moved or real is None or h.status != "open" or self._points_at(h, real.words, subs):
                continue
            weights[h.id] *= factor
            h.evidence.append(Evidence(
                kind="experiment", experiment_id=exp.id, effect="weakens",
                detail=f"{detail}; this hypothesis changes nothing there (x{factor:g})"))
        return [s.id for s in subs] if moved else []

    def _sites(
        self, view: PlannerView, exp: Experiment, surfaced: Outcome, true: Outcome
    ) -> tuple[RaiseSite | None, RaiseSite | None]:
        """(where the localising launch's failure was raised, where the failure had surfaced)."""
        return (raise_site(self.generator_input(view, true, exp.baseline)),
                raise_site(self.generator_input(view, surfaced, exp.baseline)))

    def frame_moved(self, view: PlannerView, exp: Experiment, surfaced: Outcome, true: Outcome) -> bool:
        """Whether the localising launch ``exp`` raised its failure (``true``) in another engine frame than
        the one it had surfaced in (``surfaced``)."""
        real, seen = self._sites(view, exp, surfaced, true)
        return real is not None and (seen is None or seen.where != real.where)

    def _points_at(self, h: Hypothesis, words: set[str], subs: list[Subsystem]) -> bool:
        """Whether one of ``h``'s changes configures one of the subsystems ``subs`` (their ``flags`` or
        ``env`` patterns), or the frame's ``words`` name its component."""
        for iv in h.interventions:
            for name in iv.names:
                pattern = (lambda s: s.flags) if iv.kind == "flag" else (lambda s: s.env)
                if any((p := pattern(s)) is not None and p.search(name) for s in subs):
                    return True
        shared = stems(h.component) & words
        if not shared or (self.flags is not None and specificity(self.flags, shared) < _RELATED_SPECIFICITY):
            return False
        # words a setting of those subsystems carries are that setting's (vision code's "attention" is
        # --mm-attention-backend's, not the text attention's --attention-backend)
        names = [n for iv in h.interventions if iv.kind == "flag" for n in iv.names]
        pats = [s.flags for s in subs if s.flags is not None]
        return not (names and site_owner(self.flags, pats, names[0], words=shared) is not None)

    def update(
        self,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        exp: Experiment,
        out: Outcome,
        obs: str,
        facts: dict[str, str] | None = None,
    ) -> None:
        """Weigh the open hypotheses by the observation ``obs`` (``classify_observation``) of ``exp``: each
        weight is multiplied by the likelihood of what it predicted (``likelihood`` in
        knowledge/planner.toml), a falsified decisive prediction refutes; ``facts``: the reference's."""
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
            if iv.fact and iv.fact in before and iv.fact in after and not same_value(before[iv.fact], after[iv.fact]):
                return f"{iv.fact} {before[iv.fact]} → {after[iv.fact]}"
        return None

    def refute_by_cause_signature(self, ledger: dict[str, Hypothesis], out: Outcome) -> None:
        """Refute the hypotheses whose cause signature appears in ``out``, a run that served."""
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
    def normalise(ledger: dict[str, Hypothesis], weights: dict[str, float], new: set[str]) -> None:
        """Posteriors from the weights, with the "unlisted cause" remainder; ``new`` hypotheses get theirs
        as prior too."""
        live = [h for h in ledger.values() if h.status != "refuted"]
        total = sum(weights[h.id] for h in live) + tunables().ledger.unlisted_weight
        for h in ledger.values():
            h.posterior = 0.0 if h.status == "refuted" else round(weights[h.id] / total, 4)
            if h.id in new:
                h.prior = h.posterior


def _raise_to(again: dict[str, Hypothesis], ledger: dict[str, Hypothesis], weights: dict[str, float]) -> None:
    """Each open hypothesis a new blocker's evidence proposes again (``again``: its candidates by id, weighed
    as new ones are, by where the error surfaced and what the user changed that it touches) gets at least
    the weight that evidence gives it, with the evidence's first two facts."""
    for cand in again.values():
        if cand.weight > weights[cand.id]:
            weights[cand.id] = cand.weight
            ledger[cand.id].evidence.extend(cand.evidence[:2])


def _refuted_before(view: PlannerView, old: Hypothesis, cand: Hypothesis, inp: GeneratorInput) -> str:
    """Why a refuted hypothesis is open again on a new blocker, or empty. A launch that left the old
    blocker in place only showed that the change did not get past that blocker: the server never reached
    the code the new failure is in (a vision tower refusing its attention backend while the weights load
    hides the text attention backend, built after the KV pool). When every launch that refuted it ran on an earlier
    baseline than the one that now fails (``inp.baseline``), and the new failure's own evidence points at
    it (an evidence generator's candidate, or the user's setting the new failure implicates: not a
    generic revert, not a prior that fired on the kind of failure alone), it is tested again here."""
    if cand.symptom_only or cand.support is not None or (cand.generator == "settings" and not implicated_setting(cand)):
        return ""
    by_id = {e.id: e for e in view.experiments}
    refuting = [e.experiment_id for e in old.evidence
                if e.kind == "experiment" and e.effect == "refutes" and e.experiment_id]
    runs = [by_id.get(i) for i in refuting]
    if not runs or any(r is None or r.baseline == inp.baseline for r in runs):
        return ""
    return (f"refuted by {', '.join(refuting)} on an earlier blocker, which that launch did not get past; "
            "the failure the run has moved on to implicates it again")


def _entry(cand: Hypothesis) -> Hypothesis:
    """A generator's hypothesis as a ledger entry: lists of its own (the ledger appends to its evidence),
    belief left for ``_normalise``."""
    return cand.model_copy(update={
        "prior": 0.0,
        "posterior": 0.0,
        "evidence": list(cand.evidence),
        "interventions": list(cand.interventions),
        "cause_signatures": list(cand.cause_signatures),
    })


EvidenceEffect = Literal["supports", "weakens", "refutes", "confirms", "neutral"]


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
