"""A default the engine could not compute: a missing value in the code that resolves unset arguments.

When the failing traceback's exception says a value was None where a number was needed ("'<' not
supported between instances of 'NoneType' and 'int'") and the innermost frame of the engine's own code is
its argument resolution (knowledge/resolution.toml: SGLang's ``server_args`` and ``arg_groups``), an
engineer reads "a default could not be computed on this host": that code runs for the settings the user
did not give, and an explicit value skips it (sgl-project/sglang#11103: SGLang compared the CPU's unknown
device memory with a threshold while choosing memory defaults; "it will generate a crash if you don't
specify a mem-fraction-static argument").

Which setting: a value flag of the host's own ``--help`` that the baseline leaves unset (the engine
resolves it) and that the failing frame names: the failing line reads the flag's own name
(``cfg.chunked_prefill_size``), or the frame's file, function and failing line share a specific word with
the flag (``gpu_mem`` in ``handle_gpu_memory_settings`` and ``--mem-fraction-static``). The value is the
engine's own fallback for that setting when the quantity its default is derived from is unknown
(``[[fallback]]``); a flag without one is not proposed (a guessed value tests nothing). Each flag is a
hypothesis of its own, tested by one launch that sets it.
"""

from __future__ import annotations

import re

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import (
    effective_value,
    engine_package,
    explicit,
    raise_site,
    specificity,
    stems,
    words_with_stems,
)
from agent.planning.resolution import load_resolution
from tools.flags import FlagSpec

__all__ = ["ResolutionGenerator"]

#: Weight of "setting this flag explicitly skips the failing default computation", times how specifically
#: the frame names it (1 for the flag's own name in the failing line): as strong as a remedy the error
#: names (``agent.planning.generators.remedies.WEIGHT_ERROR``), since the frame and the exception together
#: say which computation failed and why.
WEIGHT = 0.3
#: A shared word must be at least this specific (``common.specificity``) to name a flag.
MIN_SPECIFICITY = 0.5


def _named_by(spec: FlagSpec, words: set[str], code: str, inp: GeneratorInput) -> tuple[float, str]:
    """How specifically the failing frame names ``spec`` (0: not at all), and how, in words."""
    dest = spec.name.lstrip("-").replace("-", "_")
    if re.search(rf"\b{re.escape(dest)}\b", code):
        return 1.0, f"the failing line reads {dest}"
    shared = stems(spec.name) & words
    strength = specificity(inp.flags, shared) if inp.flags is not None and shared else 0.0
    if strength < MIN_SPECIFICITY:
        return 0.0, ""
    said = words_with_stems(spec.name, shared) or sorted(shared)  # whole words, never a stem ("aiter", not "ait")
    return strength, f"the failing frame shares '{', '.join(said)}' with it"


class ResolutionGenerator:
    """Unset flags whose default computation the failing frame names (see module docstring)."""

    name = "resolution"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """One candidate per unset flag the failing default computation names, set to the engine's own
        fallback value; none unless the exception says a value was None in argument-resolution code."""
        if inp.evidence.stage == "ok" or inp.flags is None:
            return []
        known = load_resolution()
        tbs = [tb for tb in inp.evidence.tracebacks if tb.exception_line]
        if not tbs or not known.says_missing(tbs[-1].exception_line):
            return []
        site = raise_site(inp)
        if site is None or not known.resolves(engine_package(inp), site.where):
            return []
        frame = next((f for f in tbs[-1].frames if f.module and f"{f.module}.{f.function}" == site.where), None)
        code = (frame.code or "") if frame is not None else ""
        out: list[Hypothesis] = []
        for spec in inp.flags.flags.values():
            if not spec.takes_value or spec.deprecated or explicit(inp, spec):
                continue
            if effective_value(inp, spec) not in (None, "None"):
                continue  # the engine does not resolve it: the help or the server gives its value
            fallback = known.fallback_of(spec.name)
            if fallback is None:
                continue
            strength, how = _named_by(spec, site.words, code, inp)
            if strength <= 0:
                continue
            out.append(self._hypothesis(inp, spec, fallback.value, fallback.source, how, site.where,
                                        tbs[-1].exception_line, strength))
        return out

    def _hypothesis(self, inp: GeneratorInput, spec: FlagSpec, value: str, source: str, how: str, where: str,
                    error: str, strength: float) -> Hypothesis:
        lines = [tb.log_line for tb in inp.evidence.tracebacks[-1:]]
        return Hypothesis(
            id=f"resolution:{spec.name}",
            statement=(
                f"{where} could not compute the default of {spec.name} on this host (a value it needs is None: "
                f"{error}); given explicitly, {spec.name} skips that computation"
            ),
            component=where.rsplit(".", 1)[0].split(".", 2)[-1],
            weight=WEIGHT * strength,
            rationale=(
                "a TypeError on None in the code that resolves unset arguments means a default could not be "
                "computed; that code runs only for the settings the user did not give"
            ),
            generator=self.name,
            evidence=[
                Evidence(kind="fact", detail=f"{how}; the innermost engine frame is {where}",
                         experiment_id=inp.evidence.experiment_id, lines=lines),
            ],
            interventions=[
                Intervention(
                    names=[spec.name], values=[value], decisive=True, cost="none",
                    note=f"the engine's own value when its default cannot be computed ({source})",
                )
            ],
            triggers=[how],
            source="evidence",
        )
