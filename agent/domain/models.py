"""The data contracts of a hypoloop run (docs/ARCHITECTURE.md, "Data contracts").

Every model here is JSON-plain: the LangGraph state holds ``model_dump(mode="json")`` of these and each
node re-validates what it reads, so any process (a resumed run, a report, a replay) can read a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from functools import cached_property, lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent.domain.failure import (
    burst_concurrency,
    kept_lines,
    parse_tracebacks,
    server_args_of,
    symptom_classes,
    warning_lines,
)
from tools.flags import value_words
from tools.knowledge import Finding
from tools.logwatch import LogLine
from tools.probes import Probe, ProbeResult
from tools.signatures import SignatureMatch
from tools.source_guards import SourceReading
from tools.tracebacks import Traceback

FlagValue = str | bool | None

Stage = Literal[
    "launch_failed", "load_failed", "timeout", "ready", "request_failed", "wrong_output", "ok", "infra_error"
]

#: How far a launch got. A change that moves the failure to a later stage is progress (the rule
#: planner adopts a change into the baseline when it moves the failure past its previous stage). A timeout
#: or stall happens while loading, so it ranks with a load failure; infra errors say nothing about
#: the deployment and rank below everything.
STAGE_ORDER: dict[str, int] = {
    "infra_error": -1,
    "launch_failed": 0,
    "load_failed": 1,
    "timeout": 1,
    "ready": 2,
    "request_failed": 3,
    "wrong_output": 4,
    "ok": 5,
}



#: Spellings SGLang accepts for one value (``--kv-cache-dtype bf16`` and ``bfloat16``; server_args.py).
VALUE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}


def value_key(value: FlagValue) -> FlagValue:
    """A value's spelling-independent form: dtype aliases (``bfloat16`` is ``bf16``), numbers (``0.930``
    is ``0.93``; a whole number spelt ``4.0`` or ``1e5`` is not ``4`` or ``100000``, which int() reads) and
    JSON documents (``{"a":1}`` is ``{"a": 1}``) compare equal; other text lower-cased."""
    if not isinstance(value, str):
        return value
    return _text_key(value)


@lru_cache(maxsize=16384)
def _text_key(value: str) -> str:
    """`value_key` of a text (cached: the planner compares the same few hundred values thousands of times
    a step)."""
    text = value.strip()
    if text[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(text), sort_keys=True)
        except ValueError:
            pass
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None and number == number and abs(number) != float("inf"):
        # a whole number spelt as a fraction or an exponent (``4.0``, ``1e5``) is another launch than the
        # integer (``4``): an engine that reads the setting with int() refuses the one and takes the other
        return repr(number) + ("" if number != int(number) or _INTEGER.fullmatch(text) else " (not an integer literal)")
    return VALUE_ALIASES.get(text.lower(), text.lower())


#: An integer literal as int() reads it (``4``, ``+4``, ``-4``; ``4.0`` and ``1e5`` are not).
_INTEGER = re.compile(r"[+-]?\d+")


class Change(BaseModel):
    """The one variable an experiment changes against the baseline.

    ``kind`` is ``flag`` (a ``launch_server`` flag, canonical long name such as ``--kv-cache-dtype``) or
    ``env`` (an environment variable of the server process). ``before`` is the baseline's value (``None``:
    not set, so the server's default or auto-resolution applies); ``after`` is the new value (``True``
    for a bare boolean flag, ``None`` to remove the flag or variable).
    """

    kind: Literal["flag", "env"]
    name: str
    before: FlagValue = None
    after: FlagValue = None

    def key(self) -> str:
        """A stable text key of what is set, independent of ``before`` and of spelling (``bfloat16`` and
        ``bf16`` are one dtype), for "never repeat" and "never propose a rejected change" checks."""
        return f"{self.kind}:{self.name}={json.dumps(value_key(self.after))}"

    def describe(self) -> str:
        """``name: before → after`` as shown to people."""

        def show(v: FlagValue) -> str:
            return "(unset)" if v is None else ("(on)" if v is True else str(v))

        return f"{self.name}: {show(self.before)} → {show(self.after)}"


def command_text(flags: dict[str, Any], env: dict[str, Any] | None = None) -> str:
    """Flags (and env assignments before them) as a shell would take them: a switch alone, a value
    flag followed by its value, every value ``shlex``-quoted where it needs it (a JSON value of
    ``--json-model-override-args`` stays one word; a list-valued flag's value, ``--cuda-graph-bs 1 2 4 8``,
    is one word per item: ``tools.flags.value_words``). ``""`` when both are empty."""
    parts = [f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items()]
    for k, v in flags.items():
        parts.append(k if v is True else " ".join([k, *(shlex.quote(w) for w in value_words(str(v)))]))
    return " ".join(parts)


class Baseline(BaseModel):
    """The configuration the next experiment starts from: flags in command-line order and env vars."""

    model_config = ConfigDict(extra="forbid")

    flags: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    def apply(self, change: Change | None) -> Baseline:
        """Return a new baseline with ``change`` applied (``None``: a copy)."""
        flags, env = dict(self.flags), dict(self.env)
        if change is not None:
            target: dict[str, Any] = flags if change.kind == "flag" else env
            if change.after is None or change.after is False:
                target.pop(change.name, None)
            else:
                target[change.name] = change.after
        return Baseline(flags=flags, env=env)

    def value(self, kind: str, name: str) -> FlagValue:
        """The baseline's current value of a flag or env var (``None`` when unset)."""
        return (self.flags if kind == "flag" else self.env).get(name)


