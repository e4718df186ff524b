"""Helpers the generators share: words and stems of names, flag look-ups on the host's catalog,
effective values, and the order in which alternative implementations are tried."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent.domain.models import FlagValue, LogLine
from agent.planning.generators.implementations import implementations
from agent.planning.in_play import subsystems_of_frame
from agent.planning.words import GENERIC_WORDS, stem, stems
from tools.engines import get_engine
from tools.flags import FlagCatalog, FlagError, FlagSpec
from tools.log_records import LEVELS, read_record
from tools.tracebacks import chained_to_cause

if TYPE_CHECKING:
    from agent.planning.generators import GeneratorInput

__all__ = [
    "GENERIC_WORDS",
    "alternative_choices",
    "canon",
    "effective_value",
    "ERROR_WORD",
    "error_lines",
    "fact_flag",
    "finds",
    "norm",
    "stems",
]

@functools.lru_cache(maxsize=16384)
def finds(pattern: re.Pattern[str], text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``. Cached by both: the planner reads the kept log
    lines of every launch again each step, and a long line (the engine's settings) takes a pattern with
    alternatives a tenth of a millisecond."""
    return pattern.search(text) is not None


@functools.lru_cache(maxsize=16384)
def norm(text: str) -> str:
    """Lower case without ``_``, ``-`` and spaces (``DeepGemm`` and ``deep_gemm`` compare equal)."""
    return _SEPARATORS.sub("", text.lower())


_SEPARATORS = re.compile(r"[\s_\-]+")


def words_with_stems(text: str, wanted: set[str]) -> list[str]:
    """The whole words of ``text`` whose stems are in ``wanted`` (for messages: "attention", not the stem
    "attent"), in their order of appearance, each once."""
    out: list[str] = []
    for w in re.split(r"[^A-Za-z0-9]+|_", text):
        w = w.lower()
        if w and w not in out and stem(w) in wanted:
            out.append(w)
    return out


_CANON: dict[int, tuple[FlagCatalog, dict[str, FlagSpec | None]]] = {}


def canon(flags: FlagCatalog | None, name: str) -> FlagSpec | None:
    """The host's flag spec for a spelling, or None when the host does not know it (memoised per
    catalog: ``FlagCatalog.resolve`` rebuilds its option index on every call)."""
    if flags is None:
        return None
    entry = _CANON.get(id(flags))
    if entry is None or entry[0] is not flags:
        if len(_CANON) >= 8:
            _CANON.pop(next(iter(_CANON)))
        entry = (flags, {})
        _CANON[id(flags)] = entry
    memo = entry[1]
    if name not in memo:
        try:
            memo[name] = flags.resolve(name)
        except FlagError:
            memo[name] = None
    return memo[name]


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
        value = inp.evidence.server_args.get(key)
        if value is not None and value != "None":
            return value
    if not spec.takes_value:
        return None
    return spec.default


def alternative_choices(
    spec: FlagSpec, current: FlagValue, gpu_name: str | None = None, vendor: str | None = None
) -> list[str]:
    """A choice flag's legal alternatives to ``current``: portable implementations first, then the
    rest in the help's order; ``current`` itself left out, and other vendors' choices too unless the
    host's GPU is not an NVIDIA one (``gpu_name`` as nvidia-smi or the fingerprint gives it)."""
    cur = norm(str(current)) if current is not None else None
    if vendor is not None:
        nvidia = vendor == "nvidia"
    else:
        nvidia = gpu_name is None or "nvidia" in gpu_name.lower() or not gpu_name.strip()
    known = implementations()  # portable and other-vendor choices: knowledge/implementations.toml
    alts = [c for c in spec.choices or [] if norm(c) != cur and not (nvidia and known.other_vendor.search(c))]
    first = [c for p in known.choices.portable for c in alts if c == p]
    return first + [c for c in alts if c not in first]


#: A list of quoted values in a flag's help text: "The device to use ('cuda', 'xpu', 'cpu')." (SGLang
#: documents choices this way where argparse has none, e.g. 0.5.23's --device).
def explicit(inp: GeneratorInput, spec: FlagSpec) -> bool:
    """Whether the failing baseline sets this flag itself."""
    return any(n in inp.baseline.flags for n in spec.option_strings)


