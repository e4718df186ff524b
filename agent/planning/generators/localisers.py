"""Localisers: for an asynchronous device fault whose report says it may be wrong, the launch that makes it
true (``knowledge/localisers.toml``, read by ``agent.planning.localise``).

The hypothesis is "the frame the error surfaced in is not where the kernel failed"; its one intervention
sets the localiser's variable. It predicts nothing about the symptom (``decisive = False``), and it is a
costly workaround should the failure vanish with it, so it is never reported as the fix; the chooser
launches it before any guess (``agent.planning.chooser``) and the history reads its frames
(``agent.planning.history``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.localise import applies, load_localisers

if TYPE_CHECKING:
    from agent.planning.generators import GeneratorInput

__all__ = ["LOCALISER_PREFIX", "LocaliserGenerator"]

#: Ledger ids of localiser hypotheses start with this.
LOCALISER_PREFIX = "localise:"
#: Its weight: small, it explains nothing; it is launched first for what it tells, not for its P(fix).
WEIGHT = 0.02


class LocaliserGenerator:
    """One candidate per localiser of knowledge/localisers.toml that the failing launch calls for."""

    name = "localiser"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Candidates ``localise:ID`` (see module docstring)."""
        out = []
        for loc in load_localisers():
            if not applies(loc, inp.evidence, inp.baseline, inp.fingerprint):
                continue
            m = next((m for m in inp.evidence.matches if m.signature_id == loc.signature), None)
            lines = list(m.line_numbers[:3]) if m is not None else []
            said = f": {m.first_line.strip()}" if m is not None else ""
            out.append(Hypothesis(
                id=f"{LOCALISER_PREFIX}{loc.id}",
                statement=loc.statement,
                component="diagnosis.frames",
                weight=WEIGHT,
                rationale=f"a localising launch ({loc.env}={loc.value}) fixes nothing but makes the report "
                f"true; then the next change is narrowed to the subsystem its frames name ({loc.source})",
                generator=self.name,
                evidence=[Evidence(kind="signature", detail=f"the log says its stack may be wrong{said}",
                                   experiment_id=inp.evidence.experiment_id, lines=lines)],
                interventions=[Intervention(
                    kind="env", names=[loc.env], values=[loc.value], decisive=False, cost="high",
                    workaround=True,
                    note=f"localiser: {loc.env}={loc.value} serialises every kernel launch (debugging only, "
                    "never the fix)")],
                triggers=[loc.signature],
            ))
        return out
