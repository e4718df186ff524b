"""Remedies named in the evidence: error text that names a flag, an environment variable or a value.

Examples of what is read (wording of SGLang 0.5.x errors; ``srt/model_executor/model_runner.py``,
``srt/model_executor/cuda_graph_runner.py``, ``srt/mem_cache/kv_cache_configurator.py`` in 0.5.23):

- ``Please try to increase --mem-fraction-static`` -> raise that flag (``agent.planning.values``);
- ``Increase --mem-fraction-static (at least 0.9113 is needed ...)`` -> that value, rounded up;
- SGLang's numbered ``Possible solutions:`` list -> each item (``set --cuda-graph-max-bs to a smaller
  value (e.g., 16)``, ``disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance
  loss)`` marked as a costly workaround, ``not using --enable-torch-compile`` -> remove that flag);
- ``Use --attention-backend triton`` / ``--x=y`` -> that value; ``export NAME=VALUE`` -> that variable.

A remedy in the fatal error weighs most, one from a list of possible solutions less, a warning's least.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable

from agent.domain.models import Evidence, FlagValue, Hypothesis, Intervention, LogLine
from agent.planning.allowed import PLAIN_WORDS, no_full_stop, stated_allowed
from agent.planning.budgets import overridden
from agent.planning.catalog import load_roles
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import (
    ERROR_WORD,
    canon,
    effective_value,
    error_lines,
    explicit,
    fact_flag,
    finds,
    is_log_level_flag,
    norm,
)
from agent.planning.generators.set_dest import set_dest_remedies
from agent.planning.in_play import DEVICE_FLAG, device_for, load_subsystems, platform_of
from agent.planning.values import fit_cpu_list, rule_for
from tools.flags import FlagCatalog, FlagSpec, documented_choices

#: One remedy a launch's evidence names: (ledger id, intervention, kind of line, the line, description).
Remedy = tuple[str, Intervention, str, LogLine, str]

__all__ = ["RemediesGenerator", "left_out", "remedies_in"]

#: Weights by where the remedy was read.
WEIGHT_ERROR = 0.3
WEIGHT_SOLUTION = 0.1
WEIGHT_WARNING = 0.05
#: A setting the fatal error itself says to move ("Try increasing `x` or decreasing `y`"): the engine's
#: own instruction outweighs a catalog cause (priors up to 0.5), unless the user set a flag such a cause
#: reverts (then that explicit setting is the likelier culprit and the instruction weighs as WEIGHT_ERROR).
WEIGHT_NAMED = 0.6
#: The user's own setting chose a package that is not installed: reverting it is the first thing to try.
WEIGHT_MISSING = 0.5
#: A named variable that overrides a safety check (``_OVERRIDE``) weighs this much of a plain remedy.
OVERRIDE_FACTOR = 0.3

_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?:(?:=|\s+)(?P<value>[A-Za-z0-9_./:+-]+))?")
_ENV = re.compile(r"(?<![\w-])(?P<name>[A-Z][A-Z0-9]*_[A-Z0-9_]+)=(?P<value>[^\s,;'\"`)]+)")
#: Variables that override a safety check (SGLANG_ALLOW_..., ..._FORCE_..., ..._SKIP_...): setting one
#: silences the check rather than repairing what it caught, so it is a workaround.
_OVERRIDE = re.compile(r"ALLOW|OVERWRITE|OVERRIDE|FORCE|SKIP|IGNORE|UNSAFE|DISABLE")
#: The error's own sentence saying what the variable it names does to the check that failed: it bypasses it
#: ("Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.", flashinfer/__init__.py's cubin version
#: check; its maintainers' fix is the matching package, flashinfer-ai/flashinfer#4869): whatever its name,
#: such a variable silences the check rather than repairing what it caught, a workaround.
_BYPASSES = re.compile(r"\bto (?:bypass|skip|disable|ignore|override|circumvent) (?:this|the|these|that) "
                       r"(?:\w+ )?(?:checks?|validations?|assertions?|guards?)\b", re.I)
_RAISE = re.compile(r"\b(?:increase|raise|larger|higher|bigger|more)\b", re.I)
_LOWER = re.compile(r"\b(?:decrease|lower|reduce|smaller|less)\b", re.I)
#: "Please set proper `--max-total-tokens` to avoid the out-of-memory error." (SGLang 0.5.23 numa_utils.py): a
#: bound the engine asks for against running out of memory, i.e. a lower one.
_BOUND_FOR_MEMORY = re.compile(r"\bset (?:a |an )?(?:proper|appropriate|suitable)\b.{0,60}\b(?:out[- ]of[- ]memory|OOM)\b", re.I)
_AT_LEAST = re.compile(r"at least (?P<v>\d+(?:\.\d+)?)")
_AT_MOST = re.compile(r"at most (?P<v>\d+(?:\.\d+)?)")
_EXAMPLES = re.compile(r"e\.g\.,?\s*(?P<v>[0-9.]+(?:\s*(?:or|,)\s*[0-9.]+)*)")
_NOT_USING = re.compile(r"\b(?:not using|without|remove|drop|do not use|don't use)\s+(?:the\s+)?$", re.I)
#: A setting offered only to quiet the message itself ("To silence this warning, specify ...": no remedy).
_SILENCES = re.compile(r"\bto (?:silence|suppress|hide|mute|quiet) (?:this|the|these) (?:warnings?|messages?|logs?)\b", re.I)
_COSTLY = re.compile(r"not recommended|performance loss|much slower|slow(?:s|er)? down", re.I)
_SOLUTIONS = re.compile(r"possible (?:solutions|suggestions)|you can try|to fix this|workarounds?:", re.I)
_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+")
_REMEDY_WORDS = re.compile(r"\b(?:use|set|try|increase|decrease|lower|raise|reduce|pass|add|enable|disable|"
                           r"please|consider|specify|by)\b", re.I)


def _where(lines: list[LogLine], exceptions: set[str], warned: frozenset[int] = frozenset()) -> list[tuple[LogLine, str]]:
    """(line, kind) for each line that may name a remedy: error, solution or warning (a line that says so, or
    one a signature of severity ``warning`` matched: ``warned``, line numbers; SGLang's own log format prints
    no level)."""
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
        if stripped in exceptions or finds(ERROR_WORD, text):
            out.append((ll, "error"))
        elif ll.line in warned or re.search(r"\bWARN(?:ING)?\b|warning", text, re.I):
            out.append((ll, "warning"))
    return out


def _round_up(value: float, step: float = 0.01) -> str:
    return f"{math.ceil(value / step - 1e-9) * step:.2f}"


def remedies_in(inp: GeneratorInput) -> list[Remedy]:
    """(id, intervention, kind, line, description) for every remedy named in the kept log lines."""
    ev = inp.evidence
    exceptions = {tb.exception_line for tb in ev.tracebacks}
    warned = frozenset(n for m in ev.matches if m.severity == "warning" for n in m.line_numbers)
    found: list[Remedy] = []
    for ll, kind in _where(ev.log, exceptions, warned):
        text = ll.text
        if kind != "solution" and not _REMEDY_WORDS.search(text):
            continue
        found += [r for m in _FLAG.finditer(text) if (r := _flag_remedy(inp, m, kind, ll)) is not None]
        found += [r for m in _ENV.finditer(text) if (r := _env_remedy(inp, m, kind, ll)) is not None]
    found += _named_settings(inp)
    found += set_dest_remedies(error_lines(inp), lambda dest: fact_flag(inp.flags, dest) if inp.flags else None,
                               lambda spec: explicit(inp, spec))
    found += _alternatives(inp)
    found += _allowed_values(inp)
    found += _bounded_settings(inp)
    found += _missing_package_reverts(inp)
    return found


def _flag_remedy(inp: GeneratorInput, m: re.Match[str], kind: str, ll: LogLine) -> Remedy | None:
    """The remedy a flag named in a log line (``m`` of ``_FLAG``) stands for: the flag off, on, a value
    or a direction, or None when it is not this host's flag or names no usable value."""
    text = ll.text
    spec = canon(inp.flags, m.group(1))
    if spec is None or _SILENCES.search(_sentence_of(text, m.start())):
        return None
    before_text = text[: m.start()]
    after_text = text[m.end() : m.end() + 80]
    sentence = before_text[-80:] + m.group(0) + after_text
    costly = bool(_COSTLY.search(after_text))
    note = " ".join(text.strip().split())  # whole: a reader sees the line it came from
    if _NOT_USING.search(before_text[-30:]):
        if not any(n in inp.baseline.flags for n in spec.option_strings):
            return None
        iv = Intervention(names=[spec.name], values=[None], decisive=kind == "error", cost="low", note=note)
        return (f"remedy:{spec.name}=off", iv, kind, ll, f"without {spec.name}")
    if not spec.takes_value:
        if any(inp.baseline.flags.get(n) is True for n in spec.option_strings):
            return None  # on already: the error names the switch in force ("--enable-X is not supported ...")
        workaround = spec.name.startswith("--disable-")
        iv = Intervention(names=[spec.name], values=[True], decisive=kind == "error",
                          cost="high" if costly else ("medium" if workaround else "low"),
                          workaround=workaround, note=note)
        return (f"remedy:{spec.name}", iv, kind, ll, f"{spec.name}")
    value = no_full_stop(m.group("value"))
    values: list[FlagValue] = []
    derive = None
    direction = "raise" if _RAISE.search(sentence) else "lower" if _LOWER.search(sentence) or \
        _BOUND_FOR_MEMORY.search(sentence) else None
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
        # the rule of the flag as the line spells it, or as this host does (``--cuda-graph-max-bs`` in the
        # engine's own advice is 0.5.23's ``--cuda-graph-max-bs-decode``), or of another spelling of its role
        role_names = next((names for names in load_roles().values() if spec.name in names), [])
        derive = next((r for n in (spec.name, m.group(1), *role_names) if (r := rule_for(n, direction))), None)
        if (ex := _EXAMPLES.search(after_text)) is not None:
            values = re.split(r"\s*(?:or|,)\s*", ex.group("v").strip())
        values = values or _step(effective_value(inp, spec), direction, spec.value_type)
    if not values and not derive:
        return None
    fact = spec.name.lstrip("-").replace("-", "_")
    role = next((r for r, names in load_roles().items() if spec.name in names), None)
    iv = Intervention(names=load_roles()[role] if role else [spec.name], role=role,
                      values=values, derive=derive, decisive=kind == "error",
                      fact=fact if fact_flag(inp.flags, fact) is spec else None,
                      cost="high" if costly else "low", note=note)
    what = f"{direction} {spec.name}" if direction else f"{spec.name} {values[0]}"
    return (f"remedy:{spec.name}" + (f"={values[0]}" if not direction else f":{direction}"), iv, kind, ll, what)


