"""The mapping between domain models and transcript payloads, in one place.

The transcript is a versioned wire format (transcripts/README.md): its payload models
(``agent.record.events``) are kept apart from the domain models on purpose, so a domain model can grow without
changing what old transcripts mean. An event whose payload carries a domain object is written with
:func:`to_payload` (the object's JSON dump plus the event's own fields) and read back with
:func:`from_payload`; fields of other events that hold a domain object are read with :func:`field_of`.
``tests/test_wire.py`` writes and reads back one event of every type in ``agent.record.events.PAYLOADS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from agent.domain.case import Case
from agent.domain.models import Baseline, Change, Conclusion, Experiment, Hypothesis, Outcome
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog
from tools.knowledge import Finding
from tools.probes import ProbeResult

M = TypeVar("M", bound=BaseModel)

#: Event type -> the domain model its payload is a dump of, and the event's own fields besides it.
DOMAIN_EVENTS: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {
    "host.fingerprint": (HostFingerprint, ()),
    "hypothesis.added": (Hypothesis, ()),
    "experiment.proposed": (Experiment, ("considered", "batch")),
    "probe.result": (ProbeResult, ("experiment_id",)),
    "outcome": (Outcome, ()),
    "conclusion": (Conclusion, ()),
}

#: (event type, field) -> the domain model that field of the payload is a dump of.
DOMAIN_FIELDS: dict[tuple[str, str], type[BaseModel]] = {
    ("run.started", "case_data"): Case,
    ("tool.result", "catalog"): FlagCatalog,
    ("baseline.changed", "baseline"): Baseline,
    ("approval.decided", "change"): Change,
    ("knowledge.read", "findings[].finding"): Finding,
}


def to_payload(type_: str, obj: BaseModel, **extra: Any) -> dict[str, Any]:
    """The payload of a ``type_`` event carrying ``obj``: its JSON dump and the event's own fields
    (``extra``, e.g. ``considered`` of ``experiment.proposed``). Raises TypeError for a model or an
    extra field the event type does not carry."""
    model, own = DOMAIN_EVENTS[type_]
    if not isinstance(obj, model):
        raise TypeError(f"a {type_} event carries {model.__name__}, not {type(obj).__name__}")
    unknown = set(extra) - set(own)
    if unknown:
        raise TypeError(f"a {type_} event has no field {', '.join(sorted(unknown))}")
    return {**obj.model_dump(mode="json"), **extra}


def from_payload(type_: str, data: Mapping[str, Any], model: type[M]) -> M:
    """The domain object a ``type_`` event's payload carries (the event's own fields left out).
    ``model`` names the expected class (checked against ``DOMAIN_EVENTS``). Raises
    pydantic.ValidationError when the payload does not hold one."""
    expected, own = DOMAIN_EVENTS[type_]
    if model is not expected:
        raise TypeError(f"a {type_} event carries {expected.__name__}, not {model.__name__}")
    return model.model_validate({k: v for k, v in data.items() if k not in own})


def field_of(type_: str, field: str, value: Any, model: type[M]) -> M:
    """The domain object in field ``field`` of a ``type_`` event (``DOMAIN_FIELDS``)."""
    expected = DOMAIN_FIELDS[(type_, field)]
    if model is not expected:
        raise TypeError(f"{type_}.{field} holds {expected.__name__}, not {model.__name__}")
    return model.model_validate(value)
