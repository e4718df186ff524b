"""Remedies named in the evidence: error text that names a flag, an environment variable or a value.

Examples of what is read (wording of SGLang 0.5.x errors; ``srt/model_executor/model_runner.py``,
``srt/model_executor/cuda_graph_runner.py``, ``srt/mem_cache/kv_cache_configurator.py`` in 0.5.23):

- ``Please try to increase --mem-fraction-static`` -> raise that flag (the value from
  ``agent.values`` when a rule for that flag and direction exists, else a step up);
- ``Increase --mem-fraction-static (at least 0.9113 is needed ...)`` -> that value, rounded up;
- ``Use --attention-backend triton`` / ``--x=y`` -> that value;
- SGLang's numbered ``Possible solutions:`` list -> each item (``set --cuda-graph-max-bs to a smaller
  value (e.g., 16)``, ``disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance
  loss)`` marked as a costly workaround, ``not using --enable-torch-compile`` -> remove that flag);
- ``export NAME=VALUE`` / ``set NAME=VALUE`` -> that environment variable.

A remedy from the fatal error itself weighs most, one from a list of possible solutions less, one in a
warning least.
"""

from __future__ import annotations

import math
import re

from agent.catalog import load_roles
from agent.generators import Candidate, GeneratorInput
from agent.generators.common import canon, effective_value, fact_flag
from agent.models import Evidence, FlagValue, Intervention, LogLine
from agent.values import rule_for

__all__ = ["RemediesGenerator", "remedies_in"]

#: Weights by where the remedy was read.
WEIGHT_ERROR = 0.3
WEIGHT_SOLUTION = 0.1
WEIGHT_WARNING = 0.05
#: A named variable that overrides a safety check (``_OVERRIDE``) weighs this much of a plain remedy.
OVERRIDE_FACTOR = 0.3

_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?:(?:=|\s+)(?P<value>[A-Za-z0-9_./:+-]+))?")
_ENV = re.compile(r"(?<![\w-])(?P<name>[A-Z][A-Z0-9]*_[A-Z0-9_]+)=(?P<value>[^\s,;'\"`)]+)")
#: Variables that override a safety check (SGLANG_ALLOW_..., ..._FORCE_..., ..._SKIP_...): setting one
#: silences the check rather than repairing what it caught, so it is a workaround.
_OVERRIDE = re.compile(r"ALLOW|OVERWRITE|OVERRIDE|FORCE|SKIP|IGNORE|UNSAFE|DISABLE")
_RAISE = re.compile(r"\b(?:increase|raise|larger|higher|bigger|more)\b", re.I)
_LOWER = re.compile(r"\b(?:decrease|lower|reduce|smaller|less)\b", re.I)
_AT_LEAST = re.compile(r"at least (?P<v>\d+(?:\.\d+)?)")
_AT_MOST = re.compile(r"at most (?P<v>\d+(?:\.\d+)?)")
_EXAMPLES = re.compile(r"e\.g\.,?\s*(?P<v>[0-9.]+(?:\s*(?:or|,)\s*[0-9.]+)*)")
_NOT_USING = re.compile(r"\b(?:not using|without|remove|drop|do not use|don't use)\s+(?:the\s+)?$", re.I)
_COSTLY = re.compile(r"not recommended|performance loss|much slower|slow(?:s|er)? down", re.I)
_SOLUTIONS = re.compile(r"possible solutions|you can try|to fix this|workarounds?:", re.I)
_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+")
_REMEDY_WORDS = re.compile(r"\b(?:use|set|try|increase|decrease|lower|raise|reduce|pass|add|enable|disable|"
                           r"please|consider|specify|by)\b", re.I)


def _where(lines: list[LogLine], exceptions: set[str]) -> list[tuple[LogLine, str]]:
    """(line, kind) for each line that may name a remedy: error, solution or warning."""
    out: list[tuple[LogLine, str]] = []
    in_list = False
    for ll in lines:
        text = ll.text
        if _SOLUTIONS.search(text):
            in_list = True
            out.append((ll, "solution"))
            continue
        if in_list and _ITEM.match(text):
            out.append((ll, "solution"))
            continue
        in_list = False
        stripped = text.strip()
        if stripped in exceptions or re.search(r"\b\w*(?:Error|Exception)\b:", text):
            out.append((ll, "error"))
        elif re.search(r"\bWARN(?:ING)?\b|warning", text, re.I):
            out.append((ll, "warning"))
    return out


