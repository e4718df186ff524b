"""Misspelt flags: a flag of the user's that the host's ``--help`` does not list, one typing slip away from
one it does (``--tp-sise 8`` and ``--tp-size``), meant that flag with that value.

The launcher refuses the unknown flag, so the first fix is its removal (a blocker, adopted once the server
gets further); but removing it also drops what the user asked for (eight ranks), and the next failure often
follows from that (the model no longer fits one GPU). An engineer reads the slip and sets the flag the user
meant to the user's value: that is the candidate here, once the misspelt flag is gone from the baseline and
the flag it was meant to be is not set. A slip is one character inserted, dropped, replaced, or two
neighbours swapped (optimal string alignment distance 1) in a name of five letters or more, matched by one
flag only; a flag carried over from another release is usually further from today's (``--enable-ep-moe``
and ``--enable-eplb``), and is left removed.
"""

from __future__ import annotations

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.generators import GeneratorInput
from agent.planning.misspelt import MIN_NAME, one_slip

__all__ = ["MisspeltFlagGenerator"]

#: The user's own value, read under a slip of the flag's name: as strong as a setting the fatal error names
#: (``remedies.WEIGHT_ERROR``, ``settings.WEIGHT_VALUE_QUOTED``); no new tunable.
WEIGHT = 0.3

class MisspeltFlagGenerator:
    """The flag a removed, unlisted flag of the user's was one slip away from, set to the user's value."""

    name = "misspelt"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Nothing without the host's flags, or while the misspelt flag is still in the baseline."""
        if inp.flags is None:
            return []
        options = {o: spec for spec in inp.flags.flags.values() for o in spec.option_strings if o.startswith("--")}
        out: list[Hypothesis] = []
        for name, value in inp.case.baseline.flags.items():
            if name in inp.baseline.flags or inp.flags.lookup(name) is not None or len(name) - 2 < MIN_NAME:
                continue
            near = {spec.name for o, spec in options.items() if one_slip(name, o)}
            if len(near) != 1:
                continue
            meant = inp.flags.resolve(near.pop())
            if any(o in inp.baseline.flags for o in meant.option_strings) or value in (None, False):
                continue
            shown = "" if value is True else f" {value}"
            out.append(Hypothesis(
                id=f"misspelt:{name}", component=f"config.{meant.name.lstrip('-').replace('-', '_')}",
                statement=f"The user's {name}{shown} is {meant.name}{shown} misspelt: the launcher refused it, and "
                          f"without {meant.name} the server runs another deployment than the one asked for",
                weight=WEIGHT, generator=self.name,
                rationale=f"{name} is one typing slip from {meant.name}, which the host's --help lists",
                evidence=[Evidence(kind="fact", detail=f"the case sets {name}{shown}, unknown to the host's --help and one "
                                   f"character from {meant.name}; it was removed to get past the launcher",
                                   experiment_id=inp.evidence.experiment_id)],
                interventions=[Intervention(names=[meant.name], values=[value], decisive=True, cost="none",
                                            note=f"what the user wrote as {name}")]))
        return out
