"""``hypoloop run``: debug a deployment from a case file, one experiment at a time."""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.cli.common import (
    HostOpt,
    HostOptions,
    InsecureOpt,
    JsonResult,
    KeyOpt,
    KnowledgeOpt,
    KnownOpt,
    PlannerName,
    PythonOpt,
    approval_mode,
    err_console,
    fail,
    read_case,
    state_dir,
    using_knowledge,
    with_host_options,
)
from agent.cli.drive import (
    RunSession,
    check_knowledge,
    command_for,
    confirm_orphans,
    drive_guarded,
    host_notices,
    report_result,
    sigterm_as_interrupt,
)
from agent.domain.case import Case
from agent.domain.knowledge_dir import chosen_dir
from agent.planning.planner import make_planner
from agent.record.redact import run_redactor
from agent.record.transcript import Transcript, TranscriptEvent
from agent.review.render import EventRenderer
from agent.run.approval.policy import ApprovalMode
from agent.run.progress import ProgressBoard
from tools.sanitize import SafeConsole

_ApproveOpt = Annotated[
    ApprovalMode | None,
    typer.Option(
        "--approve",
        help="each: ask before every launch; risky: ask only for changes knowledge/risky.toml "
        "marks risky; auto: never ask",
        show_default="the case file's approval, else each",
    ),
]
_PlannerOpt = Annotated[
    PlannerName,
    typer.Option("--planner", help="rules: the rule planner, no network; llm: a model behind an "
                 "OpenAI-compatible endpoint chooses the experiments"),
]
_BaseUrlOpt = Annotated[
    str | None,
    typer.Option("--base-url", help="llm: OpenAI-compatible URL ending in /v1 (default api.openai.com)"),
]
_ApiKeyEnvOpt = Annotated[
    str | None, typer.Option("--api-key-env", help="llm: variable holding the API key (OPENAI_API_KEY)")
]
_ContextTokensOpt = Annotated[
    int | None, typer.Option("--llm-context-tokens", help="llm: prompt budget per request (12000)")
]
_TokenBudgetOpt = Annotated[
    int | None, typer.Option("--llm-token-budget", help="llm: tokens the whole run may spend (300000)")
]
_RedactHostsOpt = Annotated[
    bool, typer.Option("--redact-hosts", help="llm: also mask host names and IP addresses it is sent")
]
_ParallelOpt = Annotated[
    int,
    typer.Option(
        "--parallel",
        help="run up to N one-change experiments at once, each for a different hypothesis (e.g. one "
        "Slurm job each); 1: one at a time",
    ),
]


def run(
    case: Annotated[
        str, typer.Argument(help="a case TOML file, or lab:WORLD for a case shipped with the lab")
    ],
    auto: Annotated[
        bool, typer.Option("--auto", help="approve every experiment without asking (--approve auto)")
    ] = False,
    approve: _ApproveOpt = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the result as one JSON line at the end")
    ] = False,
    transcript_dir: Annotated[Path, typer.Option(help="where the run's transcript is written")] = Path(
        "transcripts"
    ),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show belief updates too")] = False,
    host: HostOpt = None,
    ssh_key: KeyOpt = None,
    known_hosts: KnownOpt = None,
    insecure_accept_host_key: InsecureOpt = False,
    remote_python: PythonOpt = None,
    planner: _PlannerOpt = "rules",
    model: Annotated[str | None, typer.Option("--model", help="llm: the model name the endpoint serves")] = None,
    base_url: _BaseUrlOpt = None,
    api_key_env: _ApiKeyEnvOpt = None,
    llm_context_tokens: _ContextTokensOpt = None,
    llm_token_budget: _TokenBudgetOpt = None,
    llm_timeout: Annotated[
        float | None, typer.Option("--llm-timeout", help="llm: seconds per request (180)")
    ] = None,
    redact_hosts: _RedactHostsOpt = False,
    knowledge: KnowledgeOpt = None,
    parallel: _ParallelOpt = 1,
) -> None:
    """Debug a deployment: hypothesize, run one-change experiments, conclude with the root cause."""
    JsonResult.pending, JsonResult.managed = json_out, True
    options = RunOptions(
        case=case,
        mode=approval_mode(approve, auto),
        auto=auto,
        json_out=json_out,
        transcript_dir=transcript_dir,
        verbose=verbose,
        host=HostOptions(host, ssh_key, known_hosts, insecure_accept_host_key, remote_python),
        planner=PlannerOptions(planner, model, base_url, api_key_env, llm_context_tokens, llm_token_budget,
                               llm_timeout, redact_hosts),
        parallel=parallel,
    )
    with using_knowledge(knowledge):
        run_case(options)