def _round_up(value: float, step: float = 0.01) -> str:
    return f"{math.ceil(value / step - 1e-9) * step:.2f}"


def remedies_in(inp: GeneratorInput) -> list[tuple[str, Intervention, str, LogLine, str]]:
    """(id, intervention, kind, line, description) for every remedy named in the kept log lines."""
    ev = inp.evidence
    exceptions = {tb.exception for tb in ev.tracebacks}
    found: list[tuple[str, Intervention, str, LogLine, str]] = []
    for ll, kind in _where(ev.log, exceptions):
        text = ll.text
        if kind != "solution" and not _REMEDY_WORDS.search(text):
            continue
        for m in _FLAG.finditer(text):
            spec = canon(inp.flags, m.group(1))
            if spec is None:
                continue
            before_text = text[: m.start()]
            after_text = text[m.end() : m.end() + 80]
            sentence = before_text[-80:] + m.group(0) + after_text
            costly = bool(_COSTLY.search(after_text))
            note = " ".join(text.strip().split())  # whole: a reader sees the line it came from
            if _NOT_USING.search(before_text[-30:]):
                if not any(n in inp.baseline.flags for n in spec.option_strings):
                    continue
                iv = Intervention(names=[spec.name], values=[None], decisive=kind == "error", cost="low", note=note)
                found.append((f"remedy:{spec.name}=off", iv, kind, ll, f"without {spec.name}"))
                continue
            if not spec.takes_value:
                workaround = spec.name.startswith("--disable-")
                iv = Intervention(names=[spec.name], values=[True], decisive=kind == "error",
                                  cost="high" if costly else ("medium" if workaround else "low"),
                                  workaround=workaround, note=note)
                found.append((f"remedy:{spec.name}", iv, kind, ll, f"{spec.name}"))
                continue
            value = m.group("value")
            values: list[FlagValue] = []
            derive = None
            direction = "raise" if _RAISE.search(sentence) else "lower" if _LOWER.search(sentence) else None
            if (at := _AT_LEAST.search(after_text)) and direction != "lower":
                values = [_round_up(float(at.group("v")))]
                direction = "raise"
            elif (at := _AT_MOST.search(after_text)) and direction != "raise":
                values = [f"{math.floor(float(at.group('v')) * 100) / 100:.2f}"]
                direction = "lower"
            elif value and not value.startswith("-") and value.lower() not in ("to", "a", "the", "by", "or", "and"):
                if spec.choices and value not in spec.choices:
                    value = None
                if value:
                    values = [value]
            if not values and direction:
                derive = rule_for(spec.name, direction)
                if (ex := _EXAMPLES.search(after_text)) is not None:
                    values = re.split(r"\s*(?:or|,)\s*", ex.group("v").strip())
                values = values or _step(effective_value(inp, spec), direction, spec.value_type)
            if not values and not derive:
                continue
            fact = spec.name.lstrip("-").replace("-", "_")
            role = next((r for r, names in load_roles().items() if spec.name in names), None)
            iv = Intervention(names=load_roles()[role] if role else [spec.name], role=role,
                              values=values, derive=derive, decisive=kind == "error",
                              fact=fact if fact_flag(inp.flags, fact) is spec else None,
                              cost="high" if costly else "low", note=note)
            what = f"{direction} {spec.name}" if direction else f"{spec.name} {values[0]}"
            found.append((f"remedy:{spec.name}" + (f"={values[0]}" if not direction else f":{direction}"),
                          iv, kind, ll, what))
        for m in _ENV.finditer(text):
            if _condition_fails(text[: m.start()]) is not None:
                continue  # the text offers it only if something holds that its own figures deny
            override = bool(_OVERRIDE.search(m.group("name")))
            iv = Intervention(kind="env", names=[m.group("name")], values=[m.group("value")],
                              decisive=kind == "error", cost="low", workaround=override,
                              note=" ".join(text.split()))
            found.append((f"remedy:{m.group('name')}={m.group('value')}", iv, kind, ll,
                          f"{m.group('name')}={m.group('value')}"))
    return found


