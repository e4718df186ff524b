"""A graded failure is fixed only by a launch that beats it on the same questions (issue 20: never a wrong
``isolated``).

A launch that answers the probe set "not below the expected level with 95% confidence" passes it; with a
drop of a few points a change that fixed nothing passes half the time (0.87 against an expected 0.91, 200
questions). An engineer compares the change with the failing run on the same set: the run's outcomes are
read with every such pass that does not beat the run's first graded failure (``agent.domain.accuracy.improved_p``:
Fisher's exact test, 95%) counted as that failure again, so that the history, its confirmations and the
ending all see one verdict.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.domain.accuracy import CONFIDENCE, PROBE_ID, graded_count, improved_p
from agent.domain.models import Outcome

__all__ = ["judged_against_failure"]


def judged_against_failure(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """``outcomes`` (in the order they ran) with each ready launch whose probe-set count does not beat the first
    graded failure's (a ``wrong_output`` launch that answered the set) turned into that failure's stage,
    ``wrong_output``, its summary saying why; the others as they are. The first graded failure itself, and a
    run with none, are unchanged."""
    seen = list(outcomes)
    failing = next((o for o in seen if o.stage == "wrong_output" and graded_count(o.probes) is not None), None)
    then = graded_count(failing.probes) if failing is not None else None
    if then is None:
        return seen
    out: list[Outcome] = []
    for o in seen:
        now = graded_count(o.probes) if o.stage == "ok" else None
        if now is not None and improved_p(now, then) >= 1 - CONFIDENCE:
            note = (f"the probe set's {now[0]}/{now[1]} is not above the failing launch's {then[0]}/{then[1]} "
                    "with 95% confidence (Fisher's exact test): the accuracy is not shown restored")
            data = o.model_dump()
            data["probes"] = [p if p["probe_id"] != PROBE_ID else {**p, "ok": False, "status": "wrong_answer",
                                                                    "error": note}
                              for p in data["probes"]]
            data.update(stage="wrong_output", summary="; ".join(x for x in (o.summary, note) if x))
            o = Outcome.model_validate(data)  # a new object: no reading cached from the pass survives
        out.append(o)
    return out