def selecting_flags(flags: FlagCatalog | None) -> Iterable[FlagSpec]:
    """Flags that choose between implementations: a value flag with at least two choices, other than
    a log verbosity (``is_log_level_flag``)."""
    if flags is None:
        return []
    return [s for s in flags.flags.values() if s.takes_value and s.choices and len(s.choices) >= 2 and not s.deprecated
            and not is_log_level_flag(s)]


#: Logging levels: Python's (``tools.log_records.LEVELS`` and ``NOTSET``) and uvicorn's ``trace``.
_LOG_LEVELS = frozenset({*(lv.lower() for lv in LEVELS), "notset", "trace"})


def is_log_level_flag(spec: FlagSpec) -> bool:
    """Whether a flag's choices are logging levels (vLLM's ``--log-level {CRITICAL,ERROR,...}``,
    ``--uvicorn-log-level``, SGLang's ``--log-level``): it sets how much is logged, never which
    implementation runs, and an ``ERROR`` record header or "validation error" names none of it."""
    return _log_levels(tuple(spec.choices or ()))


@functools.lru_cache(maxsize=4096)
def _log_levels(choices: tuple[str, ...]) -> bool:
    """Whether most of ``choices`` (two or more) are logging levels (`is_log_level_flag`)."""
    lowered = [c.lower() for c in choices]
    return len(lowered) >= 2 and sum(c in _LOG_LEVELS for c in lowered) * 2 > len(lowered)


#: Weights of implicating words by where they were read (``Implicated.weight``).
INNERMOST_WEIGHT = 1.5
FOLDER_WEIGHT = 0.5


#: An HTTP response's body echoed into an error message, as Python's ``f"{res.text=}"`` prints it
#: (``res.text=''``, ``response.content=b'...'``): text a server generated for a request (a model's
#: answer, an error page), so its words say nothing about which flag or implementation failed. SGLang's
#: warm-up assertion is one (``assert res.status_code == 200, f"{res=}, {res.text=}"``, http_server.py).
_RESPONSE_BODY = re.compile(
    r"\b\w+\.(?:text|content|json\(\))=(?:b?'(?:[^'\\]|\\.)*'|b?\"(?:[^\"\\]|\\.)*\"|\S+)"
)


def without_response_bodies(error: str) -> str:
    """An exception line with any HTTP response body it echoes (``res.text='...'``) removed: what is left is
    the program's own words, which may name a flag's choice; the body is the server's output."""
    return _RESPONSE_BODY.sub("", error)


@dataclass
class Implicated:
    """What the failure points at: packages in the traceback frames, the words (stems) of the SGLang
    modules and functions it ran through (``innermost_words``: of the innermost engine frame and the
    exception message), and the error text itself (normalised, for matching choice names)."""

    why: list[str] = field(default_factory=list)
    words: set[str] = field(default_factory=set)
    innermost_words: set[str] = field(default_factory=set)
    packages: dict[str, str] = field(default_factory=dict)  # norm(package) -> package
    lines: list[int] = field(default_factory=list)
    error_text: str = ""
    #: How much each word counts: the innermost engine frame's file and function and the error message
    #: most, other frames' files and functions less, the folders they sit in least.
    weight: dict[str, float] = field(default_factory=dict)
    #: The innermost engine frame of the last traceback (``module.function``) and the subsystems whose
    #: code it is in (knowledge/subsystems.toml ``modules``): (subsystem id, its flag pattern).
    innermost: str = ""
    subsystems: list[tuple[str, re.Pattern[str]]] = field(default_factory=list)

    def subsystem_of(self, flag: str) -> str | None:
        """The subsystem the failure surfaced in that ``flag`` configures, or None."""
        return next((sid for sid, pat in self.subsystems if pat.search(flag)), None)

    def strength(self, flags: FlagCatalog | None, shared: set[str]) -> float:
        """How strongly the shared words tie a flag to the failure (specificity x where each was read)."""
        return max(
            ((min(1.0, 3.0 / stem_df(flags, w)) if flags is not None else 1.0) * self.weight.get(w, 1.0)
             for w in shared),
            default=0.0,
        )


_SITE_FLAGS: dict[tuple[int, tuple[str, ...]], tuple[FlagCatalog, list[FlagSpec]]] = {}


