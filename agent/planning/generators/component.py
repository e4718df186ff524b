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

import functools
import re
from dataclasses import dataclass
from typing import Any

from agent.domain.models import Change, Evidence, Hypothesis, Intervention
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import (
    Implicated,
    alternative_choices,
    effective_value,
    explicit,
    fact_flag,
    implicated,
    mentioned_first,
    norm,
    selecting_flags,
    site_owner,
    specificity,
    stems,
    words_with_stems,
)
from agent.planning.generators.implementations import implementations
from agent.planning.in_play import InPlay
from agent.planning.served import served_settings, user_keeps
from tools.engines import get_engine
from tools.flags import FlagSpec

__all__ = ["ImplicatedComponentGenerator"]

#: Base weight of a component hypothesis, and the multipliers for what makes it a prime suspect.
BASE_WEIGHT = 0.08
EXPLICIT_FACTOR = 2.0  # the baseline chose this implementation itself
AUTO_FACTOR = 1.5  # SGLang chose it on its own (auto-resolution)
PACKAGE_FACTOR = 2.0  # the failing frames are inside the package this choice selects
FEATURE_FACTOR = 2.0  # it configures a feature the baseline explicitly turns on
SUSPECT_FACTOR = 0.4  # only suspected: a kernel failed and this backend ran (no frame names it)
#: Shared words tying a flag to the failure must be at least this specific (``common.specificity``).
MIN_SPECIFICITY = 0.25
#: Symptoms of a kernel misbehaving, where every backend the run used is a suspect.
_KERNEL_SYMPTOMS = frozenset({"nan_inf", "garbage_output", "accuracy_drop", "illegal_memory_access", "device_assert",
                              "device_fault",
                              "unsupported_arch", "crash_at_decode"})
#: Facts whose keys name an implementation choice (SGLang ServerArgs dests of backend / dtype flags).
_CHOICE_FACT_SUFFIXES = ("_backend", "kv_cache_dtype")
#: Values that name no implementation (a flag left to SGLang, or a switch), never "named by the error"; nor
#: does "model" (``--sampling-defaults model``: the checkpoint's own generation config), a word every error
#: about the model's files uses.
_NO_IMPLEMENTATION = frozenset({"auto", "none", "null", "default", "true", "false", "off", "on", "all", "model"})


@functools.lru_cache(maxsize=4096)
def _whole_word(word: str) -> re.Pattern[str]:
    """``word`` as a whole word, case-insensitive (``-`` joins words); compiled once per word (the choices
    of every selecting flag, against every failing launch of the history, each step)."""
    return re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])", re.IGNORECASE)


def named_choice(spec: FlagSpec, error_text: str) -> str | None:
    """The one choice of ``spec`` the error text names as a whole word, case-insensitive ("FlashInfer
    version mismatch" names ``flashinfer``; ``flashinfer-python`` is another word), or None. An error that
    names two or more of the choices lists alternatives (``remedies`` reads those), so it names none here."""
    return _named_choice(tuple(spec.choices or ()), error_text)


@functools.lru_cache(maxsize=8192)
def _named_choice(choices: tuple[str, ...], error_text: str) -> str | None:
    """`named_choice` of a flag's ``choices`` (cached: every selecting flag against every failing launch of
    the history, each step)."""
    # An ASCII choice absent from an ASCII text as a substring cannot be in it as a whole word: no pattern to
    # compile or run (outside ASCII, case-insensitive matching folds more than ``lower`` does).
    lowered = error_text.lower() if error_text.isascii() else None
    named = [
        c for c in choices
        if len(c) >= 3 and c.lower() not in _NO_IMPLEMENTATION
        and (lowered is None or not c.isascii() or c.lower() in lowered)
        and _whole_word(c).search(error_text)
    ]
    return named[0] if len(named) == 1 else None


def _statement(spec: FlagSpec, current: object, how: str, engine: str) -> str:
    """The hypothesis in words. A flag whose value in the failing run is unknown (unset, and neither the
    server nor the help's default names one) is left for the engine (``engine``: its display name,
    knowledge/engines.toml) to choose at startup: say so rather than print the missing value ("(None)")."""
    if current is None or str(current).strip() in ("", "None"):
        chosen = f"its default, chosen by {engine} at startup"
    else:
        chosen = str(current)
    return (
        f"The implementation {spec.name} selects ({chosen}) fails on this host ({how}); another of its "
        "legal choices avoids it"
    )