def _env_remedy(inp: GeneratorInput, m: re.Match[str], kind: str, ll: LogLine) -> Remedy | None:
    """The environment variable a log line names (``m`` of ``_ENV``) with a value that fits this host,
    or None."""
    text = ll.text
    if _condition_fails(text[: m.start()]) is not None or _SILENCES.search(_sentence_of(text, m.start())):
        return None  # offered only if something holds that its own figures deny, or only to quiet a message
    override = bool(_OVERRIDE.search(m.group("name")) or _BYPASSES.search(_sentence_of(text, m.start())))
    env_value, _why = fit_cpu_list(str(no_full_stop(m.group("value"))), _sentence_of(text, m.start()),
                                   cpu_count=_cpu_count(inp), ranks=_ranks(inp))
    if env_value is None:
        return None  # an example for another machine, or a value the guard would refuse (left_out)
    if str(inp.baseline.env.get(m.group("name"), "")) == str(env_value):
        return None  # the value in force, which the error quotes ("the unified-KV path (NAME=VALUE)")
    iv = Intervention(kind="env", names=[m.group("name")], values=[env_value],
                      decisive=kind == "error", cost="low", workaround=override,
                      note=" ".join(text.split()))
    return (f"remedy:{m.group('name')}={env_value}", iv, kind, ll, f"{m.group('name')}={env_value}")


