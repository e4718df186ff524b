"""Log signatures: known log lines of SGLang, CUDA, NCCL and Python, matched line by line.

Signatures are data (`knowledge/signatures.toml`, see the comment at its top for the format). A
`SignatureMatcher` searches every line against every signature and aggregates hits with their 1-based
line numbers; named regex groups fill fact templates (e.g. the effective KV-cache dtype). Matching is
cheap per line: patterns are compiled once, and each pattern's longest required literal (derived from
the regex) is checked with a substring test before the regex runs.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.knowledge_files import field_error, knowledge_path, read_toml

Severity = Literal["info", "warning", "error", "fatal"]
Kind = Literal["progress", "ready", "fatal", "warning", "fact", "error"]
Stage = Literal["launch", "load", "capture", "serve", "decode", "request"]
#: The start-up and serving stages a signature belongs to, in the order a launch reaches them.
STAGES: tuple[str, ...] = Stage.__args__  # type: ignore[attr-defined]

#: The signature file's name in a knowledge folder (``tools.knowledge_files``).
SIGNATURES_FILE = "signatures.toml"


class SignatureError(ValueError):
    """A signature file is unreadable or an entry is invalid; the message names file, entry and field."""


class Signature(BaseModel):
    """One known log line. `pattern` is a Python regex searched in each line; `facts` maps a fact key
    to a template where `{name}` is a named group of `pattern` and other text is literal."""

    model_config = ConfigDict(extra="forbid")

    id: str
    pattern: str
    severity: Severity
    kind: Kind
    stage: Stage
    components: list[str] = Field(default_factory=list)
    meaning: str
    source: str
    facts: dict[str, str] = Field(default_factory=dict)
    #: The engines whose logs print this line (``sglang``, ``vllm``; `tools.engines`); empty: any engine
    #: (Python, CUDA, NCCL, uvicorn lines). A launch is matched only against its engine's signatures, so
    #: one engine's ready line never ends the wait for another.
    engines: list[str] = Field(default_factory=list)


def for_engine(signatures: Iterable[Signature], engine: str | None) -> list[Signature]:
    """The signatures that apply to a log of `engine` (None: every signature, for a log of unknown origin)."""
    return [s for s in signatures if engine is None or not s.engines or engine in s.engines]


class SignatureMatch(BaseModel):
    """Hits of one signature: every matching line number (1-based), the first matching line's text, and
    the facts it set (for an aggregated match, the latest value of each fact)."""

    signature_id: str
    kind: Kind
    severity: Severity
    stage: Stage
    components: list[str]
    meaning: str
    line_numbers: list[int]
    first_line: str
    facts: dict[str, str] = Field(default_factory=dict)


@functools.lru_cache(maxsize=4096)
def _template_fields(template: str) -> tuple[str, ...]:
    """Names referenced by `{name}` in a fact template; raises ValueError on anything fancier. Cached by
    the template's text (a matcher is built per launch from the same few hundred signatures)."""
    names: list[str] = []
    for _, field, spec, conv in string.Formatter().parse(template):
        if field is None:
            continue
        if not field.isidentifier() or spec or conv:
            raise ValueError(f"template {template!r}: use plain {{group}} references only")
        names.append(field)
    return tuple(names)


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> tuple[re.Pattern[str], str | None]:
    """`pattern` compiled, with its required literal (`_required_literal`). Cached by the pattern's text:
    a matcher is built per launch from a few hundred signatures, more than `re`'s own cache holds."""
    return re.compile(pattern), _required_literal(pattern)