@dataclass
class _Reading:
    """What one failing launch says about implementations, read once per ``generate``: the implicated
    component, the warnings' text, the backends SGLang resolved (facts) and their flags, the words of
    the features the baseline turns on, and whether a kernel misbehaved."""

    imp: Implicated
    warn_text: str
    auto_facts: dict[str, Any]
    fact_of: dict[str, str]
    feature_words: set[str]
    crashy: bool
    engine: str  # the case's engine as reports name it (knowledge/engines.toml ``display``)
    play: InPlay  # what is in play on this deployment (knowledge/subsystems.toml)


def _implication(inp: GeneratorInput, spec: FlagSpec, current: object, rd: _Reading) -> tuple[float, list[str]]:
    """(strength, reasons) with which the failure implicates the implementation ``spec`` selects
    (``current``): its value is the failing package, its name the failing component, the error surfaced
    in the subsystem it configures, a warning names its value, or a kernel failed and it ran; no reasons
    when it is not implicated."""
    assert inp.flags is not None
    imp = rd.imp
    factor, how = 0.0, []
    cur = norm(str(current)) if current is not None else ""
    site = [pat for _, pat in imp.subsystems]
    sub = imp.subsystem_of(spec.name)
    if (pkg := _package_reading(imp, cur, current, elsewhere=bool(site) and sub is None)) is not None:
        factor = max(factor, pkg[0])
        how.append(pkg[1])
    named = named_choice(spec, imp.error_text)
    if named is not None and site_owner(inp.flags, site, spec.name, value=named):
        named = None  # a choice of the flag of the subsystem whose code raised it: that one's value
    if named is not None and norm(named) == cur:
        factor = max(factor, PACKAGE_FACTOR)
        how.append(f"the error names its value {current}")
    elif named is not None and cur in ("", "none", "auto"):
        # left to SGLang, the implementation the error names may be the one it chose; when the error was
        # raised in the code of the subsystem this flag configures, the choice it names is the one in force
        factor = max(factor, PACKAGE_FACTOR if sub is not None else 1.0)
        how.append(f"the error names {named}, one of its choices, and {rd.engine} chose its value at startup")
    shared = stems(spec.name) & imp.words - {"backend", "dtype"}
    if site_owner(inp.flags, site, spec.name, words=shared):
        shared = set()  # the failing code's words are those of its own subsystem's flag
    strength = imp.strength(inp.flags, shared)
    if strength >= MIN_SPECIFICITY:
        factor = max(factor, strength)
        how.append(f"it names the failing component ({', '.join(words_with_stems(spec.name, shared))})")
    if sub is not None:
        # The error surfaced in this subsystem's own code: its flags are the ones the failure
        # points at, however many flags share its words (a full --help has dozens of hicache-*).
        factor = max(factor, 1.0)
        how.append(f"the error surfaced in {imp.innermost}, code of the {sub} subsystem it configures")
        if rd.crashy and spec.name.endswith("-backend") and (cur not in ("", "none", "auto") or imp.packages):
            # a kernel faulted there, and this is the kernel implementation that subsystem ran (its value
            # left to the engine, the frames go on from the subsystem's code into a kernel package):
            # as strong as failing frames inside the package a choice selects
            factor = max(factor, PACKAGE_FACTOR)
            ran = current if cur not in ("", "none") else "(the engine's choice)"
            how.append(f"a kernel failed in that subsystem and its {spec.name} {ran} ran there")
    # A whole word of the warning ("auto" is not named by "automatically increase").
    if cur and len(cur) >= 4 and re.search(rf"(?<![\w-]){re.escape(cur)}(?![\w-])", rd.warn_text):
        factor = max(factor, 1.0)
        how.append(f"a warning names its value {current}")
    if not how and spec.name.endswith("-backend"):
        for system, cls in rd.play.implicated_here("flag", spec.name, set(inp.evidence.symptoms)):
            # no frame names it, but it computes what the symptom shows and runs here (the checkpoint's
            # quantized GEMM for a silent accuracy drop): ahead of a backend that merely ran
            factor = max(factor, 1.0)
            how.append(f"it selects the {system.id} implementation, which runs here and whose kernels are known "
                       f"to cause a failure like this one ({cls.replace('_', ' ')})")
    used = explicit(inp, spec) or rd.fact_of.get(spec.name)
    if not how and rd.crashy and used and spec.name.endswith("-backend"):
        factor = SUSPECT_FACTOR
        how.append("a kernel failed and this backend is one the failing run used")
    return factor, how


