"""Fewer ranks when a rank says its own shard of a weight does not fit a kernel.

With tensor parallelism each rank holds a slice of every weight: a dimension of the per-rank partition is
the model's dimension divided by the rank count. Kernels that tile a weight, or quantization schemes that
scale it per block, need those dimensions to be multiples of their tile or block; a split that leaves a
remainder is refused by the rank that holds it (SGLang's CPU engine warns ``Unsupported dimension or dtype
for prepacking for weight 'w2_weight' with shape torch.Size([32, 2880, 720]) ... The derived (OC, IC)
dimensions must be divisible by (16, 32).`` on every rank and runs the layer unpacked; its FP8 block
quantization raises ``Weight input_size_per_partition = N is not divisible by weight quantization block_k
= K.``). The texts that say so, and the setting whose split shapes the shard, are data (knowledge/
signatures.toml ``rank_shard_refused``, its fact ``shard_split_by``), never a model's name.

An engineer who reads that line changes the split, by the smallest step: the setting the fact names, one
step below the value in force (the next smaller count that divides the model's attention
heads, knowledge/served.toml ``divides``, when the host's config.json gives them). On a platform whose engine
sizes the ranks from the host (the CPU engine: one rank per NUMA node, ``host_sized_on``) fewer ranks serve
the same model on the same box; on a GPU they give devices back, a change of the deployment, so the candidate
is then a workaround (``agent.planning.served.Served.changes_deployment``).

No symptom maps to a remedy here: what is read is the engine's own statement that a rank's shard does not
divide, so the empty-catalog ablation keeps it (as it keeps signatures.toml).
"""

from __future__ import annotations

from collections.abc import Iterator

from agent.domain.models import Evidence, Hypothesis, Intervention, LogLine
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon, effective_value, fact_flag
from agent.planning.served import (
    SHARD_FACT,
    WHOLE_FACT,
    OnHost,
    canonical_flag,
    run_platform,
    served_settings,
    user_keeps,
    whole_number,
)

__all__ = ["FewerRanksGenerator", "fewer_ranks"]

#: The line is an error of the failing launch (its traceback's message, an error record): as strong as an
#: error's remedy (``remedies.WEIGHT_ERROR``); a warning the rank printed before the launch failed weighs less.
WEIGHT_ERROR = 0.3
WEIGHT_WARNING = 0.2


def fewer_ranks(current: int, divides: int | None) -> int | None:
    """The next rank count below ``current`` that divides ``divides`` (the model's attention heads; None:
    unknown, any count), or None when ``current`` is 1 already."""
    return next((n for n in range(current - 1, 0, -1) if divides is None or divides % n == 0), None)


def _shard_lines(inp: GeneratorInput) -> Iterator[tuple[str, LogLine, bool]]:
    """(the setting's argparse dest, the line, whether it is the failing error) for the kept line in which a
    rank said its shard of a weight does not fit a kernel (the fact ``SHARD_FACT`` of
    knowledge/signatures.toml ``rank_shard_refused``)."""
    dest = inp.evidence.facts.get(SHARD_FACT)
    if not dest:
        return
    numbers = {n for m in inp.evidence.matches if m.facts.get(SHARD_FACT) for n in m.line_numbers}
    errors = [tb.exception_line.strip() for tb in inp.evidence.tracebacks if tb.exception_line]
    kept = next((ll for ll in inp.evidence.log if ll.line in numbers), None)
    if kept is None:  # the line was not kept in the excerpt: the signature's own copy of it
        m = next((m for m in inp.evidence.matches if m.facts.get(SHARD_FACT)), None)
        if m is None:
            return
        kept = LogLine(line=m.line_numbers[0] if m.line_numbers else 0, text=m.first_line)
    text = " ".join(kept.text.split())
    yield str(dest), kept, any(e and e in text for e in errors)


