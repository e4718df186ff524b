"""Helpers the generators share: words and stems of names, flag look-ups on the host's catalog,
effective values, and the order in which alternative implementations are tried."""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.generators import GeneratorInput
from agent.models import FlagValue
from tools.flags import FlagCatalog, FlagError, FlagSpec

__all__ = [
    "GENERIC_WORDS",
    "alternative_choices",
    "canon",
    "effective_value",
    "fact_flag",
    "norm",
    "stems",
]

#: Words too common in module paths, function names and help texts to implicate anything.
GENERIC_WORDS = frozenset(
    """srt python lib dist site packages init self call run forward get set the and for with this that from
    into when use used using not none true false default value values model models layer layers manager
    managers executor entrypoints utils util common base main process worker workers server args arg
    http engine module modules function wrapper wrapped inner outer impl core local global new old
    size type mode enable enables enabled disable disables disabled option options flag support supported
    which will can may only are its has have per max min number num time file path name""".split()
)
_SUFFIXES = ("ations", "ation", "ions", "ion", "ings", "ing", "ers", "er", "ed", "es", "s")
#: Implementations that are compiled just in time for whatever GPU is present, tried first among the
#: alternatives of a backend flag (kernels shipped prebuilt for a few GPU generations are the usual
#: reason one backend fails where another works; sgl-project/sglang issues about "Unsupported
#: architecture", "no kernel image" on new GPUs).
PORTABLE_CHOICES = ("triton", "torch_native", "pytorch", "torch", "flashinfer")
#: Choices for other vendors' hardware (AMD ROCm, Intel, Ascend, ...), never proposed on an NVIDIA host.
_OTHER_VENDOR = re.compile(r"aiter|wave|ascend|npu|hpu|xpu|intel|rocm|mlu|musa|ipex|\bcpu\b|amx|hip", re.I)


def norm(text: str) -> str:
    """Lower case without ``_``, ``-`` and spaces (``DeepGemm`` and ``deep_gemm`` compare equal)."""
    return re.sub(r"[\s_\-]+", "", text.lower())


def _stem(word: str) -> str:
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            return word[: -len(suf)]
    return word


def stems(text: str) -> set[str]:
    """Stems of the words of ``text`` (split at non-letters and ``_``/``-``/``.``), generic words left out."""
    out = set()
    for w in re.split(r"[^A-Za-z0-9]+|_", text):
        w = w.lower()
        if len(w) < 3 or w.isdigit() or w in GENERIC_WORDS:
            continue
        s = _stem(w)
        if s not in GENERIC_WORDS:
            out.add(s)
    return out


def canon(flags: FlagCatalog | None, name: str) -> FlagSpec | None:
    """The host's flag spec for a spelling, or None when the host does not know it."""
    if flags is None:
        return None
    try:
        return flags.resolve(name)
    except FlagError:
        return None


def fact_flag(flags: FlagCatalog | None, fact: str) -> FlagSpec | None:
    """The flag whose argparse dest is ``fact`` (``fp8_gemm_backend`` -> ``--fp8-gemm-backend``;
    the NSA/DSA rename of SGLang 0.5.18 is followed both ways)."""
    names = [fact]
    if fact.startswith("nsa_"):
        names.append("dsa_" + fact[4:])
    elif fact.startswith("dsa_"):
        names.append("nsa_" + fact[4:])
    for n in names:
        spec = canon(flags, "--" + n.replace("_", "-"))
        if spec is not None:
            return spec
    return None


def effective_value(inp: GeneratorInput, spec: FlagSpec) -> FlagValue:
    """A flag's value in the failing run: the baseline's, else what the server reported (a fact named
    after the flag's dest), else the help's default."""
    for name in spec.option_strings:
        if name in inp.baseline.flags:
            return inp.baseline.flags[name]
    dest = spec.name.lstrip("-").replace("-", "_")
    for key in (dest, "nsa_" + dest[4:] if dest.startswith("dsa_") else dest):
        if key in inp.evidence.facts:
            return inp.evidence.facts[key]
    if not spec.takes_value:
        return None
    return spec.default


def alternative_choices(spec: FlagSpec, current: FlagValue) -> list[str]:
    """A choice flag's legal alternatives to ``current``: portable implementations first, then the
    rest in the help's order; other vendors' choices and ``current`` itself left out."""
    cur = norm(str(current)) if current is not None else None
    alts = [c for c in spec.choices or [] if norm(c) != cur and not _OTHER_VENDOR.search(c)]
    first = [c for p in PORTABLE_CHOICES for c in alts if c == p]
    return first + [c for c in alts if c not in first]


def explicit(inp: GeneratorInput, spec: FlagSpec) -> bool:
    """Whether the failing baseline sets this flag itself."""
    return any(n in inp.baseline.flags for n in spec.option_strings)


def selecting_flags(flags: FlagCatalog | None) -> Iterable[FlagSpec]:
    """Flags that choose between implementations: a value flag with at least two choices."""
    if flags is None:
        return []
    return [s for s in flags.flags.values() if s.takes_value and s.choices and len(s.choices) >= 2 and not s.deprecated]
