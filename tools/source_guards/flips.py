"""What a condition was on the failing path (``Want``) and the value of a variable or flag that flips it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_NEGATE = {"==": "!=", "!=": "==", "in": "not in", "not in": "in", "is": "is not", "is not": "is"}


@dataclass(frozen=True)
class Want:
    """What a condition (or the part of it being resolved) evaluated to on the failing path.

    ``pol``: True/False/None (unknown). With ``op`` set it is a comparison ``VALUE op const`` that held
    (pol True) or not; without, the value's truth.
    """

    pol: bool | None
    op: str | None = None
    const: Any = None
    symbolic: bool = False
    #: Flipping this part alone surely flips the whole condition (False for one operand of an ``or``
    #: that held, or of an ``and`` that did not).
    sure: bool = True

    def negated(self) -> Want:
        """The same want for ``not`` the expression."""
        return Want(None if self.pol is None else not self.pol, self.op, self.const, self.symbolic, self.sure)

    def unsure(self) -> Want:
        """The same want, with flipping this part alone no longer sure to flip the whole."""
        return Want(self.pol, self.op, self.const, self.symbolic, False)


def as_text(value: Any) -> str:
    """A value as a variable's text: a bool as ``1``/``0``, else ``str``."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def boundary(op: str, const: Any, pol: bool) -> Any:
    """A value on the other side of ``VALUE op const`` from where the failing path was (None if the
    comparison does not allow reading one off)."""
    if isinstance(const, bool) or not isinstance(const, int | float):
        return None
    held = op if pol else {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
    step = 1 if isinstance(const, int) else 0
    if held == ">":  # was > c: c itself is not
        return const
    if held == ">=":
        return const - step if step else None
    if held == "<":
        return const
    if held == "<=":
        return const + step if step else None
    return None


def flip(want: Want) -> tuple[Any, list[str], bool] | None:
    """(value, avoid, unset) from a comparison want; None for a plain truth want."""
    if want.op is None or want.pol is None:
        return None
    op, const = want.op, want.const
    held = op if want.pol else _NEGATE.get(op, op)
    if want.symbolic:
        if held in ("==", "is", "in"):
            return None, [str(const)], False
        return None, [], False
    if held in ("is", "is not") and const is None:
        return (None, [], False) if held == "is" else (None, [], True)
    if held in ("==", "is"):
        return None, [as_text(const)], False
    if held in ("!=", "is not"):
        return const, [], False
    if held == "in":
        return None, [as_text(c) for c in (const if isinstance(const, tuple) else (const,))], False
    if held == "not in":
        values = const if isinstance(const, tuple) else (const,)
        return (values[0] if values else None), [], False
    if op in ("<", "<=", ">", ">="):
        return boundary(op, const, want.pol), [], False
    return None, [], False


def env_flip(want: Want, env_type: str) -> dict[str, Any]:
    """``SourceLead`` fields (value, avoid, unset) that flip a condition on an environment variable read as
    `env_type` (``raw``, ``set``, ``bool``, ``int``); ``{}`` when nothing can be read off it."""
    flipped = flip(want)
    if flipped is not None:
        value, avoid, unset = flipped
        return {"value": None if value is None else as_text(value), "avoid": avoid, "unset": unset}
    if want.pol is None:
        return {}
    if env_type == "set" or env_type == "raw":
        # A raw string is true when set and non-empty: unset flips a true one, any text a false one.
        return {"unset": True} if want.pol else {"value": "1"}
    return {"value": "0"} if want.pol else {"value": "1"}


def flag_flip(want: Want, switch: bool) -> dict[str, Any]:
    """``SourceLead`` fields (value, avoid, unset) that flip a condition on a server argument (`switch`:
    the flag takes no value); ``{}`` when nothing can be read off it."""
    flipped = flip(want)
    if flipped is not None:
        value, avoid, unset = flipped
        if isinstance(value, bool):
            return {"value": True, "avoid": avoid} if value else {"unset": True, "avoid": avoid}
        return {"value": None if value is None else as_text(value), "avoid": avoid, "unset": unset}
    if want.pol is None:
        return {}
    if want.pol:
        return {"unset": True}
    return {"value": True} if switch else {}
