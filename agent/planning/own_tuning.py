"""The user's own tuning of the implementation a fix switched away from (issue 20, point 5: root fix before
workaround, the user's intent kept).

When another implementation of a component served (``--attention-backend aiter`` -> ``triton``) while the
user had tuned the one in force with settings of their own (``SGLANG_AITER_MLA_PERSIST=1``: a variable
whose name carries the implementation's name), an engineer asks first whether that tuning, not the
implementation, is what fails here: each such setting is reverted, and a switch the user turned on is also
put in its other position (its default may be the same "on", so the revert alone may change nothing).
Only when all of that failed is switching the implementation the narrowest change that serves: the fix.
Until then it is a workaround. A setting that turns a whole library off (knowledge/switches.toml
``[[broad]]``: ``SGLANG_USE_AITER=0``) is no tuning of one implementation and is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from agent.domain.models import Baseline, Change, Experiment, Hypothesis, Outcome
from agent.planning.switches import broad_switch
from tools.flags import FlagCatalog, lists_choices

__all__ = ["BOOLEAN", "flip_of", "tuning_exhausted", "tuning_keys", "tuning_tests", "tuning_verdict"]

#: Values of a variable that read as a switch, and the other position of each.
BOOLEAN: dict[str, str] = {"1": "0", "0": "1", "true": "false", "false": "true", "on": "off", "off": "on",
                           "yes": "no", "no": "yes"}


def flip_of(value: object) -> str | None:
    """The other position of a switch value ("1" -> "0", "True" -> "false"); None for a value that is no
    switch (a size, a path)."""
    return BOOLEAN.get(str(value).strip().lower()) if value is not None and value is not True else None


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def tuning_tests(case_baseline: Baseline, base: Baseline, change: Change, flags: FlagCatalog | None) -> list[Change]:
    """The tests of the user's own tuning of the implementation ``change`` switches away from, from the
    failing ``base``: ``change`` gives another value to a choice flag (its ``--help`` lists choices) that the
    case itself sets; each variable or flag the case sets (as ``base`` still has it) whose name holds the
    implementation's name as a word, other than ``change``'s flag and a library-wide switch, is reverted, and
    a switch value is also flipped (``flip_of``). Empty otherwise."""
    if change.kind != "flag" or change.after is None or not lists_choices(flags, change.name):
        return []
    current = case_baseline.value("flag", change.name)
    if current is None or current is True or str(current) != str(base.value("flag", change.name)):
        return []
    token = str(current).strip().lower()
    if len(token) < 3 or not token.isalnum():
        return []
    out: list[Change] = []
    for kind, own in (("env", case_baseline.env), ("flag", case_baseline.flags)):
        for name, value in own.items():
            if name == change.name or token not in _words(name) or str(base.value(kind, name)) != str(value):
                continue
            tests = [Change(kind=kind, name=name, before=value, after=None)]  # type: ignore[arg-type]
            if (other := flip_of(value)) is not None:
                tests.append(Change(kind=kind, name=name, before=value, after=other))  # type: ignore[arg-type]
            if any(broad_switch(t) is not None for t in tests):
                continue  # the whole library off: no tuning of one implementation
            out += tests
    return out


def tuning_exhausted(fix_exp: Experiment, original: Baseline, experiments: Mapping[str, Experiment],
                     outcomes: Mapping[str, Outcome], flags: FlagCatalog | None) -> bool | None:
    """Whether the fix's switch of implementation is the narrowest change that served: None when the user
    did not tune the implementation it left (``tuning_tests`` is empty); True when every such test was
    launched from the fix's own failing configuration and failed; False while one is untested or served."""
    assert fix_exp.change is not None
    return _all_failed(fix_exp, tuning_tests(original, fix_exp.baseline, fix_exp.change, flags), experiments, outcomes)


def _all_failed(fix_exp: Experiment, tests: list[Change], experiments: Mapping[str, Experiment],
                outcomes: Mapping[str, Outcome]) -> bool | None:
    """``tuning_exhausted`` over the tuning ``tests`` already worked out."""
    if not tests:
        return None
    for t in tests:
        ran = [outcomes[e.id] for e in experiments.values() if e.purpose == "test" and e.change == t
               and e.baseline == fix_exp.baseline and e.id in outcomes]
        if not ran or any(o.stage in ("ok", "infra_error") for o in ran):
            return False
    return True


def tuning_keys(case_baseline: Baseline, base: Baseline | None, best: Change | None,
                flags: FlagCatalog | None, hypotheses: Iterable[Hypothesis]) -> list[str]:
    """Keys of ``tuning_tests`` of the best fix so far, those an open hypothesis proposes (a revert, a
    flip), in order; empty without a best fix."""
    if best is None or base is None:
        return []
    offered = {(iv.kind, n) for h in hypotheses if h.status in ("open", "supported") for iv in h.interventions
               for n in iv.names}
    return [t.key() for t in tuning_tests(case_baseline, base, best, flags) if (t.kind, t.name) in offered]


def tuning_verdict(fix_exp: Experiment, original: Baseline, experiments: Mapping[str, Experiment],
                   outcomes: Mapping[str, Outcome], flags: FlagCatalog | None) -> tuple[bool, str] | None:
    """The ending's verdict on a fix that switched implementations away from one the user tuned: (True, why)
    a workaround while that tuning is untested, (False, why) the fix once all of it failed
    (``tuning_exhausted``); None when the user tuned nothing of it."""
    if fix_exp.change is None:
        return None
    found = tuning_tests(original, fix_exp.baseline, fix_exp.change, flags)
    tuned = _all_failed(fix_exp, found, experiments, outcomes)
    if tuned is None:
        return None
    tests = ", ".join(t.describe() for t in found)
    if tuned:
        return False, (f"the user's own tuning of the implementation it left failed alone ({tests}): switching "
                       "implementations is the narrowest change that served")
    return True, f"the user's own tuning of the implementation it left was not all tested alone ({tests})"