class Prediction(BaseModel):
    """What one hypothesis predicts an experiment will show.

    ``expect``: ``fixed`` (the failure goes away), ``persists`` (the same symptom stays), ``may_fix``
    (the change may or may not help if the hypothesis holds).
    """

    hypothesis_id: str
    expect: Literal["fixed", "persists", "may_fix"]


class Experiment(BaseModel):
    """One launch: the current baseline plus at most one change.

    ``purpose`` is ``baseline`` (reproduce the failure, no change), ``test`` (exactly one change) or
    ``confirm`` (re-run the fixing configuration once). ``cost_estimate_s`` is in modelled host-seconds.
    ``attempt`` numbers repeats of the same launch (a flaky outcome, a second confirmation); ``probes``
    are requests sent in addition to the case's probes (e.g. a concurrency probe).
    """

    id: str
    purpose: Literal["baseline", "test", "confirm"]
    baseline: Baseline
    change: Change | None = None
    predictions: list[Prediction] = Field(default_factory=list)
    rationale: str = ""
    cost_estimate_s: float = 0.0
    score: float = 0.0
    proposed_by: str = "rules"
    status: Literal["proposed", "approved", "rejected", "running", "done", "skipped"] = "proposed"
    attempt: int = Field(default=1, ge=1)
    probes: list[Probe] = Field(default_factory=list)

    @staticmethod
    def make_id(
        baseline: Baseline,
        change: Change | None,
        purpose: str,
        *,
        attempt: int = 1,
        probes: list[Probe] | None = None,
    ) -> str:
        """Stable id: a hash of the baseline, the change, the purpose and (when not the default) the
        attempt number and extra probes (``exp-`` + 10 hex digits)."""
        key: dict[str, Any] = {
            "flags": baseline.flags,
            "env": baseline.env,
            "change": None if change is None else [change.kind, change.name, change.after],
            "purpose": purpose,
        }
        if attempt != 1:
            key["attempt"] = attempt
        if probes:
            key["probes"] = [p.model_dump(mode="json") for p in probes]
        blob = json.dumps(key, sort_keys=True)
        return "exp-" + hashlib.sha256(blob.encode()).hexdigest()[:10]

    def expected_id(self) -> str:
        """The id this experiment must have (``make_id`` of its own fields)."""
        return self.make_id(
            self.baseline, self.change, self.purpose, attempt=self.attempt, probes=self.probes
        )

    def config(self) -> Baseline:
        """The configuration this experiment launches (baseline with the change applied)."""
        return self.baseline.apply(self.change)


class RelevantFinding(BaseModel):
    """A finding with its relevance (0..1) to the case."""

    finding: Finding
    relevance: float


class Timings(BaseModel):
    """Seconds of wall time on the orchestrator and modelled seconds on the host.

    `host_seconds`: the launch's modelled host-seconds (``tools.host_time.launch_host_s``: on a scaled
    host the load phase's wall seconds divided by the time scale, the request phase's as real seconds plus
    the host time its probes are known to hold; at time scale 1 the wall seconds). On a batch-scheduler host `queued_s` is the time the job waited in the queue and `wall_s` the whole
    launch from submission; `host_seconds` counts from the job's start (queue time is not GPU time).
    """

    to_ready_s: float | None = None
    to_end_s: float | None = None
    host_seconds: float = 0.0
    queued_s: float | None = None
    wall_s: float | None = None
    detection_delay_median_s: float | None = None
    detection_delay_max_s: float | None = None


