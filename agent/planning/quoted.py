"""Values an error quotes: which one of the baseline's settings holds a value the failing error quotes, and
what kind of value the error says it must be (knowledge/value_types.toml).

An engineer who reads ``Value error, invalid literal for int() with base 10: '1.5'`` under a pydantic
``ValidationError`` looks for where ``1.5`` came from: when exactly one of the user's settings holds it
(``VLLM_CPU_KVCACHE_SPACE=1.5``), that setting is what the engine refused, whatever frame the error
surfaced in, and it must be an integer: the whole number nearest the user's value (``1``: a cap stays a
cap) is the fix, removing the setting only avoids it. The failing error is read whole: the exception
lines of the failing run's tracebacks with the lines of their messages printed under them
(``agent.planning.package_changes.message_lines``; pydantic prints the validator's own error on the line
after ``1 validation error for VllmConfig``), the log's error lines, and the lines fatal signatures matched
(argparse's ``error: argument --x: invalid int value: '1.5'``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.domain.models import Baseline, LogLine
from agent.planning.package_changes import message_lines
from tools.knowledge_files import KnowledgeFile, load_model
from tools.log_records import read_record

if TYPE_CHECKING:
    from agent.domain.models import Outcome

__all__ = ["Held", "QuotedValue", "ValueTypesError", "as_number", "failing_lines", "held_alone", "last_words", "load_value_types",
           "nearest_of_kind", "quoted_values", "same_spelling"]

Kind = Literal["int", "float"]
#: What each kind is called in a sentence.
KIND_WORDS: dict[str, str] = {"int": "an integer (a whole number)", "float": "a number"}


class ValueTypesError(ValueError):
    """knowledge/value_types.toml cannot be used (one line naming the file and the field)."""


class ValueMessage(BaseModel):
    """A message that says what type the value it quotes must have (see knowledge/value_types.toml)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    pattern: str
    kind: Kind | None = None
    source: str

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """``pattern`` compiled."""
        return re.compile(self.pattern)


