"""Small texts the terminal views and the report share: a log line as a terminal showed it, a change,
a launch's summary line, a duration, an alternative fix, and a line printed with a hanging indent (rich)."""

from __future__ import annotations

import re
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from tools.sanitize import visible

__all__ = ["alternative_text", "change_text", "clock", "failure_line", "print_hanging", "shown_line", "summary_line"]


def shown_line(text: str) -> str:
    """A log line as a terminal showed it: a progress bar that redraws itself with carriage returns
    (tqdm) shows its latest state, the last non-empty segment; nothing else is changed or cut."""
    if "\r" not in text:
        return text
    parts = [p for p in text.split("\r") if p.strip()]
    return parts[-1] if parts else ""


def change_text(change: dict[str, Any] | None) -> str:
    """A transcript change payload as the replay and the report show it: ``NAME: before → after``."""
    if not change:
        return "no change"

    def show(v: Any) -> str:
        return "(unset)" if v is None else ("(on)" if v is True else str(v))

    return f"{change['name']}: {show(change.get('before'))} → {show(change.get('after'))}"


def print_hanging(console: Console, text: str, *, hang: int = 2, highlight: bool = False) -> None:
    """Print one line of rich markup whose leading spaces are its indentation; when it is wider than the
    terminal, its continuation lines start ``hang`` columns further in (not at column 0), so a story of
    indented lines keeps its shape on a narrow terminal. Nothing is cut, and no word is split inside: a
    word longer than a line (a path) is folded after a ``/`` (or a ``.``, ...) where one fits, and a part with no such place
    (a run id, an experiment id) is printed whole, wider than the terminal. A line that fits, or a terminal
    too narrow to indent (< 20 columns left), prints as is."""
    text = visible(text)  # before the layout: a control shown as ⟨U+202E⟩ is wider than the control
    body = text.lstrip(" ")
    indent = len(text) - len(body)
    line = Text.from_markup(body)
    width = console.width - indent - hang
    if width < 20 or line.cell_len <= console.width - indent:
        console.print(text, highlight=highlight)
        return
    parts = [p for wrapped in line.divide(_breaks(line.plain, width)) for p in _at_slashes(wrapped, width)]
    for i, part in enumerate(parts):
        part.rstrip()
        console.print(Text(" " * (indent if i == 0 else indent + hang)) + part, highlight=highlight,
                      overflow="ignore", crop=False)


def _breaks(plain: str, width: int) -> list[int]:
    """Where to break ``plain`` into lines of at most ``width`` cells, at spaces only: a word wider than a
    line gets a line of its own, whole (``_at_slashes`` may fold it)."""
    breaks: list[int] = []
    used = 0
    for m in re.finditer(r"\s*\S+\s*", plain):
        word = m.group()
        if used and used + cell_len(word.rstrip()) > width:
            breaks.append(m.start())
            used = 0
        used += cell_len(word)
    return breaks


#: Where a word wider than a line may be folded: after a path's ``/``, a dotted name's ``.``, an ``_``
#: or punctuation; after a ``-`` only where none of these fits (never inside a run id or an experiment id
#: that such a place can keep whole).
_SAFE_BREAKS = frozenset("/._,;:=")


def _at_slashes(line: Text, width: int) -> list[Text]:
    """``line`` (one word wider than ``width`` when it is too wide) in parts of at most ``width`` cells,
    each ending after a ``_SAFE_BREAKS`` character; a part that none can end within ``width`` runs on to
    the next one."""
    plain = line.plain.rstrip()
    if len(plain) <= width:
        return [line]
    cuts: list[int] = []
    start = 0
    while len(plain) - start > width:
        slashes = [i + 1 for i, ch in enumerate(plain) if ch in _SAFE_BREAKS and start < i + 1 < len(plain)]
        fits = [c for c in slashes if c - start <= width]
        # a word with no such place within the line (a flag's name: --remote-instance-weight-loader-...) is
        # folded after a hyphen rather than run past the terminal's edge
        hyphens = [i + 1 for i, ch in enumerate(plain[: start + width]) if ch == "-" and start < i + 1 < len(plain)]
        cut = fits[-1] if fits else hyphens[-1] if hyphens else next(iter(slashes), None)
        if cut is None:
            break
        cuts.append(cut)
        start = cut
    return list(line.divide(cuts)) if cuts else [line]


def summary_line(status: str, elapsed: float, stage_seconds: dict[str, float], where: str | None) -> str:
    """The one-line summary of a launch (rich markup): ``✓ ready after 1:32 — init 0:03 · weights 0:41``
    or ``✗ crashed during KV pool after 0:12 — ...``; the same line live and in ``replay``."""
    spans = " · ".join(f"{stage} {clock(sec)}" for stage, sec in stage_seconds.items())
    if status == "ready":
        head = f"[green]✓ ready[/] after {clock(elapsed)}"
    else:
        head = f"[red]✗ {escape(status)}[/] during {escape(where or '?')} after {clock(elapsed)}"
    return f"  {head} [dim]— {escape(spans)}[/]" if spans else f"  {head}"


def clock(seconds: float) -> str:
    """A duration in seconds as a person reads it: `4.2 s` under a minute, else `m:ss` or `h:mm:ss`."""
    if seconds < 59.95:
        return f"{max(seconds, 0.0):.1f} s"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def alternative_text(a: dict[str, Any]) -> str:
    """One line for an entry of ``Conclusion.alternatives``: the change, whether it is a workaround, its
    performance cost, and what this run saw of it."""
    kind = "workaround" if a.get("workaround") else "root fix"
    if a.get("result") == "fixed":
        seen = f"also fixed it in {a['experiment_id']}"
    elif a.get("decisive", True):
        seen = "not tested in this run"
    else:
        seen = "may help, not certain; not tested in this run"
    note = f": {a['note']}" if a.get("note") else ""
    return f"{a['change']} ({kind}, performance cost {a.get('cost')}{note}; {seen})"


def failure_line(lineno: int, text: str, shown: set[int]) -> str | None:
    """What a failed launch's summary adds about its failure line ``lineno`` (Rich markup), given the fatal
    lines ``shown`` as they came: the line quoted when it was not shown; a pointer to it when several
    were (which one is the failure, not the dying processes' echoes); nothing when it was the only one."""
    if lineno not in shown:
        return f"    [red]log:{lineno}[/] {escape(text)}"
    if len(shown) > 1:
        return f"    [dim]the failure: log:{lineno} (above)[/]"
    return None


def print_command(console: Console, command: str, *, indent: int = 2) -> None:
    """Print a shell command to paste on a line of its own, ``indent`` columns in, never wrapped: a command
    broken over two lines runs only its first half when pasted (the terminal folds a long line for the eye
    and the copy stays one line). ``command`` is plain text (rich markup is escaped)."""
    from rich.markup import escape

    console.print(" " * indent + escape(visible(command)), soft_wrap=True, highlight=False)
