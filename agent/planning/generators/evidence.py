"""The names generators used for a failing launch's evidence, kept for callers; the readings themselves
are the outcome's (``agent.domain.models.Outcome``: ``log``, ``tracebacks``, ``warnings``,
``server_args``, ``concurrency``, ``symptoms``, computed by ``agent.domain.failure``), and the kept log
lines are ``agent.domain.excerpt.LogExcerpt``'s.
"""

from __future__ import annotations

from agent.domain.excerpt import LogExcerpt, excerpt_of_text
from agent.domain.failure import parse_server_args, parse_tracebacks, symptom_classes
from agent.domain.models import Outcome

__all__ = [
    "LogExcerpt",
    "excerpt_of_text",
    "failure_evidence",
    "parse_server_args",
    "parse_tracebacks",
    "symptom_classes",
]


def failure_evidence(outcome: Outcome) -> Outcome:
    """The evidence generators read of one outcome: the outcome itself, whose readings (``symptoms``,
    ``tracebacks``, ...) replace the copy this used to make (``FailureEvidence``)."""
    return outcome