def _package_reading(imp: Implicated, cur: str, current: object, *, elsewhere: bool) -> tuple[float, str] | None:
    """(factor, reason) when the choice in force (``cur``, normalised) is a package the failing frames run in,
    else None. One package serves several subsystems (FlashInfer: attention, sampling, the fused all-reduce):
    when the error surfaced in another subsystem's code (``elsewhere``), which entered the package, the
    package alone does not say this choice ran."""
    if not cur or cur not in imp.packages:
        return None
    if elsewhere:
        return 1.0, f"its value {current} is the package the failing frames run in, entered from {imp.innermost} (another subsystem's code)"
    return PACKAGE_FACTOR, f"its value {current} is the package the failing frames run in"


def _avoids(inp: GeneratorInput, spec: FlagSpec, rd: _Reading, cur: str, named: str | None, how: list[str]) -> bool:
    """Whether switching away from the implementation in force avoids the failure without repairing it:
    it is the package the failure happened in, or the one the error names; unless SGLang chose for this
    platform an implementation with no kernels for this GPU (``_unfit_default``, its reason added to
    ``how``): then the choice is what is wrong, and one that runs here is the fix."""
    if not (cur and cur in rd.imp.packages) and named is None:
        return False
    if _unfit_default(inp, spec, rd, cur):
        how.append(_unfit_reason(inp))
        return False
    return True


def _unfit_default(inp: GeneratorInput, spec: FlagSpec, rd: _Reading, cur: str) -> bool:
    """Whether the implementation in force is SGLang's own choice for this platform (the baseline does
    not set the flag, SGLang printed what it resolved) and the failure says its kernels were not built
    for this GPU (``unsupported_arch``: "no kernel image", HIP's "invalid device function"), for an
    implementation shipped prebuilt (not one of ``implementations.toml``'s portable, just-in-time ones,
    where an architecture error is the compiler toolchain's). Then choosing an implementation that runs
    on this GPU repairs the configuration; it is not a workaround around a broken one."""
    if explicit(inp, spec) or rd.fact_of.get(spec.name) is None or cur in ("", "none", "auto"):
        return False
    if "unsupported_arch" not in inp.evidence.symptoms:
        return False
    return cur not in {norm(c) for c in implementations().choices.portable}


def _unfit_reason(inp: GeneratorInput) -> str:
    """The evidence that the engine's own choice does not fit this GPU, in words."""
    fp = inp.fingerprint
    engine = get_engine(inp.case.launcher.engine).display
    gpu = (fp.gpu_arch or (f"compute capability {fp.compute_capability}" if fp.compute_capability else None)
           if fp is not None else None)
    return (f"the error says its kernels were not built for this GPU{f' ({gpu})' if gpu else ''}, and {engine} "
            "chose it for this platform itself")


def _without_named(spec: FlagSpec, cur: str, alts: list[str], error_text: str) -> tuple[str | None, list[str]]:
    """The choice the error names when it may be the one in force (``cur``, normalised: unknown or that
    choice), and the alternatives without it (the implementation the error blames is no alternative)."""
    named = named_choice(spec, error_text)
    if named is None or cur not in ("", "none", "auto", norm(named)):
        return None, alts
    return named, [c for c in alts if c != named]


def _served_alternatives(inp: GeneratorInput, spec: FlagSpec, current: object,
                         alts: list[str]) -> tuple[list[str], set[str]]:
    """For a flag that defines what is served (knowledge/served.toml, ``--quantization``): the
    alternatives without those these weights cannot serve (``ServedSettings.unservable``: an AWQ format
    on a checkpoint made in none), and the set of those that change the deployment (a workaround, never
    the fix: issue 20, point 5). Any other flag: ``alts`` as they are and an empty set."""
    served = served_settings()
    if served.role("flag", spec.name, inp.flags) != "served":
        return alts, set()
    checkpoint = inp.fingerprint.checkpoint if inp.fingerprint else {}
    keeps = user_keeps(inp.case, inp.flags, inp.outcomes)
    alts = [c for c in alts if not served.unservable(inp.flags, spec.name, c, checkpoint)]
    changes = {c for c in alts if served.changes_deployment("flag", spec.name, c, inp.flags, keeps, checkpoint,
                                                            current)}
    return alts, changes


