"""Stall detection from a launch's own log rhythm, per start-up stage.

A server that hangs (an NCCL collective that never completes, a deadlocked kernel) prints nothing: no
error, no ready line. Waiting for the NCCL watchdog or a fixed ready timeout costs many minutes of GPU
host time. `StallWatch` decides "no progress" earlier, from two things the log itself shows:

- the stage the launch is in, from the last progress line (signatures of kind progress/ready/fact with
  their `stage`: launch, load, capture, serve); each stage has a quiet period a healthy SGLang server
  may spend without printing (`STAGE_QUIET_S`, host seconds);
- the rhythm so far: a healthy log that printed a line every few seconds and then goes silent for many
  times its longest gap has stopped.

The limit (orchestrator wall seconds) is `max(quiet of the stage × time_scale, factor × longest gap
between lines so far, min_wall_s)`, capped by the case's `stall_timeout_s` when it gives one.
`min_wall_s` absorbs scheduling noise on the orchestrator; it only matters under the lab's compressed
time. Before the first line the interpreter is still importing, so `startup_wall_s` applies instead.

Use: pass `watch.observe` the session's events and `watch.limit` as the session's stall timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from tools.signatures import Signature, SignatureMatcher

#: Longest silence (host seconds) a healthy SGLang 0.5.x start-up shows in each stage:
#: launch — argument parsing to process-group start (tokenizer and config download: ~1-2 min);
#: load — NCCL init and weights (a large shard from network storage: minutes, then progress resumes);
#: capture — one batch size, including Triton/torch.compile JIT for it;
#: serve — warm-up request, which may JIT-compile DeepGEMM kernels for several minutes.
STAGE_QUIET_S: dict[str, float] = {"launch": 120.0, "load": 300.0, "capture": 300.0, "serve": 600.0}


class StallWatch:
    """Tracks a launch's log and says how long a silence means a stall (see module docstring).

    `signatures`: the log signatures (their progress-kind entries give the stage). `time_scale`: the
    host's time scale (1.0 on a real host). `ceiling_s`: hard upper bound in wall seconds (None: none).
    """

    def __init__(
        self,
        signatures: Iterable[Signature],
        *,
        time_scale: float = 1.0,
        ceiling_s: float | None = None,
        factor: float = 6.0,
        min_wall_s: float = 1.0,
        startup_wall_s: float = 10.0,
        stage_quiet_s: dict[str, float] | None = None,
    ) -> None:
        progress = [s for s in signatures if s.kind in ("progress", "ready")]
        self._matcher = SignatureMatcher(progress)
        self._stage_of = {s.id: s.stage for s in progress}
        self.time_scale = time_scale
        self.ceiling_s = ceiling_s
        self.factor = factor
        self.min_wall_s = min_wall_s
        self.startup_wall_s = startup_wall_s
        self.stage_quiet_s = dict(STAGE_QUIET_S if stage_quiet_s is None else stage_quiet_s)
        self.stage: str | None = None
        self.last_progress: str | None = None  # id of the last progress signature seen
        self.longest_gap_s = 0.0
        self._last_seen: float | None = None
        self._lines = 0

    def observe(self, event: object) -> None:
        """Feed one `tools.server.WatchEvent` (only `line` events are used)."""
        if getattr(event, "kind", None) != "line":
            return
        line = getattr(event, "line", None)
        if line is None:
            return
        self.feed(line.line, line.text, line.seen_monotonic)

    def feed(self, lineno: int, text: str, seen: float | None = None) -> None:
        """Feed one log line read at monotonic time `seen` (now if None)."""
        seen = time.monotonic() if seen is None else seen
        self._lines += 1
        if self._last_seen is not None:
            self.longest_gap_s = max(self.longest_gap_s, seen - self._last_seen)
        self._last_seen = seen
        for hit in self._matcher.feed(lineno, text):
            self.last_progress = hit.signature_id
            self.stage = self._stage_of.get(hit.signature_id, self.stage)

    def limit(self) -> float | None:
        """Seconds of log silence (wall) after which the launch counts as stalled now."""
        if self._lines == 0:
            limit = max(self.startup_wall_s, self.stage_quiet_s.get("launch", 0.0) * self.time_scale)
        else:
            quiet = self.stage_quiet_s.get(self.stage or "launch", 0.0) * self.time_scale
            limit = max(quiet, self.factor * self.longest_gap_s, self.min_wall_s)
        if self.ceiling_s is not None:
            limit = min(limit, self.ceiling_s)
        return limit
