"""What the LLM planner accepts of a model's answer: its change in canonical form on this host
(``single_change``, ``checked_change``: a known flag with a legal value, or a plain environment variable, that changes the
baseline), its new hypotheses as catalog entries (``fresh_entries``), and the feedback sent back when an
answer is refused (``Refused``, ``feedback``)."""

from __future__ import annotations

import re

from agent.domain.models import Baseline, Change, FlagValue, Hypothesis, Intervention
from agent.planning.catalog import CatalogEntry
from agent.planning.llm_answer import LLMChange, LLMDecision, LLMExperiment
from agent.planning.view import HistoryState
from tools.flags import FlagCatalog, FlagError

#: Hypotheses the model may add per answer.
MAX_NEW_PER_ANSWER = 3
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Refused(Exception):
    """A proposal the guard rails refuse; the message is fed back to the model."""


def checked_change(ch: LLMChange, baseline: Baseline, flags: FlagCatalog | None) -> Change:
    """A Change in canonical form against ``baseline``, or Refused (unknown flag, illegal value, shell
    characters, no change). Flag names and values are checked with the host's flag catalog
    (``FlagCatalog.resolve``/``validate``); without one, flag changes are refused."""
    kind, value = ch.kind, ch.value
    name = ch.name.strip()
    after: FlagValue
    if kind == "flag":
        if flags is None:
            raise Refused("no flag catalog: flag changes cannot be checked on this host")
        try:
            if value is None or value is False:
                name, after = flags.resolve(name).name, None
            else:
                name, after = flags.validate(name, value)
        except FlagError as exc:
            raise Refused(str(exc)) from None
    else:
        if not _ENV_NAME.match(name):
            raise Refused(f"env {name!r}: expected a variable name like NCCL_P2P_DISABLE")
        after = None if value is None or value is False else ("1" if value is True else str(value))
    before = baseline.value(kind, name)
    if (before is None and after is None) or (
        before is not None and after is not None and str(before) == str(after)
    ):
        raise Refused(
            f"{name} is already {'(unset)' if before is None else before} in the baseline; an experiment must change it"
        )
    return Change(kind=kind, name=name, before=before, after=after)


def single_change(spec: LLMExperiment | None, baseline: Baseline, flags: FlagCatalog | None) -> Change:
    """The one change of the model's experiment, checked (``checked_change``); Refused when the answer
    has no experiment or changes other than exactly one variable."""
    if spec is None:
        raise Refused('action is "experiment" but no experiment was given')
    if len(spec.changes) != 1:
        listed = ", ".join(c.text() for c in spec.changes) or "none"
        raise Refused(
            f"an experiment changes exactly one variable; this proposal changes {len(spec.changes)} ({listed})"
        )
    return checked_change(spec.changes[0], baseline, flags)


def fresh_entries(
    decision: LLMDecision,
    state: HistoryState,
    change: Change,
    tests: list[str],
    *,
    kept: set[str],
    flags: FlagCatalog | None,
    model: str,
) -> tuple[list[CatalogEntry], list[str]]:
    """Catalog entries for the model's new hypotheses (ids ``model:<slug>``, at most
    ``MAX_NEW_PER_ANSWER``, none already in the ledger or among the model's ``kept`` hypotheses); a test
    that is not a legal change against ``state.baseline`` is dropped (listed in the second value), a
    hypothesis this experiment tests without its own test gets the experiment's ``change``. ``model``
    names the endpoint's model in each entry's source."""
    entries: list[CatalogEntry] = []
    dropped: list[str] = []
    known = {h.id for h in state.hypotheses}
    existing = kept | known
    for h in decision.new_hypotheses[:MAX_NEW_PER_ANSWER]:
        slug = re.sub(r"[^a-z0-9]+", "-", h.id.lower().removeprefix("model:")).strip("-")[:48] or "h"
        hid = f"model:{slug}"
        if hid in existing or h.id in known:
            continue
        iv: Intervention | None = None
        if h.test is not None:
            try:
                tc = checked_change(h.test, state.baseline, flags)
                iv = Intervention(kind=tc.kind, names=[tc.name], values=[tc.after], decisive=h.decisive)
            except Refused as exc:
                dropped.append(f"{hid}: test {h.test.text()} dropped: {exc}")
        if iv is None and (h.id in tests or hid in tests):
            iv = Intervention(kind=change.kind, names=[change.name], values=[change.after], decisive=h.decisive)
        entries.append(
            CatalogEntry(
                id=hid,
                statement=" ".join(h.statement.split())[:300],
                component=(h.component.strip() or "unknown")[:60],
                rationale=" ".join((decision.reasoning or h.statement).split())[:300],
                source=f"LLM planner ({model})",
                prior=h.prior,
                intervention=[iv] if iv else [],
            )
        )
        existing.add(hid)
    return entries, dropped


def as_hypothesis(e: CatalogEntry) -> Hypothesis:
    """A model's new catalog entry as a ledger hypothesis at its prior (``source="model"``)."""
    return Hypothesis(
        id=e.id,
        statement=e.statement,
        component=e.component,
        prior=e.prior,
        posterior=e.prior,
        source="model",
        interventions=list(e.intervention),
    )


def feedback(kind: str, reason: str) -> str:
    """The message sent back to the model when its answer could not be read (``kind`` ``parse``) or
    was refused by the guard rails (``guard``)."""
    if kind == "parse":
        return (
            f"Your answer could not be read: {reason}. Answer again with exactly one JSON object in the "
            "shape given, and nothing else."
        )
    return (
        f"Refused, not executed: {reason}. Propose a different experiment that follows the rules (exactly "
        "one change against the current baseline, a flag from the catalog with a legal value or a plain "
        "environment variable, not run or rejected before), or conclude. Answer with the JSON object only."
    )
