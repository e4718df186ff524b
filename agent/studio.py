"""The run graph for LangGraph's own tooling: ``langgraph dev`` and LangGraph Studio (``langgraph.json``).

Studio starts a run with the input ``{"case_ref": "lab:glm5-nvfp4-sm120"}`` (a case file path works too;
``approval`` is optional: each, risky or auto). The graph stops at the same ``interrupt()`` as the CLI,
showing the approval request; resume it with ``{"decision": "approve"}``, ``{"decision": "edit", "set":
["--kv-cache-dtype=bfloat16"]}``, ``{"decision": "reject", "reason": "..."}`` or ``{"decision": "stop"}``.

The LangGraph server brings its own checkpointer, so the graph is compiled without one. Each run
(thread) writes its transcript to ``$HYPOLOOP_TRANSCRIPT_DIR/THREAD_ID.jsonl`` (default
``./transcripts``); flag catalogs are cached under ``$HYPOLOOP_HOME``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from langgraph.config import get_config

from agent.graph import Runtime, build_graph
from agent.runs import home_dir
from agent.transcript import Transcript, TranscriptEvent


class ThreadTranscripts(Transcript):
    """A transcript per LangGraph thread: events go to ``DIR/THREAD_ID.jsonl`` of the running thread.

    One graph object serves every run of a LangGraph server, so the file is chosen per call from the
    run's config (``get_config()``, only available inside a node).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.listeners = []
        self._open: dict[str, Transcript] = {}
        self._lock = threading.Lock()

    def _current(self) -> Transcript:
        thread = str(get_config().get("configurable", {}).get("thread_id") or "studio")
        with self._lock:
            tr = self._open.get(thread)
            if tr is None:
                tr = Transcript(self.directory / f"{thread}.jsonl", thread)
                self._open[thread] = tr
            return tr

    @property
    def path(self) -> Path:  # type: ignore[override]
        return self._current().path

    @property
    def run_id(self) -> str:  # type: ignore[override]
        return self._current().run_id

    @property
    def step(self) -> int:  # type: ignore[override]
        return self._current().step

    @step.setter
    def step(self, value: int) -> None:
        self._current().step = value

    def emit(self, type: str, data: dict[str, Any] | None = None, *, node: str = "") -> TranscriptEvent:
        return self._current().emit(type, data, node=node)

    def close(self) -> None:
        with self._lock:
            for tr in self._open.values():
                tr.close()
            self._open.clear()


def studio_graph(checkpointer: Any = None) -> Any:
    """The run graph with a default runtime (local state dir, per-thread transcripts)."""
    directory = Path(os.environ.get("HYPOLOOP_TRANSCRIPT_DIR", "transcripts"))
    home = home_dir()
    home.mkdir(parents=True, exist_ok=True)
    return build_graph(Runtime(ThreadTranscripts(directory), home), checkpointer)


def make_graph() -> Any:
    """Factory named in ``langgraph.json``: the graph compiled without a checkpointer (the server has one)."""
    return studio_graph()