class FewerRanksGenerator:
    """One candidate per rank setting a rank's refused shard implicates: ``ranks:FLAG=N``."""

    name = "ranks"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """The next smaller rank count, when a kept line says a rank's shard of a weight does not fit a
        kernel and the setting is above 1 (see the module docstring). Nothing without a flag catalog."""
        if inp.flags is None or inp.evidence.stage == "ok":
            return []
        served = served_settings()
        checkpoint = inp.fingerprint.checkpoint if inp.fingerprint else {}
        out: dict[str, Hypothesis] = {}
        for dest, ll, is_error in _shard_lines(inp):
            for name in (d.strip() for d in dest.split("*")):
                spec = fact_flag(inp.flags, name)
                if spec is None or spec.name in out or not spec.takes_value:
                    continue
                current = whole_number(effective_value(inp, spec))
                key = next((k for n, k in served.divides.items() if canonical_flag(inp.flags, n) == spec.name), None)
                value = fewer_ranks(current, whole_number((checkpoint or {}).get(key)) if key else None) if current else None
                if current is None or value is None:
                    continue
                deployment = served.changes_deployment(
                    "flag", spec.name, str(value), inp.flags, user_keeps(inp.case, inp.flags, inp.outcomes), checkpoint, current,
                    OnHost(run_platform(inp.fingerprint, inp.baseline), {SHARD_FACT: dest}))
                out[spec.name] = self._candidate(inp, spec.name, current, value, ll, is_error, deployment)
            whole = self._whole_experts(inp, ll, is_error)
            if whole is not None and whole.interventions[0].names[0] not in out:
                out[whole.interventions[0].names[0]] = whole
        return list(out.values())

    def _whole_experts(self, inp: GeneratorInput, ll: LogLine, is_error: bool) -> Hypothesis | None:
        """Expert parallelism as wide as the tensor parallelism, when the refused shard is a slice of the
        routed experts (the failing run's ``WHOLE_FACT`` names the setting, knowledge/signatures.toml
        ``expert_shard_refused``): each rank then holds whole experts and no expert is sliced, on the same
        GPUs (a change that keeps what is served: ``Served.changes_deployment``). None when the setting is
        unknown or already that wide."""
        assert inp.flags is not None
        dest, split = inp.evidence.facts.get(WHOLE_FACT), inp.evidence.facts.get(SHARD_FACT, "")
        spec = fact_flag(inp.flags, str(dest)) if dest else None
        tp_spec = fact_flag(inp.flags, split.split("*")[0].strip()) if split else None
        if spec is None or tp_spec is None or not spec.takes_value:
            return None
        tp = whole_number(effective_value(inp, tp_spec))
        current = whole_number(effective_value(inp, spec)) or 1
        if not tp or tp <= current:
            return None
        deployment = served_settings().changes_deployment(
            "flag", spec.name, str(tp), inp.flags, user_keeps(inp.case, inp.flags, inp.outcomes),
            inp.fingerprint.checkpoint if inp.fingerprint else {}, current,
            OnHost(run_platform(inp.fingerprint, inp.baseline), {WHOLE_FACT: str(dest)}))
        h = self._candidate(inp, spec.name, current, tp, ll, is_error, deployment)
        iv = h.interventions[0].model_copy(update={"note": "whole experts per rank on the same GPUs: no expert is "
                                                            "sliced across the ranks"})
        return h.model_copy(update={
            "statement": f"A rank's slice of every routed expert at {spec.name} {current} does not fit the kernel "
                         f"that runs it; with {spec.name} {tp} each rank holds whole experts and the failure goes away",
            "rationale": "tensor parallelism slices every routed expert across the ranks; expert parallelism as wide "
                         "hands each rank whole experts instead, on the same GPUs",
            "interventions": [iv]})

    def _candidate(self, inp: GeneratorInput, flag: str, current: int, value: int, ll: LogLine, is_error: bool,
                   deployment: bool) -> Hypothesis:
        text = " ".join(ll.text.split())
        shown = text if len(text) <= 240 else text[:237] + "..."
        spec = canon(inp.flags, flag)
        iv = Intervention(names=[flag], values=[str(value)], decisive=True,
                          fact=(spec.name if spec else flag).lstrip("-").replace("-", "_"),
                          cost="high" if deployment else "medium", workaround=deployment,
                          note=("fewer ranks: changes what is served (devices given back)" if deployment else
                                "fewer ranks on the same host: each rank's shard of the weights is larger"))
        return Hypothesis(
            id=f"ranks:{flag}={value}",
            statement=f"A rank's shard of a weight at {flag} {current} does not fit the kernel that runs it; "
                      f"with {flag} {value} the shards divide and the failure goes away",
            component=iv.fact or flag,
            weight=WEIGHT_ERROR if is_error else WEIGHT_WARNING,
            rationale="a rank said its own shard of a weight does not divide a kernel's tile or block; the "
                      "split over ranks is the smallest change that moves it",
            generator=self.name,
            evidence=[Evidence(kind="signature", detail=f"log line {ll.line}: {shown}",
                               experiment_id=inp.evidence.experiment_id, lines=[ll.line])],
            interventions=[iv],
            triggers=["error" if is_error else "warning"],
        )