def _required_literal(pattern: str) -> str | None:
    """The longest literal text (>= 3 chars) every match of `pattern` must contain, or None.

    Uses the stdlib regex parser (`re._parser`, Python 3.11+); any surprise there just disables the
    prefilter for that pattern, never changes what matches.
    """
    try:
        from re import _constants as c  # type: ignore[attr-defined]
        from re import _parser as p  # type: ignore[attr-defined]

        parsed = p.parse(pattern)
    except Exception:
        return None
    if parsed.state.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    best = ""

    def walk(seq: Any) -> None:
        nonlocal best
        run: list[str] = []

        def flush() -> None:
            nonlocal best
            text = "".join(run)
            if len(text) > len(best):
                best = text
            run.clear()

        op: Any
        av: Any
        for op, av in seq:
            if op is c.LITERAL:
                run.append(chr(av))
                continue
            flush()
            if op is c.SUBPATTERN:
                _group, add_flags, _del_flags, sub = av
                if not add_flags & re.IGNORECASE:
                    walk(sub)
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                low, _high, sub = av
                if low >= 1:
                    walk(sub)
        flush()

    try:
        walk(parsed)
    except Exception:
        return None
    return best if len(best) >= 3 else None


class _Compiled:
    __slots__ = ("sig", "regex", "literal", "fields", "appends")

    def __init__(self, sig: Signature) -> None:
        self.sig = sig
        self.regex, self.literal = _compiled(sig.pattern)
        self.fields = {key: _template_fields(tpl) for key, tpl in sig.facts.items()}
        #: Facts whose template starts with "+": each matching line appends its value (space-separated)
        #: instead of replacing it, e.g. a capture curve "160:2.76 152:2.62 ...".
        self.appends = {key for key, tpl in sig.facts.items() if tpl.startswith("+")}

    def facts_of(self, m: re.Match[str]) -> dict[str, str]:
        groups = m.groupdict()
        out: dict[str, str] = {}
        for key, template in self.sig.facts.items():
            names = self.fields[key]
            if any(groups.get(n) is None for n in names):
                continue  # an optional group that did not take part sets nothing
            value = template.removeprefix("+").format(**{n: groups[n].strip() for n in names})
            if value:
                out[key] = value
        return out


def _check(sig: Signature, where: str) -> None:
    try:
        regex = re.compile(sig.pattern)
    except re.error as exc:
        raise SignatureError(f"{where}: pattern is not a valid Python regex: {exc}") from None
    for key, template in sig.facts.items():
        try:
            names = _template_fields(template)
        except ValueError as exc:
            raise SignatureError(f"{where}: facts.{key}: {exc}") from None
        missing = [n for n in names if n not in regex.groupindex]
        if missing:
            raise SignatureError(
                f"{where}: facts.{key} uses {{{missing[0]}}} but the pattern has no group (?P<{missing[0]}>...)"
            )


def _load_file(path: Path) -> list[Signature]:
    data = read_toml(path, SignatureError)
    unknown = sorted(set(data) - {"signature"})
    if unknown:
        raise SignatureError(f"{path}: unknown table or key {unknown[0]!r} (expected [[signature]] tables)")
    entries = data.get("signature", [])
    if not isinstance(entries, list):
        raise SignatureError(f"{path}: expected [[signature]] tables")
    out: list[Signature] = []
    for i, entry in enumerate(entries, 1):
        ident = entry.get("id") if isinstance(entry, dict) else None
        where = f"{path}: signature #{i}" + (f" ({ident})" if ident else "")
        try:
            sig = Signature.model_validate(entry)
        except ValidationError as exc:
            field, msg = field_error(exc)
            raise SignatureError(f"{where}: field {field or 'entry'}: {msg}") from None
        _check(sig, where)
        out.append(sig)
    return out


def load_signatures(path: Path | None = None) -> list[Signature]:
    """Load signatures from a TOML file, or from every `*.toml` in a directory (sorted by name).

    Default: ``signatures.toml`` of the knowledge folder in force (``--knowledge DIR``,
    ``$HYPOLOOP_KNOWLEDGE``; else the repository's: `tools.knowledge_files.knowledge_path`). Raises
    `SignatureError` naming the file, the entry (number and id) and the field for unreadable files,
    invalid TOML, missing/invalid/unknown fields, bad regexes, fact templates that reference missing
    groups, and duplicate ids.
    """
    base = Path(path) if path is not None else knowledge_path(SIGNATURES_FILE)
    files = sorted(base.glob("*.toml")) if base.is_dir() else [base]
    sigs: list[Signature] = []
    seen: dict[str, Path] = {}
    for f in files:
        for sig in _load_file(f):
            if sig.id in seen:
                raise SignatureError(f"{f}: signature {sig.id!r} is already defined in {seen[sig.id]}")
            seen[sig.id] = f
            sigs.append(sig)
    return sigs