def _sentence_of(text: str, at: int) -> str:
    """The sentence of ``text`` that holds position ``at`` (what says whether a value is an example)."""
    start = max(text.rfind(". ", 0, at), text.rfind("? ", 0, at)) + 1
    end = text.find(". ", at)
    return text[start : end if end >= 0 else len(text)]


def _cpu_count(inp: GeneratorInput) -> int | None:
    return inp.fingerprint.cpu_count if inp.fingerprint is not None else None


def _ranks(inp: GeneratorInput) -> int | None:
    """The server's rank count per node as the effective config shows it (tp_size), or None."""
    try:
        return int(str(inp.evidence.facts.get("tp_size"))) if inp.evidence.facts.get("tp_size") else None
    except ValueError:
        return None


def left_out(inp: GeneratorInput) -> list[str]:
    """Why each value an error text names for a variable was not proposed, or was replaced by one
    derived for this host (``agent.planning.values.fit_cpu_list``): one sentence each, for the user."""
    out: list[str] = []
    for ll, _kind in _where(inp.evidence.log, {tb.exception_line for tb in inp.evidence.tracebacks}):
        for m in _ENV.finditer(ll.text):
            raw = str(no_full_stop(m.group("value")))
            value, why = fit_cpu_list(raw, _sentence_of(ll.text, m.start()), cpu_count=_cpu_count(inp),
                                      ranks=_ranks(inp))
            if why and (line := f"{m.group('name')}={raw} (log line {ll.line}): {why}") not in out:
                out.append(line)
    return out


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*")
#: An error that says the options it names are missing or refused (then they are not what to use).
_NEGATED = re.compile(r"\b(?:no|not|none of|neither|unavailable|missing|unsupported)\b", re.I)


