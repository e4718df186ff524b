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
- ``FailureEvidence``: one failing launch, digested: stage, signatures, effective-config facts (the
  server-args line and ``/get_server_info``), probe results, the log excerpt kept around fatal lines,
  the parsed tracebacks, warnings, and the symptom classes it falls into (``SymptomClass``).
- ``GeneratorInput``: everything a generator may read. It never holds a host or the lab: a generator is
  a pure function of the run's history, so a replay of a transcript gives the same candidates.
- A generator's answer is ``agent.domain.models.Hypothesis``, the ledger's own model (``Candidate`` is
  its old name here), with the generator's weight and triggers in fields that are never written.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent.domain.case import Case
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

#: Classes of symptoms a hypothesis can trigger on instead of one exact log line.
SymptomClass = Literal[
    "nan_inf",  # NaN/Inf probabilities or logits
    "garbage_output",  # degenerate, empty or wrong text without a NaN line
    "crash_at_decode",  # ready, then the first generation killed the server
    "hang",  # the log stopped (no error), or a request never returned
    "oom_weights",  # out of memory while loading the weights
    "oom_kv_pool",  # no room for the KV cache under the static fraction
    "oom_capture",  # out of memory while capturing CUDA graphs
    "oom_runtime",  # out of memory while serving
    "unsupported_arch",  # kernels not built for this GPU generation
    "import_error",  # a library failed to import or load (ImportError, undefined symbol, ...)
    "illegal_memory_access",  # a kernel read or wrote outside its buffers
    "device_assert",  # a kernel assertion (device-side assert)
    "startup_error",  # any other exception before the server was ready
    "load_only",  # single requests pass, concurrent ones fail
    "no_repro",  # the reported failure did not show
]
SYMPTOM_CLASSES: tuple[str, ...] = SymptomClass.__args__  # type: ignore[attr-defined]


class FailureEvidence(BaseModel):
    """One failing launch, digested for the generators.

    ``facts``: effective-config facts (signature captures, ``/get_server_info``); ``log``: the log
    lines kept (fatal and error lines with the lines around them, warnings, the tail); ``tracebacks``
    and ``warnings`` parsed from them; ``symptoms``: the classes the failure falls into.
    ``concurrency``: the largest burst of concurrent requests this launch sent (1 without a burst).
    """

    experiment_id: str
    stage: str
    signatures: list[str] = Field(default_factory=list)
    failure_signatures: list[str] = Field(default_factory=list)
    facts: dict[str, str] = Field(default_factory=dict)
    log: list[LogLine] = Field(default_factory=list)
    tracebacks: list[Traceback] = Field(default_factory=list)
    warnings: list[LogLine] = Field(default_factory=list)
    symptoms: list[str] = Field(default_factory=list)
    probe_texts: list[str] = Field(default_factory=list)
    concurrency: int = 1
    #: Every scalar effective setting SGLang printed in its ``server_args=...`` line (argparse dests).
    server_args: dict[str, str] = Field(default_factory=dict)

    def text(self) -> str:
        """The kept log lines as one text (for generators that search the wording of errors)."""
        return "\n".join(line.text for line in self.log)


class GeneratorInput(BaseModel):
    """What a generator may read: the failing evidence, the run's history, the host's facts and flags.

    ``baseline``: the configuration that failed (``evidence``); ``outcomes``/``experiments``: the run so
    far (e.g. the bursts already sent); ``catalog``: the knowledge catalog's entries (possibly empty);
    ``features``: model features (moe, dsa, nvfp4, ...); ``host_files``: text of files read from the host
    as cheap evidence (e.g. installed source at the innermost traceback frames), path -> text.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    case: Case
    baseline: Baseline
    evidence: FailureEvidence
    reference: Outcome
    fingerprint: HostFingerprint | None = None
    flags: FlagCatalog | None = None
    catalog: list[CatalogEntry] = Field(default_factory=list)
    findings: list[RelevantFinding] = Field(default_factory=list)
    features: set[str] = Field(default_factory=set)
    experiments: list[Experiment] = Field(default_factory=list)
    outcomes: list[Outcome] = Field(default_factory=list)
    host_files: dict[str, str] = Field(default_factory=dict)

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
    evidence: a generator that finds nothing returns ``[]``)."""

    name: str

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Hypotheses for ``inp.evidence``, each with its interventions."""
        ...
