"""What a person is asked (``ApprovalRequest``, built by ``build_request``, with a note and other tests
when the leading hypothesis's test was rejected) and what they answer (``ApprovalAnswer``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from agent.domain.models import (
    Baseline,
    Change,
    Experiment,
    FlagValue,
    Hypothesis,
    Rejection,
    value_key,
)
from agent.planning.allowed import allowed_by_errors
from agent.planning.view import PlannerView
from agent.run.approval.policy import ApprovalMode
from tools.flags import FlagCatalog, FlagError

Decision = Literal["approve", "edit", "reject", "stop"]


class HypothesisLine(BaseModel):
    """One open hypothesis as the approval screen shows it, with what it predicts for this experiment."""

    id: str
    statement: str
    component: str
    posterior: float
    status: str
    predicts: Literal["fixed", "may_fix", "persists"]


class EditOffer(BaseModel):
    """An edit the approval screen offers: ``set`` is typed as is at the edit prompt (or given to
    ``resume --set``); ``why`` says what it is."""

    set: str
    why: str


class LeadBlocked(BaseModel):
    """The leading hypothesis can no longer be tested as proposed: a person rejected its test, and the
    experiment waiting now does not test it. ``edits`` test it another way (may be empty)."""

    hypothesis_id: str
    statement: str
    posterior: float
    rejected: str  # the rejected change, as `name: before → after`
    reason: str
    instead: list[str] = Field(default_factory=list)  # what this experiment tests, "id (p=0.05)"
    edits: list[EditOffer] = Field(default_factory=list)


class ApprovalRequest(BaseModel):
    """What the approve node asks (the ``interrupt()`` value): everything needed to decide.

    ``launches``/``host_seconds`` are spent so far, against ``budget_launches``/``budget_host_seconds``;
    ``experiment.cost_estimate_s`` is this launch's estimate in modelled host-seconds. ``error`` says why
    the previous answer to this request was refused (the person is asked again).
    """

    kind: Literal["approval"] = "approval"
    run_id: str
    experiment: Experiment
    step: int
    tests: list[str] = Field(default_factory=list)
    hypotheses: list[HypothesisLine] = Field(default_factory=list)
    launches: int = 0
    budget_launches: int = 0
    host_seconds: float = 0.0
    budget_host_seconds: float = 0.0
    mode: str = "each"
    risky: list[str] = Field(default_factory=list)
    error: str | None = None
    #: With ``--parallel N``: the batch this experiment belongs to, one line per experiment (``*`` marks
    #: this one), asked about one by one; ``{"decision": "approve", "all": true}`` approves the rest too.
    batch: list[str] = Field(default_factory=list)
    lead_blocked: LeadBlocked | None = None
    choices: list[str] = Field(default_factory=lambda: ["approve", "edit", "reject", "stop"])
    answer_format: str = (
        '{"decision": "approve"} | {"decision": "edit", "set": ["--attention-backend=triton"]} | '
        '{"decision": "reject", "reason": "..."} | {"decision": "stop"}'
    )


@dataclass(frozen=True)
class RequestContext:
    """The run around an experiment waiting for approval: what it has spent (``launches``, and
    ``host_seconds`` in modelled host-seconds) against its budget, the approval ``mode``, why the change
    is risky (``risky``), why the previous answer was refused (``error``), the lines of the parallel
    batch it belongs to (``batch``) and the note on a blocked leading hypothesis (``lead_blocked``)."""

    run_id: str
    launches: int
    host_seconds: float
    budget_launches: int
    budget_host_seconds: float
    mode: str
    risky: Sequence[str] = ()
    error: str | None = None
    batch: Sequence[str] = ()
    lead_blocked: LeadBlocked | None = None
    #: the number the experiment is shown with (``agent.run.state.next_step``); 0: ``launches + 1``
    step: int = 0


def build_request(exp: Experiment, hypotheses: Sequence[Hypothesis], ctx: RequestContext) -> ApprovalRequest:
    """The approval request for ``exp`` given the run's ledger (``hypotheses``) and ``ctx`` (pure; no I/O)."""
    predicted = {p.hypothesis_id: p.expect for p in exp.predictions}
    live = sorted((h for h in hypotheses if h.status in ("open", "supported")), key=lambda h: -h.posterior)
    lines = [
        HypothesisLine(
            id=h.id,
            statement=h.statement,
            component=h.component,
            posterior=h.posterior,
            status=h.status,
            predicts=predicted.get(h.id, "persists"),
        )
        for h in live
    ]
    tests = [ln.id for ln in lines if ln.predicts != "persists"]
    return ApprovalRequest(
        run_id=ctx.run_id,
        experiment=exp,
        step=ctx.step or ctx.launches + 1,
        tests=tests,
        hypotheses=lines,
        launches=ctx.launches,
        budget_launches=ctx.budget_launches,
        host_seconds=round(ctx.host_seconds, 3),  # as the run keeps it: one rounding, when shown
        budget_host_seconds=ctx.budget_host_seconds,
        mode=ctx.mode,
        risky=list(ctx.risky),
        error=ctx.error,
        batch=list(ctx.batch),
        lead_blocked=ctx.lead_blocked,
        # a baseline or confirmation run changes nothing: there is no change to edit
        choices=["approve", "edit", "reject", "stop"] if exp.purpose == "test" and exp.change is not None
        else ["approve", "reject", "stop"],
    )


