"""Counts in the words a reader expects: "1 launch", "3 launches", "0 launches", "1 host-second".

Used wherever a number of things is shown to a person (CLI output, ``show``/``runs``/``replay``, the
report, FINDINGS entries, the conclusion's reason), so a one-launch run never reads "1 launches".
"""

from __future__ import annotations

_SIBILANT_ENDINGS = ("s", "sh", "ch", "x", "z")


def plural(noun: str) -> str:
    """The regular English plural of ``noun`` ("launch" → "launches", "flag" → "flags"); irregular nouns
    ("hypothesis") are given to ``count`` as ``many``."""
    return noun + ("es" if noun.endswith(_SIBILANT_ENDINGS) else "s")


def count(n: float | int | None, one: str, many: str | None = None, fmt: str = "") -> str:
    """``n`` and the noun that agrees with it as shown: ``count(1, "launch")`` is "1 launch",
    ``count(0, "launch")`` "0 launches", ``count(1.2, "host-second", fmt=".0f")`` "1 host-second"
    (singular exactly when the number as formatted with ``fmt`` reads "1"). ``None`` shows as "?" with
    the plural. ``many``: the plural when it is not regular."""
    shown = "?" if n is None else format(n, fmt)
    return f"{shown} {one if shown == '1' else (many or plural(one))}"


__all__ = ["count", "plural"]
