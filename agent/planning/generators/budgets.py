"""The user's budget raised to what the failure needs (issue 20, point 5: the root fix keeps the intent).

When the failing log says a budget is too small (a signature knowledge/budgets.toml names as the
budget's ``short``) and the case itself sets that budget (the user's own ``--kv-cache-memory-bytes
4096``), the change an engineer makes is the budget raised to what one request needs, rounded up to a
sensible size: the need the engine's error states, else the arithmetic of its KV-cache layout over the
model's config.json (``agent.planning.budgets``). Removing the budget is the settings generator's
revert; when the case's description says the user bounded the resource on purpose ("to save memory"),
that revert is a workaround that changes the deployment, and the raise is the root fix.
"""

from __future__ import annotations

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.budgets import (
    Budget,
    budget_bytes,
    budget_of,
    doubled,
    load_budgets,
    need_bytes,
    raised_value,
)
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon

__all__ = ["BudgetGenerator"]

#: Weight of "the user's budget is below what the failure needs": the engine's own message says the budget
#: is short and the user's value is that budget, as strong as a remedy the error names
#: (``agent.planning.generators.remedies.WEIGHT_ERROR``) and a value the error quotes
#: (``agent.planning.generators.settings.WEIGHT_VALUE_QUOTED``).
WEIGHT = 0.3


class BudgetGenerator:
    """One candidate per budget of the user's that the failure says is short: ``raise:NAME``."""

    name = "budgets"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Raises of the case's own budgets the failing log calls too small."""
        if inp.evidence.stage == "ok" or not load_budgets().budget:
            return []
        matched = {m.signature_id: m for m in inp.evidence.matches}
        out: list[Hypothesis] = []
        own = [("flag", n, v) for n, v in inp.case.baseline.flags.items()]
        own += [("env", n, v) for n, v in inp.case.baseline.env.items()]
        for kind, name, value in own:
            spec = canon(inp.flags, name) if kind == "flag" else None
            budget = budget_of(kind, spec.name if spec else name)
            if budget is None or inp.baseline.value(kind, name) is None:
                continue  # not a budget, or this run removed it
            short = next((matched[s] for s in budget.short if s in matched), None)
            if short is None:
                continue
            h = self._candidate(inp, budget, name, value, short.line_numbers[0] if short.line_numbers else None)
            if h is not None:
                out.append(h)
        return out

    def _candidate(self, inp: GeneratorInput, budget: Budget, name: str, value: object,
                   line: int | None) -> Hypothesis | None:
        if budget.unit == "count":
            raised, how = doubled(value)
            if raised is None:
                return None
        else:
            checkpoint = inp.fingerprint.checkpoint if inp.fingerprint else {}
            need, how = need_bytes(budget, inp.evidence.facts, inp.baseline, checkpoint)
            if need is None:
                return None
            have = budget_bytes(budget, value)
            raised = raised_value(budget, need)
            if have is not None and have >= (budget_bytes(budget, raised) or 0):
                return None  # already at least what the raise would set: the need is not the problem
        at = f" (log line {line})" if line else ""
        resource = load_budgets().resource_of(budget)
        return Hypothesis(
            id=f"raise:{name}",
            statement=f"The user's budget {name} {value} is below what one request needs ({how}); a budget "
            f"of {raised} holds it and keeps the bound the user set",
            component=resource.component if resource else f"config.{name.lstrip('-').replace('-', '_')}",
            weight=WEIGHT,
            rationale="the engine says the budget is too small, and the budget is the user's own setting: "
            "raising it to what is needed keeps it, removing it lets the engine size the resource itself",
            generator=self.name,
            evidence=[Evidence(kind="fact", detail=f"the failing log says the budget {name} is short{at}; "
                               f"one request needs {how}", experiment_id=inp.evidence.experiment_id)],
            interventions=[Intervention(
                kind=budget.kind, names=[name], values=[raised], derive="raise_budget", decisive=True, cost="none",
                note=f"the user's budget raised to what one request needs ({budget.source.split(' (')[0]})",
            )],
        )
