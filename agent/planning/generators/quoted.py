"""A value the failing error says has the wrong type, held by one of the user's settings: the nearest value
of the right type (issue 20, point 2: an error that names a value is read as a remedy).

``Value error, invalid literal for int() with base 10: '1.5'`` names no setting, and its traceback ends in
pydantic; but when exactly one setting of the failing baseline holds ``1.5`` (``VLLM_CPU_KVCACHE_SPACE=1.5``,
compared by ``agent.planning.quoted.same_spelling``), that setting must be an integer, and the fix an
engineer makes is the whole number nearest the user's value (``1`` first: a tie goes toward zero, so a cap
stays a cap; then ``2``), which keeps what the user asked for. What each message says the value must be is
knowledge/value_types.toml (CPython's ``int()``, ``float()`` and argparse, pydantic's parsing errors); the
nearest value is ``agent.planning.quoted.nearest_of_kind``. Removing the setting is the settings
generator's revert, which the same quote implicates (``agent.planning.generators.settings``): a workaround
when the case's description gives the setting a purpose.
"""

from __future__ import annotations

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon
from agent.planning.quoted import (
    KIND_WORDS,
    Held,
    as_number,
    failing_lines,
    held_alone,
    nearest_of_kind,
    quoted_values,
)

__all__ = ["QuotedValueGenerator"]

#: The error quotes the user's value and says what type it must have: as strong as a setting the fatal
#: error itself says to move (``agent.planning.generators.remedies.WEIGHT_NAMED``, 0.6; not imported, which
#: would make the agent's import chain deeper), since the value picks out one setting as surely as its name
#: would.
WEIGHT = 0.6


class QuotedValueGenerator:
    """One candidate per setting whose value a type message quotes: ``typed:NAME``, the nearest values of
    the kind the message names."""

    name = "quoted"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """``typed:NAME`` for each setting of the failing baseline that alone holds a value a type message
        of the failing error quotes, when the value is a number of another kind."""
        if inp.evidence.stage == "ok":
            return []
        typed = [q for q in quoted_values(failing_lines(inp.evidence)) if q.kind is not None]
        out: list[Hypothesis] = []
        for held in held_alone(typed, inp.baseline):
            values = nearest_of_kind(held.quoted.kind, held.value)
            if values:
                out.append(self._candidate(inp, held, values))
        return out

    def _candidate(self, inp: GeneratorInput, held: Held, values: list[str]) -> Hypothesis:
        kind = held.quoted.kind or ""
        name = held.name
        if held.kind == "flag" and (spec := canon(inp.flags, name)) is not None:
            name = spec.name
        line = held.quoted.line
        said = " ".join(line.text.split())
        first = values[0]
        toward_zero = kind == "int" and abs(float(first)) < abs(as_number(held.value) or 0.0)
        return Hypothesis(
            id=f"typed:{name}",
            statement=f"{name} must be {KIND_WORDS[kind]}: the failing error ({held.quoted.said}) refuses the "
            f"user's {held.value.strip()}, which no other setting holds; {first}, the nearest value of that kind"
            + (" rounded toward zero (a bound the user set stays within it)" if toward_zero else "")
            + ", keeps the user's value nearest",
            component=f"env.{name}" if held.kind == "env" else f"config.{name.lstrip('-').replace('-', '_')}",
            weight=WEIGHT,
            rationale="the error quotes a value of one of the user's settings and says what type it must have: "
            "the nearest value of that type keeps what the user asked for",
            generator=self.name,
            evidence=[Evidence(kind="signature", detail=f"log line {line.line}: {said}",
                               experiment_id=inp.evidence.experiment_id, lines=[line.line])],
            interventions=[
                Intervention(kind=held.kind, names=[name], values=[v], decisive=True, cost="none",
                             note=f"{KIND_WORDS[kind]} nearest the user's {held.value} ({held.quoted.message}: {said})")
                for v in values
            ],
        )
