"""Load: failures that need several requests at once.

When single requests pass and a burst fails (symptom class ``load_only``, or the case's
``[reproduce] concurrency``), the batch is part of the cause. Candidates: cap the batch below the
concurrency at which the failure showed (``--max-running-requests``, ``--cuda-graph-max-bs``: values
from the bursts this run sent, the largest that passed or half the failing one), and turn off the
scheduler features that only act on batches of several requests (switches whose names speak of
overlap scheduling, padding, the radix cache, found in the host's ``--help``).
"""

from __future__ import annotations

import re

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon, explicit
from agent.planning.generators.implementations import implementations

__all__ = ["LoadGenerator", "passing_level"]

#: Weights: a batch cap avoids any batch-dependent fault but costs throughput (a workaround).
CAP_WEIGHT = 0.06
FEATURE_WEIGHT = 0.05
#: The user's own opt-in of such a feature: as a backend the user chose over one SGLang chose
#: (component generator's EXPLICIT_FACTOR 2 over a feature's weight); no new tunable.
OPT_IN_WEIGHT = 2 * FEATURE_WEIGHT


def passing_level(inp: GeneratorInput, failing: int) -> int:
    """The largest burst below ``failing`` that passed in this run (1 when none did)."""
    best = 1
    for o in inp.outcomes:
        for p in o.probes:
            m = re.search(r":x(\d+)$", p.probe_id)
            if m and p.ok and int(m.group(1)) < failing:
                best = max(best, int(m.group(1)))
    return best


class LoadGenerator:
    """Batch caps and batch-only features, when the failure shows only under concurrent requests."""

    name = "load"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Nothing unless the evidence says the failure needs a burst."""
        ev = inp.evidence
        if not ev.burst_failed:
            return []  # no burst failed (a single request of the reported shape: its length, not a batch)
        failing = ev.concurrency
        ok = passing_level(inp, failing)
        cap = max(1, ok if ok > 1 else failing // 2)
        detail = f"single requests pass; a burst of {failing} concurrent requests fails"
        if ok > 1:
            detail += f" and one of {ok} passed"
        evidence = [Evidence(kind="fact", detail=detail, experiment_id=ev.experiment_id)]
        out: list[Hypothesis] = []
        for name in implementations().load.batch_caps:  # knowledge/implementations.toml
            spec = canon(inp.flags, name)
            if spec is None or not spec.takes_value:
                continue
            out.append(
                Hypothesis(
                    id=f"load:{spec.name}",
                    statement=f"The failure needs a batch of about {failing} requests; capping the batch at "
                    f"{cap} with {spec.name} avoids it",
                    component="scheduler.batch",
                    weight=CAP_WEIGHT,
                    rationale="a fault that appears only with many requests in flight depends on the batch size",
                    generator=self.name,
                    evidence=evidence,
                    interventions=[Intervention(names=[spec.name], values=[str(cap)], decisive=True,
                                                cost="medium", workaround=True,
                                                note="fewer requests run together: lower throughput")],
                )
            )
        out += _opt_ins(inp, evidence)
        if inp.flags is not None:
            batch_features = implementations().batch_features  # knowledge/implementations.toml
            for spec in inp.flags.flags.values():
                if spec.takes_value or spec.deprecated or not batch_features.match(spec.name):
                    continue
                if explicit(inp, spec):
                    continue
                what = spec.name.removeprefix("--disable-").replace("-", " ")
                out.append(
                    Hypothesis(
                        id=f"load:{spec.name}",
                        statement=f"The {what} feature mishandles batches of several requests",
                        component=f"scheduler.{spec.name.removeprefix('--disable-').replace('-', '_')}",
                        weight=FEATURE_WEIGHT,
                        rationale="this feature acts only when several requests share a batch",
                        generator=self.name,
                        evidence=evidence,
                        interventions=[Intervention(names=[spec.name], values=[True], decisive=True, cost="medium")],
                        support=0.0,  # the catalog may already hold this cause: no second hypothesis then
                    )
                )
        return out


def _opt_ins(inp: GeneratorInput, evidence: list[Evidence]) -> list[Hypothesis]:
    """The user's own opt-ins (``--enable-X`` set in the baseline) of features that act only on batches of
    several requests (knowledge/implementations.toml ``batch_opt_ins``): turning one back off is the test."""
    pattern = implementations().batch_opt_ins
    out: list[Hypothesis] = []
    for name, value in inp.baseline.flags.items():
        spec = canon(inp.flags, name)
        flag = spec.name if spec is not None else name
        if value is not True or not pattern.match(flag):
            continue
        what = flag.removeprefix("--enable-").replace("-", " ")
        out.append(Hypothesis(
            id=f"load:{flag}", statement=f"The {what} feature the baseline turns on mishandles batches of several requests",
            component=f"scheduler.{flag.removeprefix('--enable-').replace('-', '_')}", weight=OPT_IN_WEIGHT,
            rationale="the user turned on a feature that acts only when several requests share a batch, and only a "
            "burst fails", generator="load", evidence=evidence,
            interventions=[Intervention(names=[name], values=[False], decisive=True, cost="low")]))
    return out