class ImplicatedComponentGenerator:
    """Flags that select the implicated component, with every legal alternative (see module docstring)."""

    name = "component"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """One candidate per implicated selecting flag, one per implicated switch."""
        if inp.evidence.stage == "ok" or inp.flags is None:
            return []
        auto_facts = {k: v for k, v in inp.evidence.facts.items() if k.endswith(_CHOICE_FACT_SUFFIXES)}
        rd = _Reading(
            imp=implicated(inp),
            warn_text=norm(" ".join(w.text for w in inp.evidence.warnings)),
            auto_facts=auto_facts,
            fact_of={s.name: k for k in auto_facts if (s := fact_flag(inp.flags, k)) is not None},
            feature_words=self._feature_words(inp),
            crashy=bool(set(inp.evidence.symptoms) & _KERNEL_SYMPTOMS),
            engine=get_engine(inp.case.launcher.engine).display,
            play=InPlay(inp.fingerprint, inp.baseline, inp.evidence.server_args, inp.flags),
        )
        out = [c for spec in selecting_flags(inp.flags) if (c := self._choice(inp, spec, rd)) is not None]
        out += self._switches(inp, rd.imp)
        return out

    def _choice(self, inp: GeneratorInput, spec: FlagSpec, rd: _Reading) -> Hypothesis | None:
        """The candidate of one selecting flag with every legal alternative, weighed by how the failure
        implicates it; None when it is not implicated or has no alternative."""
        assert inp.flags is not None
        current = effective_value(inp, spec)
        fp = inp.fingerprint
        alts = alternative_choices(spec, current, fp.gpu_name if fp else None, fp.gpu_vendor if fp else None)
        if not explicit(inp, spec):  # setting the default (or "auto": what an unset flag resolves by) changes nothing
            alts = [c for c in alts if norm(c) != "auto" and (spec.default is None or norm(c) != norm(str(spec.default)))]
        alts = [c for c in alts if rd.play.why_not(Change(kind="flag", name=spec.name, after=c)) is None]  # in play
        if not alts:
            return None
        cur = norm(str(current)) if current is not None else ""
        factor, how = _implication(inp, spec, current, rd)
        if not how:
            return None  # not implicated
        imp, lines = rd.imp, list(rd.imp.lines[:3])
        dest = spec.name.lstrip("-").replace("-", "_")
        fact_key = rd.fact_of.get(spec.name)
        if explicit(inp, spec):
            factor *= EXPLICIT_FACTOR
            how.append("the baseline sets it explicitly")
        elif fact_key is not None and str(rd.auto_facts[fact_key]).lower() not in ("auto", "none"):
            factor *= AUTO_FACTOR
            how.append(f"{rd.engine} resolved it on its own ({fact_key}={rd.auto_facts[fact_key]})")
        if specificity(inp.flags, stems(spec.name) & rd.feature_words - {"backend", "dtype"}) >= 0.5:
            factor *= FEATURE_FACTOR
            how.append("it configures a feature the baseline turns on")
        named, alts = _without_named(spec, cur, alts, imp.error_text)
        alts, served = _served_alternatives(inp, spec, current, mentioned_first(alts, imp.error_text))
        if not alts:
            return None
        avoids = _avoids(inp, spec, rd, cur, named, how)
        # With a single alternative, "this implementation is broken" predicts that it fixes.
        ivs = [
            Intervention(
                names=[spec.name], values=[c], decisive=len(alts) == 1, fact=fact_key or dest,
                cost="high" if c in served else "medium" if avoids else "low", workaround=avoids or c in served,
                note=f"an alternative implementation of {spec.name}"
                + (f" that does not use {named or current}" if avoids else "")
                + ("; changes what is served (the deployment the user asked for)" if c in served else ""),
            )
            for c in alts
        ]
        return Hypothesis(
            id=f"component:{spec.name}",
            statement=_statement(spec, current, "; ".join(how), rd.engine),
            component=spec.name.lstrip("-").removesuffix("-backend").replace("-", "_"),
            package=imp.packages.get(cur) if cur in imp.packages else named,
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

    @staticmethod
    def _feature_words(inp: GeneratorInput) -> set[str]:
        """Stems of the flags the baseline sets (features someone turned on or tuned)."""
        words: set[str] = set()
        for name in inp.baseline.flags:
            if served_settings().role("flag", name, inp.flags) is not None:
                continue
            words |= stems(name.lstrip("-").removeprefix("enable-"))
        return words

    def _switches(self, inp: GeneratorInput, imp: Implicated) -> list[Hypothesis]:
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
            strength = imp.strength(inp.flags, shared)
            if len(shared) < 2 and not (shared and len(words) == 1) or strength < MIN_SPECIFICITY:
                continue
            weight = BASE_WEIGHT * strength
            what = name.split("-", 1)[1].replace("-", " ")
            out.append(
                Hypothesis(
                    id=f"component:{spec.name}",
                    statement=f"The {what} feature breaks in the failing component "
                    f"({', '.join(words_with_stems(what, shared) or sorted(shared))}); {'turning it off' if on else 'leaving it off'} avoids the failure",
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