def _edit_text(change: Change) -> str:
    """A change as the edit prompt reads it: ``--flag=value``, ``--switch``, ``NAME=value``."""
    if change.after is True:
        return change.name
    return f"{change.name}={'' if change.after is None else change.after}"


#: Says what ``Hypothesis`` expects of an experiment that makes ``Change`` (None: the unchanged baseline):
#: ``fixed``, ``may_fix`` or ``persists``.
_Predict = Callable[[Hypothesis, Change | None], str]


class _EditOffers:
    """The edits offered so far: each change once, none run or rejected before, at most ``most``."""

    def __init__(self, view: PlannerView, most: int) -> None:
        self.seen = {r.change_key for r in view.rejections if r.change_key}
        self.seen |= {e.change.key() for e in view.experiments if e.change is not None and e.status == "done"}
        self.most = most
        self.edits: list[EditOffer] = []

    def offer(self, change: Change, why: str) -> None:
        if change.key() not in self.seen and len(self.edits) < self.most:
            self.seen.add(change.key())
            self.edits.append(EditOffer(set=_edit_text(change), why=why))


def _legal_flag_change(flags: FlagCatalog | None, baseline: Baseline, name: str, value: FlagValue) -> Change | None:
    """The flag change setting ``name`` to ``value``, canonical and normalised by the catalog; None without
    a catalog, when the host would refuse it, or when the baseline already has that value."""
    if flags is None:
        return None
    try:
        canon, norm = flags.validate(name, value)
    except FlagError:
        return None
    before = baseline.value("flag", canon)
    return None if value_key(before) == value_key(norm) else Change(kind="flag", name=canon, before=before, after=norm)


def _blocked_lead(
    exp: Experiment, live: Sequence[Hypothesis], view: PlannerView, predict: _Predict
) -> tuple[Hypothesis, Rejection] | None:
    """The leading live hypothesis and the last rejection of a change that tested it, when ``exp`` (a
    test) does not test it; else None."""
    if not live or exp.purpose != "test":
        return None
    lead = max(live, key=lambda h: h.posterior)
    if predict(lead, exp.change) != "persists":
        return None
    blocked = [r for r in view.rejections if r.change is not None and predict(lead, r.change) != "persists"]
    if not blocked:
        return None
    return lead, blocked[-1]


def _offer_other_interventions(
    lead: Hypothesis,
    rejected: Change,
    baseline: Baseline,
    flags: FlagCatalog | None,
    predict: _Predict,
    offers: _EditOffers,
) -> None:
    """Offer the first legal change of each of ``lead``'s interventions that it predicts fixes the
    failure and that does not set the rejected variable."""
    for iv in lead.interventions:
        for name in iv.names:
            changes = [
                Change(kind="env", name=name, before=baseline.value("env", name), after=v)
                if iv.kind == "env"
                else _legal_flag_change(flags, baseline, name, v)
                for v in iv.values
            ]
            change = next((c for c in changes if c is not None), None)
            if change is not None:
                if predict(lead, change) != "persists" and value_key(change.name) != value_key(rejected.name):
                    offer_why = f"another intervention of {lead.id} (it predicts: {predict(lead, change)})"
                    offers.offer(change, offer_why)
                break


def _offer_other_values(
    lead: Hypothesis,
    rejected: Change,
    view: PlannerView,
    baseline: Baseline,
    flags: FlagCatalog | None,
    predict: _Predict,
    offers: _EditOffers,
) -> None:
    """Offer the other values the host accepts for the rejected flag (its ``--help`` choices), without
    the default, the effective values of the baseline's own failing run and of the last failing run,
    ``auto`` when the flag is unset, and the values the host refused on this run (a failing launch's
    error said the setting allows only others: ``allowed_by_errors``)."""
    if rejected.kind != "flag" or flags is None:
        return
    try:
        spec = flags.resolve(rejected.name)
    except FlagError:
        spec = None
    failing = [o for o in view.outcomes if o.stage != "ok"]
    own = [o for e in view.experiments if e.config() == baseline and (o := view.outcome_of(e.id)) and o.stage != "ok"]
    facts = own[-1].facts if own else (failing[-1].facts if failing else {})
    effective = {value_key(v) for o in (own[-1:] + failing[-1:]) for v in o.facts.values()}
    allowed = allowed_by_errors(failing, flags).get(spec.name) if spec else None
    fact = next((iv.fact for iv in lead.interventions if iv.fact and iv.fact in facts), None)
    now = f"the failing run's {facts[fact]}" if fact else f"{rejected.before or 'the default'}"
    unset = baseline.value("flag", spec.name) is None if spec else False
    for choice in (spec.choices or []) if spec else []:
        change = _legal_flag_change(flags, baseline, rejected.name, choice)
        if (
            change is None
            or value_key(choice) == value_key(spec.default if spec else None)
            # SGLang spells "let the server choose" as auto: with the flag unset, that is the baseline
            or (unset and value_key(choice) == "auto")
            or value_key(choice) in effective
            or (allowed is not None and str(choice).lower() not in allowed)  # the host refused it
            or predict(lead, change) != "persists"  # the rejected value in another spelling
        ):
            continue
        offers.offer(change, f"another value than {now}: the ledger predicts nothing for it; whether it fails "
                     f"tells whether the fault is tied to {facts[fact] if fact else 'that value'}")


