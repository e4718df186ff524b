"""A flag name one typing slip from another (``--tp-sise`` and ``--tp-size``): the reading the misspelt-flag
generator (``agent.planning.generators.misspelt``) and the conclusion share."""

from __future__ import annotations

from agent.domain.models import Baseline, Change
from tools.flags import FlagCatalog

__all__ = ["MIN_NAME", "one_slip", "spelt_right"]

#: The shortest flag name (without ``--``) read as a slip of another: shorter names are too close to many.
MIN_NAME = 5


def one_slip(a: str, b: str) -> bool:
    """Whether ``a`` becomes ``b`` by one character inserted, deleted or replaced, or two neighbouring
    characters swapped (optimal string alignment distance exactly 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k, (x, y) in enumerate(zip(short, long_, strict=False)) if x != y), len(short))
    return short[i:] == long_[i + 1:]


def spelt_right(original: Baseline, change: Change, flags: FlagCatalog | None = None) -> bool:
    """Whether ``change`` sets a flag to the value the user gave a misspelt spelling of it (of any of its
    option strings, ``flags`` the host's) in ``original`` (``--tensor-parallel-size 8`` for the case's
    ``--tp-sise 8``, a slip of ``--tp-size``): it restores what the user asked for, it changes nothing they
    chose."""
    if change.kind != "flag" or change.after is None or change.name in original.flags:
        return False
    spec = flags.lookup(change.name) if flags is not None else None
    names = spec.option_strings if spec is not None else [change.name]
    return any(len(n) - 2 >= MIN_NAME and any(one_slip(n, o) for o in names) and str(v) == str(change.after)
               for n, v in original.flags.items())
