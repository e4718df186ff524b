"""Candidate generators: ways of finding candidate causes, behind one protocol (docs/ARCHITECTURE.md,
"Planners").

A generator reads the evidence of a failing run, the host's facts and the host's own flag catalog (from
``launch_server --help``) and returns hypotheses (``Hypothesis``), each with the one-variable
interventions that test it and what each predicts (``decisive``: the change must fix the failure if the
hypothesis holds; otherwise it may). The rule planner ranks everything all generators produce by
expected information per host-second; the knowledge catalog is one generator among several.

Adding a way of finding causes is adding a module with one small class and a line in ``REGISTRY``
(``agent/planning/generators/registry.py``), the way mini-swe-agent lists its environments.

The models here are the contract:

- ``LogLine``, ``Frame``, ``Traceback``: what the log showed (the log-line model is
  ``agent.domain.models.LogLine``, the traceback model ``tools.tracebacks``: frames innermost first,
  each with the top-level package and dotted module read from its path).
- The failing launch is its ``Outcome``: stage, signatures, effective-config facts (the server-args line
  and ``/get_server_info``), probe results, the log excerpt kept around fatal lines, and its readings
  (``agent.domain.failure``): the parsed tracebacks, warnings, and the symptom classes it falls into
  (``SymptomClass``). ``FailureEvidence`` is the outcome's old name here.
- ``GeneratorInput``: everything a generator may read. It never holds a host or the lab: a generator is
  a pure function of the run's history, so a replay of a transcript gives the same candidates.
- A generator's answer is ``agent.domain.models.Hypothesis``, the ledger's own model (``Candidate`` is
  its old name here), with the generator's weight and triggers in fields that are never written.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent.domain.case import Case
from agent.domain.failure import SYMPTOM_CLASSES, SymptomClass
from agent.domain.models import (
    Baseline,
    Experiment,
    Hypothesis,
    LogLine,
    Outcome,
    RelevantFinding,
)
from agent.planning.catalog import CatalogEntry
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog
from tools.tracebacks import Frame, Traceback

__all__ = [
    "SYMPTOM_CLASSES",
    "Candidate",
    "CandidateGenerator",
    "FailureEvidence",
    "Frame",
    "GeneratorInput",
    "Hypothesis",
    "LogLine",
    "SymptomClass",
    "Traceback",
]

#: The name of a failing launch's evidence while it was a model of its own: the generators read the
#: outcome itself (``agent.domain.models.Outcome``), whose readings (``symptoms``, ``tracebacks``,
#: ``warnings``, ``server_args``, ``concurrency``, ``log``) are computed by ``agent.domain.failure``.
FailureEvidence = Outcome


class GeneratorInput(BaseModel):
    """What a generator may read: the failing launch, the run's history, the host's facts and flags.

    ``reference``: the failing launch's outcome (``evidence`` is the same object, read through its
    readings: ``symptoms``, ``tracebacks``, ``warnings``, ``server_args``, ...); ``baseline``: the
    configuration that failed; ``outcomes``/``experiments``: the run so far (e.g. the bursts already
    sent); ``catalog``: the knowledge catalog's entries (possibly empty); ``features``: model features
    (moe, dsa, nvfp4, ...); ``host_files``: text of files read from the host as cheap evidence (e.g.
    installed source at the innermost traceback frames), path -> text.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    case: Case
    baseline: Baseline
    reference: Outcome
    fingerprint: HostFingerprint | None = None
    flags: FlagCatalog | None = None
    catalog: list[CatalogEntry] = Field(default_factory=list)
    findings: list[RelevantFinding] = Field(default_factory=list)
    features: set[str] = Field(default_factory=set)
    experiments: list[Experiment] = Field(default_factory=list)
    outcomes: list[Outcome] = Field(default_factory=list)
    host_files: dict[str, str] = Field(default_factory=dict)
    #: Every outcome of the run, later ones included: what the tests made from this failing baseline
    #: showed about it (a change that took a subsystem out and served), for generators that narrow a
    #: workaround down to a root fix (``switches``).
    run_outcomes: list[Outcome] = Field(default_factory=list)

    @property
    def evidence(self) -> Outcome:
        """The failing launch's outcome (``reference``), as the generators read it."""
        return self.reference

    @property
    def compute_capability(self) -> str | None:
        """The host GPU's compute capability ("12.0"), if known."""
        return self.fingerprint.compute_capability if self.fingerprint else None


#: The name generators' hypotheses had while they were a model of their own: a generator proposes
#: ``Hypothesis`` objects, the ledger's own model (``agent.domain.models.Hypothesis``), whose
#: generator-only fields (``weight``, ``triggers``, ``support``, ``symptom_only``) are never written.
Candidate = Hypothesis


@runtime_checkable
class CandidateGenerator(Protocol):
    """A way of finding candidate causes: ``generate(input) -> candidates`` (pure; never raises on odd
    evidence: a generator that finds nothing returns ``[]``).

    Its answer for a launch is kept for the rest of the run (``agent.planning.candidate_memo``) and it sees
    the run only up to that launch, unless the class says ``reads_run = True``: it reads later launches too
    (``run_outcomes``, ``experiments``) and is asked again on every step."""

    name: str

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Hypotheses for ``inp.evidence``, each with its interventions."""
        ...
