"""The run graph for LangGraph's own tooling: ``langgraph dev`` and LangGraph Studio (``langgraph.json``).

Studio starts a run with the input ``{"case_ref": "lab:glm5-nvfp4-sm120"}`` (a case file path works too;
``approval`` is optional: each, risky or auto). The graph stops at the same ``interrupt()`` as the CLI,
showing the approval request; resume it with ``{"decision": "approve"}``, ``{"decision": "edit", "set":
["--kv-cache-dtype=bfloat16"]}``, ``{"decision": "reject", "reason": "..."}`` or ``{"decision": "stop"}``.

The LangGraph server brings its own checkpointer, so the graph is compiled without one. One graph
object serves every thread of the server, so each thread gets its own ``Runtime`` (its host connection,
flag catalog, running servers and transcript ``$HYPOLOOP_TRANSCRIPT_DIR/THREAD_ID.jsonl``, default
``./transcripts``); flag catalogs are cached under ``$HYPOLOOP_HOME``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from langgraph.config import get_config

from agent.planning.planner import make_planner
from agent.record.runs import home_dir
from agent.record.transcript import Transcript
from agent.run.graph import build_graph
from agent.run.runtime import Runtime


class ThreadRuntimes:
    """One ``Runtime`` per LangGraph thread, made on the thread's first node and kept for its later ones.

    Called inside a node (``get_config()`` names the running thread). ``close()`` stops what every
    thread's runtime still runs and closes their hosts and transcripts.
    """

    def __init__(self, directory: Path, home: Path) -> None:
        self.directory = directory
        self.home = home
        self._runtimes: dict[str, Runtime] = {}
        self._lock = threading.Lock()

    def __call__(self) -> Runtime:
        thread = str(get_config().get("configurable", {}).get("thread_id") or "studio")
        with self._lock:
            rt = self._runtimes.get(thread)
            if rt is None:
                rt = Runtime(Transcript(self.directory / f"{thread}.jsonl", thread), self.home, make_planner)
                self._runtimes[thread] = rt
            return rt

    def close(self) -> None:
        """Close every thread's runtime (servers stopped, hosts closed) and its transcript."""
        with self._lock:
            for rt in self._runtimes.values():
                rt.close()
                rt.transcript.close()
            self._runtimes.clear()


def studio_graph(checkpointer: Any = None, runtimes: ThreadRuntimes | None = None) -> Any:
    """The run graph with a runtime per thread (local state dir, a transcript per thread)."""
    if runtimes is None:
        home = home_dir()
        home.mkdir(parents=True, exist_ok=True)
        runtimes = ThreadRuntimes(Path(os.environ.get("HYPOLOOP_TRANSCRIPT_DIR", "transcripts")), home)
    return build_graph(runtimes, checkpointer)


def make_graph() -> Any:
    """Factory named in ``langgraph.json``: the graph compiled without a checkpointer (the server has one)."""
    return studio_graph()