@dataclass(frozen=True)
class PlannerOptions:
    """``run``'s planner options as given: which planner, and for ``llm`` the endpoint, model, budgets
    (tokens), timeout (seconds) and whether host names are masked; None: the planner's default."""

    name: str = "rules"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    context_tokens: int | None = None
    token_budget: int | None = None
    timeout_s: float | None = None
    redact_hosts: bool = False


@dataclass(frozen=True)
class RunOptions:
    """``run``'s options: the case (a file or lab:WORLD), the approval mode asked for (None: the case's)
    and whether ``--auto`` stops orphaned servers unasked, output (JSON line, verbosity, transcript
    folder), host settings, planner and how many experiments run at once."""

    case: str
    mode: str | None
    auto: bool
    json_out: bool
    transcript_dir: Path
    verbose: bool
    host: HostOptions
    planner: PlannerOptions
    parallel: int = 1


def _planner_spec(options: PlannerOptions) -> Any:
    """The planner spec the run records (bad LLM options: one line, exit 2)."""
    from agent.planning.llm_spec import planner_spec_from_options

    try:
        return planner_spec_from_options(
            options.name,
            model=options.model,
            base_url=options.base_url,
            api_key_env=options.api_key_env,
            context_tokens=options.context_tokens,
            token_budget=options.token_budget,
            timeout_s=options.timeout_s,
            redact_hosts=options.redact_hosts,
        )
    except ValueError as exc:
        fail(str(exc))


def _checked_case(options: RunOptions) -> Case:
    """The case with the command line's host settings and the knowledge folder checked (its warnings are
    the run's ``case.warning`` events, shown as the run goes); bad input ends the command in one line
    (exit 2)."""
    c = read_case(options.case, options.host.host)
    c = with_host_options(c, options.host)
    check_knowledge()  # unusable knowledge is refused before a run (and its checkpoint) exists
    return c


def run_case(options: RunOptions) -> None:
    """Start a new run of ``options.case`` and drive it to its end (or to an approval it waits for).

    Exit codes as the package says: 1 the run ended in error, 2 bad input, 3 waiting, 130 interrupted."""
    from agent.record.runs import RunError, RunLock, open_checkpointer

    if options.parallel < 1:
        fail(f"--parallel {options.parallel}: expected a whole number of at least 1")
    planner_spec = _planner_spec(options.planner)
    c = _checked_case(options)
    run_id = time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    tpath = (options.transcript_dir / f"{run_id}.jsonl").absolute()  # printed and recorded: usable from anywhere
    sdir = state_dir()
    store = open_checkpointer(sdir)
    try:
        saver = store.__enter__()
    except RunError as exc:  # a damaged store: nothing was started yet
        fail(str(exc))
    lock = RunLock(sdir, run_id).acquire()  # `runs` shows it running; a concurrent `resume` is refused
    try:
        tr = Transcript(tpath, run_id, redact=run_redactor(c))
    except OSError as exc:
        store.__exit__(None, None, None)
        lock.release()
        where = options.transcript_dir
        why = ("a file, expected a folder" if where.is_file() else
               f"a link to {where.readlink()}, which does not exist" if where.is_symlink() and not where.exists()
               else exc.strerror)
        fail(f"--transcript-dir {options.transcript_dir}: cannot write the transcript: {why}")
    JsonResult.run_id = run_id  # the run exists from here: an error before it names none (README: null)
    session = _session(options, tr, tpath, sdir)
    result: dict[str, Any] = {}
    bad_input: str | None = None
    try:
        result = _start(session, saver, c, planner_spec, options)
        bad_input = _bad_input(result, tpath)
        if bad_input is not None:  # the case is unusable as written: no run is kept of it
            saver.delete_thread(run_id)
    finally:
        for listener in tr.listeners:  # the run's header, unless the case was refused (the error alone)
            if isinstance(listener, HeldUntilIntake):
                listener.release(show=bad_input is None)
        session.rt.close()
        tr.close()
        store.__exit__(None, None, None)
        lock.release()
    if bad_input is not None:
        _forget(sdir, tpath, run_id)
        JsonResult.run_id = None
        fail(bad_input)
    report_result(result, run_id, tpath, json_out=options.json_out, console=session.console)