#: PyTorch's out-of-memory message (``c10/cuda/CUDACachingAllocator.cpp``, every release since 2.0):
#: "Tried to allocate 1.75 GiB. GPU 0 has a total capacity of 79.10 GiB of which 512.00 MiB is free. ...
#: and 312.55 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try
#: setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
_SIZE = r"(?P<{0}>\d+(?:\.\d+)?) (?P<{0}_unit>[KMGT]i?B)"
_TRIED = re.compile(r"Tried to allocate " + _SIZE.format("v"))
_FREE = re.compile(r"of which " + _SIZE.format("v") + " is free")
_RESERVED_UNUSED = re.compile(_SIZE.format("v") + r" is reserved by PyTorch but unallocated")
_UNITS = {"KB": 1 / 1024, "KiB": 1 / 1024, "MB": 1.0, "MiB": 1.0, "GB": 1024.0, "GiB": 1024.0,
          "TB": 1024.0**2, "TiB": 1024.0**2}


def _mib(m: re.Match[str] | None) -> float | None:
    return float(m.group("v")) * _UNITS.get(m.group("v_unit"), 1.0) if m else None


def _condition_fails(before: str) -> str | None:
    """Why a remedy the text offers only under a condition ("If reserved but unallocated memory is large
    try setting ...") does not apply, judged by the text's own figures; None when it may apply.

    Defragmenting (``expandable_segments``) can only serve a request that the free memory plus the
    memory PyTorch reserved but left unallocated could hold together: when both are smaller than the
    request, the allocation fails however the segments are arranged."""
    if not re.search(r"\bif\b[^.]*\breserved but unallocated\b[^.]*$", before, re.I):
        return None
    tried, free, unused = _mib(_TRIED.search(before)), _mib(_FREE.search(before)), _mib(_RESERVED_UNUSED.search(before))
    if tried is None or free is None or unused is None:
        return None
    if free + unused >= tried:
        return None
    return (f"{free:.0f} MiB free and {unused:.0f} MiB reserved but unallocated cannot hold the {tried:.0f} MiB "
            "requested, however the memory is arranged")


def _step(current: FlagValue, direction: str, value_type: str) -> list[FlagValue]:
    """A value one step in ``direction`` from ``current`` when the text gives none (x2 or /2 for
    integers, +/-0.05 for fractions)."""
    try:
        x = float(str(current))
    except (TypeError, ValueError):
        return []
    if value_type == "int":
        return [str(max(1, int(x * 2 if direction == "raise" else x // 2)))]
    if 0 < x <= 1:
        return [f"{min(0.99, x + 0.05) if direction == 'raise' else max(0.05, x - 0.05):.2f}"]
    return [str(x * 2 if direction == "raise" else x / 2)]


class RemediesGenerator:
    """One candidate per remedy the evidence names (see module docstring)."""

    name = "remedies"

    def generate(self, inp: GeneratorInput) -> list[Candidate]:
        """Candidates ``remedy:...``; the same remedy named twice counts once, at its strongest."""
        weight = {"error": WEIGHT_ERROR, "solution": WEIGHT_SOLUTION, "warning": WEIGHT_WARNING}
        best: dict[str, Candidate] = {}
        for cid, iv, kind, ll, what in remedies_in(inp):
            override = iv.kind == "env" and iv.workaround
            cand = Candidate(
                id=cid,
                statement=f"The log names the remedy: {what}",
                component=iv.fact or (iv.names[0].lstrip("-").replace("-", "_") if iv.kind == "flag" else
                                      f"env.{iv.names[0]}"),
                # a variable that silences the check is weighed below fixing what the check caught
                weight=weight[kind] * (OVERRIDE_FACTOR if override else 1.0),
                rationale=f"the {'error' if kind == 'error' else kind} text names this change",
                generator=self.name,
                evidence=[Evidence(kind="signature", detail=f"log line {ll.line}: {ll.text.strip()}",
                                   experiment_id=inp.evidence.experiment_id, lines=[ll.line])],
                interventions=[iv],
                triggers=[kind],
                # one of SGLang's listed possible solutions corroborates a cause that already proposes
                # it rather than being a second hypothesis for the same change
                support=0.0 if kind == "solution" else None,
            )
            if cid not in best or best[cid].weight < cand.weight:
                best[cid] = cand
        return list(best.values())
