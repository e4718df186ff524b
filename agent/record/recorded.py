"""A run rebuilt from its transcript: what was believed, proposed, decided, run and concluded.

``RecordedRun.load(path)`` folds the events of one transcript (transcripts/README.md) into plain
records that the report, the re-decide check and the FINDINGS.md write-back share. Payloads stay the
dicts the transcript holds (already checked by the reader); nothing here talks to a host.

Units as in the transcript: an outcome's timings are modelled host-seconds, ``ts`` is Unix time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.domain.case import LauncherSpec
from agent.record.transcript import Transcript, TranscriptError, TranscriptEvent, parse_event, read_transcript
from tools.tracebacks import TRACEBACK_START, exception_of

_VERDICTS = ("supported", "refuted", "confirmed", "open")


@dataclass
class RecordedProposal:
    """One ``experiment.proposed`` event and what became of it (``decision``: approve, edit, reject,
    stop, or ``None`` while waiting)."""

    seq: int
    step: int
    ts: float
    data: dict[str, Any]
    decision: dict[str, Any] | None = None

    @property
    def experiment_id(self) -> str:
        return str(self.data["id"])


@dataclass
class ExperimentRun:
    """An experiment that was executed (or ingested from an existing log): its proposal and approval,
    the server's timeline (events with their ``ts``), the log lines read as they came, probes, outcome.

    ``experiment`` is the experiment as it ran (an edit replaces the proposal's change).
    """

    experiment: dict[str, Any]
    step: int
    proposal: RecordedProposal | None = None
    observed_log: str | None = None
    launched: list[TranscriptEvent] = field(default_factory=list)
    ready: TranscriptEvent | None = None
    ended: TranscriptEvent | None = None
    stopped: TranscriptEvent | None = None
    observations: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[TranscriptEvent] = field(default_factory=list)
    outcome: dict[str, Any] | None = None
    outcome_seq: int | None = None
    #: the ``ts`` of each of its server events while a server ran (``server.lost``, written later, left out)
    seen: list[float] = field(default_factory=list)
    stops: list[TranscriptEvent] = field(default_factory=list)  #: every ``server.stopped``, in order

    @property
    def id(self) -> str:
        return str(self.experiment["id"])

    def unconcluded_launches(self) -> list[tuple[TranscriptEvent, float]]:
        """Its launches that gave no outcome (stopped by Ctrl-C, lost with a killed run), each with the
        seconds of wall time it was seen running (its launch to its stop, else to its last server event
        before the next launch): every ``server.launched`` but the last when the experiment has an outcome, all of them when
        it has none. An ingested log has none."""
        if not self.launched_server:
            return []
        launches = [ev for ev in self.launched if ev.type == "server.launched"]
        out = []
        for i, ev in enumerate(launches[:-1] if self.outcome is not None else launches):
            start = float(ev.data.get("started_wall") or ev.ts)
            until = launches[i + 1].ts if i + 1 < len(launches) else float("inf")
            stop = next((t.ts for t in self.stops if ev.ts <= t.ts < until), None)
            last = stop if stop is not None else max((t for t in self.seen if ev.ts <= t < until), default=start)
            out.append((ev, max(0.0, last - start)))
        return out

    @property
    def launched_server(self) -> bool:
        """Whether this counts as a launch (the agent's ``launches``): not an ingested log, not a host
        failure."""
        return self.observed_log is None and (self.outcome or {}).get("stage") != "infra_error"

    @property
    def host_seconds(self) -> float:
        return float(((self.outcome or {}).get("timings") or {}).get("host_seconds") or 0.0)

    def log_text(self, line: int) -> str | None:
        """The text of one log line as the transcript recorded it (an observation or a signature's first
        line), or None."""
        for ob in self.observations:
            if ob.get("line") == line and ob.get("text") is not None:
                return str(ob["text"])
        for m in (self.outcome or {}).get("matches", []):
            if m.get("line_numbers") and m["line_numbers"][0] == line and m.get("first_line"):
                return str(m["first_line"])
        return None


@dataclass
class HypothesisRecord:
    """A hypothesis over the run: as added, every status change with its evidence, and its posterior
    after each step (``series``: step -> posterior)."""

    added: dict[str, Any]
    added_step: int
    status: str = "open"
    posterior: float = 0.0
    changes: list[TranscriptEvent] = field(default_factory=list)
    series: dict[int, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return str(self.added["id"])

    @property
    def evidence(self) -> list[dict[str, Any]]:
        """Evidence in order: what created it, then what each status change added."""
        out = list(self.added.get("evidence", []))
        for ev in self.changes:
            out.extend(ev.data.get("evidence", []))
        return out


@dataclass
class DesignPoint:
    """One decision of the design step, with the history the planner had at that moment.

    ``kind``: ``proposed`` (``data`` is the experiment.proposed payload), ``none`` (design.none) or
    ``refused`` (the guard refused the planner's proposal: an ``error`` event). ``executed`` are the
    ids of the experiments whose outcome was known, in order; ``rejections`` how many rejections
    there were; ``verdicts`` the recorded hypothesis statuses (id -> status).
    """

    seq: int
    step: int
    kind: str
    data: dict[str, Any]
    executed: list[str]
    rejections: int
    verdicts: dict[str, str]
    launches: int
    host_seconds: float


@dataclass
class RecordedRun:
    """Everything a transcript says about one run (see module docstring)."""

    path: Path
    run_id: str = ""
    events: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    started: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    catalog: dict[str, Any] | None = None
    knowledge: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[RecordedProposal] = field(default_factory=list)
    runs: list[ExperimentRun] = field(default_factory=list)
    hypotheses: dict[str, HypothesisRecord] = field(default_factory=dict)
    baseline_changes: list[TranscriptEvent] = field(default_factory=list)
    design_points: list[DesignPoint] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    errors: list[TranscriptEvent] = field(default_factory=list)
    conclusion: dict[str, Any] | None = None
    conclusion_seq: int = 0
    ended: dict[str, Any] | None = None
    #: The ``approval.requested`` the run waits on, unanswered (`awaited_approval`), or None.
    waiting: dict[str, Any] | None = None
    truncated_tail: bool = False
    launch_argv: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ building

    @classmethod
    def load(cls, path: Path, *, on_bad: Callable[[TranscriptError], None] | None = None) -> RecordedRun:
        """Read and fold a transcript; raises TranscriptError on a malformed line, or hands it to
        ``on_bad`` and reads on (``agent.record.transcript.read_transcript``). Raises TranscriptError when
        no line holds an event."""
        run = cls(path=Path(path))
        count = 0
        for ev in read_transcript(run.path, on_bad=on_bad):
            run.add(ev)
            count += 1
        if count == 0:
            raise TranscriptError(f"{path}: no transcript events (the file is empty or not a transcript)")
        try:
            with open(run.path, "rb") as fh:
                fh.seek(0, 2)
                if fh.tell() > 0:
                    fh.seek(-1, 2)
                    run.truncated_tail = fh.read(1) != b"\n"
        except OSError:
            pass
        return run

    def add(self, ev: TranscriptEvent) -> None:
        """Fold one event in (events must come in transcript order)."""
        self.events += 1
        self.run_id = self.run_id or ev.run_id
        self.waiting = awaited_approval(self.waiting, ev)
        self.first_ts = ev.ts if self.first_ts is None else self.first_ts
        self.last_ts = ev.ts
        d = ev.data
        t = ev.type
        if t == "run.started":
            if not self.started:
                self.started = dict(d)
            self.ended = None  # a resumed run continues the same file
        elif t == "run.resumed":
            self.ended = None
        elif t == "host.fingerprint":
            self.fingerprint = dict(d)
        elif t == "tool.call" and d.get("tool") == "launch_server" and d.get("argv"):
            self.launch_argv = [str(a) for a in d["argv"]]
        elif t == "tool.result" and d.get("tool") == "flag_catalog":
            self.catalog = d.get("catalog")
        elif t == "knowledge.read":
            self.knowledge.append(dict(d))
        elif t == "observation" and d.get("source") is not None and d.get("experiment_id"):
            self._ingest(ev)
        elif t == "experiment.proposed":
            self.proposals.append(RecordedProposal(ev.seq, ev.step, ev.ts, dict(d)))
            self._design_point(ev, "proposed")
        elif t == "design.none":
            self._design_point(ev, "none")
        elif t == "error" and ev.node == "design":
            self._design_point(ev, "refused")
        elif t == "approval.decided":
            self._decided(ev)
        elif t.startswith("hypothesis."):
            self._hypothesis(ev)
        elif t == "baseline.changed":
            self.baseline_changes.append(ev)
        elif t == "conclusion":
            self.conclusion, self.conclusion_seq = dict(d), ev.seq
        elif t == "run.ended":
            self.ended = dict(d)
        elif t == "outcome":
            r = self._run(d.get("experiment_id"))
            if r is not None:
                r.outcome, r.outcome_seq = dict(d), ev.seq
        elif d.get("experiment_id") and (t.startswith("server.") or t in ("probe.result", "observation")):
            self._server_event(ev)
        elif t.startswith("experiment.") and d.get("experiment_id"):
            r = self._run(d.get("experiment_id"))
            if r is not None:
                r.notes.append(ev)
        if t == "error":
            self.errors.append(ev)

    def _run(self, experiment_id: Any) -> ExperimentRun | None:
        for r in reversed(self.runs):
            if r.id == experiment_id:
                return r
        return None

    def _ingest(self, ev: TranscriptEvent) -> None:
        case = self.case_dict() or {}
        self.runs.append(
            ExperimentRun(
                experiment={
                    "id": ev.data["experiment_id"],
                    "purpose": "baseline",
                    "baseline": case.get("baseline") or {"flags": {}, "env": {}},
                    "change": None,
                    "rationale": f"observed log {ev.data.get('source')}",
                    "status": "running",
                },
                step=ev.step,
                observed_log=str(ev.data.get("source")),
            )
        )

    def _decided(self, ev: TranscriptEvent) -> None:
        d = ev.data
        prop = next((p for p in reversed(self.proposals) if p.experiment_id == d.get("experiment_id")), None)
        if prop is None:
            return
        prop.decision = dict(d)
        decision = d.get("decision")
        if decision in ("approve", "edit"):
            exp = {k: v for k, v in prop.data.items() if k != "considered"}
            if decision == "edit" and d.get("edited_experiment_id"):
                exp.update(
                    id=d["edited_experiment_id"],
                    purpose="test",
                    change=d.get("change"),
                    proposed_by=d.get("by") or "user",
                    rationale=f"edited by {d.get('by') or 'user'}",
                )
            exp["status"] = "approved"
            earlier = self._run(exp["id"])
            # The approve node runs again after a resume: an answer repeated for a run that has not
            # executed yet is the same run.
            if earlier is None or earlier.outcome is not None:
                self.runs.append(ExperimentRun(experiment=exp, step=prop.step, proposal=prop))
        elif decision == "reject":
            self.rejections.append(
                {
                    "experiment_id": prop.experiment_id,
                    "change": prop.data.get("change"),
                    "reason": d.get("reason") or "no reason given",
                    "seq": ev.seq,
                }
            )

    def _server_event(self, ev: TranscriptEvent) -> None:
        r = self._run(ev.data.get("experiment_id"))
        if r is None:
            return
        t = ev.type
        if t != "server.lost":
            r.seen.append(ev.ts)
        if t in ("server.launched", "server.adopted"):
            r.launched.append(ev)
        elif t == "server.ready":
            r.ready = ev
        elif t in ("server.crashed", "server.timeout"):
            r.ended = ev
        elif t == "server.stopped":
            r.stopped = ev
            r.stops.append(ev)
        elif t == "observation":
            r.observations.append(dict(ev.data))
        elif t == "probe.result":
            r.probes.append(dict(ev.data))
        else:
            r.notes.append(ev)

    def _hypothesis(self, ev: TranscriptEvent) -> None:
        d = ev.data
        hid = d.get("id")
        if not hid:
            return
        kind = ev.type.split(".", 1)[1]
        if kind == "added":
            h = HypothesisRecord(added=dict(d), added_step=ev.step)
            h.status = str(d.get("status", "open"))
            self.hypotheses[hid] = h
        else:
            h_or_none = self.hypotheses.get(hid)
            if h_or_none is None:
                return
            h = h_or_none
            if kind in _VERDICTS:
                h.status = kind
                h.changes.append(ev)
        h.posterior = float(d.get("posterior", h.posterior))
        h.series[ev.step] = h.posterior

    def _design_point(self, ev: TranscriptEvent, kind: str) -> None:
        done = [r for r in self.runs if r.outcome is not None]
        launches = sum(1 for r in done if r.launched_server)
        host_s = 0.0
        for r in done:
            host_s = round(host_s + r.host_seconds, 3)
        self.design_points.append(
            DesignPoint(
                seq=ev.seq,
                step=ev.step,
                kind=kind,
                data=dict(ev.data),
                executed=[r.id for r in done],
                rejections=len(self.rejections),
                verdicts={h.id: h.status for h in self.hypotheses.values()},
                launches=launches,
                host_seconds=host_s,
            )
        )

    # ------------------------------------------------------------------ questions

    def case_dict(self) -> dict[str, Any] | None:
        """The case as loaded (``run.started.case_data``), or None for an older transcript."""
        data = self.started.get("case_data")
        return dict(data) if isinstance(data, dict) else None

    @property
    def finished(self) -> bool:
        """Whether the transcript ends with ``run.ended`` (an unfinished run is still going or died)."""
        return self.ended is not None

    @property
    def status(self) -> str:
        """How the run ended (``run.ended``), else ``waiting for approval`` (its last request unanswered: the
        status ``hypoloop runs`` gives and ``resume`` acts on), else ``unfinished``."""
        if self.ended:
            return str(self.ended.get("status"))
        return "waiting for approval" if self.waiting else "unfinished"

    def run_of(self, experiment_id: str | None) -> ExperimentRun | None:
        """The executed experiment with this id (the last one if it ran more than once)."""
        return self._run(experiment_id) if experiment_id else None

    def executed(self) -> list[ExperimentRun]:
        """Experiments with an outcome, in the order they ran."""
        return [r for r in self.runs if r.outcome is not None]

    def launches(self) -> int:
        """Servers the run launched: each executed experiment that counts as a launch, and one launched
        but never concluded (a run interrupted or killed mid-experiment still spent that launch)."""
        return sum(1 for r in self.runs if r.launched_server and (r.outcome is not None or r.launched))

    def host_seconds(self) -> float:
        total = 0.0
        for r in self.executed():
            total = round(total + r.host_seconds, 3)
        return total

    def model_path(self) -> str:
        """The model under test: from the case, else from the last launch command, else the case name."""
        case = self.case_dict() or {}
        path = (case.get("model") or {}).get("path")
        if not path and self.launch_argv:
            spec = LauncherSpec.model_validate(case.get("launcher") or {})
            path = spec.engine_impl().model_of(self.launch_argv, len(spec.argv))
        return str(path or self.started.get("case") or "?")

    def hypothesis(self, hid: str | None) -> HypothesisRecord | None:
        return self.hypotheses.get(hid) if hid else None

    def telling_match(self, outcome: dict[str, Any]) -> dict[str, Any] | None:
        """The log match that best states an outcome's failure: the one the root-cause hypothesis took
        as its signature evidence (e.g. ``ptxas fatal : Value 'sm_120' is not defined``), else the first
        fatal match (which may be a generic one such as "Scheduler hit an exception"); None if none."""
        matches = [m for m in outcome.get("matches", []) if m.get("kind") in ("fatal", "error")]
        root = self.hypothesis(((self.conclusion or {}).get("root_cause") or {}).get("hypothesis_id"))
        cited = [
            str(e.get("detail", ""))[len("signature ") :].split(":", 1)[0]
            for e in (root.evidence if root else [])
            if e.get("kind") == "signature" and e.get("effect") == "supports"
        ]
        for sig in cited:
            found = next((m for m in matches if m.get("signature_id") == sig), None)
            if found is not None:
                return _error_line_of(outcome, dict(found))
        fatal = next((dict(m) for m in matches if m.get("kind") == "fatal"), None)
        return _error_line_of(outcome, fatal) if fatal is not None else None

    def steps(self) -> list[int]:
        """Step numbers that have a hypothesize result, in order."""
        return sorted({s for h in self.hypotheses.values() for s in h.series})

    def interventions_of(self, change_text: str) -> list[str]:
        """Ids of hypotheses one of whose interventions a considered change (``name: before → after``,
        as ``Change.describe`` writes it) carries out."""
        name, _, rest = change_text.partition(":")
        after = rest.rsplit("→", 1)[-1].strip()
        value: Any = True if after == "(on)" else (None if after == "(unset)" else after)
        out = []
        for h in self.hypotheses.values():
            for iv in h.added.get("interventions", []):
                if name.strip() in iv.get("names", []) and any(
                    str(v).lower() == str(value).lower() for v in iv.get("values", [True])
                ):
                    out.append(h.id)
                    break
        return out


def awaited_approval(waiting: dict[str, Any] | None, ev: TranscriptEvent) -> dict[str, Any] | None:
    """The ``approval.requested`` payload a run waits on after ``ev``, given the one it waited on before it
    (None: none). A request stays awaited through what its own wait writes (``run.paused``, a
    ``run.resumed`` that brought no answer, the approve node's other lines); an answer (``approval.decided``,
    ``approval.refused``: asked again as a new request, a ``run.resumed`` carrying one), ``run.ended`` or
    any other node's event ends it. Killed at the question, the run still waits there: its checkpoint holds
    the question, and ``hypoloop resume`` asks it again (``agent.record.runs.run_info``)."""
    if ev.type == "approval.requested":
        return dict(ev.data)
    if waiting is None or ev.type in ("approval.decided", "approval.refused", "run.ended"):
        return None
    if ev.type == "run.resumed":
        return None if ev.data.get("answer") else waiting
    return waiting if ev.type == "run.paused" or ev.node == "approve" else None


def follow(transcript: Transcript) -> RecordedRun | None:
    """The run ``transcript`` records, kept current as it is written: the events already in its file
    folded once (a resumed run's earlier processes wrote them), then every event it emits, as the file
    holds it (each read back from its JSON line, so the fold equals ``RecordedRun.load`` of the file; its
    payload is not checked again against ``agent.record.events``: this process just wrote it).
    None when the file holds a line ``RecordedRun.load`` refuses (a damaged transcript)."""
    path = Path(transcript.path)
    try:
        run = RecordedRun.load(path) if path.is_file() and path.stat().st_size > 0 else RecordedRun(path=path)
    except (OSError, TranscriptError):
        return None

    def fold(ev: TranscriptEvent) -> None:
        line = json.dumps(ev.model_dump(mode="json"), ensure_ascii=False, default=str)
        run.add(parse_event(line, where=f"{path}: seq {ev.seq}", payloads=False))  # written by us: valid

    transcript.listeners.append(fold)
    return run


def _error_line_of(outcome: dict[str, Any], match: dict[str, Any]) -> dict[str, Any]:
    """``match`` stating its error: a match whose first line is a traceback's header ("Scheduler hit an
    exception: Traceback (most recent call last):") says nothing of the failure, so the traceback's own
    error line (``RuntimeError: ...``; of a chained one, the last: ``tools.tracebacks.exception_of``) and its
    line number stand in, read from the outcome's kept log
    lines; the match as it is when the traceback's end was not kept."""
    if not TRACEBACK_START.search(str(match.get("first_line", ""))) or not match.get("line_numbers"):
        return match
    start = match["line_numbers"][0]
    kept = [(int(ll["line"]), str(ll["text"])) for ll in outcome.get("log_excerpt") or [] if "line" in ll]
    end = exception_of([(n, t) for n, t in kept if n >= start], start)
    if end is None:
        return match
    return {**match, "first_line": end[1], "line_numbers": [end[0]]}
