"""A setting the fatal error tells the user to set, by its argparse dest: SGLang's argument checks end
with the way out, as in "AssertionError: no_buffer do not support overlap schedule. Try to set
disable_overlap_schedule=True." (SGLang 0.5.23 srt/arg_groups/mamba_hook.py line 159), "Please set
pp_size=1" (srt/models/sdar.py line 435), "try to set eager=True" (srt/utils/custom_op.py line 98).
The dest is turned into the host's flag through its --help catalog (a name the host does not know is no
remedy; a request field such as ``stream=false`` is none either); the value is taken as written: a
switch's ``True`` turns it on, ``False`` removes it where the baseline sets it. What the engine's own
check requires is the configuration the engine supports, so it is no workaround (unlike a
``--disable-...`` flag an error merely mentions among possible solutions, ``remedies``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from agent.domain.models import FlagValue, Intervention, LogLine
from tools.flags import FlagSpec
from tools.flags.values import is_number

__all__ = ["SET_DEST", "set_dest_remedies"]

#: "set NAME=VALUE" / "set NAME = VALUE" / "set `NAME` to VALUE" after a verb that tells the user to do it.
SET_DEST = re.compile(
    r"\b(?:set|use|pass)\s+`?(?P<dest>[a-z][a-z0-9]*(?:_[a-z0-9]+)+)`?\s*(?:=|\bto\b)\s*[`'\"]?(?P<value>[A-Za-z0-9_.+-]+)",
    re.I,
)
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", "none"})


def set_dest_remedies(
    lines: Iterable[LogLine], flag_of: Callable[[str], FlagSpec | None], explicit: Callable[[FlagSpec], bool]
) -> list[tuple[str, Intervention, str, LogLine, str]]:
    """(ledger id, intervention, "named", line, description) for each setting a fatal error line (``lines``:
    the failure's error lines) tells the user to set by its dest, in the shape of
    ``agent.planning.generators.remedies.Remedy``. ``flag_of`` turns a dest into the host's flag (None: not
    one of its flags); ``explicit`` says whether the failing baseline sets a flag itself."""
    out: list[tuple[str, Intervention, str, LogLine, str]] = []
    for ll in lines:
        for m in SET_DEST.finditer(ll.text):
            dest, raw = m.group("dest"), m.group("value").rstrip(".")
            spec = flag_of(dest)
            if spec is None:
                continue
            values = _values(spec, raw, explicit)
            if values is None:
                continue
            # what the engine's own check requires is the configuration it supports, not an avoidance
            iv = Intervention(
                names=[spec.name], values=values, decisive=True, cost="low", note=" ".join(ll.text.split())
            )
            what = (
                spec.name
                if values == [True]
                else f"without {spec.name}"
                if values == [None]
                else f"{spec.name} {raw}"
            )
            out.append(
                (
                    f"remedy:{spec.name}={raw.lower()}",
                    iv,
                    "named",
                    ll,
                    f"{what} (the error says to set {dest}={raw})",
                )
            )
    return out


def _values(spec: FlagSpec, raw: str, explicit: Callable[[FlagSpec], bool]) -> list[FlagValue] | None:
    """The flag value ``raw`` stands for, or None when it names nothing this flag can take."""
    low = raw.lower()
    if not spec.takes_value:
        if low in _TRUE:
            return [True]
        return [None] if low in _FALSE and explicit(spec) else None
    if spec.choices and raw not in spec.choices:
        return None
    if spec.value_type in ("int", "float") and not is_number(raw):  # "set max_running_requests to reduce ..."
        return None
    return [raw]