def site_owner(
    flags: FlagCatalog | None,
    site: Iterable[re.Pattern[str]],
    name: str,
    words: set[str] | frozenset[str] = frozenset(),
    value: object = None,
) -> str | None:
    """The flag of the subsystem the failure surfaced in that accounts for what it shares with setting
    ``name``, or None. ``site``: the flag patterns of the subsystems whose code (knowledge/subsystems.toml
    ``modules``) the innermost engine frame is; ``words``: the words of ``name`` the failing code or error
    shares; ``value``: ``name``'s value, quoted by the error. When ``name`` configures none of those
    subsystems and one of their flags carries every one of the ``words`` in its own name, or has ``value``
    among its choices, that flag is returned: the failing code's words and the value it names are its
    subsystem's own. SGLang 0.5.23's VisionAttention raising "The 'fa3' backend is not supported on
    Blackwell GPUs" (srt/layers/attention/vision.py) names ``--mm-attention-backend``'s fa3 and carries
    that flag's words (attention, backend): a user's ``--attention-backend fa3``, the language model's
    attention, is not what the vision tower refused."""
    pats = list(site)
    if flags is None or not pats or any(p.search(name) for p in pats):
        return None
    quoted = str(value).strip().lower() if value is not None and not isinstance(value, bool) else ""
    if not words and not quoted:
        return None
    key = (id(flags), tuple(p.pattern for p in pats))
    entry = _SITE_FLAGS.get(key)
    if entry is None or entry[0] is not flags:
        if len(_SITE_FLAGS) >= 16:
            _SITE_FLAGS.pop(next(iter(_SITE_FLAGS)))
        entry = (flags, [s for s in flags.flags.values() if any(p.search(s.name) for p in pats)])
        _SITE_FLAGS[key] = entry
    for spec in entry[1]:
        if words and set(words) <= stems(spec.name.lstrip("-")):
            return spec.name
        if quoted and any(str(c).strip().lower() == quoted for c in spec.choices or []):
            return spec.name
    return None


@dataclass
class RaiseSite:
    """Where the failing run's error surfaced: the innermost engine frame of its last traceback
    (``where``: ``module.function``) and the stems of that frame's file, function and failing line
    (``words``; not the exception message, whose words are the kind of failure, ``CUDA error``, more often
    than the place)."""

    where: str
    words: set[str]
    line: int


def engine_package(inp: GeneratorInput) -> str:
    """The top-level Python package of the case's engine (``sglang``, ``vllm``): the first module of its
    ``modules`` in knowledge/engines.toml. Frames in it are the engine's own code."""
    return get_engine(inp.case.launcher.engine).data.modules[0].split(".", 1)[0]


def raise_site(inp: GeneratorInput) -> RaiseSite | None:
    """The innermost frame of the engine's own code (SGLang's, vLLM's) in the last traceback of the
    failing run's log, or None when no traceback passes through it (then nothing points anywhere in
    particular)."""
    engine = engine_package(inp)
    for tb in reversed(inp.evidence.tracebacks):
        fr = next((f for f in tb.frames if f.package == engine and f.module), None)
        if fr is None or fr.module is None:
            continue
        module = fr.module
        words = stems(module.rsplit(".", 1)[-1]) | stems(fr.function or "")
        if fr.code:
            words |= stems(re.sub(r"\W+", " ", fr.code))
        return RaiseSite(where=f"{module}.{fr.function}", words=words, line=tb.start_line)
    return None