def _alternatives(inp: GeneratorInput) -> list[Remedy]:
    """An error that names several options of one flag's documented choices (devices, backends,
    dtypes) names that flag as the remedy. The values proposed are those that fit this host: for a
    flag whose choices are devices, the device of the host's platform (``knowledge/subsystems.toml``,
    ``[[platform]]``); when the error names the value in force beside another (``the model config (fp8)
    does not match ... (w8a8_fp8)``), the other; otherwise the choices it names, unless it says they are
    missing or refused (then nothing). The value in force is never proposed."""
    if inp.flags is None:
        return []
    know = load_subsystems()
    device_values = {str(p.get("device")) for p in know.platforms if p.get("device")}
    platform = platform_of(inp.fingerprint, None, know)
    out: list[Remedy] = []
    seen: set[str] = set()
    for ll in error_lines(inp):
        text = ll.text
        words = {w.lower() for w in _WORD.findall(text)}
        for spec in inp.flags.flags.values():
            if spec.deprecated or not spec.takes_value or spec.name in seen or is_log_level_flag(spec):
                continue
            choices = documented_choices(spec)
            if not choices and spec.name == DEVICE_FLAG:
                # a catalog read off a log's server-args line knows no choices: the platforms' devices are
                choices = sorted(device_values)
            named = [c for c in choices if len(c) >= 3 and c.lower() in words and c.lower() not in PLAIN_WORDS]
            if len(named) < 2:
                continue
            current = effective_value(inp, spec)
            cur = str(current).lower() if current is not None else None
            if len(device_values & {c.lower() for c in choices}) >= 2 and platform is not None:
                fit = device_for(platform, know)
                values = [c for c in choices if fit is not None and c.lower() == fit.lower()]
                how = f"the value for this host's platform ({platform})"
            elif cur is not None and cur in {c.lower() for c in named}:
                # the error names the value in force and another: the other is what it points at
                values = [c for c in named if c.lower() != cur]
                how = "the other choice the error names beside the one in force"
            elif _NEGATED.search(text):
                continue  # it names choices that are missing or refused, and none that fits this host
            else:
                values = named
                how = "a choice the error names"
            values = [v for v in values if v.lower() != cur]
            if not values:
                continue
            seen.add(spec.name)
            fact = spec.name.lstrip("-").replace("-", "_")
            iv = Intervention(names=[spec.name], values=list(values), decisive=len(values) == 1,
                              fact=fact if fact_flag(inp.flags, fact) is spec else None, cost="low",
                              note=f"{how}; the error names {', '.join(named)} among {spec.name}'s choices: "
                              + " ".join(text.split()))
            out.append((f"remedy:{spec.name}={values[0]}", iv, "error", ll,
                        f"{spec.name} {values[0]} ({how})"))
    return out