class Outcome(BaseModel):
    """What one experiment showed: the furthest stage reached and the evidence for it."""

    experiment_id: str
    stage: Stage
    matches: list[SignatureMatch] = Field(default_factory=list)
    facts: dict[str, str] = Field(default_factory=dict)
    probes: list[ProbeResult] = Field(default_factory=list)
    timings: Timings = Field(default_factory=Timings)
    exit_code: int | None = None
    log_path: str | None = None
    summary: str = ""
    #: Log lines kept as evidence (fatal and error lines with their traceback and surroundings, warnings,
    #: the tail), so generators and the LLM planner can read tracebacks without the log file.
    log_excerpt: list[LogLine] = Field(default_factory=list)
    #: What reading the installed source at the failure's traceback frames found (no launch): the
    #: environment variables and server arguments guarding the failing line, and a failed import's
    #: package (``tools.source_guards``); None when the launch did not fail with a traceback.
    source_reading: SourceReading | None = None

    def failure_signatures(self) -> list[str]:
        """Ids of the matched signatures that name the symptom, in order of appearance.

        Those of kind ``fatal`` or ``error`` that implicate a component; wrappers that only say "a process
        died" (a traceback header, the scheduler's exception line: no component beyond the scheduler) are
        left out unless nothing more specific matched.
        """
        failing = [m for m in self.matches if m.kind in ("fatal", "error")]
        specific = [m.signature_id for m in failing if set(m.components) - {"scheduler"}]
        return specific or [m.signature_id for m in failing]

    def signature_ids(self) -> set[str]:
        """Ids of every matched signature."""
        return {m.signature_id for m in self.matches}

    # What the failure shows, read from the fields above (``agent.domain.failure``): the generators, the
    # ledger and the conclusion read a failing launch through these. Computed once per object; an
    # outcome is not changed after analyze built it (analyze adds only facts and the source reading).

    @cached_property
    def log(self) -> list[LogLine]:
        """The kept log lines (``log_excerpt``; in a transcript older than the excerpt, each signature's
        first line)."""
        return kept_lines(self.log_excerpt, self.matches)

    @cached_property
    def tracebacks(self) -> list[Traceback]:
        """The Python tracebacks in the kept lines, in log order, frames innermost first."""
        return parse_tracebacks(self.log)

    @cached_property
    def warnings(self) -> list[LogLine]:
        """The warning lines among the kept lines."""
        return warning_lines(self.log)

    @cached_property
    def server_args(self) -> dict[str, str]:
        """Every scalar effective setting the engine printed (SGLang's ``server_args=...`` line, argparse
        dests), as text."""
        return server_args_of(self.log)

    @cached_property
    def concurrency(self) -> int:
        """The largest burst of concurrent requests this launch sent, or the smallest that failed (1
        without a burst)."""
        return burst_concurrency(self.probes)

    @cached_property
    def symptoms(self) -> list[str]:
        """The symptom classes the outcome falls into (``agent.domain.failure.SymptomClass``), most
        specific first."""
        return symptom_classes(self, self.tracebacks, "\n".join(ll.text for ll in self.log))

    @property
    def burst_failed(self) -> bool:
        """Whether single requests passed and a burst of several concurrent requests failed (symptom
        ``load_only`` at a concurrency above 1). A single request of the case's reported shape (a long
        prompt) failing alone is ``load_only`` too, but no burst: its length, not a batch, is in play."""
        return "load_only" in self.symptoms and self.concurrency > 1


class Evidence(BaseModel):
    """One reference that moved a hypothesis: a signature with lines, a finding, a fact or an experiment."""

    kind: Literal["signature", "finding", "fact", "experiment", "host", "rejection"]
    detail: str
    experiment_id: str | None = None
    lines: list[int] = Field(default_factory=list)
    effect: Literal["supports", "weakens", "refutes", "confirms", "neutral"] = "supports"


class Intervention(BaseModel):
    """A one-variable change that tests a hypothesis (from the hypothesis catalog or a finding).

    ``names``: alternative spellings across SGLang releases; the first one the host's flag catalog knows
    is used. ``values``: alternative spellings of the value; the first legal one is used. ``decisive``:
    if the hypothesis holds, this change must fix the failure (a persisting symptom refutes it).
    ``fact``: an effective-config fact this change sets; skipped when the fact already has the value.
    ``derive``: the name of a rule that computes the value from the evidence (memory figures in the log,
    the GPU's memory) instead of taking it from ``values``, which are then only the fallback; a derived
    intervention matches any change of that variable in the rule's direction. ``workaround``: the change
    avoids the broken component instead of repairing the cause (e.g. ``--disable-cuda-graph``); a root
    fix is preferred over it. ``role``: the names are the spellings of a flag role
    (``knowledge/flag_roles.toml``), matched exactly against the host's flags, non-deprecated first.
    """

    kind: Literal["flag", "env"] = "flag"
    names: list[str]
    role: str | None = None
    values: list[FlagValue] = Field(default_factory=lambda: list[FlagValue]([True]))
    decisive: bool = True
    fact: str | None = None
    cost: Literal["none", "low", "medium", "high"] = "low"
    note: str = ""
    derive: str | None = None
    workaround: bool = False


