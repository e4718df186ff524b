"""Installed source: the variables that guard the failing line, read from the host's own files.

When a launch fails with a traceback through SGLang or a kernel package, the analyze node reads the
installed files at the innermost frames on the host (no launch; ``tools.source_guards``) and keeps what
it found on the outcome (``Outcome.source_reading``): each environment variable or server argument in
a condition on the path to the failing line (``if envs.SGLANG_X.get():``, ``assert
server_args.attention_backend != "triton"``, ``if not _use_aiter: return``), with the value that takes
the other branch where the comparison shows it. This generator turns each into a hypothesis, "the
failing branch is taken because of NAME", tested by changing that one variable, with the file, line and
condition as evidence.

Weights: a value read exactly off the condition (``== "x"`` on the failing path, a boolean) weighs more
than "any other value"; the innermost frame more than the calls that led to it; a condition inside a
helper the guard calls (polarity unknown) least. A variable guarding the line in several places is one
hypothesis with every place as evidence.
"""

from __future__ import annotations

from agent.domain.models import Evidence, FlagValue, Hypothesis, Intervention
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import alternative_choices, canon, effective_value
from tools.source_guards import SourceLead

__all__ = ["InstalledSourceGenerator", "lead_interventions"]

#: Base weight of a guard hypothesis whose flipping value is read off the condition.
EXACT_WEIGHT = 0.25
#: ... whose condition only says which value the failing path needs ("any other value").
OTHER_WEIGHT = 0.12
#: ... inside a helper the condition calls, where what it evaluated to is not known.
UNKNOWN_WEIGHT = 0.05
#: Weight multiplier per frame outward from the innermost one read (the call sites that led there).
FRAME_DECAY = 0.75
#: Alternatives proposed for a flag whose condition only names the value to avoid.
MAX_ALTERNATIVES = 2


def _values(lead: SourceLead, inp: GeneratorInput) -> tuple[list[FlagValue], str]:
    """The values that take the other branch, and how they were read."""
    if lead.kind == "env":
        current = inp.baseline.env.get(lead.name)
        if lead.unset:
            return ([None], "remove it") if current is not None else ([], "")
        if lead.value is not None:
            return [str(lead.value)], "read off the condition"
        if lead.avoid:
            return [], ""
        if lead.polarity is None:
            return (["0"] if current not in (None, "0", "false") else ["1"]), "the other setting"
        return [], ""
    spec = canon(inp.flags, lead.name)
    if spec is None:
        return [], ""
    if lead.unset:
        return ([None], "remove it") if any(n in inp.baseline.flags for n in spec.option_strings) else ([], "")
    if lead.value is not None:
        return [lead.value], "read off the condition"
    if lead.avoid and spec.takes_value and spec.choices:
        alts = [c for c in alternative_choices(spec, effective_value(inp, spec)) if c not in lead.avoid]
        return list(alts[:MAX_ALTERNATIVES]), f"another legal choice than {' / '.join(lead.avoid)}"
    if lead.polarity is None and not spec.takes_value:
        on = any(n in inp.baseline.flags for n in spec.option_strings)
        return ([None] if on else [True]), "the other setting"
    return [], ""


def lead_interventions(lead: SourceLead, inp: GeneratorInput) -> list[Intervention]:
    """One-variable changes that take the other branch of `lead`'s condition on this host (none when
    the value cannot be read and the flag has no choices, or the flag is not on this host)."""
    values, how = _values(lead, inp)
    exact = (lead.value is not None or lead.unset) and lead.certain
    out: list[Intervention] = []
    for value in values:
        out.append(
            Intervention(
                kind=lead.kind,
                names=[lead.name],
                values=[value],
                # Flipping a condition on the failing path exactly cuts the path to the failing line
                # (whichever frame it guards); a guessed value may or may not.
                decisive=exact,
                cost="low",
                note=f"{how}: {lead.condition} ({lead.where()})",
            )
        )
    return out


def _flip_phrase(lead: SourceLead) -> str:
    """``NAME=1``, ``NAME unset``, ``NAME != triton``, ``NAME (on)``."""
    flip = lead.flip_text()
    return f"{lead.name}{flip}" if flip.startswith("=") else f"{lead.name} {flip}"


def _weight(lead: SourceLead) -> float:
    if lead.polarity is None:
        base = UNKNOWN_WEIGHT
    elif (lead.value is not None or lead.unset) and lead.certain:
        base = EXACT_WEIGHT
    else:
        base = OTHER_WEIGHT
    return base * FRAME_DECAY ** min(lead.frame, 6)


def _component(path: str) -> str:
    """``layers.attention.triton_backend`` for ``.../site-packages/sglang/srt/layers/attention/triton_backend.py``."""
    parts = path.removesuffix(".py").split("/")
    for top in ("srt", "sglang"):
        if top in parts:
            return ".".join(parts[len(parts) - parts[::-1].index(top) :]) or top
    return ".".join(parts[-2:])


def _package(path: str) -> str | None:
    parts = path.split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            return parts[i + 1] if i + 1 < len(parts) else None
    return "sglang" if "sglang" in parts else None


class InstalledSourceGenerator:
    """Guards of the failing line read from the installed source (see module docstring)."""

    name = "source"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """One candidate per variable guarding a failing line, with the changes that flip it."""
        reading = inp.reference.source_reading
        if reading is None or inp.evidence.stage == "ok":
            return []
        by_var: dict[str, Hypothesis] = {}
        for lead in reading.leads:
            ivs = lead_interventions(lead, inp)
            if not ivs:
                continue
            key = f"source:{lead.kind}:{lead.name}"
            detail = f"{lead.where()}: {lead.guard} {lead.condition}"
            if lead.via:
                detail += " (via " + "; ".join(lead.via[:3]) + ")"
            ev = Evidence(kind="host", detail=detail, experiment_id=inp.reference.experiment_id)
            cand = by_var.get(key)
            if cand is not None:
                cand.evidence.append(ev)
                cand.weight = max(cand.weight, _weight(lead))
                known = {(iv.kind, tuple(iv.names), tuple(map(str, iv.values))) for iv in cand.interventions}
                for iv in ivs:
                    if (iv.kind, tuple(iv.names), tuple(map(str, iv.values))) not in known:
                        cand.interventions.append(iv)
                continue
            what = "environment variable" if lead.kind == "env" else "server argument"
            by_var[key] = Hypothesis(
                id=key,
                statement=(
                    f"The failing line runs only on the branch {lead.condition} selects "
                    f"({lead.function} in {_component(lead.path)}); the {what} {lead.name} decides it, "
                    f"and {_flip_phrase(lead)} takes the other branch"
                ),
                component=_component(lead.path),
                package=_package(lead.path),
                weight=_weight(lead),
                rationale=(
                    f"{reading.exception or 'the failure'} is raised on a path guarded by "
                    f"`{lead.condition}` ({lead.where()}), read from the installed source on the host"
                ),
                generator=self.name,
                evidence=[ev],
                interventions=ivs,
                triggers=[f"traceback frame {lead.frame}: {lead.function}"],
                source="evidence",
            )
        return list(by_var.values())
