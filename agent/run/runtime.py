"""The non-JSON parts of a run, rebuilt by each process: the host connection, the catalogs, the
transcript and the servers running right now.

Side effects: ``Runtime.host`` connects to the host (and may stop servers that earlier runs left there,
writing ``host.orphans*`` events); ``close``/``stop_sessions`` stop servers and write ``server.stopped``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.domain.case import Case
from agent.domain.knowledge_dir import knowledge_file
from agent.planning.candidate_memo import CandidateMemo
from agent.planning.catalog import CatalogEntry, load_catalog
from agent.record.recorded import RecordedRun, follow
from agent.record.transcript import Transcript
from tools.connect import connect_host
from tools.fingerprint import engine_version
from tools.flags import FlagCatalog, load_flag_catalog
from tools.host import FindsOrphans, Host, HostError, expand_argv
from tools.server import ServerSession
from tools.signatures import Signature, for_engine, load_signatures
from tools.ssh import SSHOptions

if TYPE_CHECKING:
    from agent.planning.view import Planner, PlannerFactory
    from agent.run.progress import ProgressBoard


@dataclass
class Runtime:
    """The non-JSON parts of a run, rebuilt by each process: host connection, catalogs, transcript.

    ``state_dir`` holds the flag-catalog cache. Hosts are connected lazily and closed by ``close()``.
    ``make_planner`` builds the planner a run's state names (the CLI gives
    ``agent.planning.planner.make_planner``); a runtime without one only reads a run's state.
    """

    transcript: Transcript
    state_dir: Path
    make_planner: PlannerFactory | None = None
    _host: Host | None = None
    _flags: FlagCatalog | None = None
    _signatures: list[Signature] | None = None
    _catalog: list[CatalogEntry] | None = None
    sessions: dict[str, ServerSession] = field(default_factory=dict)  # experiment id -> running session
    #: Stop servers that earlier runs left on the host (their orchestrator is gone) without asking.
    stop_orphans: bool = False
    #: Asked (with the orphans as JSON) whether to stop them when ``stop_orphans`` is off; None: don't.
    confirm_orphans: Callable[[list[dict[str, Any]]], bool] | None = None
    #: An approval mode given when a run is continued without an answer (``resume RUN --auto``): it
    #: applies from the next approval on and is saved into the run's state there.
    approval_override: str | None = None
    unstopped: list[str] = field(default_factory=list)
    #: Shows each launch while it loads (the CLI's live progress display); None: nothing is shown.
    progress: ProgressBoard | None = None
    #: The run as its transcript tells it, folded from each event as it is written
    #: (``agent.record.recorded.follow``): what conclude reads for the FINDINGS.md entry instead of the file.
    #: None when the transcript held a damaged line.
    recorded: RecordedRun | None = field(init=False, default=None)
    #: The candidate generators' answers for this run's past launches, handed to every planner built
    #: (``planner``), so a step does not ask them again for each launch before it
    #: (``agent.planning.candidate_memo``). Per process: a resumed run fills a new one.
    memo: CandidateMemo = field(default_factory=CandidateMemo)

    def __post_init__(self) -> None:
        self.recorded = follow(self.transcript)

    def host(self, case: Case) -> Host:
        """The case's host, connected on first use (local, ``ssh://``, ``slurm://``, ``slurm+ssh://``).
        Raises HostError.

        Right after an SSH or Slurm host connects, servers (jobs) that earlier runs left there are
        reported and, with
        ``stop_orphans`` or a yes from ``confirm_orphans``, stopped (this run's own are left for it).
        """
        if self._host is None:
            self._host = connect_host(
                case.host.target,
                env=case.host.env,
                local_root=str(self.state_dir / "runs"),
                ssh=ssh_options(case),
                slurm=case.host.slurm,
                on_event=lambda type_, data: self.transcript.emit(type_, data, node="host"),
            )
            self._handle_orphans(self._host)
        return self._host

    def _handle_orphans(self, host: Host) -> None:
        if not isinstance(host, FindsOrphans):
            return
        tr = self.transcript
        try:
            orphans = [o for o in host.find_orphans() if _orphan_run(o) != tr.run_id]
        except HostError as exc:
            tr.emit("host.orphans", {"error": f"could not look for orphaned servers: {exc}"}, node="host")
            return
        if not orphans:
            return
        listed = [o.model_dump(mode="json") for o in orphans]
        tr.emit("host.orphans", {"orphans": listed}, node="host")
        if not (self.stop_orphans or (self.confirm_orphans is not None and self.confirm_orphans(listed))):
            tr.emit(
                "host.orphans_left",
                {"count": len(orphans), "reason": "not confirmed (run with --auto to stop them)"},
                node="host",
            )
            return
        for o in orphans:
            ok = host.stop_orphan(o)
            tr.emit(
                "host.orphan_stopped",
                {"pgid": o.pgid, "pid_file": getattr(o, "pid_file", None), "port": getattr(o, "port", None),
                 "job_id": getattr(o, "job_id", None), "verified": ok},
                node="host",
            )

    def flags(self, case: Case, version: str | None) -> FlagCatalog:
        """The host's flag catalog from the launcher's own help (``launch_server --help``, ``vllm serve
        --help=all``; cached per host + version)."""
        if self._flags is None:
            host = self.host(case)
            self._flags = load_flag_catalog(
                host,
                expand_argv(case.launcher.argv, host),
                cache_dir=self.state_dir / "flag-cache",
                version=version,
                help_args=case.launcher.engine_impl().data.help_args,
            )
        return self._flags

    @property
    def loaded_flags(self) -> FlagCatalog | None:
        """The host's flag catalog if this process has read it already (``flags``), else None: nothing is
        asked of the host (the conclusion reads it where it can)."""
        return self._flags

    @property
    def signatures(self) -> list[Signature]:
        """Log signatures from ``signatures.toml`` of the knowledge folder in force (``agent.domain.knowledge_dir``)."""
        if self._signatures is None:
            self._signatures = load_signatures(knowledge_file("signatures.toml"))
        return self._signatures

    def signatures_for(self, case: Case) -> list[Signature]:
        """The log signatures that apply to the case's engine (`tools.signatures.for_engine`)."""
        return for_engine(self.signatures, case.launcher.engine_impl().name)

    @property
    def catalog(self) -> list[CatalogEntry]:
        """The hypothesis catalog from ``hypotheses.toml`` of the knowledge folder in force."""
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog

    def planner(self, state: Mapping[str, Any]) -> Planner:
        """The planner the run's state names (``state["planner"]``: rules when absent), over the host's
        flag catalog. Raises HostError/FlagError when the catalog cannot be read, RuntimeError when this
        runtime was given no planner factory (``make_planner``)."""
        if self.make_planner is None:
            raise RuntimeError("this runtime has no planner factory: it can only read a run's state")
        case = Case.model_validate(state["case"])
        version = engine_version(state.get("fingerprint"))
        return self.make_planner(state.get("planner"), self.catalog, self.flags(case, version), transcript=self.transcript,
                                 memo=self.memo)

    def close(self) -> None:
        """Stop anything still running and close the host connection.

        Never raises HostError: a server that cannot be stopped because the host is unreachable stays
        there (the run already ended in error saying so) and the next start on that host reports it as an
        orphan; the reasons are kept in ``unstopped``. The host is closed even when writing the
        ``server.stopped`` records fails (a full disk), and that OSError is raised after.
        """
        try:
            self.stop_sessions()
        finally:
            if self._host is not None:
                self._host.close()

    def stop_sessions(self) -> list[str]:
        """Stop (and record stopping) the servers an interrupt or an error left running; the ids of the
        experiments whose server could not be verified gone (reasons in ``unstopped``).

        Never raises HostError. Every server is stopped before anything is written, so a transcript that
        cannot be written (OSError, e.g. a full disk) cannot keep one running; that OSError is raised at
        the end.
        """
        stopped: list[tuple[str, ServerSession, bool]] = []
        for exp_id, s in self.sessions.items():
            try:
                verified = s.stop()
            except HostError as exc:
                self.unstopped.append(str(exc))
                verified = False
            stopped.append((exp_id, s, verified))
        self.sessions.clear()
        failed: OSError | None = None
        for exp_id, s, verified in stopped:
            if s.handle is None:
                continue
            try:
                self.transcript.emit(
                    "server.stopped",
                    {"experiment_id": exp_id, "pid": s.handle.pid, "log": s.log_path, "verified": verified,
                     "interrupted": True,
                     "wall_s": round(time.monotonic() - s.handle.started_monotonic, 3)},
                    node="execute",
                )
            except OSError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
        return [exp_id for exp_id, s, verified in stopped if s.handle is not None and not verified]


def _orphan_run(orphan: Any) -> str:
    """The run a leftover server belongs to: a Slurm job's tagged run id, or an SSH PID file's folder."""
    return str(getattr(orphan, "run_id", None) or Path(orphan.pid_file).parent.name)


def ssh_options(case: Case) -> SSHOptions | None:
    """The case's SSH settings (paths relative to the case file), or None for a local host."""
    spec = case.host
    if not spec.target.startswith(("ssh://", "slurm+ssh://")):  # a slurm+ssh:// login node uses them too
        return None
    return SSHOptions(
        key_path=str(case.resolve_path(spec.ssh_key)) if spec.ssh_key else None,
        known_hosts=str(case.resolve_path(spec.known_hosts)) if spec.known_hosts else None,
        insecure_accept_host_key=spec.insecure_accept_host_key,
        python=spec.remote_python or "python3",
        workdir_root=spec.remote_workdir,
        reconnect_timeout_s=spec.reconnect_timeout_s,
    )
