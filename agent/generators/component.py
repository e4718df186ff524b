"""Implicated component: from where the failure happened to the flags that choose that component.

Reads, in order of weight:
- the traceback frames: a third-party kernel package in the frames (``flashinfer``, ``deep_gemm``,
  ``triton``, ``sgl_kernel``, ``flash_mla``, ...) implicates that package; an SGLang module path and
  function names (``sglang/srt/layers/attention/triton_backend.py``) implicate their words
  (``attention``, ``triton``);
- the backends SGLang resolved on its own (facts from its log lines and ``/get_server_info``) and
  those the baseline sets explicitly: prime suspects;
- warnings that name an implementation (``DeepGemm is enabled ...`` names the ``deep_gemm`` choice).

Then the host's own ``--help``: a flag with choices whose current value is the implicated package, or
whose name shares a word with the implicated component, is the switch for that component; every legal
alternative choice is an intervention (portable implementations first). A ``--disable-X`` /
``--enable-X`` switch whose words the component shares is a candidate too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.generators import Candidate, GeneratorInput
from agent.generators.common import (
    alternative_choices,
    effective_value,
    explicit,
    fact_flag,
    norm,
    selecting_flags,
    stems,
)
from agent.models import Evidence, Intervention
from tools.flags import FlagSpec

__all__ = ["ImplicatedComponentGenerator"]

#: Packages that are the framework or the language, not a kernel implementation one could swap.
_NOT_KERNELS = frozenset({"sglang", "torch", "transformers", "uvicorn", "fastapi", "asyncio", "multiprocessing",
                          "concurrent", "threading", "runpy", "importlib", "typing", "safetensors",
                          "huggingface_hub", "numpy", "zmq", "uvloop", "starlette", "anyio"})
#: Base weight of a component hypothesis, and the multipliers for what makes it a prime suspect.
BASE_WEIGHT = 0.05
EXPLICIT_FACTOR = 2.0  # the baseline chose this implementation itself
AUTO_FACTOR = 1.5  # SGLang chose it on its own (auto-resolution)
PACKAGE_FACTOR = 2.0  # the failing frames are inside the package this choice selects
INNERMOST_FACTOR = 1.5  # the words come from the innermost SGLang frame
#: Facts whose keys name an implementation choice (SGLang ServerArgs dests of backend / dtype flags).
_CHOICE_FACT_SUFFIXES = ("_backend", "kv_cache_dtype")


@dataclass
class _Implicated:
    why: list[str] = field(default_factory=list)
    words: set[str] = field(default_factory=set)
    innermost_words: set[str] = field(default_factory=set)
    packages: dict[str, str] = field(default_factory=dict)  # norm(package) -> package
    lines: list[int] = field(default_factory=list)


def _implicated(inp: GeneratorInput) -> _Implicated:
    imp = _Implicated()
    for tb in reversed(inp.evidence.tracebacks):
        first_sglang = True
        for fr in reversed(tb.frames):
            if fr.package and fr.package not in _NOT_KERNELS:
                if norm(fr.package) not in imp.packages:
                    imp.packages[norm(fr.package)] = fr.package
                    imp.why.append(f"the traceback passes through {fr.package} ({fr.module}.{fr.function})")
                    imp.lines.append(tb.log_line)
            if fr.package == "sglang" and fr.module:
                parts = fr.module.split(".")[2:] if fr.module.startswith("sglang.srt.") else fr.module.split(".")[1:]
                words = stems(" ".join(parts)) | stems(fr.function or "")
                words -= {"scheduler", "runner", "loader", "load"} if not first_sglang else set()
                imp.words |= words
                if first_sglang:
                    imp.innermost_words |= words
                    imp.why.append(f"the innermost SGLang frame is {fr.module}.{fr.function}")
                    imp.lines.append(tb.log_line)
                    first_sglang = False
    return imp


def _statement(spec: FlagSpec, current: object, how: str) -> str:
    return (
        f"The implementation {spec.name} selects ({current}) fails on this host ({how}); another of its "
        "legal choices avoids it"
    )


class ImplicatedComponentGenerator:
    """Flags that select the implicated component, with every legal alternative (see module docstring)."""

    name = "component"

    def generate(self, inp: GeneratorInput) -> list[Candidate]:
        """One candidate per implicated selecting flag, one per implicated switch."""
        if inp.evidence.stage == "ok":
            return []
        imp = _implicated(inp)
        warn_text = norm(" ".join(w.text for w in inp.evidence.warnings))
        auto_facts = {
            k: v for k, v in inp.evidence.facts.items() if k.endswith(_CHOICE_FACT_SUFFIXES)
        }
        out: list[Candidate] = []
        for spec in selecting_flags(inp.flags):
            current = effective_value(inp, spec)
            alts = alternative_choices(spec, current)
            if not alts:
                continue
            factor, how, lines = 0.0, [], list(imp.lines[:3])
            name_words = stems(spec.name)
            cur = norm(str(current)) if current is not None else ""
            if cur and cur in imp.packages:
                factor = max(factor, PACKAGE_FACTOR)
                how.append(f"its value {current} is the package the failing frames run in")
            shared = name_words & imp.words - {"backend", "dtype"}
            if shared:
                factor = max(factor, INNERMOST_FACTOR if shared & imp.innermost_words else 1.0)
                how.append(f"it names the failing component ({', '.join(sorted(shared))})")
            if cur and len(cur) >= 4 and cur in warn_text:
                factor = max(factor, 1.0)
                how.append(f"a warning names its value {current}")
            dest = spec.name.lstrip("-").replace("-", "_")
            fact_key = next((k for k in auto_facts if fact_flag(inp.flags, k) is spec), None)
            if not how:
                continue  # not implicated
            if explicit(inp, spec):
                factor *= EXPLICIT_FACTOR
                how.append("the baseline sets it explicitly")
            elif fact_key is not None:
                factor *= AUTO_FACTOR
                how.append(f"SGLang resolved it on its own ({fact_key}={auto_facts[fact_key]})")
            ivs = [
                Intervention(
                    names=[spec.name], values=[c], decisive=False, fact=fact_key or dest, cost="low",
                    note=f"an alternative implementation of {spec.name}",
                )
                for c in alts
            ]
            out.append(
                Candidate(
                    id=f"component:{spec.name}",
                    statement=_statement(spec, current, "; ".join(how)),
                    component=spec.name.lstrip("-").removesuffix("-backend").replace("-", "_"),
                    package=next(iter(imp.packages.values()), None) if cur in imp.packages else None,
                    weight=BASE_WEIGHT * factor,
                    rationale="a component implicated by the failure is chosen by this flag; another "
                    "implementation of it uses different kernels",
                    generator=self.name,
                    evidence=[
                        Evidence(kind="fact", detail=h, experiment_id=inp.evidence.experiment_id, lines=lines)
                        for h in how
                    ],
                    interventions=ivs,
                    triggers=how,
                )
            )
        out += self._switches(inp, imp)
        return out

    def _switches(self, inp: GeneratorInput, imp: _Implicated) -> list[Candidate]:
        """``--disable-X`` switches (and ``--enable-X`` ones the baseline sets) whose X the frames name."""
        if inp.flags is None or not imp.words:
            return []
        out = []
        for spec in inp.flags.flags.values():
            if spec.takes_value or spec.deprecated:
                continue
            name = spec.name.lstrip("-")
            if name.startswith("disable-"):
                on = True
            elif name.startswith("enable-") and explicit(inp, spec):
                on = False
            else:
                continue
            if explicit(inp, spec) and on:
                continue
            words = stems(name.split("-", 1)[1])
            shared = words & imp.words
            if len(shared) < 2 and not (shared and len(words) == 1):
                continue
            weight = BASE_WEIGHT * (INNERMOST_FACTOR if shared & imp.innermost_words else 1.0)
            what = name.split("-", 1)[1].replace("-", " ")
            out.append(
                Candidate(
                    id=f"component:{spec.name}",
                    statement=f"The {what} feature breaks in the failing component "
                    f"({', '.join(sorted(shared))}); {'turning it off' if on else 'leaving it off'} avoids the failure",
                    component=name.split("-", 1)[1].replace("-", "_"),
                    weight=weight,
                    rationale="the failing frames name this feature's code",
                    generator=self.name,
                    evidence=[Evidence(kind="fact", detail=w, experiment_id=inp.evidence.experiment_id,
                                       lines=imp.lines[:3]) for w in imp.why[:2]],
                    interventions=[Intervention(names=[spec.name], values=[True if on else None], decisive=True,
                                                cost="low")],
                    triggers=sorted(shared),
                )
            )
        return out
