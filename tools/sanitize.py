"""One sanitiser for every byte from outside (server logs, FINDINGS.md, case text, remote output) before
it reaches a terminal or a report.

- `visible`: control and escape sequences shown as visible characters (ESC as ``␛``, so an OSC title
  ``ESC ] 0 ; x BEL`` prints as ``␛]0;x␇``; NUL as ``␀``; C1 controls and Unicode bidi/format controls
  as ``⟨U+202E⟩``); tab, newline and carriage return are kept (a terminal library lays them out).
- `visible_line`: `visible`, with tab, newline and carriage return shown too (``␉``, ``␊``, ``␍``), for
  text that must stay one line (a one-line error naming a path with a newline in it).
- `visible_data`: the same over every string of a JSON-like value (dicts, lists, tuples, dataclasses).
- `md_text`: `visible` plus HTML escaping of ``<``, ``>`` and ``&`` and backslash-escaped backticks, for
  Markdown prose (Markdown renderers pass raw HTML through; entities show as the characters they stand
  for); `md_code` a code span and `fence` a code fence that no backtick inside can close.
- `without_credentials`: a URL shown without the password in it (``ssh://user:PW@host``).
- `SafeConsole`: a rich ``Console`` whose every rendered text segment goes through `visible`, the
  last line of defence for whatever reaches a terminal.

Sources: ECMA-48 (C0 0x00-0x1F, DEL 0x7F, C1 0x80-0x9F; CSI ``ESC [`` and OSC ``ESC ]``), Unicode's
bidirectional controls (UAX #9: U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) and the
control pictures block (U+2400-U+2421).
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

#: Kept as they are: a terminal library lays them out (rich drops a bare CR itself).
_KEPT = "\t\n\r"
_BIDI_AND_FORMAT = "\u061c\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2028\u2029\u2060" \
    "\u2066\u2067\u2068\u2069\ufeff"
_UNSAFE = re.compile(
    "[" + "".join(re.escape(chr(c)) for c in range(0x20) if chr(c) not in _KEPT) + "\x7f\x80-\x9f"
    + re.escape(_BIDI_AND_FORMAT) + "]"
)


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    if c < 0x20:
        return chr(0x2400 + c)  # the control picture: ␀ ␇ ␛ ...
    if c == 0x7F:
        return "\u2421"  # ␡
    return f"⟨U+{c:04X}⟩"


def visible(text: str) -> str:
    """``text`` with every control character that a terminal would act on shown visibly instead: C0
    controls (except tab, newline, carriage return) as their control pictures (ESC → ``␛``), DEL as
    ``␡``, C1 controls and bidi/format controls as ``⟨U+XXXX⟩``. Plain text is returned unchanged;
    applying it twice changes nothing more."""
    if not isinstance(text, str):
        text = str(text)
    return _UNSAFE.sub(_shown, text)


_LINE_BREAKS = re.compile("[" + _KEPT + "]")


def visible_line(text: str) -> str:
    """`visible` ``text`` with tab, newline and carriage return shown as their control pictures too
    (``␉``, ``␊``, ``␍``), so outside text (a path, a name) cannot break a one-line message in two or
    overwrite it. Plain text is returned unchanged."""
    return _LINE_BREAKS.sub(lambda m: chr(0x2400 + ord(m.group())), visible(text))


def visible_data(value: Any) -> Any:
    """``value`` with `visible` applied to every string in it (see `map_strings`)."""
    return map_strings(value, visible)


def map_strings(value: Any, fn: Callable[[str], str], on_object: Callable[[Any], Any] | None = None) -> Any:
    """``value`` with ``fn`` applied to every string in it: dict values (not keys), list and tuple items,
    dataclass fields (as a new instance); other values unchanged. ``on_object``, when it returns
    something other than None for a dataclass, gives that object's replacement instead."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_strings(v, fn, on_object) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, fn, on_object) for v in value]
    if isinstance(value, tuple):
        return tuple(map_strings(v, fn, on_object) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if on_object is not None and (done := on_object(value)) is not None:
            return done
        changes = {f.name: map_strings(getattr(value, f.name), fn, on_object) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value


def md_text(text: str) -> str:
    """``text`` safe as Markdown prose: `visible`, then ``&``, ``<`` and ``>`` as HTML entities, so raw
    HTML (``<script>``, ``<img onerror=...>``) from outside shows as text and never as markup; and each
    backtick backslash-escaped (with any backslashes right before it doubled), so a log line's backticks
    show as backticks instead of opening code spans (CommonMark 0.31, 2.4 "Backslash escapes").
    `md_code` turns such text into a code span."""
    escaped = html.escape(visible(text), quote=False)
    return _BACKTICK.sub(lambda m: m[1] * 2 + "\\`", escaped)


_BACKTICK = re.compile(r"(\\*)`")
_ESCAPED_BACKTICK = re.compile(r"((?:\\\\)*)\\`")
_BACKTICK_RUN = re.compile(r"`+")


def md_raw(text: str) -> str:
    """The visible text `md_text` was given (its exact inverse)."""
    return html.unescape(_ESCAPED_BACKTICK.sub(lambda m: m[1][: len(m[1]) // 2] + "`", text))


def fence(text: str, least: int = 3) -> str:
    """A run of backticks longer than any in ``text`` (at least ``least``): as a code fence or a code
    span's delimiter it cannot be closed by ``text`` (CommonMark 0.31, 4.5 and 6.1)."""
    longest = max((len(m) for m in _BACKTICK_RUN.findall(text)), default=0)
    return "`" * max(least, longest + 1)


def md_code(text: str) -> str:
    """``text`` (as `md_text` made it safe) as one Markdown code span shown as the text itself: its
    delimiter a run of backticks longer than any inside, a space inside each delimiter when the text
    starts or ends with a backtick (or with spaces on both ends, which CommonMark strips), line ends as
    spaces. Inside a code span nothing is markup, so no entity or escape is needed there (CommonMark
    0.31, 6.1 "Code spans")."""
    raw = md_raw(text).replace("\n", " ")
    pad = " " if raw[:1] == "`" or raw[-1:] == "`" or (raw[:1] == " " and raw[-1:] == " " and raw.strip()) else ""
    tick = fence(raw, least=1)
    return f"{tick}{pad}{raw}{pad}{tick}"


def fenced(text: str) -> str:
    """``text`` for a Markdown code fence made with `fence` (longer than any backtick run in it, so
    nothing inside closes it): `visible`."""
    return visible(text)


_URL_CREDENTIALS = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://)([^/\s:@]*):[^/\s@]*@")


def without_credentials(text: str) -> str:
    """``text`` with the password of every URL in it left out (``ssh://user:PW@host`` →
    ``ssh://user@host``), so an error can show the URL it refuses (RFC 3986 userinfo)."""
    return _URL_CREDENTIALS.sub(r"\1\2@", text)


class SafeConsole(Console):
    """A rich Console that shows control characters visibly (`visible`) in every text segment it renders,
    whatever printed them; rich's own control segments (cursor moves of a live display) pass as they
    are. Text given as a string (``print``, table cells) is made visible before it is laid out: rich
    drops BEL, backspace, VT, FF and CR from text itself, and a ``⟨U+202E⟩`` put in after wrapping
    would widen a wrapped line past the terminal, which crops it."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        """rich's ``render_str`` of ``visible(text)``."""
        return super().render_str(visible(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control or not _UNSAFE.search(seg.text):
                yield seg
            else:
                yield Segment(visible(seg.text), seg.style, seg.control)
