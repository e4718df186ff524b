"""The knowledge catalog as one generator: ``hypotheses.toml`` entries whose triggers the evidence meets.

Entries trigger on signatures, symptom classes, effective-config facts, host and model facts
(``agent.planning.catalog.Condition``); their weight is the entry's prior times its boosts. The catalog is priors,
never an answer key: the other generators propose causes it does not describe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from agent.domain.models import Evidence, Hypothesis, Outcome
from agent.planning.catalog import CatalogEntry, EvidenceContext

if TYPE_CHECKING:
    from agent.planning.generators import GeneratorInput

__all__ = ["CatalogGenerator", "condition_evidence", "entries_to_candidates", "evidence_context"]

EvidenceEffect = Literal["supports", "weakens", "refutes", "confirms", "neutral"]


def evidence_context(inp: GeneratorInput) -> EvidenceContext:
    """What the failing run showed, as catalog conditions see it (``failure_under_load`` added when
    single requests passed and a burst of several failed)."""
    ref = inp.reference
    facts = dict(ref.facts)
    if inp.evidence.burst_failed:
        facts["failure_under_load"] = "true"  # a single request of the reported shape is not a burst
    fp = inp.fingerprint
    return EvidenceContext(
        signatures=ref.signature_ids(),
        symptoms=set(inp.evidence.symptoms),
        facts=facts,
        features=set(inp.features),
        compute_capability=fp.compute_capability if fp else None,
        gpu_name=fp.gpu_name if fp else None,
        stage=ref.stage,
    )


def condition_evidence(
    detail: str, signature: str | None, outcome: Outcome, effect: EvidenceEffect = "supports"
) -> Evidence:
    """An evidence entry for a condition that held; a signature's first log line and numbers are quoted."""
    lines: list[int] = []
    kind: Literal["signature", "fact"] = "fact"
    if signature:
        kind = "signature"
        m = next((m for m in outcome.matches if m.signature_id == signature), None)
        if m is not None:
            lines = list(m.line_numbers[:5])
            detail = f"{detail}: {m.first_line.strip()}"  # whole: evidence is never cut
    return Evidence(kind=kind, detail=detail, experiment_id=outcome.experiment_id, lines=lines, effect=effect)


def entries_to_candidates(
    entries: list[CatalogEntry], inp: GeneratorInput, generator: str, *, id_prefix: str = ""
) -> list[Hypothesis]:
    """The entries that ``inp`` triggers, as candidates (weight = prior x boosts)."""
    ctx = evidence_context(inp)
    ref = inp.reference
    out: list[Hypothesis] = []
    for entry in entries:
        fired = entry.triggered(ctx)
        if fired is None:
            continue
        weight, boosts = entry.weight(ctx)
        statement, component = entry.render(ctx)
        evidence = [condition_evidence(c.describe(), c.signature, ref) for c in fired]
        evidence += [
            condition_evidence(
                f"{b.why or b.describe()} (x{b.factor:g})",
                b.signature,
                ref,
                effect="supports" if b.factor >= 1 else "weakens",
            )
            for b in boosts
        ]
        out.append(
            Hypothesis(
                id=f"{id_prefix}{entry.id}",
                statement=statement,
                component=component,
                package=entry.package,
                weight=weight,
                rationale=entry.rationale,
                generator=generator,
                evidence=evidence,
                interventions=list(entry.intervention),
                cause_signatures=list(entry.cause_signatures),
                stage=entry.stage,
                triggers=[c.describe() for c in fired],
                source="signature" if any(c.signature for c in fired) else "catalog",
                symptom_only=all(c.symptom_only for c in [*fired, *boosts]),
            )
        )
    return out


class CatalogGenerator:
    """Entries of the knowledge catalog (``GeneratorInput.catalog``) that the evidence triggers."""

    name = "catalog"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Triggered catalog entries, ids as in the catalog."""
        return entries_to_candidates(inp.catalog, inp, self.name)