def _flag_named(flags: FlagCatalog) -> Callable[[str], FlagSpec | None]:
    """The host's flag an error names by its flag spelling or its argparse dest (``kv_cache_dtype``)."""
    return lambda name: canon(flags, "--" + name.replace("_", "-")) or fact_flag(flags, name.replace("-", "_"))


def _allowed_values(inp: GeneratorInput) -> list[Remedy]:
    """An error that states which values a setting allows, naming the setting by its flag or its
    argparse dest (``kv_cache_dtype``), where the value in force is not among them: set the setting to
    a value it allows. Values are the error's own words, cleaned of prose punctuation; a documented
    choice list of the host's flag, when known, must hold them. Nothing when the value in force is
    allowed (the error is then about something else)."""
    if inp.flags is None:
        return []
    out: list[Remedy] = []
    for ll in error_lines(inp):
        for spec, values in stated_allowed(ll.text, _flag_named(inp.flags), documented_choices):
            current = effective_value(inp, spec)
            cur = str(current).lower() if current is not None else None
            if cur is None or cur in {v.lower() for v in values}:
                continue
            # nearest the user's value first (its family: fp8_e4m3 for fp8_e5m2 keeps what it was for)
            values.sort(key=lambda v: -len(os.path.commonprefix([v.lower(), cur])))
            fact = spec.name.lstrip("-").replace("-", "_")
            iv = Intervention(names=[spec.name], values=list(values), decisive=True,
                              fact=fact if fact_flag(inp.flags, fact) is spec else None, cost="low",
                              note=f"the error allows {', '.join(values)} for {spec.name} and the run had "
                              f"{current}: " + " ".join(ll.text.split()))
            out.append((f"remedy:{spec.name}={values[0]}", iv, "error", ll,
                        f"{spec.name} {values[0]} (a value the error says {spec.name} allows; the run had {current})"))
            break
    return out


#: An error that bounds a product of settings by a figure of the host (``the total number of ranks
#: (dp_size * tp_size * pp_size = 2) should be smaller than or equal to number of numa node on the
#: machine 1``, sglang/srt/utils/numa_utils.py ``init_threads_binding``, 0.5.23).
_BOUNDED = re.compile(
    r"\((?P<expr>[a-z_][a-z0-9_]*(?:\s*\*\s*[a-z_][a-z0-9_]*)*)\s*=\s*(?P<cur>\d+)\)\s*should be "
    r"(?:smaller|less|lower|fewer) than or equal to\D*?(?P<limit>\d+)",
    re.I,
)


