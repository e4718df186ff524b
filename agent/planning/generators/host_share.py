"""Ranks that leave part of the host unused: the engine's own notice that the run takes fewer of the host's
units than it has.

SGLang's CPU engine binds each rank's threads and memory to one NUMA node and says so when the ranks are
fewer than the nodes: ``Detected the current machine has 2 numa nodes available, but the total number of
ranks (dp_size * tp_size * pp_size) is 1, so only 1 numa nodes are used.``
(sglang/srt/utils/numa_utils.py ``init_threads_binding``, 0.5.23). An engineer reads that line as the
host's size, the product of settings that decides how much of it is used, and the one setting the
platform's documentation sizes from the host (knowledge/subsystems.toml ``[[platform]] rank_setting``:
SGLang's CPU docs set ``--tp`` to the NUMA node count). When the launch then died while the weights were
loading (one node's memory is all one rank gets), taking the whole host is the first thing to try; on any
other failure the notice weighs as a warning. The opposite bound (ranks above the nodes, an error) is
``remedies._bounded_settings``.

The file maps no symptom to a remedy: what it reads is the engine's own statement of the host's size, so the
empty-catalog ablation keeps it (as it keeps signatures.toml and subsystems.toml).
"""

from __future__ import annotations

import math
import re

from agent.domain.models import Evidence, Hypothesis, Intervention, LogLine
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon, effective_value, fact_flag
from agent.planning.in_play import DEVICE_FLAG, load_subsystems, platform_of

__all__ = ["HostShareGenerator", "unused_share"]

#: The notice weighs as an error's remedy when the launch died loading the weights (the part of the host a
#: rank holds is what ran out), as a warning's otherwise (``remedies.WEIGHT_ERROR``, ``WEIGHT_WARNING``).
WEIGHT_DIED_LOADING = 0.3
WEIGHT_NOTICE = 0.05

#: "has N <units> available, but the total number of ranks (a * b * c) is M, so only M <units> are used"
_UNDERUSED = re.compile(
    r"has (?P<limit>\d+) (?P<units>[a-z][a-z ]*?) available\b.*?"
    r"\((?P<expr>[a-z_][a-z0-9_]*(?:\s*\*\s*[a-z_][a-z0-9_]*)*)\)\s*(?:is|=)\s*(?P<cur>\d+)\b.*?\bonly\b",
    re.I,
)


def _int(value: object) -> int:
    try:
        return max(1, int(str(value)))
    except ValueError:
        return 1


def _rank_setting(inp: GeneratorInput) -> str | None:
    """The flag this host's platform sizes from the host (``rank_setting`` of its ``[[platform]]``)."""
    k = load_subsystems()
    device = None
    if inp.flags is not None and (spec := canon(inp.flags, DEVICE_FLAG)) is not None:
        device = effective_value(inp, spec)
    platform = platform_of(inp.fingerprint, str(device) if device else None, k)
    entry = next((p for p in k.platforms if p.get("id") == platform), None)
    return str(entry["rank_setting"]) if entry and entry.get("rank_setting") else None


def unused_share(inp: GeneratorInput) -> list[tuple[LogLine, str, int, str]]:
    """(line, flag, value, units) for each notice that the run's ranks leave host units unused: the flag
    the platform sizes from the host (else the one factor above 1) raised so the product of the settings
    the notice multiplies reaches the host's count. Nothing without a flag catalog, when the product
    already reaches it, or when the setting is not one of the notice's factors."""
    if inp.flags is None:
        return []
    out: list[tuple[LogLine, str, int, str]] = []
    for ll in inp.evidence.log:
        m = _UNDERUSED.search(ll.text)
        if m is None:
            continue
        limit, units = int(m.group("limit")), " ".join(m.group("units").split())
        factors: dict[str, int] = {}
        for dest in re.split(r"\s*\*\s*", m.group("expr")):
            spec = fact_flag(inp.flags, dest)
            factors[dest] = _int(effective_value(inp, spec)) if spec is not None else 1
        if math.prod(factors.values()) >= limit:
            continue
        sized = _rank_setting(inp)
        spec = canon(inp.flags, sized) if sized else None
        dest = next((d for d in factors if spec is not None and fact_flag(inp.flags, d) is spec), None)
        if dest is None:
            above = [d for d, v in factors.items() if v > 1]
            dest = above[0] if len(above) == 1 else None
            spec = fact_flag(inp.flags, dest) if dest else None
        if dest is None or spec is None or not spec.takes_value:
            continue
        rest = math.prod(v for d, v in factors.items() if d != dest)
        value = limit // rest
        if value > factors[dest] and value * rest == limit:
            out.append((ll, spec.name, value, units))
    return out


def _died_loading(inp: GeneratorInput) -> bool:
    ev = inp.evidence
    progress = {m.signature_id for m in ev.matches if m.kind == "progress"}
    return ev.stage in ("load_failed", "launch_failed") and "load_weight_begin" in progress and \
        not any(p.startswith("load_weight_end") for p in progress)


class HostShareGenerator:
    """One candidate per notice that the ranks leave host units unused (see module docstring)."""

    name = "host_share"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Candidates ``host_share:FLAG=N``."""
        out: list[Hypothesis] = []
        died = _died_loading(inp)
        for ll, flag, value, units in unused_share(inp):
            text = " ".join(ll.text.split())
            iv = Intervention(names=[flag], values=[str(value)], decisive=died, fact=flag.lstrip("-").replace("-", "_"),
                              cost="none", note=f"the engine says this host has {units} it leaves unused: {text}")
            out.append(Hypothesis(
                id=f"host_share:{flag}={value}",
                statement=f"The run's ranks take only part of this host's {units}; with {flag} {value} "
                          f"they take all of it" + (" and the weights fit" if died else ""),
                component=iv.fact or flag,
                weight=WEIGHT_DIED_LOADING if died else WEIGHT_NOTICE,
                rationale="the engine's own notice counts the host's " + units + " and the ranks that use them"
                          + ("; the launch died while the weights were loading" if died else ""),
                generator=self.name,
                evidence=[Evidence(kind="signature", detail=f"log line {ll.line}: {text}",
                                   experiment_id=inp.evidence.experiment_id, lines=[ll.line])],
                interventions=[iv],
                triggers=["notice"],
            ))
        return out