def lead_blocked(
    exp: Experiment,
    hypotheses: Sequence[Hypothesis],
    view: PlannerView,
    *,
    flags: FlagCatalog | None,
    predict: Callable[[Hypothesis, Change | None], str],
    most: int = 4,
) -> LeadBlocked | None:
    """Whether the leading hypothesis (the most probable open or supported one) lost its test to a
    rejection while ``exp`` does not test it; then the note the approval screen shows, with edits that
    test it another way. Pure: reads the flag catalog object, no host.

    The edits, in order: the hypothesis's other interventions (a value the host accepts, not the
    rejected change in another spelling, not run or rejected before), which the ledger predicts fix
    the failure; then other values the host accepts for the variable of the rejected test (its
    ``--help`` choices, without the baseline's, the failing run's effective value and the default), on
    which the ledger predicts nothing: they say whether the fault is tied to the rejected value.
    """
    live = [h for h in hypotheses if h.status in ("open", "supported")]
    found = _blocked_lead(exp, live, view, predict)
    if found is None:
        return None
    lead, rejected = found
    assert rejected.change is not None
    offers = _EditOffers(view, most)
    _offer_other_interventions(lead, rejected.change, exp.baseline, flags, predict, offers)
    _offer_other_values(lead, rejected.change, view, exp.baseline, flags, predict, offers)
    instead = [
        f"{p.hypothesis_id} (p={next((h.posterior for h in live if h.id == p.hypothesis_id), 0.0):.2f})"
        for p in exp.predictions
        if p.expect != "persists"
    ]
    return LeadBlocked(
        hypothesis_id=lead.id,
        statement=lead.statement,
        posterior=lead.posterior,
        rejected=rejected.change.describe(),
        reason=rejected.reason,
        instead=instead,
        edits=offers.edits,
    )


class ApprovalAnswer(BaseModel):
    """A person's (or a policy's) answer to an approval request.

    ``set``: for an edit, the one change as text: ``--flag VALUE``, ``--flag=VALUE``, ``NAME=VALUE`` for an
    environment variable (``NAME=`` unsets it, ``--flag=`` removes the flag), or a bare value for the
    proposed variable. ``decision="approve"`` with ``set`` is an edit. ``experiment_id``: the experiment
    the answer is meant for; an answer for another one is refused (a stale or repeated answer never
    approves whatever is waiting now). ``mode``: switch the approval mode for the rest of the run.
    """

    decision: Decision
    reason: str | None = None
    set: list[str] = Field(default_factory=list)
    experiment_id: str | None = None
    mode: ApprovalMode | None = None
    by: str = "user"
    #: With ``decision="approve"`` in a parallel batch: approve the rest of the batch as proposed too.
    all: bool = False

    @model_validator(mode="after")
    def _edit(self) -> ApprovalAnswer:
        if self.decision == "approve" and self.set:
            self.decision = "edit"
        return self

    @classmethod
    def parse(cls, raw: Any) -> ApprovalAnswer:
        """An answer from what a client sent: a dict, or a word (``approve``, ``y``, ``reject``, ``stop``).

        Raises ValueError with a one-line message for anything else.
        """
        if isinstance(raw, ApprovalAnswer):
            return raw
        if isinstance(raw, str):
            word = raw.strip().lower()
            words = {
                "y": "approve",
                "yes": "approve",
                "a": "approve",
                "n": "reject",
                "no": "reject",
                "s": "stop",
            }
            raw = {"decision": "approve", "all": True} if word in ("all", "approve-all") else {
                "decision": words.get(word, word)
            }
        if not isinstance(raw, dict):
            raise ValueError(f"expected an answer like {{'decision': 'approve'}}, got {raw!r}")
        raw = dict(raw)
        if isinstance(raw.get("set"), str):
            raw["set"] = [raw["set"]]
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "answer"
            raise ValueError(f"answer field '{field}': {err['msg']}") from None
