"""Names and values of changes on one host: a catalog intervention made concrete (``realize``), whether
a change is an intervention (``prediction``), flag spellings and legal values from the host's flag
catalog (memoised per catalog)."""

from __future__ import annotations

from typing import Any

from agent.domain.models import VALUE_ALIASES, Baseline, Change, FlagValue, Hypothesis, Intervention
from agent.planning.values import RULES, Contradicted, ValueEvidence, derive, moves_in_direction
from tools.flags import FlagCatalog, FlagError


class FlagMatcher:
    """Matches changes against interventions on a host whose flags are ``flags`` (None: names and
    values unchecked)."""

    def __init__(self, flags: FlagCatalog | None) -> None:
        self.flags = flags

    def _canon(self, kind: str, name: str) -> str | None:
        """Canonical flag name on this host (``None`` if unknown); env names are returned as they are."""
        if kind == "env":
            return name
        if self.flags is None:
            return name
        memo = _flag_memo(self.flags)
        key = ("canon", name)
        if key not in memo:
            try:
                memo[key] = self.flags.resolve(name).name
            except FlagError:
                memo[key] = None
        return memo[key]

    def _role(self, iv: Intervention) -> str | None:
        """This host's spelling of the intervention's flag role (exact, non-deprecated first); without a
        flag catalog, the newest spelling."""
        if self.flags is None:
            return iv.names[0]
        spec = self.flags.resolve_role(iv.names)
        return spec.name if spec is not None else None

    def _legal(self, name: str, value: FlagValue) -> FlagValue | None:
        """The normalised value if legal for the flag on this host, else ``None``."""
        if self.flags is None:
            return value
        memo = _flag_memo(self.flags)
        key = ("legal", name, value)
        if key not in memo:
            try:
                memo[key] = self.flags.validate(name, value)[1]
            except FlagError:
                memo[key] = None
        return memo[key]

    def matches(self, change: Change, iv: Intervention, facts: dict[str, str] | None = None) -> bool:
        """Whether ``change`` is the intervention ``iv``: same variable and one of its values, or for a
        derived value, a move in the rule's direction (``facts`` give the effective value when the
        change's ``before`` is unset)."""
        if change.kind != iv.kind:
            return False
        # a name the host does not know stays as written: only a baseline flag carries one (its removal)
        names = {self._canon(iv.kind, n) or n for n in iv.names} if iv.role is None else {self._role(iv)}
        if change.name not in names:
            return False
        # ``false`` in the catalog is a removal, as realize() makes it (after = None).
        if any(same_value(change.after, None if v is False else v) for v in iv.values):
            return True
        if iv.derive and change.after is not None:  # a removal's effective value is unknown here
            before: Any = change.before
            if before is None and iv.fact and facts:
                before = facts.get(iv.fact)
            return moves_in_direction(iv.derive, before, change.after) is not False
        return False

    def realize(
        self, iv: Intervention, baseline: Baseline, evidence: ValueEvidence | None = None
    ) -> tuple[Change | None, str]:
        """Turn an intervention into a concrete change on this host, or say why it cannot be.

        A derived value comes from ``evidence`` (see ``agent/planning/values.py``); when the evidence lacks the
        figures, the intervention's literal values are the fallback. For a derived change the returned
        text says how the value was computed.
        """
        name = (
            next((c for n in iv.names if (c := self._canon(iv.kind, n))), None) if iv.role is None else self._role(iv)
        )
        if name is None and iv.role is None and any(v is None or v is False for v in iv.values):
            # a baseline flag the host's --help does not list (a launch script from another release):
            # removing it is the one change it can take
            name = next((n for n in iv.names if n in baseline.flags), None)
            if name is not None:
                return Change(kind="flag", name=name, before=baseline.flags[name], after=None), ""
        if name is None:
            return None, f"no flag among {iv.names} on this host"
        candidates: list[FlagValue] = list(iv.values)
        how = ""
        if iv.derive and iv.derive in RULES:  # a direction-only rule leaves the literal values
            derived, how = derive(iv.derive, evidence or ValueEvidence(flags=baseline.flags))
            if derived is not None:
                candidates = [derived]
            elif not candidates or isinstance(how, Contradicted):
                return None, f"{name}: no value from the evidence ({how})"
            else:
                how = f"fallback value; the evidence gave none ({how})"
        for value in candidates:
            # A reversion: remove the setting so the engine's default applies (``values = [false]`` in
            # the catalog, as a truth's ``value = false`` means removed; for a switch, off is unset too).
            if value is None or value is False:
                before = baseline.value(iv.kind, name)
                if before is None:
                    return None, f"{name} is not set in the baseline"
                return Change(kind=iv.kind, name=name, before=before, after=None), how
            legal = value if iv.kind == "env" else self._legal(name, value)
            if legal is None:
                continue
            before = baseline.value(iv.kind, name)
            if same_value(before, legal):
                return None, f"{name} is already {legal} in the baseline"
            return Change(kind=iv.kind, name=name, before=before, after=legal), how
        return None, f"none of {candidates} is a legal value of {name}"

    def prediction(self, h: Hypothesis, change: Change | None, facts: dict[str, str] | None = None) -> str:
        """What ``h`` predicts for a change: fixed, may_fix or persists."""
        if change is not None:
            for iv in h.interventions:
                if self.matches(change, iv, facts):
                    return "fixed" if iv.decisive else "may_fix"
        return "persists"

    def covers(self, diff: Intervention, iv: Intervention, facts: dict[str, str]) -> bool:
        """Whether intervention ``iv`` makes the change ``diff`` names (same fact and value, or the same
        variable with that value / in the rule's direction)."""
        value = diff.values[0] if diff.values else True
        if diff.fact and iv.fact == diff.fact and any(same_value(value, v) for v in iv.values):
            return True
        if diff.fact:
            return False
        name = self._canon(diff.kind, diff.names[0]) or diff.names[0]
        return self.matches(Change(kind=diff.kind, name=name, after=value), iv, facts)


#: Flag-catalog lookups of the planner, per catalog object (held here, so its id is not reused while
#: cached). The planner asks the same few dozen names on every step; ``FlagCatalog.validate`` checks a
#: value afresh each call.
_FLAG_MEMOS: dict[int, tuple[FlagCatalog, dict[tuple[Any, ...], Any]]] = {}


def _flag_memo(flags: FlagCatalog) -> dict[tuple[Any, ...], Any]:
    entry = _FLAG_MEMOS.get(id(flags))
    if entry is None or entry[0] is not flags:
        if len(_FLAG_MEMOS) >= 8:
            _FLAG_MEMOS.pop(next(iter(_FLAG_MEMOS)))
        entry = (flags, {})
        _FLAG_MEMOS[id(flags)] = entry
    return entry[1]


def same_value(a: Any, b: Any) -> bool:
    """Flag values compared as text, with bf16/bfloat16-style spellings of one dtype treated as equal."""
    if a is None or b is None:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or str(a).lower() == str(b).lower()
    sa, sb = str(a).strip().lower(), str(b).strip().lower()
    return VALUE_ALIASES.get(sa, sa) == VALUE_ALIASES.get(sb, sb)