def _bounded_settings(inp: GeneratorInput) -> list[Remedy]:
    """An error that says a product of settings (``dp_size * tp_size * pp_size = 2``) must be at most a
    figure of the host (``1``): the one factor above 1 whose flag the host knows is lowered so the
    product fits. Nothing when several factors are above 1 (which to lower is a choice, not a reading)."""
    if inp.flags is None:
        return []
    out: list[Remedy] = []
    for ll in error_lines(inp):
        m = _BOUNDED.search(ll.text)
        if m is None:
            continue
        limit = int(m.group("limit"))
        factors: list[tuple[str, int]] = []
        for dest in re.split(r"\s*\*\s*", m.group("expr")):
            spec = fact_flag(inp.flags, dest)
            value = effective_value(inp, spec) if spec is not None else None
            try:
                factors.append((dest, int(str(value)) if value is not None else 1))
            except ValueError:
                factors.append((dest, 1))
        above = [(d, v) for d, v in factors if v > 1]
        if len(above) != 1 or limit < 1:
            continue
        dest, current = above[0]
        spec = fact_flag(inp.flags, dest)
        rest = math.prod(v for d, v in factors if d != dest)
        lowered = max(1, limit // max(1, rest))
        if spec is None or lowered >= current:
            continue
        iv = Intervention(names=[spec.name], values=[str(lowered)], decisive=True, fact=dest, cost="medium",
                          note=f"{m.group('expr')} = {m.group('cur')} must be at most {limit}: " + " ".join(ll.text.split()))
        out.append((f"remedy:{spec.name}={lowered}", iv, "error", ll,
                    f"{spec.name} {lowered} (the error bounds {m.group('expr')} by {limit}; the run had {current})"))
    return out


#: A setting an error names by its argparse dest in backticks, after the way to move it: vLLM's "Try
#: increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine"
#: (vllm/v1/core/kv_cache_utils.py, 0.8.x to 0.32.0). The verb nearest before each name is its direction.
_BACKTICKED = re.compile(r"`(?P<name>[a-z][a-z0-9]*(?:_[a-z0-9]+)+)`")
_UP_VERB = re.compile(r"\b(?:increas|rais|enlarg)(?:e|es|ing)\b", re.I)
_DOWN_VERB = re.compile(r"\b(?:decreas|lower|reduc|shrink)(?:e|es|ing|s)?\b", re.I)


def _named_settings(inp: GeneratorInput) -> list[Remedy]:
    """The settings an error names in backticks with the way to move each (``increasing `x```): one
    remedy per setting, with a value one step that way from the value in force, or the figure the
    evidence gives for it (a fact ``DEST_fits``, e.g. vLLM's "estimated maximum model length").
    Without a flag catalog (a log read alone) the dest stands for its flag ``--dest-with-dashes``; with
    one, a name the host does not know is no remedy."""
    out: list[Remedy] = []
    kind = "error" if _user_set_cause(inp) else "named"
    moot = overridden(inp.baseline, lambda n: spec.name if (spec := canon(inp.flags, n)) else n)
    for ll in error_lines(inp):
        text, start = ll.text, 0
        for m in _BACKTICKED.finditer(text):
            clause, start = text[start : m.start()], m.end()
            verbs = [(v.start(), "raise") for v in _UP_VERB.finditer(clause)] + \
                    [(v.start(), "lower") for v in _DOWN_VERB.finditer(clause)]
            if not verbs:
                continue
            direction, dest = max(verbs)[1], m.group("name")
            spec = fact_flag(inp.flags, dest) if inp.flags is not None else \
                FlagSpec(name="--" + dest.replace("_", "-"), takes_value=True)
            if spec is None or not spec.takes_value or spec.name in moot:
                continue  # unknown here, a switch, or a knob the user's own budget overrides
            fits = inp.evidence.facts.get(f"{dest}_fits")
            current = effective_value(inp, spec)
            values: list[FlagValue] = [str(fits)] if fits and direction == "lower" else \
                _step(current, direction, "float" if "." in str(current) else "int")
            derive = rule_for(spec.name, direction)
            if not values and not derive:
                continue
            iv = Intervention(names=[spec.name], values=values, derive=derive, decisive=True,
                              fact=dest if inp.flags is None or fact_flag(inp.flags, dest) is spec else None,
                              cost="low", note=" ".join(text.split()))
            out.append((f"remedy:{spec.name}:{direction}", iv, kind, ll,
                        f"{direction} {spec.name} (the error names {dest})"))
    return out


def _user_set_cause(inp: GeneratorInput) -> bool:
    """Whether the baseline sets a flag that a catalog cause of this failure (an entry whose cause
    signature the evidence shows) would remove: the user's explicit setting on the failing part."""
    seen = set(inp.evidence.signature_ids())
    return any(any(_explicitly_set(inp, name) for name in iv.names)
               for entry in inp.catalog if seen & set(entry.cause_signatures)
               for iv in entry.intervention if iv.kind == "flag" and any(v is False or v is None for v in iv.values))


def _explicitly_set(inp: GeneratorInput, name: str) -> bool:
    """Whether the failing run set flag ``name``: in its baseline, or printed by the server among its
    settings with a value other than the help's default (vLLM's ``non-default args`` list only those)."""
    spec = canon(inp.flags, name)
    if any(n in inp.baseline.flags for n in (spec.option_strings if spec else [name])):
        return True
    printed = inp.evidence.server_args.get(name.lstrip("-").replace("-", "_"))
    return printed not in (None, "None", "") and (spec is None or printed != spec.default)


#: Words that are choices of many flags and say nothing about one (``auto``, ``none``, ``default``).
_MISSING = re.compile(
    r"No module named '(?P<a>[A-Za-z_][\w.]*)'|(?P<b>[A-Za-z_][\w-]*) (?:package )?is not installed|"
    r"(?:install|installed) (?P<c>[A-Za-z_][\w-]*) (?:first|to use)",
    re.I,
)


def _missing_package_reverts(inp: GeneratorInput) -> list[Remedy]:
    """An error that a package is not installed, where the user's own explicit setting chose that
    package (``--attention-backend flashinfer`` and ``No module named 'flashinfer'``): reverting that
    setting lets SGLang choose an implementation that is installed. A first-class remedy."""
    out: list[Remedy] = []
    for ll in error_lines(inp) + [w for w in inp.evidence.log if finds(_MISSING, w.text)]:
        for m in _MISSING.finditer(ll.text):
            pkg = norm((m.group("a") or m.group("b") or m.group("c") or "").split(".")[0])
            if len(pkg) < 3:
                continue
            for name, value in inp.baseline.flags.items():
                if not isinstance(value, str) or value is True:
                    continue
                v = norm(value)
                if len(v) < 3 or not (pkg.startswith(v) or v.startswith(pkg)):
                    continue
                spec = canon(inp.flags, name)
                cname = spec.name if spec else name
                cid = f"remedy:{cname}=off"
                if any(f[0] == cid for f in out):
                    continue
                iv = Intervention(names=[cname], values=[None], decisive=True, cost="low",
                                  note=f"{pkg} is not installed and {cname} {value} needs it: "
                                  + " ".join(ll.text.split()))
                out.append((cid, iv, "missing", ll, f"without {cname} (it needs {value}, which is not installed)"))
    return out


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

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Candidates ``remedy:...``; the same remedy named twice counts once, at its strongest."""
        weight = {"error": WEIGHT_ERROR, "solution": WEIGHT_SOLUTION, "warning": WEIGHT_WARNING,
                  "missing": WEIGHT_MISSING, "named": WEIGHT_NAMED}
        best: dict[str, Hypothesis] = {}
        for cid, iv, kind, ll, what in remedies_in(inp):
            override = iv.kind == "env" and iv.workaround
            cand = Hypothesis(
                id=cid,
                statement=f"The log names the remedy: {what}",
                component=iv.fact or (iv.names[0].lstrip("-").replace("-", "_") if iv.kind == "flag" else
                                      f"env.{iv.names[0]}"),
                # a variable that silences the check is weighed below fixing what the check caught
                weight=weight[kind] * (OVERRIDE_FACTOR if override else 1.0),
                rationale=(f"the {'error' if kind in ('error', 'named') else kind} text names this change" if kind != "missing"
                           else "the error says a package is not installed that the user's own setting chose"),
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