class HeldUntilIntake:
    """A transcript listener that passes events on to ``inner`` but holds the intake's own (the run's
    header, the host, the flag catalog) until the run gets past intake: a case refused there (a flag the
    host's --help lacks) prints its one-line error alone, not after a header of a run that never was."""

    def __init__(self, inner: Callable[[TranscriptEvent], None]) -> None:
        self.inner = inner
        self.held: list[TranscriptEvent] | None = []

    def __call__(self, ev: TranscriptEvent) -> None:
        """Hold an event of intake (or of the conclusion right after it: a refused case ends there); pass
        on the first one of any other step after every held one."""
        if self.held is not None and ev.node in ("intake", "conclude"):
            self.held.append(ev)
            return
        self.release(show=True)
        self.inner(ev)

    def release(self, *, show: bool) -> None:
        """Pass the held events on (``show``) or drop them; later events pass straight on."""
        held, self.held = self.held or [], None
        for ev in held if show else []:
            self.inner(ev)


def _bad_input(result: dict[str, Any], tpath: Path) -> str | None:
    """The one-line error of a run that ended at intake on bad input (the case's host, launcher or
    baseline unusable as written, e.g. a flag the host's --help does not have), before any launch and
    without acting on the host; None for any other ending. A run that stopped servers an earlier run
    left (``host.orphan_stopped`` in its transcript) changed the host, so it is kept as a record."""
    conclusion = result.get("conclusion") or {}
    if result.get("error_kind") != "input" or conclusion.get("status") != "error" or conclusion.get("launches"):
        return None
    try:
        if '"type": "host.orphan_stopped"' in tpath.read_text(encoding="utf-8", errors="replace"):
            return None
    except OSError:
        pass
    return str(conclusion.get("reason") or result.get("error") or "the case cannot be used as written")


def _forget(sdir: Path, tpath: Path, run_id: str) -> None:
    """Remove what a run that never started left: its transcript, lock file and run folder."""
    import shutil

    tpath.unlink(missing_ok=True)
    (sdir / "locks" / f"{run_id}.lock").unlink(missing_ok=True)
    shutil.rmtree(sdir / "runs" / run_id, ignore_errors=True)


def _session(options: RunOptions, tr: Transcript, tpath: Path, sdir: Path) -> RunSession:
    """The new run's session: its events shown on the console (stderr with ``--json``), host notices,
    and a runtime that stops orphaned servers with ``--auto`` or after a yes at the terminal."""
    from agent.planning.llm_spec import llm_notices
    from agent.run.runtime import Runtime

    console = SafeConsole(stderr=options.json_out)
    tr.listeners.append(
        HeldUntilIntake(EventRenderer(console, verbose=options.verbose, show_input_errors=False,
                                      launch_progress=True, command_for=command_for))
    )
    tr.listeners.append(host_notices(err_console))
    tr.listeners.append(llm_notices(console))
    rt = Runtime(tr, sdir, make_planner, progress=ProgressBoard(console, redact=tr.redact))
    # Servers that crashed runs left on the host: stopped with --auto, else after a yes at the terminal.
    rt.stop_orphans = options.auto
    rt.confirm_orphans = confirm_orphans if sys.stdin.isatty() else None
    return RunSession(rt, tr, tpath, tr.run_id, console, options.json_out)


def _start(session: RunSession, saver: Any, c: Case, planner_spec: Any, options: RunOptions) -> dict[str, Any]:
    """Build the graph over the checkpoint store ``saver`` and drive the run from its initial state."""
    from agent.run.graph import build_graph
    from agent.run.state import initial_state

    graph = build_graph(session.rt, saver)
    config: dict[str, Any] = {"configurable": {"thread_id": session.run_id}, "recursion_limit": 1000}
    sigterm_as_interrupt()
    initial = initial_state(
        session.run_id,
        c.model_dump(mode="json"),
        approval=options.mode or c.approval,
        transcript=str(session.tpath.resolve()),
        planner=planner_spec,
        host_option=options.host.host,
        knowledge_dir=chosen_dir(),
        **({"parallel": options.parallel} if options.parallel > 1 else {}),
    )
    return drive_guarded(graph, config, initial, session)
