"""Settings against defaults: every setting the baseline makes itself, reverted alone.

Delta debugging over the explicit settings (Zeller, "Yesterday, my program worked. Today, it does not.
Why?", 1999) with one-variable steps: if one explicit flag or environment variable causes the failure,
removing it (so SGLang's default or auto-resolution applies) fixes it. Low weight: the generic fallback
that keeps a run from ending "nothing left to try" while reversions remain in budget. Settings that say
what the deployment *is* (model, parallel layout, checkpoint format: ``agent.models.IDENTITY_FLAGS``) are
never reverted.
"""

from __future__ import annotations

from agent.generators import Candidate, GeneratorInput
from agent.generators.common import canon
from agent.models import IDENTITY_ENV, IDENTITY_FLAGS, Evidence, Intervention

__all__ = ["SettingsVsDefaultsGenerator"]

#: Weight of "this explicit setting causes the failure"; a setting that selects an implementation (a
#: flag with choices) is a likelier suspect than a tuning knob.
WEIGHT = 0.02
CHOICE_FACTOR = 2.0
#: Flags that let the model load at all (reverting them only fails earlier).
_KEEP = frozenset({"--trust-remote-code"})


class SettingsVsDefaultsGenerator:
    """One candidate per explicit baseline setting: ``revert:NAME``."""

    name = "settings"

    def generate(self, inp: GeneratorInput) -> list[Candidate]:
        """Reversions of the failing baseline's own flags and environment variables."""
        if inp.evidence.stage == "ok":
            return []
        out: list[Candidate] = []
        for name, value in inp.baseline.flags.items():
            spec = canon(inp.flags, name)
            canonical = spec.name if spec else name
            if canonical in IDENTITY_FLAGS or name in IDENTITY_FLAGS or canonical in _KEEP:
                continue
            if spec is not None and spec.default is not None and str(spec.default) == str(value):
                continue  # set to the default: reverting changes nothing
            choice = bool(spec and spec.choices)
            out.append(self._candidate(inp, "flag", canonical, value, WEIGHT * (CHOICE_FACTOR if choice else 1.0)))
        for name, value in inp.baseline.env.items():
            if name in IDENTITY_ENV:
                continue
            out.append(self._candidate(inp, "env", name, value, WEIGHT))
        return out

    def _candidate(self, inp: GeneratorInput, kind: str, name: str, value: object, weight: float) -> Candidate:
        shown = "(on)" if value is True else value
        return Candidate(
            id=f"revert:{name}",
            statement=f"The baseline's own setting {name} {shown} causes the failure; without it SGLang's "
            "default applies and the failure goes away",
            component=f"config.{name.lstrip('-').replace('-', '_')}",
            weight=weight,
            rationale="an explicit setting away from the default is a change someone made; each is reverted alone",
            generator=self.name,
            evidence=[Evidence(kind="fact", detail=f"the baseline sets {name}={shown} explicitly",
                               experiment_id=inp.evidence.experiment_id)],
            interventions=[Intervention(kind=kind, names=[name], values=[None], decisive=True, cost="none")],  # type: ignore[arg-type]
        )
