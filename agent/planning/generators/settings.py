"""Settings against defaults: every setting the baseline makes itself, reverted alone.

Delta debugging over the explicit settings (Zeller, "Yesterday, my program worked. Today, it does not.
Why?", 1999) with one-variable steps: if one explicit flag or environment variable causes the failure,
removing it (so SGLang's default or auto-resolution applies) fixes it. Low weight: the generic fallback
that keeps a run from ending "nothing left to try" while reversions remain in budget. Settings that say
where the server runs and what it loads (knowledge/served.toml, role "place") are never reverted, nor a
"served" one whose removal changes the deployment (the parallel layout); one SGLang can read off the
checkpoint (quantization, context length) is an ordinary candidate, unless the case's intent keeps it
(then it is reverted only as a workaround that changes the deployment).
A setting whose words the failing frames or error share (``http_proxy`` and a failing
``http_server`` frame) is a likelier suspect.
"""

from __future__ import annotations

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon, implicated, specificity, stems
from agent.planning.served import description_keeps, served_settings

__all__ = ["SettingsVsDefaultsGenerator"]

#: Weight of "this explicit setting causes the failure"; a setting that selects an implementation (a
#: flag with choices) is a likelier suspect than a tuning knob.
WEIGHT = 0.02
CHOICE_FACTOR = 2.0
#: Multiplier for a setting the failing frames or error name (by a specific shared word).
IMPLICATED_FACTOR = 5.0


class SettingsVsDefaultsGenerator:
    """One candidate per explicit baseline setting: ``revert:NAME``."""

    name = "settings"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Reversions of the failing baseline's own flags and environment variables."""
        if inp.evidence.stage == "ok":
            return []
        imp = implicated(inp)

        def named(name: str) -> float:
            shared = stems(name.lstrip("-")) & imp.words
            if not shared:
                return 1.0
            strength = specificity(inp.flags, shared) if inp.flags is not None else 1.0
            return max(1.0, IMPLICATED_FACTOR * strength)

        out: list[Hypothesis] = []
        served = served_settings()
        keeps = set()
        for k in description_keeps(inp.case):
            ks = canon(inp.flags, k)
            keeps.add(ks.name if ks else k)
        for name, value in inp.baseline.flags.items():
            spec = canon(inp.flags, name)
            canonical = spec.name if spec else name
            role = served.role("flag", canonical, inp.flags)
            if role == "place":
                continue  # where it runs and what it loads: never reverted
            checkpoint = inp.fingerprint.checkpoint if inp.fingerprint else {}
            if role == "served" and served.changes_deployment("flag", canonical, None, inp.flags,
                                                              checkpoint=checkpoint, before=value):
                continue  # the parallel layout: reverting it takes other devices, not a cause to test
            deployment = served.changes_deployment("flag", canonical, None, inp.flags, keeps, checkpoint,
                                                   value)
            if spec is not None and spec.default is not None and str(spec.default) == str(value):
                continue  # set to the default: reverting changes nothing
            choice = bool(spec and spec.choices)
            weight = WEIGHT * (CHOICE_FACTOR if choice else 1.0) * named(canonical)
            out.append(self._candidate(inp, "flag", canonical, value, weight, deployment))
        for name, value in inp.baseline.env.items():
            if served.role("env", name) == "place":
                continue
            deployment = served.changes_deployment("env", name, None, inp.flags, keeps)
            out.append(self._candidate(inp, "env", name, value, WEIGHT * named(name), deployment))
        return out

    def _candidate(self, inp: GeneratorInput, kind: str, name: str, value: object, weight: float,
                   deployment: bool = False) -> Hypothesis:
        """``deployment``: the setting defines what is served (knowledge/served.toml) or the user needs
        it (the case's intent): reverting it changes the deployment, so it is tried last, as a
        workaround, and is never the fix."""
        shown = "(on)" if value is True else value
        return Hypothesis(
            id=f"revert:{name}",
            statement=f"The baseline's own setting {name} {shown} causes the failure; without it SGLang's "
            "default applies and the failure goes away",
            component=f"config.{name.lstrip('-').replace('-', '_')}",
            weight=weight,
            rationale="an explicit setting away from the default is a change someone made; each is reverted alone",
            generator=self.name,
            evidence=[Evidence(kind="fact", detail=f"the baseline sets {name}={shown} explicitly",
                               experiment_id=inp.evidence.experiment_id)],
            interventions=[Intervention(
                kind=kind, names=[name], values=[None], decisive=True,  # type: ignore[arg-type]
                cost="high" if deployment else "none", workaround=deployment,
                note="changes what is served (the deployment the user asked for)" if deployment else "",
            )],
        )
