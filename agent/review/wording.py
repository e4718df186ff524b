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


#: Below this probability a confirmed hypothesis is not the likeliest explanation of the fix it predicted.
_SHARED_BELOW = 0.5


def with_probability(status: str, p: float) -> str:
    """A hypothesis's status with its ledger probability as shown (``show``, ``replay``, the run): "supported
    p=0.62". A confirmed one below 0.5 says what the number is, so "confirmed" never stands bare beside a
    small probability: its predicted fix held, and ``p`` is its probability of being the root cause, which
    the hypotheses that predicted the same fix share ("confirmed (its fix held) p=0.04 as the root cause,
    shared with the others that predicted the same fix")."""
    if status == "confirmed" and p < _SHARED_BELOW:
        return f"confirmed (its fix held) p={p:.2f} as the root cause, shared with the others that predicted the same fix"
    return f"{status} p={p:.2f}"


def status_word(status: str, p: float) -> str:
    """A hypothesis's status in a ledger table beside its probability: "confirmed, fix shared" for a
    confirmed one below 0.5 (see ``with_probability``), else ``status``."""
    return "confirmed, fix shared" if status == "confirmed" and p < _SHARED_BELOW else status


__all__ = ["count", "plural", "status_word", "with_probability"]
