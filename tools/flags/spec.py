"""What one flag is (``FlagSpec``, read from argparse help) and the errors a flag name or value raises."""

from __future__ import annotations

import functools
import re
from typing import Literal

from pydantic import BaseModel, Field

ValueType = Literal["str", "int", "float", "bool"]


FlagValue = str | bool | int | float | list[str] | list[int] | list[float] | tuple[str, ...] | None


class FlagError(ValueError):
    """A flag name or value the catalog cannot accept; the message is one line and names the flag."""

    def __init__(self, message: str, *, flag: str | None = None) -> None:
        super().__init__(one_line(message))
        self.flag = flag


class UnknownFlagError(FlagError):
    """The name is neither a flag, an alias, nor a prefix of one."""


class AmbiguousFlagError(FlagError):
    """The name is a prefix of several different flags (argparse would refuse it too)."""


class InvalidFlagValueError(FlagError):
    """The value is not a legal value of the flag (choice, type, switch, or unsafe characters)."""


class CatalogLoadError(FlagError):
    """Running ``<launcher> --help`` on the host failed or printed no usable argparse help."""


class FlagSpec(BaseModel):
    """One option from argparse help.

    ``name`` is the canonical spelling: the first ``--long`` option string argparse prints (for real
    SGLang 0.5.9 that is ``--tensor-parallel-size``, with ``--tp-size`` an alias). ``default`` is the
    text the help shows (``None`` when it shows none or says None). ``metavar`` is as printed;
    ``nargs`` is argparse's ``"?"``, ``"+"``, ``"*"`` read from the metavar shape, else ``None``.
    An ``argparse.BooleanOptionalAction`` pair (``--x, --no-x``, SGLang 0.5.23) becomes two switches
    that point at each other: ``--x`` with ``negation="--no-x"`` and ``--no-x`` with ``negates="--x"``;
    the negative spelling is never an alias, since it means the opposite.
    """

    name: str
    aliases: list[str] = Field(default_factory=list)
    takes_value: bool
    value_type: ValueType = "str"
    choices: list[str] | None = None
    default: str | None = None
    help: str = ""
    deprecated: bool = False
    metavar: str | None = None
    nargs: str | None = None
    negation: str | None = None
    negates: str | None = None

    @property
    def option_strings(self) -> list[str]:
        """The canonical name followed by every alias."""
        return [self.name, *self.aliases]


def one_line(message: str) -> str:
    """``message`` with every run of whitespace (newlines too) made one space."""
    return " ".join(message.split())


_QUOTED_LIST = re.compile(r"(?:'[A-Za-z0-9_.+-]+'\s*,\s*)+'[A-Za-z0-9_.+-]+'")


def documented_choices(spec: FlagSpec) -> list[str]:
    """A value flag's choices: argparse's, else a list of quoted values in its help text (SGLang 0.5.23's
    ``--device``: "The device to use ('cuda', 'xpu', 'hpu', 'npu', 'cpu', 'musa')"); [] if none."""
    if spec.choices:
        return list(spec.choices)
    if not spec.takes_value:
        return []
    return list(_quoted_choices(spec.help or ""))


@functools.lru_cache(maxsize=4096)
def _quoted_choices(help_text: str) -> tuple[str, ...]:
    """The values of the first quoted list in a flag's help text (cached by the text: asked of every flag
    of the catalog for every error line, each step)."""
    m = _QUOTED_LIST.search(help_text)
    return tuple(re.findall(r"'([^']+)'", m.group(0))) if m else ()
