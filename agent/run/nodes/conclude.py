"""conclude: the run's ending: root cause and minimal fix when a confirmed fix exists, else what was
ruled out and what is left; the ready-to-append FINDINGS.md entry of an isolated run.

Side effects: on the host, stops every server this run still has running (``Runtime.stop_sessions``,
which writes ``server.stopped``), so nothing outlives the run and the stop is recorded before its end (a
run that ended in error says which it could not reach, left for the next run's orphan sweep); transcript
``conclusion`` and ``run.ended``. The conclusion is built from the state; the FINDINGS.md entry from the
run as its transcript tells it, which the runtime keeps folded in memory as events are written
(``Runtime.recorded``): the file is not read back.
"""

from __future__ import annotations

from dataclasses import replace

from agent.domain.models import Conclusion
from agent.planning.conclusion import conclusion_of, joined
from agent.record.recorded import RecordedRun
from agent.record.wire import to_payload
from agent.review.findings import FindingsWriteError, entry_for
from agent.run.runtime import Runtime
from agent.run.state import RunState
from tools.flags import FlagCatalog


def conclude(state: RunState, rt: Runtime) -> RunState:
    """The conclude node: see the module docstring."""
    left = rt.stop_sessions()  # nothing outlives its run, and the stop is recorded before the run's end
    # A state without a transcript path (LangGraph Studio's) gets no findings entry, as before.
    c = build_conclusion(state, rt.recorded if state.get("transcript") else None, rt.loaded_flags)
    if left and c.status == "error":  # the host failed under them: say where they are and who stops them
        c.reason = joined(
            c.reason,
            f"the server of {', '.join(left)} could not be stopped from here; it is reported and stopped by the "
            "next run on that host",
        )
    rt.transcript.emit("conclusion", to_payload("conclusion", c), node="conclude")
    rt.transcript.emit(
        "run.ended",
        {"status": c.status, "launches": c.launches, "host_seconds": c.host_seconds, "reason": c.reason},
        node="conclude",
    )
    return {"conclusion": c.model_dump(mode="json"), "status": c.status}


def build_conclusion(state: RunState, recorded: RecordedRun | None = None,
                     flags: FlagCatalog | None = None) -> Conclusion:
    """The run's ending (``agent.planning.conclusion.conclusion_of``): root cause and fix when a confirmed
    fix exists, else what was ruled out; an isolated one with its FINDINGS.md entry when ``recorded`` (the
    run as its transcript tells it) is given. ``flags``: the host's flag catalog when read."""
    c = conclusion_of(state, flags)
    if c.status == "isolated":
        c.findings_entry = findings_entry(recorded, c)
    return c


def findings_entry(recorded: RecordedRun | None, c: Conclusion) -> str:
    """The FINDINGS.md entry of an isolated run: the one ``hypoloop findings add`` appends
    (``agent.review.findings.entry_for``), built from ``recorded`` (the run as its transcript tells it)
    with this conclusion. ``""`` without one (e.g. a state assembled without a transcript)."""
    if recorded is None or not recorded.events:
        return ""
    try:
        return entry_for(replace(recorded, conclusion=c.model_dump(mode="json")))
    except FindingsWriteError:
        return ""