class ValueTypes(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    message: list[ValueMessage] = Field(default_factory=list)


def _load(path: Path) -> ValueTypes:
    data = load_model(path, ValueTypes, ValueTypesError)
    for i, m in enumerate(data.message):
        try:
            groups = re.compile(m.pattern).groupindex
        except re.error as exc:
            raise ValueTypesError(f"{path}: field 'message.{i}.pattern': not a regex: {exc}") from None
        if "value" not in groups:
            raise ValueTypesError(f"{path}: field 'message.{i}.pattern': expected a group named 'value'")
        if m.kind is None and "kind" not in groups:
            raise ValueTypesError(f"{path}: field 'message.{i}.kind': expected 'int' or 'float' (the pattern "
                                  "has no group named 'kind')")
    return data


_VALUE_TYPES: KnowledgeFile[ValueTypes] = KnowledgeFile("value_types.toml", _load, absent=ValueTypes)


def load_value_types() -> ValueTypes:
    """knowledge/value_types.toml of the knowledge folder in force. Raises ``ValueTypesError`` (one line)
    for a malformed file."""
    return _VALUE_TYPES()


@dataclass(frozen=True)
class QuotedValue:
    """A value the failing error quotes: as quoted (without its quotes), the log line, and the kind the
    message says it must be (``None`` when the message says no type: a value in quotes in any error)."""

    value: str
    line: LogLine
    kind: str | None = None
    message: str = ""
    #: the words of the message that quote it (``invalid literal for int() with base 10: '1.5'``)
    said: str = ""


@dataclass(frozen=True)
class Held:
    """The one setting of a baseline that holds a quoted value: ``kind`` ("flag" or "env"), its name as
    the baseline spells it, and its value there."""

    kind: Literal["flag", "env"]
    name: str
    value: str
    quoted: QuotedValue


def failing_lines(outcome: Outcome) -> list[LogLine]:
    """The lines that state the failure, each once, in log order, a record's header left out: the exception
    lines of the tracebacks with the lines of their messages, the lines of fatal signature matches, and the
    other lines that name an error (a record of level ERROR or CRITICAL, or an ``...Error:``) unless their
    header says DEBUG, INFO or WARNING."""
    log = outcome.log
    out: dict[int, str] = {}
    for tb in outcome.tracebacks:
        for ll in message_lines(tb, log):
            out.setdefault(ll.line, ll.text)
    fatal = {n for m in outcome.matches if m.kind == "fatal" for n in m.line_numbers}
    for ll in log:
        record = read_record(ll.text.strip())
        if ll.line in fatal or (not record.quiet and (record.level or _ERROR_WORD.search(ll.text))):
            out.setdefault(ll.line, ll.text)
    for ll in last_words(log):
        out.setdefault(ll.line, ll.text)
    lines = []
    for n, text in sorted(out.items()):
        record = read_record(text.strip())
        lines.append(LogLine(line=n, text=record.message if record.level else text))
    return lines


#: A line that names an error or exception before a colon (``ValueError: ...``).
_ERROR_WORD = re.compile(r"\b\w*(?:Error|Exception)\b:")
#: CPython's faulthandler line for a process a signal ends (Python/faulthandler.c: ``Fatal Python error:
#: Aborted``, ``Segmentation fault``), the first line of its dump.
_FATAL_SIGNAL = re.compile(r"^\s*Fatal Python error: \S")
#: How many lines before that line a native message may take.
LAST_WORDS_LINES = 6


def last_words(log: list[LogLine]) -> list[LogLine]:
    """What a process wrote just before a signal ended it: native code that gives up prints its reason to
    stderr and calls ``abort()`` (a C++ ``TORCH_CHECK``, a kernel library's dispatcher:
    ``[AITER] .../asm_mla.cu:193 get_heuristic_kernel_mla: cannot get heuristic kernel! ...``), then
    CPython's faulthandler writes ``Fatal Python error: Aborted``. Those lines carry no logger's record
    header; they are the lines right before the faulthandler line, back to the last line that has one (a
    logger's record, which the process wrote while it still ran), at most ``LAST_WORDS_LINES`` of them, in
    log order, the faulthandler line last. Empty when the log has no such line."""
    by_number = {ll.line: ll for ll in log}
    out: list[LogLine] = []
    for ll in log:
        if not _FATAL_SIGNAL.search(ll.text):
            continue
        before: list[LogLine] = []
        n = ll.line - 1
        while n in by_number and len(before) < LAST_WORDS_LINES:
            text = by_number[n].text
            if not text.strip() or read_record(text.strip()).header or _FATAL_SIGNAL.search(text):
                break
            before.append(by_number[n])
            n -= 1
        out.extend([*reversed(before), ll])
    return out


#: A value in quotes: '...', "..." or `...` (a repr, a pydantic ``input_value=``, a name in backticks).
_IN_QUOTES = re.compile(r"""(?<![\w'"`])(?P<q>['"`])(?P<value>[^'"`\n]{1,200}?)(?P=q)(?![\w'"`])""")
#: Values too common to tell one setting from another when an error quotes them outside a type message.
_PLAIN = frozenset({"true", "false", "none", "null", "auto", "default", "on", "off", "yes", "no"})


def quoted_values(lines: list[LogLine]) -> list[QuotedValue]:
    """Every value ``lines`` quote: those a type message of knowledge/value_types.toml quotes, with the
    kind it names, first; then any other value in quotes of at least three characters that is not a word
    many settings take (``auto``, ``none``)."""
    typed: list[QuotedValue] = []
    plain: list[QuotedValue] = []
    messages = load_value_types().message
    for ll in lines:
        spans: list[tuple[int, int]] = []
        for msg in messages:
            for m in msg.regex.finditer(ll.text):
                named = m.groupdict().get("kind")
                kind: str | None = msg.kind if named is None else (named if named in KIND_WORDS else None)
                typed.append(QuotedValue(value=m.group("value"), line=ll, kind=kind, message=msg.id, said=m.group(0)))
                spans.append(m.span("value"))
        for m in _IN_QUOTES.finditer(ll.text):
            v = m.group("value")
            if any(a <= m.start("value") < b for a, b in spans) or len(v.strip()) < 3 or v.strip().lower() in _PLAIN:
                continue
            plain.append(QuotedValue(value=v, line=ll, said=m.group(0)))
    return typed + plain


def as_number(text: str) -> float | None:
    """``text`` as a finite number, a single decimal comma read as a point (``1,5``); None when it is none."""
    try:
        x = float(text.strip().replace(",", ".") if text.count(",") == 1 and "." not in text else text.strip())
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def same_spelling(a: object, b: object) -> bool:
    """Whether two spellings of a setting's value are the same value: equal once stripped of spaces and
    quotes and compared without case, or the same number (``1.5`` and ``1.50``). Booleans and ``None``
    are no value an error can quote."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return False
    sa, sb = str(a).strip().strip("'\"`").strip(), str(b).strip().strip("'\"`").strip()
    if not sa or not sb:
        return False
    if sa.lower() == sb.lower():
        return True
    na, nb = as_number(sa), as_number(sb)
    return na is not None and nb is not None and na == nb


def held_alone(quoted: list[QuotedValue], baseline: Baseline) -> list[Held]:
    """For each quoted value that exactly one of ``baseline``'s settings holds (flags with a value and
    environment variables, compared by ``same_spelling``), that setting, once per setting (its first
    quote: a type message's before any other). A value two settings hold tells neither apart."""
    settings: list[tuple[Literal["flag", "env"], str, object]] = [
        *(("flag", n, v) for n, v in baseline.flags.items()), *(("env", n, v) for n, v in baseline.env.items())]
    out: dict[tuple[str, str], Held] = {}
    for q in quoted:
        holders = [(k, n, v) for k, n, v in settings if same_spelling(v, q.value)]
        if len(holders) == 1:
            k, n, v = holders[0]
            out.setdefault((k, n), Held(kind=k, name=n, value=str(v), quoted=q))
    return list(out.values())


def nearest_of_kind(kind: str | None, value: str) -> list[str]:
    """Values of ``kind`` nearest ``value`` (a number as the user wrote it), nearest first; ``[]`` when
    ``value`` is no number or already of the kind.

    ``int``: the whole numbers either side (``1.5`` -> ``1``, ``2``; ``4.0`` -> ``4``), a tie going
    toward zero, so that a bound the user set stays within it (a cap of 1.5 GiB becomes 1 GiB); zero only
    for a value that rounds to nothing else, since zero often means "unset" or "off" to the engine.
    ``float``: the number written as Python reads it (``1,5`` -> ``1.5``)."""
    x = as_number(value)
    if x is None or kind not in KIND_WORDS:
        return []
    if kind == "float":
        number = repr(x)
        return [number] if number != value.strip() else []
    lo, hi = math.floor(x), math.ceil(x)
    ints = sorted({lo, hi}, key=lambda n: (abs(n - x), abs(n)))
    if x != 0 and any(n != 0 for n in ints):
        ints = [n for n in ints if n != 0]
    spelt = [str(n) for n in ints]
    return [] if spelt == [value.strip()] else spelt
