"""Server lifecycle: launch an inference server on a host, watch its log, probe it, stop it.

`ServerSession` spawns the server through a `Host`, tails its log with a `LogWatcher` every
`poll_interval_s`, feeds each line to a `SignatureMatcher`, and stops waiting the moment the log shows a
ready or fatal signature or the process exits. It always stops what it started.

Signals: the CLI should turn SIGTERM into KeyboardInterrupt (for example
`signal.signal(signal.SIGTERM, lambda *_: _raise(KeyboardInterrupt()))`) so that `with ServerSession(...)`
blocks unwind and `__exit__` stops the server; `tools.host.terminate_all` (registered with atexit) stops
anything left at interpreter exit. Nothing can clean up after SIGKILL of the orchestrator itself.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from tools import interrupts
from tools.container import prepare as prepare_container
from tools.container import recover as recover_container
from tools.engines import Engine, get_engine, model_flags
from tools.flags import value_words
from tools.host import Host, HostError, ProcessHandle, QueuesJobs, SchedulerError, expand_argv
from tools.logwatch import LogLine, LogWatcher
from tools.signatures import SignatureMatch, SignatureMatcher
from tools.tls import http_client

EventKind = Literal["line", "ready", "fatal", "exited", "timeout", "stalled"]
LaunchStatus = Literal["ready", "crashed", "exited", "timeout", "stalled", "launch_failed"]


def render_command(
    launcher_argv: Sequence[str],
    model_path: str,
    flags: Mapping[str, str | bool | int | float | None],
    *,
    host: str,
    port: int,
    engine: Engine | None = None,
) -> list[str]:
    """The launch argv: launcher, the model as `engine` names it (SGLang `--model-path M`, vLLM's
    `vllm serve M` positional or `--model M`; default SGLang), flags in order, then `--host H --port P`.

    True renders a bare flag, False/None omits it, other values become `str(value)` as one argv item
    (no shell is involved, so no quoting is needed), except a list-valued flag's space-separated value
    (`--cuda-graph-bs 1 2 4 8`), one item per word (`tools.flags.value_words`). The model flags, `--host`
    and `--port` in `flags`
    are dropped because the session owns them. `{python}` in the launcher is left for `expand_argv`.
    Raises ValueError for a flag name that does not start with "-".
    """
    eng = engine or get_engine()
    owned = eng.session_flags() | model_flags()  # any engine's model flag (SGLang's --model is --model-path)
    argv = [str(a) for a in launcher_argv] + eng.model_args(launcher_argv, str(model_path))
    for name, value in flags.items():
        if not name.startswith("-"):
            raise ValueError(f"flag {name!r} must start with '-' (e.g. '--tp-size')")
        if name in owned or value is None or value is False:
            continue
        argv.append(name)
        if value is not True:
            argv.extend(value_words(str(value)))
    return argv + [eng.data.host_flag, host, eng.data.port_flag, str(port)]


#: What a Python interpreter prints (one line, its own path first) when the module of ``-m`` or the
#: script it was given does not exist (CPython 3.x ``runpy`` and ``main.c``):
#: ``python: No module named pkg.mod``, ``python: Error while finding module specification for 'pkg.mod'
#: (ModuleNotFoundError: No module named 'pkg')``, ``python: can't open file '/x.py': [Errno 2] ...``.
#: A traceback's ``ModuleNotFoundError: No module named 'x'`` (an import inside the server) is not one.
_NO_MODULE = re.compile(r"^(\S+): No module named ([\w.]+)$")
_NO_MODULE_SPEC = re.compile(r"^(\S+): Error while finding module specification for '([\w.]+)'")
_NO_SCRIPT = re.compile(r"^(\S+): can't open file '([^']+)': \[Errno 2\]")
#: Shell exit statuses for a program that is missing (127) or not executable (126); SGLang never uses them.
_NOT_RUNNABLE = {126: "not executable", 127: "not found"}


def launcher_missing(argv: Sequence[str], lines: Sequence[LogLine], exit_code: int | None) -> str | None:
    """Why the launch command itself could not run, or None when it did (the server then failed or not).

    A launch whose process ended because its launcher is gone (the ``-m`` module, the script given to the
    interpreter, or a program the launcher runs: exit status 127/126) never ran the server: that says
    nothing about the deployment. A module the server imports later is not the launcher
    (``ModuleNotFoundError: No module named 'flashinfer'`` in a traceback is the server's failure).
    Returns one line naming what is missing and quoting the log line that says so.
    """
    module = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m"), None)
    for line in lines:
        text = line.text.strip()
        m = _NO_MODULE.match(text) or _NO_MODULE_SPEC.match(text)
        if m and module and m.group(2) == module and not m.group(1).endswith("Error"):
            return f"the launcher's module {module} is not installed on the host (log line {line.line}: {text})"
        m = _NO_SCRIPT.match(text)
        if m and m.group(2) in argv:
            return f"the launcher's script {m.group(2)} is not on the host (log line {line.line}: {text})"
    if exit_code in _NOT_RUNNABLE:
        last = next((ln for ln in reversed(lines) if ln.text.strip()), None)
        said = f" (log line {last.line}: {last.text.strip()})" if last else ""
        return (
            f"the launch command ended with exit status {exit_code}: a program it runs is "
            f"{_NOT_RUNNABLE[exit_code]}{said}"
        )
    return None


class WatchEvent(BaseModel):
    """Something the session saw. `line` is set for line/ready/fatal events; `at_monotonic` is when."""

    kind: EventKind
    line: LogLine | None = None
    at_monotonic: float


class LaunchResult(BaseModel):
    """What a launch came to.

    status: ready (ready signature seen), crashed (fatal signature seen; the process may still be
    running), exited (process ended without a fatal signature), timeout (neither within
    `ready_timeout_s`), stalled (no log growth for `stall_timeout_s`), launch_failed (could not start
    the process at all; `error` says why). Times are seconds since spawn on the orchestrator's monotonic
    clock: `t_ready_s` when the ready line was read, `t_end_s` when waiting ended for any other status.
    `detection_delays_s[i]` is an upper bound, in seconds, on how long line i sat in the log before it
    was read (see `ServerSession`). `health_status` is the HTTP status of GET /health right after the
    ready line (None if not checked or no answer).

    `stop_line`/`stop_offset`: how many physical log lines, and how many bytes, had been read when
    hypoloop asked the server to stop (None before `stop()`); `shutdown_lines` are the lines written
    after that request. They are the server's reaction to our own SIGTERM, not evidence: they are not in
    `lines` and never reach the signature matcher (SGLang 0.5.23 logs "Subprocess scheduler_0 ...
    crashed with exit code -15. Triggering SIGQUIT for cleanup..." when it is stopped, issue 22).
    """

    status: LaunchStatus
    handle: ProcessHandle | None
    lines: list[LogLine] = Field(default_factory=list)
    matches: list[SignatureMatch] = Field(default_factory=list)
    facts: dict[str, str] = Field(default_factory=dict)
    t_ready_s: float | None = None
    t_end_s: float | None = None
    exit_code: int | None = None
    detection_delays_s: list[float] = Field(default_factory=list)
    base_url: str | None = None
    health_status: int | None = None
    error: str | None = None
    stop_line: int | None = None
    stop_offset: int | None = None
    shutdown_lines: list[LogLine] = Field(default_factory=list)


@dataclass(frozen=True)
class SessionOptions:
    """How a `ServerSession` waits, watches and stops. Durations are seconds.

    `ready_timeout_s` counts from spawn; `stall_timeout_s` (None = off; a callable is asked at every
    poll, e.g. `tools.stall.StallWatch.limit`) is the longest the log may go without growing;
    `poll_interval_s` is how often the log is read; `fatal_grace_s` (capped at 2 s) is how long a
    crashing process may keep writing its traceback before `wait_ready`/`watch` return;
    `health_timeout_s` bounds the GET /health that confirms a ready line; `stop_grace_s` is the
    SIGTERM-to-SIGKILL grace of `stop()`; `health_poll_s` (None = off) is how often `wait_ready` asks
    GET /health while no ready line was read: SGLang logs its ready line at INFO, so a server started
    with `--log-level warning` never prints it, and /health answers 200 only once the warm-up finished
    (ServerStatus.Up; 0.5.9 and 0.5.23 entrypoints/http_server.py), which is the same moment. `api_key`
    is the server's `--api-key`, if any (SGLang exempts /health from it; sent anyway for proxies that do
    not).
    """

    ready_timeout_s: float
    stall_timeout_s: float | Callable[[], float | None] | None = None
    poll_interval_s: float = 0.05
    fatal_grace_s: float = 2.0
    health_timeout_s: float = 5.0
    stop_grace_s: float = 10.0
    health_poll_s: float | None = 1.0
    api_key: str | None = None


class ServerSession:
    """One server launch on a host, as a context manager that always stops what it started.

    `argv` is the full launch command (see `render_command`); `{python}` is expanded for the host.
    `env` is merged over the host environment. `port` is where the server listens on the host; requests
    go to `base_url` (through `host.forward_port`). `on_event` receives every `WatchEvent` (each log
    line, then ready/fatal/exited/timeout/stalled) on the calling thread. `options` holds the timings
    and the server's API key (`SessionOptions`). `ready_source` says whether the log's ready line or
    GET /health saw readiness first.

    Detection delay: the time a line was written is unknown, but a complete line read by poll k cannot
    have been complete when poll k-1 started reading (it would have been read then). So for each line
    the session records `seen_monotonic - start of the previous read` (the spawn time for the first
    read): an upper bound on write-to-seen delay, about one `SessionOptions.poll_interval_s` plus read time.

    Usage: `with ServerSession(...) as s: r = s.wait_ready(); ...; s.watch(2.0)`. `start()` is called by
    `wait_ready()` if needed. `__exit__` calls `stop()` on normal exit, exceptions and KeyboardInterrupt
    (a second KeyboardInterrupt during the stop escalates to an immediate SIGKILL of the group).
    """

    def __init__(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        log_path: str,
        port: int,
        matcher: SignatureMatcher,
        options: SessionOptions,
        env: Mapping[str, str] | None = None,
        on_event: Callable[[WatchEvent], None] | None = None,
    ) -> None:
        self.host = host
        # A launch through `docker exec` / `docker run` is rewritten so it can be stopped inside its
        # container (tools/container.py); `container` says how.
        self.argv, self.container = prepare_container(
            expand_argv(argv, host), f"{port}-{uuid.uuid4().hex[:8]}"
        )
        self.env = dict(env or {})
        self.log_path = log_path
        self.port = port
        self.matcher = matcher
        self.on_event = on_event
        self.options = options
        self._next_health_poll = 0.0
        self.ready_source: Literal["log", "health"] | None = None

        self.handle: ProcessHandle | None = None
        self.base_url: str | None = None
        self.error: str | None = None
        self.lines: list[LogLine] = []
        #: what the server printed after our own stop() signalled it (its shutdown sequence: SGLang 0.5.17+
        #: logs its scheduler's death by that SIGTERM and SIGQUITs itself); never evidence of the experiment
        self.detection_delays_s: list[float] = []
        self._status: LaunchStatus | None = None
        self._t_end: float | None = None
        self.health_status: int | None = None
        self._watcher: LogWatcher | None = None
        self._prev_read_start = 0.0
        self._started = False
        self._ready_at: float | None = None
        self._fatal_at: float | None = None
        self._exit_seen = False
        # Set when hypoloop asks the server to stop: lines read from then on are shutdown, not evidence.
        self.stop_line: int | None = None
        self.stop_offset: int | None = None
        self.shutdown_lines: list[LogLine] = []

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the server (idempotent). A spawn failure is recorded, not raised: `wait_ready()` then
        returns status "launch_failed" with the error."""
        if self._started:
            return
        self._started = True
        try:
            self.handle = self.host.spawn(self.argv, log_path=self.log_path, env=self.env)
        except SchedulerError:
            raise  # the scheduler refused the job: no launch happened, nothing to learn about the server
        except HostError as exc:
            self.error = str(exc)
            return
        self._watcher = LogWatcher(self.host, self.handle.log_path)
        self._prev_read_start = self.handle.started_monotonic
        if not isinstance(self.host, QueuesJobs):  # a queued job's node is known once it runs
            self.base_url = f"http://127.0.0.1:{self.host.forward_port(self.port)}"

    def adopt(self, handle: ProcessHandle) -> None:
        """Take over a server that an earlier orchestrator process spawned (instead of `start()`).

        The log is read again from its first byte, so matches and facts cover the whole launch; lines
        already written count no detection delay (they were written before this process watched). The
        ready deadline counts from `handle.started_monotonic`. A session starts or adopts once.
        """
        if self._started:
            return
        self._started = True
        self.handle = handle
        claim = getattr(self.host, "claim", None)  # a host that can record who looks after a server
        if claim is not None:
            claim(handle)
        self.container = recover_container(handle.argv)
        self._watcher = LogWatcher(self.host, handle.log_path)
        self._prev_read_start = time.monotonic()
        if not isinstance(self.host, QueuesJobs):
            self.base_url = f"http://127.0.0.1:{self.host.forward_port(self.port)}"
        self._pump()
        self.detection_delays_s.clear()

    def _wait_queued(self) -> None:
        """On a batch-scheduler host (`QueuesJobs`), wait while the job is queued: its start becomes
        the handle's start, so the ready timeout and stall detection count from when it runs.
        Raises what the host raises for a job pending too long (`SchedulerError`/`HostError`)."""
        if self.handle is None or not isinstance(self.host, QueuesJobs):
            return
        self.handle = self.host.wait_started(self.handle)
        self._prev_read_start = max(self._prev_read_start, self.handle.started_monotonic)
        if self.host.is_alive(self.handle):
            self.base_url = f"http://127.0.0.1:{self.host.forward_job_port(self.handle, self.port)}"

    def __enter__(self) -> ServerSession:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if isinstance(exc, KeyboardInterrupt):
            interrupts.delivered()  # caught: the server is stopped now, not raised into again
        try:
            self.stop()
        except KeyboardInterrupt:
            interrupts.delivered()
            if self.handle is not None:
                self.host.terminate(self.handle, grace_s=0.0)
            raise

    def stop(self, grace_s: float | None = None) -> bool:
        """Stop the server's whole process group (TERM, `grace_s` s, KILL) and verify it is gone.

        `grace_s` defaults to the session's `stop_grace_s` (10 s; SGLang usually exits within a few).

        A server started through `docker exec` / `docker run` is first stopped inside its container
        (tools/container.py), since signalling the engine's client does not reach it. Reads the log one
        last time. Idempotent; returns True when nothing of the group (and of the server inside its
        container) remains (also when nothing was started). Raises `HostError` only if the host itself cannot be reached.

        Before signalling, everything the server wrote so far is read as evidence; the log position at
        that moment is kept (`stop_line`, `stop_offset`) and every line after it goes to `shutdown_lines`:
        a server's reaction to being stopped (a child "crashed with exit code -15", SIGQUIT for cleanup)
        is our own doing, not a failure of the deployment.
        """
        if self.handle is None:
            return True
        if self.stop_line is None and self._watcher is not None:
            self._pump(flush=not self._alive())  # a dead process's last unterminated line is evidence too
            self.stop_line = self._watcher.lines_read
            self.stop_offset = self._watcher.offset
        grace = self.options.stop_grace_s if grace_s is None else grace_s
        inside = self._stop_in_container(grace) if self.container is not None else True
        ok = self.host.terminate(self.handle, grace_s=grace)
        self._pump(flush=True)
        return ok and inside

    def _stop_in_container(self, grace_s: float) -> bool:
        """Stop the server inside its container (see tools/container.py); True when it is gone there."""
        assert self.container is not None
        result = None
        for argv in self.container.stop_commands(grace_s):
            try:
                result = self.host.run(argv, timeout=grace_s + 30.0)
            except HostError as exc:
                self.error = self.error or f"could not stop the server inside its container: {exc}"
                return False
        if result is None:
            return True
        if self.container.mode == "run":  # `inspect` of a removed container fails; a stopped one says false
            return result.returncode != 0 or result.stdout.strip() == "false"
        return result.returncode == 0

    # -- watching ---------------------------------------------------------------------------------

    def _emit(self, kind: EventKind, line: LogLine | None = None) -> None:
        if self.on_event is not None:
            self.on_event(WatchEvent(kind=kind, line=line, at_monotonic=time.monotonic()))

    def _pump(self, *, flush: bool = False) -> list[LogLine]:
        """Read new complete lines (and the unterminated tail if `flush`), match and report them."""
        if self._watcher is None:
            return []
        read_start = time.monotonic()
        new = self._watcher.flush() if flush else self._watcher.poll()
        if self.stop_line is not None:  # written after we asked the server to stop: shutdown, not evidence
            self.shutdown_lines.extend(new)
            return []
        for line in new:
            self.detection_delays_s.append(max(0.0, line.seen_monotonic - self._prev_read_start))
            self.lines.append(line)
            hits = self.matcher.feed(line.line, line.text)
            self._emit("line", line)
            if any(h.kind == "fatal" for h in hits):
                if self._fatal_at is None:
                    self._fatal_at = line.seen_monotonic
                self._emit("fatal", line)
            if self._ready_at is None and any(h.kind == "ready" for h in hits):
                self._ready_at = line.seen_monotonic
                self._emit("ready", line)
        self._prev_read_start = read_start
        return new

    def _alive(self) -> bool:
        return self.handle is not None and self.host.is_alive(self.handle)

    def _sleep_until(self, deadline: float) -> None:
        time.sleep(max(0.0, min(self.options.poll_interval_s, deadline - time.monotonic())))

    def _drain_after_fatal(self) -> None:
        """Let a crashing process finish its traceback: poll until it exits, at most `fatal_grace_s`."""
        deadline = time.monotonic() + min(max(self.options.fatal_grace_s, 0.0), 2.0)
        while time.monotonic() < deadline:
            alive = self._alive()
            self._pump()
            if not alive:
                self._note_exit()
                return
            self._sleep_until(deadline)
        self._pump()

    def _note_exit(self) -> None:
        self._pump(flush=True)
        if not self._exit_seen:
            self._exit_seen = True
            self._emit("exited")

    def _last_progress(self) -> float:
        assert self.handle is not None
        grew = self._watcher.last_growth_monotonic if self._watcher is not None else None
        return max(self.handle.started_monotonic, grew or 0.0)

    def _wrote_since_read(self) -> bool:
        """Whether the server's log holds bytes not read yet (a poll stopped at its byte limit, or the
        server wrote while hypoloop was busy with what it read): the server made progress, so a silence
        is measured from now. Stall timing follows the server's own writing, not hypoloop's reading."""
        w = self._watcher
        if w is None:
            return False
        try:
            unread = w.backlog or w.has_unread()
        except HostError:
            return False
        if unread:
            w.last_growth_monotonic = time.monotonic()
        return unread

    def _finish(self, status: LaunchStatus, t_end: float | None) -> LaunchResult:
        self._status = status
        self._t_end = t_end
        return self.result()

    def result(self) -> LaunchResult:
        """The launch as seen so far: latest status, all lines and matches, facts, times, exit code.

        The status is the one `wait_ready` returned, changed by `watch` to "crashed"/"exited" when the
        server died later; our own `stop()` does not change it. Before `wait_ready` returns, it is
        "crashed"/"exited"/"ready" if that was already seen, else "timeout" (nothing decisive yet).
        """
        status = self._status
        if status is None:
            if self.error is not None:
                status = "launch_failed"
            elif self._fatal_at is not None:
                status = "crashed"
            elif self._exit_seen:
                status = "exited"
            elif self._ready_at is not None:
                status = "ready"
            else:
                status = "timeout"
        start = self.handle.started_monotonic if self.handle is not None else 0.0
        return LaunchResult(
            status=status,
            handle=self.handle,
            lines=list(self.lines),
            matches=self.matcher.matches(),
            facts=self.matcher.facts(),
            t_ready_s=(self._ready_at - start) if self._ready_at is not None else None,
            t_end_s=(self._t_end - start) if self._t_end is not None else None,
            exit_code=self.host.exit_code(self.handle) if self.handle is not None else None,
            detection_delays_s=list(self.detection_delays_s),
            base_url=self.base_url,
            health_status=self.health_status,
            error=self.error,
            stop_line=self.stop_line,
            stop_offset=self.stop_offset,
            shutdown_lines=list(self.shutdown_lines),
        )

    def _check_health(self) -> None:
        if self.base_url is None:
            return
        try:
            with http_client(timeout=self.options.health_timeout_s) as client:
                self.health_status = client.get(f"{self.base_url}/health").status_code
        except httpx.HTTPError:
            self.health_status = None

    def _health_says_ready(self) -> bool:
        """One GET /health, at most every `health_poll_s`; True on 200. Connection refused (HTTP not up
        yet) and timeouts are just "not yet"."""
        now = time.monotonic()
        if self.options.health_poll_s is None or self.base_url is None or now < self._next_health_poll:
            return False
        self._next_health_poll = now + self.options.health_poll_s
        headers = {"Authorization": f"Bearer {self.options.api_key}"} if self.options.api_key else {}
        try:
            with http_client(timeout=min(self.options.health_timeout_s, 2.0), headers=headers) as c:
                status = c.get(f"{self.base_url}/health").status_code
        except httpx.HTTPError:
            return False
        if status != 200:
            return False
        self.health_status = status
        self._ready_at = time.monotonic()
        self.ready_source = "health"
        self._emit("ready")
        return True

    def wait_ready(self) -> LaunchResult:
        """Watch the log until ready, fatal, exit, stall or `ready_timeout_s` after spawn.

        Returns at the first poll that sees a ready-kind line (then confirms with one GET /health,
        recorded in `health_status`) or a 200 from the periodic GET /health (see `health_poll_s`), a
        fatal-kind line (after letting the process finish its
        traceback for at most `fatal_grace_s`), or the process's exit. On timeout or stall the process
        is left running for inspection; `stop()` (or the context manager) ends it.
        """
        self.start()
        if self.handle is None:
            return self._finish("launch_failed", None)
        self._wait_queued()
        deadline = self.handle.started_monotonic + self.options.ready_timeout_s
        while True:
            alive = self._alive()  # checked before reading so lines written before an exit are read
            self._pump()
            if self._fatal_at is not None:
                self._drain_after_fatal()
                return self._finish("crashed", self._fatal_at)
            if self._ready_at is not None:
                if self.ready_source is None:
                    self.ready_source = "log"
                    self._check_health()
                return self._finish("ready", None)
            if alive and self._health_says_ready():
                self._pump()
                return self._finish("ready", None)
            if not alive:
                self._note_exit()
                return self._finish("crashed" if self._fatal_at is not None else "exited", time.monotonic())
            now = time.monotonic()
            stall_s = self.options.stall_timeout_s() if callable(self.options.stall_timeout_s) else self.options.stall_timeout_s
            if stall_s is not None and now - self._last_progress() >= stall_s and not self._wrote_since_read():
                self._emit("stalled")
                return self._finish("stalled", now)
            if now >= deadline:
                self._emit("timeout")
                return self._finish("timeout", now)
            self._sleep_until(deadline)

    def watch(self, seconds: float, *, until: Callable[[], bool] | None = None) -> list[LogLine]:
        """Keep tailing for up to `seconds` (e.g. while probes run); returns the lines read meanwhile.

        Returns early when a new fatal-kind line appears (after the `fatal_grace_s` drain), when the
        process exits, or when `until()` becomes true. Then `result()` reports "crashed"/"exited".
        """
        if self.handle is None:
            return []
        first = len(self.lines)
        fatal_before = self._fatal_at
        end = time.monotonic() + seconds
        while True:
            alive = self._alive()
            self._pump()
            if self._fatal_at is not None and fatal_before is None:
                self._drain_after_fatal()
                self._finish("crashed", self._fatal_at)
                break
            if not alive:
                self._note_exit()
                if self._status in (None, "ready", "timeout", "stalled"):
                    self._finish("crashed" if self._fatal_at is not None else "exited", time.monotonic())
                break
            if (until is not None and until()) or time.monotonic() >= end:
                self._pump()
                break
            self._sleep_until(end)
        return self.lines[first:]

    @property
    def fatal_seen(self) -> bool:
        """True once any fatal-kind line was read."""
        return self._fatal_at is not None
