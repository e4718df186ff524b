"""Approving experiments: when to ask, what a person sees, what they may answer.

Modes (``--approve``): ``each`` asks before every launch (the default: a GPU host is expensive and
shared), ``risky`` asks only when the experiment's change matches a rule in ``knowledge/risky.toml``,
``auto`` never asks. The approve node ``interrupt()``s with an :class:`ApprovalRequest` (JSON-plain, so
``hypoloop show``, a resumed process and LangGraph Studio all read the same thing) and resumes with an
:class:`ApprovalAnswer`: approve, edit (a different value or variable: still exactly one change, and
it passes the same guard rails as a planner's proposal), reject with a reason, or stop.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, model_validator
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agent.domain.models import (
    Baseline,
    Change,
    Experiment,
    FlagValue,
    Hypothesis,
    Prediction,
    Rejection,
    value_key,
)
from agent.planning.guard import GuardError, check_experiment
from agent.planning.planner import PlannerView
from agent.review.wording import count
from tools.flags import FlagCatalog, FlagError

ApprovalMode = Literal["each", "risky", "auto"]
Decision = Literal["approve", "edit", "reject", "stop"]
APPROVAL_MODES: tuple[str, ...] = get_args(ApprovalMode)

#: An environment-variable assignment in an edit: upper-case names only, so that ``kv-cache-dtype=bf16``
#: or ``kv_cache_dtype=bf16`` read as flags.
_ENV_ASSIGN = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$")
_FLAG_ASSIGN = re.compile(r"^(?P<name>[a-z][a-z0-9_-]*)=(?P<value>.*)$")


class RiskRulesError(ValueError):
    """A risky-changes file that cannot be used; one line naming the file, the entry and the field."""


class EditError(ValueError):
    """An edit that cannot run; the message says why in one line and how to say it instead."""


# ---------------------------------------------------------------------------------------- policy


class RiskRule(BaseModel):
    """One ``[[risky]]`` entry of ``knowledge/risky.toml`` (field meanings at the top of that file)."""

    id: str
    why: str
    kind: Literal["flag", "env"] | None = None
    name: str | None = None
    name_matches: str | None = None
    above: float | None = None
    below: float | None = None
    value_matches: str | None = None
    unset: bool | None = None

    def matches(self, change: Change) -> bool:
        """Whether every condition this rule gives holds for ``change``."""
        if self.kind is not None and change.kind != self.kind:
            return False
        if self.name is not None and change.name != self.name:
            return False
        if self.name_matches is not None and not re.search(self.name_matches, change.name):
            return False
        if self.unset is not None and (change.after is None) != self.unset:
            return False
        text = "" if change.after is None else str(change.after)
        if self.value_matches is not None and not re.search(self.value_matches, text):
            return False
        if self.above is not None or self.below is not None:
            try:
                number = float(text)
            except ValueError:
                return False
            if self.above is not None and not number > self.above:
                return False
            if self.below is not None and not number < self.below:
                return False
        return True


def default_risk_rules_path() -> Path:
    """``risky.toml`` of the knowledge folder in force (``agent.domain.knowledge_dir``; default the repository's)."""
    from agent.domain.knowledge_dir import knowledge_file

    return knowledge_file("risky.toml")


_RULES_CACHE: dict[Path, list[RiskRule]] = {}


def load_risk_rules(path: Path | None = None) -> list[RiskRule]:
    """The risky-change rules (cached per path). Raises RiskRulesError naming the file, entry and field."""
    path = path or default_risk_rules_path()
    if path in _RULES_CACHE:
        return _RULES_CACHE[path]
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RiskRulesError(f"{path}: {exc}") from None
    rules = []
    for i, raw in enumerate(data.get("risky", [])):
        try:
            rule = RiskRule.model_validate(raw)
            for pattern in (rule.name_matches, rule.value_matches):
                if pattern is not None:
                    re.compile(pattern)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise RiskRulesError(
                f"{path}: risky #{i + 1} ({raw.get('id', '?')}): field '{field}': {err['msg']}"
            ) from None
        except re.error as exc:
            raise RiskRulesError(f"{path}: risky #{i + 1} ({raw.get('id', '?')}): bad regex: {exc}") from None
        rules.append(rule)
    _RULES_CACHE[path] = rules
    return rules


def risky_reasons(exp: Experiment, rules: Sequence[RiskRule]) -> list[str]:
    """``"id: why"`` of every rule the experiment's change matches (none for baseline/confirm runs)."""
    if exp.change is None:
        return []
    return [f"{r.id}: {r.why}" for r in rules if r.matches(exp.change)]


def must_ask(mode: str | None, risky: Sequence[str]) -> bool:
    """Whether a person must answer before this experiment runs in approval ``mode``."""
    if mode == "auto":
        return False
    if mode == "risky":
        return bool(risky)
    return True


# ---------------------------------------------------------------------------------------- request


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


def build_request(
    *,
    run_id: str,
    exp: Experiment,
    hypotheses: Sequence[Hypothesis],
    launches: int,
    host_seconds: float,
    budget_launches: int,
    budget_host_seconds: float,
    mode: str,
    risky: Sequence[str],
    error: str | None = None,
    batch: Sequence[str] = (),
    lead_blocked: LeadBlocked | None = None,
) -> ApprovalRequest:
    """The approval request for ``exp`` given the run's ledger and spending (pure; no I/O); ``batch``:
    the lines of the parallel batch it belongs to."""
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
        run_id=run_id,
        experiment=exp,
        step=launches + 1,
        tests=tests,
        hypotheses=lines,
        launches=launches,
        budget_launches=budget_launches,
        host_seconds=round(host_seconds, 1),
        budget_host_seconds=budget_host_seconds,
        mode=mode,
        risky=list(risky),
        error=error,
        batch=list(batch),
        lead_blocked=lead_blocked,
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
    the default, the failing run's effective values, and ``auto`` when the flag is unset."""
    if rejected.kind != "flag" or flags is None:
        return
    try:
        spec = flags.resolve(rejected.name)
    except FlagError:
        spec = None
    facts = next((o.facts for o in reversed(view.outcomes) if o.stage != "ok"), {})
    effective = {value_key(v) for v in facts.values()}
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


# ---------------------------------------------------------------------------------------- answer


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


# ---------------------------------------------------------------------------------------- edit


def _show(v: FlagValue) -> str:
    return "(unset)" if v is None else ("(on)" if v is True else str(v))


#: ``--flag={"k": "v"}``, ``flag={"k": "v"}`` or ``--flag {"k": "v"}``: a JSON object or array as one flag's value, as a shell
#: passes ``--set '--json-model-override-args={"a": 1}'`` or a person types it at the prompt.
_JSON_SETTING = re.compile(
    r"^\s*(?P<name>(?:--)?[A-Za-z0-9][\w-]*)(?:=|\s+)(?P<value>[\[{].*?)\s*$", re.DOTALL
)


def parse_edit(
    items: Sequence[str], *, current: Change | None, flags: FlagCatalog | None
) -> tuple[Literal["flag", "env"], str, FlagValue]:
    """Read an edit's text into ``(kind, name, value)``; ``value`` ``None`` removes the flag/variable.

    Accepts ``--flag VALUE``, ``--flag=VALUE``, a bare ``--switch``, ``flag-name=VALUE``, ``NAME=VALUE``
    (upper-case: an environment variable) and, when ``current`` is given, a bare ``VALUE`` for the
    proposed variable. Raises EditError when the text holds anything but exactly one change.
    """
    tokens: list[str] = []
    for item in items:
        if m := _JSON_SETTING.match(item):  # JSON keeps its quotes and spaces: no shell-style split
            tokens.append(f"{m['name']}={m['value']}")
            continue
        try:
            tokens += shlex.split(item)
        except ValueError as exc:
            raise EditError(f"cannot read {item!r}: {exc}") from None
    if not tokens:
        raise EditError("empty edit: give one change, e.g. --attention-backend triton or NCCL_P2P_DISABLE=1")
    changes: list[tuple[Literal["flag", "env"], str, FlagValue]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-"):
            name, eq, value = tok.partition("=")
            if eq:
                changes.append(("flag", name, value if value != "" else None))
            else:
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                takes: bool | None = None
                if flags is not None:
                    try:
                        takes = flags.resolve(name).takes_value
                    except FlagError:
                        takes = None
                if (
                    takes is not False
                    and nxt is not None
                    and not nxt.startswith("-")
                    and not _ENV_ASSIGN.match(nxt)
                ):
                    changes.append(("flag", name, nxt))
                    i += 1
                else:
                    changes.append(("flag", name, True))
        elif m := _ENV_ASSIGN.match(tok):
            changes.append(("env", m["name"], m["value"] if m["value"] != "" else None))
        elif m := _FLAG_ASSIGN.match(tok):
            changes.append(("flag", m["name"], m["value"] if m["value"] != "" else None))
        elif len(tokens) == 1 and current is not None and not tok.startswith("="):
            changes.append((current.kind, current.name, tok))
        else:
            raise EditError(f"{tok!r}: expected --flag VALUE, --flag=VALUE or NAME=VALUE")
        i += 1
    if len(changes) != 1:
        named = ", ".join(name for _, name, _ in changes)
        raise EditError(
            f"an experiment changes exactly one variable; this edit changes {len(changes)} ({named}). "
            "Give one change, e.g. --attention-backend triton or NCCL_P2P_DISABLE=1"
        )
    return changes[0]


def apply_edit(
    exp: Experiment,
    items: Sequence[str],
    *,
    view: PlannerView,
    flags: FlagCatalog | None,
    hypotheses: Sequence[Hypothesis],
    predict: Callable[[Hypothesis, Change | None], str],
    by: str = "user",
) -> Experiment:
    """The experiment a person's edit of ``exp`` asks for: the same baseline, one different change.

    The change is normalised through the host's flag catalog (canonical name, legal value) and the new
    experiment passes ``check_experiment`` like any planner proposal; each open hypothesis's prediction
    is recomputed with ``predict``. Raises EditError (one line) when it cannot run.
    """
    if exp.purpose != "test" or exp.change is None:
        raise EditError(
            f"a {exp.purpose} run changes nothing, so there is no change to edit; approve, reject or stop it"
        )
    kind, name, value = parse_edit(items, current=exp.change, flags=flags)
    if kind == "flag":
        try:
            if value is None:
                canon, after = (flags.resolve(name).name if flags else name), None
            else:
                canon, after = flags.validate(name, value) if flags else (name, value)
        except FlagError as exc:
            raise EditError(str(exc)) from None
    else:
        canon, after = name, value
    if not isinstance(after, str | bool | type(None)):
        after = str(after)
    before = exp.baseline.value(kind, canon)
    if (before is None and after is None) or (
        before is not None and after is not None and value_key(before) == value_key(after)
    ):
        raise EditError(f"{canon} is already {_show(before)} in the baseline; an edit must change it")
    change = Change(kind=kind, name=canon, before=before, after=after)
    live = [h for h in hypotheses if h.status in ("open", "supported")]
    new = Experiment(
        id=Experiment.make_id(exp.baseline, change, "test"),
        purpose="test",
        baseline=exp.baseline,
        change=change,
        predictions=[
            Prediction.model_validate({"hypothesis_id": h.id, "expect": predict(h, change)}) for h in live
        ],
        rationale=f"edited by {by}: proposed {exp.change.describe()}, runs {change.describe()} instead",
        cost_estimate_s=exp.cost_estimate_s,
        proposed_by=by,
    )
    try:
        check_experiment(new, view=view, flags=flags)
    except GuardError as exc:
        raise EditError(str(exc)) from None
    return new


# ---------------------------------------------------------------------------------------- screen

_PREDICTS = {"fixed": "[green]fixed[/]", "may_fix": "[yellow]may fix[/]", "persists": "[dim]persists[/]"}


def describe_experiment(exp: Experiment) -> str:
    """One line: the change as ``name: before → after``, or what a baseline/confirmation run does."""
    if exp.change is not None:
        return exp.change.describe()
    return {
        "baseline": "reproduce the failure on the baseline (no change)",
        "confirm": "re-run the fix to confirm it (no change)",
    }.get(exp.purpose, exp.purpose)


#: Hypotheses the approval screen lists one by one; the rest are one line (``[h]`` shows them all).
SHOWN_HYPOTHESES = 3


def approval_panel(req: ApprovalRequest, *, full: bool = False) -> Panel:
    """The approval screen, read bottom-up from the prompt: the choices, the change and what it tests
    right above them, then the cost, the likeliest few hypotheses and one line for the rest (``full``:
    every open hypothesis with its statement). Fits 80 × 24 for a usual request (tested in tmux)."""
    exp = req.experiment
    by_id = {h.id: h for h in req.hypotheses}
    parts: list[Any] = []
    if req.hypotheses:
        # The statement goes under its id, so the id keeps a line of its own on a narrow terminal (side by
        # side, an 80-column screen folded ids mid-word: lowprec-kv-cache-attention-n / umerics).
        shown = req.hypotheses if full else _screen_hypotheses(req)
        if full:  # one block each, the id on a line of its own at the panel's full width: never folded
            rows = [
                f"{h.posterior:.2f}  {_PREDICTS[h.predicts]}\n  {escape(h.id)}\n  [dim]{escape(h.statement)}[/]"
                for h in shown
            ]
            parts.append("[bold]p  predicts / hypothesis[/]\n" + "\n".join(rows))
            shown = []
        t = Table(box=None, padding=(0, 1), header_style="bold")
        t.add_column("p", no_wrap=True)
        t.add_column("predicts", no_wrap=True)
        t.add_column(
            "hypothesis" if full else f"hypothesis ({len(shown)} of {len(req.hypotheses)})", overflow="fold"
        )
        for h in shown:
            t.add_row(f"{h.posterior:.2f}", _PREDICTS[h.predicts], escape(h.id))
        rest = [h for h in req.hypotheses if h not in shown]
        if rest and not full:
            preds = sorted({_PREDICTS[h.predicts] for h in rest})
            t.add_row(
                f"≤{max(h.posterior for h in rest):.2f}",
                preds[0] if len(preds) == 1 else "mixed",
                f"+ {len(rest)} more: press h to list them",
            )
        if not full:
            parts.append(t)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")  # a word wider than the column folds: nothing ends in '…'
    grid.add_row(
        "cost",
        f"~{exp.cost_estimate_s:.0f} host-s; so far {req.launches} of "
        f"{count(req.budget_launches, 'launch')}, {req.host_seconds:.0f} of {req.budget_host_seconds:.0f} host-s",
    )
    if req.batch:
        grid.add_row("batch", escape("\n".join(req.batch)))
    for r in req.risky:
        grid.add_row("[red]risky[/]", escape(r))
    if exp.rationale and full:
        grid.add_row("why", f"[dim]{escape(exp.rationale)}[/]")
    if req.tests:
        tested = "; ".join(
            f"{escape(h)} (p={by_id[h].posterior:.2f}): {escape(by_id[h].statement)}" for h in req.tests
        )
        grid.add_row("purpose", f"tests {tested}")
    elif exp.purpose == "baseline":
        grid.add_row("purpose", "reproduce the failure and collect the failing run's log evidence")
    elif exp.rationale:
        grid.add_row("purpose", escape(exp.rationale))
    grid.add_row("change", f"[bold magenta]{escape(describe_experiment(exp))}[/]")
    parts.append(grid)
    if req.lead_blocked is not None:
        parts.append(_lead_blocked_text(req.lead_blocked))
    if req.error:
        parts.append(f"[bold red]previous answer refused:[/] {escape(req.error)}")
    more = "  [h] list all" if req.hypotheses and not full else ""
    parts.append(escape(f"[a]pprove  [e]dit one change  [r]eject with a reason  [s]top{more}"))
    if req.batch:
        parts.append(escape("[all]: approve this one and the rest of the batch as proposed"))
    return Panel(
        Group(*parts),
        title=f"approve experiment {req.step}? [dim]{exp.id}[/]",
        title_align="left",
        border_style="red" if req.risky else "cyan",
    )


def _screen_hypotheses(req: ApprovalRequest) -> list[HypothesisLine]:
    """The hypotheses the compact screen lists: those the experiment tests, then the likeliest, up to
    ``SHOWN_HYPOTHESES`` (more only when it tests more), in falling probability."""
    tested = [h for h in req.hypotheses if h.predicts != "persists"]
    room = max(SHOWN_HYPOTHESES - len(tested), 0)
    others = [h for h in req.hypotheses if h.predicts == "persists"][:room]
    return sorted([*tested[:SHOWN_HYPOTHESES], *others], key=lambda h: -h.posterior) if tested or others else []


def _lead_blocked_text(lb: LeadBlocked) -> Group:
    """The note on the leading hypothesis whose test was rejected (see ``lead_blocked``)."""
    instead = f" This experiment tests {', '.join(lb.instead)} instead." if lb.instead else ""
    lines: list[Any] = [
        Text.from_markup(
            f"[bold yellow]⚠ the leading hypothesis {escape(lb.hypothesis_id)} (p={lb.posterior:.2f}) can no "
            f"longer be tested as proposed:[/] its test [magenta]{escape(lb.rejected)}[/] was rejected "
            f"({escape(lb.reason)}).{escape(instead)}"
        )
    ]
    if lb.edits:
        lines.append(Text("  to test it another way, [e]dit with one of:"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold magenta", overflow="fold")
        grid.add_column(overflow="fold")
        for offer in lb.edits:
            grid.add_row(f"    {escape(offer.set)}", escape(offer.why))
        lines.append(grid)
    else:
        lines.append(Text("  no other test of it is known: edit a change of your own, approve, or stop."))
    return Group(*lines)


def ask(
    req: ApprovalRequest,
    console: Console,
    *,
    check_edit: Callable[[list[str]], Experiment],
    read: Callable[[str], str] | None = None,
) -> ApprovalAnswer:
    """Show the approval screen and read an answer at the terminal; asks again after a refused edit.

    ``check_edit`` validates an edit exactly as the approve node will (raising EditError). ``read``
    defaults to ``console.input``; EOFError (Ctrl-D) and KeyboardInterrupt propagate to the caller.
    """
    reader = read or (lambda prompt: console.input(Text(prompt)))  # Text: no markup, no highlighting
    console.print(approval_panel(req))
    exp_id = req.experiment.id
    while True:
        word = reader("[a]pprove / [e]dit / [r]eject / [h]ypotheses / [s]top: ").strip().lower()
        if word in ("h", "hypotheses", "more"):
            console.print(approval_panel(req, full=True))
            continue
        if word in ("a", "approve", "y", "yes"):
            return ApprovalAnswer(decision="approve", experiment_id=exp_id)
        if word in ("all", "approve-all") and req.batch:
            return ApprovalAnswer(decision="approve", all=True, experiment_id=exp_id)
        if word in ("e", "edit"):
            while True:  # a refused edit asks for the change again; empty goes back to the menu
                text = reader(
                    "one change (e.g. --attention-backend triton, NCCL_P2P_DISABLE=1, or a new value; "
                    "empty: back): "
                ).strip()
                if not text:
                    break
                try:
                    new = check_edit([text])
                except EditError as exc:
                    console.print(f"[bold red]edit refused:[/] {escape(str(exc))}", highlight=False)
                    continue
                console.print(f"edited: [bold magenta]{escape(describe_experiment(new))}[/]", highlight=False)
                return ApprovalAnswer(decision="edit", set=[text], experiment_id=exp_id)
            continue
        if word in ("r", "reject", "n", "no"):
            reason = reader("reason (recorded; this experiment will not be proposed again): ").strip()
            if not reason:
                console.print("a rejection needs a reason")
                continue
            return ApprovalAnswer(decision="reject", reason=reason, experiment_id=exp_id)
        if word in ("s", "stop", "q", "quit"):
            return ApprovalAnswer(decision="stop", experiment_id=exp_id)
        console.print("answer a (approve), e (edit), r (reject) or s (stop)")
