"""What the engine's own refusal states the user's configuration requires (issue 20, point 5): "Hierarchical
sparse attention currently requires --disable-radix-cache." (SGLang 0.5.23
srt/arg_groups/hisparse_hook.py validate_hisparse), "... supports linear speculation only; use
--speculative-eagle-topk 1." (the same check). The engine refuses the combination the user asked for
without that setting, so making it is the configuration the engine asks for: no workaround that switches a
subsystem off to avoid a fault inside it, nor one that changes the deployment when another implementation
might keep it (no implementation accepts what the engine's argument check refuses). A leaf: it reads
outcomes only."""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.domain.models import Change, Outcome, value_key

__all__ = ["required_by_error"]

#: A switch stated as needed ("requires --disable-radix-cache"): no value follows.
_SWITCH = re.compile(r"\b(?:requires?|needs?|only (?:supported|works|runs) with|must be (?:run|used) with)\s+"
                     r"(?:the\s+)?(?P<flag>--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])")
#: A setting stated with the value needed ("use --speculative-eagle-topk 1", "requires --page-size=64").
_VALUE = re.compile(r"\b(?:requires?|needs?|use|set)\s+(?:the\s+)?(?P<flag>--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)"
                    r"(?:=|\s+)(?P<value>[A-Za-z0-9_.+-]+)")


def required_by_error(change: Change, outcomes: Iterable[Outcome]) -> bool:
    """Whether a failed launch among ``outcomes`` has an error line (a fatal or error signature's line)
    stating ``change`` as what the failing configuration requires: a boolean switch turned on that the line
    says is required ("requires --disable-radix-cache"), or a flag set to the value the line says to use
    ("use --speculative-eagle-topk 1"). False for an environment variable, a removal, or a change the lines
    do not state so."""
    if change.kind != "flag" or change.after is None or change.after is False:
        return False
    for out in outcomes:
        if out.stage in ("ok", "infra_error"):
            continue
        for m in out.matches:
            if m.kind in ("fatal", "error") and _states(change, m.first_line):
                return True
    return False


def _states(change: Change, line: str) -> bool:
    if change.after is True:
        return any(r.group("flag") == change.name for r in _SWITCH.finditer(line))
    want = value_key(change.after)
    return any(r.group("flag") == change.name and value_key(r.group("value").rstrip(".,;:")) == want
               for r in _VALUE.finditer(line))