class Hypothesis(BaseModel):
    """A candidate cause, with its belief and the evidence behind it: what a candidate generator proposes
    (``agent/planning/generators``) and what the ledger keeps, one model for both.

    ``prior``/``posterior`` are probabilities in [0, 1] normalised over open hypotheses plus an
    "unlisted cause" remainder (0 until the ledger admits it). A refuted hypothesis stays refuted
    (docs/ARCHITECTURE.md, "Planners"). ``id`` is stable across steps for the same claim (the ledger keys
    on it); ``component`` is the part of the stack (``attention.backend``, ``memory.static_fraction``).
    ``source`` defaults to ``evidence`` for a hypothesis a generator other than the catalog proposed.

    The last four fields are the proposing generator's and are never written (``exclude``: transcripts
    and checkpoints hold the ledger's fields only): ``weight``, the unnormalised prior the generator
    gives it (the ledger keeps the running weights itself); ``triggers``, the symptom classes or
    signatures that made it apply; ``support``, set when it corroborates rather than proposes (if
    another hypothesis of the same step already makes the same change, that one's weight is multiplied
    by ``1 + support`` and this one is not added: a known-good deployment backing a catalog cause);
    ``symptom_only``, a catalog prior that fired on the kind of failure alone
    (``agent.planning.catalog.Condition.symptom_only``).
    """

    id: str
    statement: str
    component: str
    rationale: str = ""
    prior: float = 0.0
    posterior: float = 0.0
    status: Literal["open", "supported", "refuted", "confirmed"] = "open"
    source: Literal["signature", "finding", "catalog", "model", "evidence"] = "catalog"
    evidence: list[Evidence] = Field(default_factory=list)
    interventions: list[Intervention] = Field(default_factory=list)
    cause_signatures: list[str] = Field(default_factory=list)
    stage: str | None = None
    #: The candidate generator that proposed it (``agent/planning/generators``), and the third-party
    #: package it implicates (``flashinfer``, ``deep_gemm``, ...), if any.
    generator: str | None = None
    package: str | None = None
    weight: float = Field(default=1.0, gt=0, exclude=True)
    triggers: list[str] = Field(default_factory=list, exclude=True)
    support: float | None = Field(default=None, exclude=True)
    symptom_only: bool = Field(default=False, exclude=True)

    @model_validator(mode="after")
    def _source_of_generator(self) -> Hypothesis:
        if "source" not in self.model_fields_set and self.generator not in (None, "catalog"):
            self.source = "evidence"
        return self


class Rejection(BaseModel):
    """A proposal a person rejected, with the reason; the planner never proposes it again."""

    experiment_id: str
    change_key: str | None
    reason: str
    change: Change | None = None


class Conclusion(BaseModel):
    """How a run ended and why (docs/ARCHITECTURE.md, "The graph": conclude)."""

    status: Literal["isolated", "not_isolated", "stopped", "error"]
    root_cause: dict[str, Any] | None = None
    fix: Change | None = None
    fix_experiment_id: str | None = None
    confirmation_experiment_id: str | None = None
    refuted: list[dict[str, Any]] = Field(default_factory=list)
    untested: list[dict[str, Any]] = Field(default_factory=list)
    launches: int = 0
    host_seconds: float = 0.0
    reason: str = ""
    findings_entry: str = ""
    rejected: list[dict[str, Any]] = Field(default_factory=list)
    edited: list[dict[str, Any]] = Field(default_factory=list)
    #: Other changes known to avoid the failure, root fixes first, then cheapest in performance: the
    #: root cause's other interventions from the catalog (e.g. ``--disable-cuda-graph`` as a workaround)
    #: and other changes that also fixed it in this run. Each: ``change`` (text), ``kind``, ``name``,
    #: ``workaround``, ``cost`` (none/low/medium/high performance cost), ``note``, ``decisive`` (False: the
    #: catalog says it may help, not that it must), ``experiment_id`` and ``result`` ("fixed" or
    #: "not tested"; a change that did not fix it is no alternative).
    alternatives: list[dict[str, Any]] = Field(default_factory=list)
    #: A run that found no fix: what the failure points at (``component``: the innermost SGLang module,
    #: ``package``: the third-party package in the traceback, ``evidence``: the exception line,
    #: ``experiment_id``, ``symptoms``); None when nothing failed (the failure did not reproduce).
    implicated: dict[str, Any] | None = None
    #: isolated: changes adopted into the baseline before the fix, each of which moved the failure past a
    #: blocker (a chain); with ``fix`` they make the working configuration ({kind, name, before, after}).
    blockers: list[dict[str, Any]] = Field(default_factory=list)
    #: The LLM planner's spending over the run (requests, tokens, refusals, fallbacks); None for rules.
    llm_usage: dict[str, Any] | None = None