#: Characters of a non-error line kept around its match in `SignatureMatch.first_line`: the printed server
#: arguments are one line of about 10,000 characters that a dozen fact signatures match, and each match
#: kept the whole of it in every outcome, ledger reference and checkpoint (about 3 MB of checkpoints per
#: launch). The facts are read from the whole line before it is cut; the log keeps the line.
LINE_CONTEXT_CHARS = 240


def _around(text: str, start: int, end: int) -> str:
    """`text` cut to `LINE_CONTEXT_CHARS` either side of `[start, end)` (the match's last group: the fact a
    long pattern reads sits there, not at the pattern's start), with "…" where cut."""
    lo, hi = max(0, start - LINE_CONTEXT_CHARS), min(len(text), end + LINE_CONTEXT_CHARS)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


class SignatureMatcher:
    """Feeds log lines through all signatures; keeps aggregated matches and the facts read so far."""

    def __init__(self, signatures: Iterable[Signature]) -> None:
        self._compiled = [_Compiled(s) for s in signatures]
        self._matches: dict[str, SignatureMatch] = {}
        self._facts: dict[str, str] = {}

    def feed(self, lineno: int, text: str) -> list[SignatureMatch]:
        """Match one line (`lineno` 1-based); returns this line's hits, one per matching signature."""
        hits: list[SignatureMatch] = []
        for comp in self._compiled:
            if comp.literal is not None and comp.literal not in text:
                continue
            m = comp.regex.search(text)
            if m is None:
                continue
            sig = comp.sig
            facts = comp.facts_of(m) if sig.facts else {}
            hit = SignatureMatch(
                signature_id=sig.id,
                kind=sig.kind,
                severity=sig.severity,
                stage=sig.stage,
                components=list(sig.components),
                meaning=sig.meaning,
                line_numbers=[lineno],
                first_line=text if sig.kind in ("fatal", "error") else _around(text, *m.span(m.lastindex or 0)),
                facts=facts,
            )
            hits.append(hit)
            agg = self._matches.get(sig.id)
            if agg is None:
                self._matches[sig.id] = hit.model_copy(deep=True)
            else:
                agg.line_numbers.append(lineno)
                agg.facts.update(_merged(agg.facts, facts, comp.appends))
            self._facts.update(_merged(self._facts, facts, comp.appends))
        return hits

    def matches(self) -> list[SignatureMatch]:
        """Aggregated matches in order of first appearance (copies; line numbers accumulated)."""
        return [m.model_copy(deep=True) for m in self._matches.values()]

    def facts(self) -> dict[str, str]:
        """Every fact read so far; when a key was set more than once the last value wins."""
        return dict(self._facts)


def _merged(old: dict[str, str], new: dict[str, str], appends: set[str]) -> dict[str, str]:
    """``new`` with each appending fact joined onto its earlier value."""
    return {k: f"{old[k]} {v}" if k in appends and old.get(k) else v for k, v in new.items()}


def scan_text(text: str, signatures: Iterable[Signature]) -> tuple[list[SignatureMatch], dict[str, str]]:
    """Match a whole log text (e.g. an existing crash log); line numbers are 1-based physical lines.

    Records are split exactly like `LogWatcher` (`tools.logwatch.split_records`: at "\\n", "\\r\\n" and
    tqdm's lone "\\r"), so line numbers agree with a live watch of the same file.
    """
    from tools.logwatch import split_records

    matcher = SignatureMatcher(signatures)
    for lineno, record in split_records(text):
        matcher.feed(lineno, record)
    return matcher.matches(), matcher.facts()
