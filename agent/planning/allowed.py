"""The values an error says a setting allows (``DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3
kv_cache_dtype``): read by the remedies generator, which proposes one of them, and by the approval
screen's edit offers, which leave out every other value of that setting (the host refused them on this
run). A leaf: it imports only the flag catalog's types, so the approval code can use it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from tools.flags import FlagCatalog, FlagError, FlagSpec

if TYPE_CHECKING:
    from agent.domain.models import Outcome

__all__ = ["PLAIN_WORDS", "allowed_by_errors", "no_full_stop", "stated_allowed"]

#: Words that are no value of a setting's own: "let the engine choose" and the like.
PLAIN_WORDS = frozenset({"auto", "none", "null", "default", "true", "false", "off", "on", "all"})

#: An error that states the values a setting allows (``DeepSeek DSA only supports bf16/bfloat16 or
#: fp8_e4m3 kv_cache_dtype``, sglang/srt/arg_groups/overrides.py in 0.5.23; ``... must be one of ...``,
#: ``... only supports kv-cache-dtype of fp8_e4m3, bf16, or auto``): the list and the setting it names.
_ALLOWS = re.compile(
    r"\b(?:only supports?|must be(?: one of)?|should be one of|expected one of|supported values? (?:are|is)|"
    r"requires one of)\s+(?P<rest>.+)$",
    re.I,
)
_VALUE_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_SETTING = re.compile(r"(?<![\w-])(?:--)?(?P<name>[a-z][a-z0-9]*(?:[_-][a-z0-9]+)+)(?![\w-])")
_LIST_WORDS = frozenset({"or", "and", "of", "the", "a", "an", "either", "one", "values", "value", "are", "is"})


def no_full_stop(value: str | None) -> str | None:
    """A value read from prose without the sentence's trailing full stop (``=1.`` is ``1``), unless the
    dot is all there is."""
    if value is None:
        return None
    stripped = value.rstrip(".,;:")
    return stripped or value


def stated_allowed(
    text: str, flag_named: Callable[[str], FlagSpec | None], choices_of: Callable[[FlagSpec], list[str]]
) -> list[tuple[FlagSpec, list[str]]]:
    """Each setting an error line names (``flag_named``: the host's flag for a flag spelling or an
    argparse dest) with the values it says that setting allows (``_ALLOWS``), in the error's own words
    cleaned of prose punctuation and, when the flag documents its choices (``choices_of``), among them;
    [] when the line states no such list."""
    m = _ALLOWS.search(text)
    if m is None:
        return []
    found: list[tuple[FlagSpec, list[str]]] = []
    rest = m.group("rest")
    for sm in _SETTING.finditer(rest):
        spec = flag_named(sm.group("name"))
        if spec is None or not spec.takes_value:
            continue
        listed = rest[: sm.start()] or rest[sm.end():]
        values: list[str] = []
        for tok in _VALUE_TOKEN.findall(re.sub(r"[/|]", " ", listed)):
            v = no_full_stop(tok) or tok
            if v.lower() in _LIST_WORDS or v in values or v.lower() in PLAIN_WORDS:
                continue
            values.append(v)
        choices = choices_of(spec)
        if choices:
            values = [v for v in values if v in choices]
        if values:
            found.append((spec, values))
    return found


def _resolve(flags: FlagCatalog) -> Callable[[str], FlagSpec | None]:
    def named(name: str) -> FlagSpec | None:
        try:
            return flags.resolve("--" + name.replace("_", "-"))
        except FlagError:
            return None

    return named


def _stated_lines(outcome: Outcome) -> Iterable[str]:
    yield from (tb.exception_line for tb in outcome.tracebacks if tb.exception_line)
    yield from (ll.text for ll in outcome.log)


def allowed_by_errors(outcomes: Sequence[Outcome], flags: FlagCatalog | None) -> dict[str, set[str]]:
    """``{flag: values}`` for each setting that a failing launch's log said allows only these values
    (``stated_allowed``; the flag's argparse choices): the host refused every other value of it on this
    run. Values lower-cased; several such errors about one setting allow what they all allow."""
    out: dict[str, set[str]] = {}
    if flags is None:
        return out
    for o in outcomes:
        if o.stage == "ok":
            continue
        for text in _stated_lines(o):
            for spec, values in stated_allowed(text, _resolve(flags), lambda s: list(s.choices or [])):
                allowed = {v.lower() for v in values}
                out[spec.name] = out[spec.name] & allowed if spec.name in out else allowed
    return out