def implicated(inp: GeneratorInput) -> Implicated:
    """Read the tracebacks of the failing run (innermost first) into an ``Implicated``."""
    imp = Implicated()
    framework = implementations().packages.framework  # no kernel package: knowledge/implementations.toml
    engine, display = engine_package(inp), get_engine(inp.case.launcher.engine).display
    errors = [without_response_bodies(tb.exception_line) for tb in inp.evidence.tracebacks if tb.exception_line]
    # the last chain's original error first (a wrapper that re-raised it is not where it happened)
    text = {ll.line: ll.text for ll in inp.evidence.log}
    for tb in reversed(chained_to_cause(list(inp.evidence.tracebacks), text)):
        first_engine = True
        for fr in tb.frames:
            if fr.package and fr.package not in framework and fr.package != engine:
                if norm(fr.package) not in imp.packages:
                    imp.packages[norm(fr.package)] = fr.package
                    where = f"{fr.function} in {fr.path}" if fr.native else f"{fr.module}.{fr.function}"
                    imp.why.append(f"the traceback passes through {fr.package} ({where})")
                    imp.lines.append(tb.start_line)
            if fr.package == engine and fr.module:
                # SGLang's runtime lives under sglang/srt/: that folder name says nothing
                parts = fr.module.split(".")[1:]
                parts = parts[1:] if parts[:1] == ["srt"] and len(parts) > 1 else parts
                folders = stems(" ".join(parts[:-1]))
                words = stems(parts[-1] if parts else "") | stems(fr.function or "")
                if first_engine and fr.code:  # what the failing line does (``expert_data.copy_(...)``)
                    words |= stems(re.sub(r"\W+", " ", fr.code))
                words -= {"scheduler", "runner", "loader", "load"} if not first_engine else set()
                imp.words |= words | folders
                for w in folders:
                    imp.weight.setdefault(w, FOLDER_WEIGHT)
                for w in words:
                    imp.weight[w] = max(imp.weight.get(w, 0.0), INNERMOST_WEIGHT if first_engine else 1.0)
                if first_engine and not imp.innermost:
                    # the last traceback's innermost engine frame: the code the failure surfaced in
                    imp.innermost = f"{fr.module}.{fr.function}"
                    imp.subsystems = [(sub.id, sub.flags) for sub in subsystems_of_frame(imp.innermost)
                                      if sub.flags is not None]
                if first_engine:
                    imp.innermost_words |= words
                    imp.why.append(f"the innermost {display} frame is {fr.module}.{fr.function}")
                    imp.lines.append(tb.start_line)
                    first_engine = False
    for e in errors[-2:]:
        words = stems(e.split(":", 1)[1] if ":" in e else e)
        imp.words |= words
        imp.innermost_words |= words
        for w in words:
            imp.weight[w] = max(imp.weight.get(w, 0.0), INNERMOST_WEIGHT)
    imp.error_text = " ".join(errors)
    # Packages the error text points into (a compiler's path in a "Repro command", a library file named
    # in the message), not only those in the frames.
    for ll in inp.evidence.log:
        if 'File "' in ll.text or "packages/" not in ll.text:
            continue
        for m in re.finditer(r"(?:site|dist)-packages/([A-Za-z_]\w*)/", ll.text):
            pkg = m.group(1)
            if pkg not in framework and pkg != engine and norm(pkg) not in imp.packages:
                imp.packages[norm(pkg)] = pkg
                imp.why.append(f"the error names a file of {pkg} (log line {ll.line})")
                imp.lines.append(ll.line)
    return imp


_DF: dict[int, tuple[FlagCatalog, dict[str, int]]] = {}


def stem_df(flags: FlagCatalog, stem: str) -> int:
    """How many of the host's flag names contain ``stem`` (a word shared by many flags implicates
    none of them in particular)."""
    entry = _DF.get(id(flags))
    if entry is None or entry[0] is not flags:
        counts: dict[str, int] = {}
        for spec in flags.flags.values():
            for st in stems(spec.name):
                counts[st] = counts.get(st, 0) + 1
        entry = (flags, counts)
        _DF[id(flags)] = entry
    return max(1, entry[1].get(stem, 0))


def specificity(flags: FlagCatalog, shared: set[str]) -> float:
    """How strongly shared words tie a flag to the failure: 1 for a word at most 3 flag names carry,
    less for commoner ones (``cache`` is in many)."""
    return max((min(1.0, 3.0 / stem_df(flags, w)) for w in shared), default=0.0)


def mentioned_first(choices: list[str], text: str) -> list[str]:
    """``choices`` with those the error text names (as whole words) first, in the text's order."""
    named = sorted(
        (c for c in choices if len(c) >= 3 and re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", text)),
        key=lambda c: text.find(c),
    )
    return named + [c for c in choices if c not in named]


#: A line that names an error or exception before a colon (``ValueError: ...``).
ERROR_WORD = re.compile(r"\b\w*(?:Error|Exception)\b:")


def error_lines(inp: GeneratorInput) -> list[LogLine]:
    """The log lines that state the failure: exception lines of the tracebacks and fatal/error lines,
    each without the logger's record header (``tools.log_records``: its level and file name are not words
    of the message). A record whose header says WARNING, INFO or DEBUG states no failure, even when its
    message quotes an error it could lead to."""
    exceptions = {tb.exception_line.strip() for tb in inp.evidence.tracebacks if tb.exception_line}
    out = []
    for ll in inp.evidence.log:
        record = read_record(ll.text.strip())
        if record.quiet:
            continue
        t = record.message.strip() if record.level else ll.text.strip()
        if t in exceptions or finds(ERROR_WORD, t):
            out.append(LogLine(line=ll.line, text=t) if record.level else ll)
    return out
