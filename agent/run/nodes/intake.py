"""intake: load the case, connect to the host, fingerprint it, read the flag catalog and the knowledge.

Side effects:

- transcript: ``run.started``, ``tool.call`` (fingerprint), ``host.fingerprint``, ``tool.result``
  (flag catalog), ``knowledge.read`` per knowledge file, ``observation`` (an observed log), ``error``
  (a case that cannot be used as written);
- host: connects (``Runtime.host``), which lists servers that earlier runs left there and, when allowed,
  stops them (``host.orphans*`` events); runs the GPU query, the version command, check_env, one
  command asking the host's Python which distribution provides each import name, and ``launch_server
  --help``, and, when the case names a ``--port``, asks whether something already listens there
  (read-only; nothing is launched);
- files: reads the case's knowledge files and observed log; the flag catalog is cached under
  ``$HYPOLOOP_HOME/flag-cache``.

On a bad host, launcher, baseline or knowledge file the update carries ``status: "error"`` and the
graph's error edge goes to conclude.
"""

from __future__ import annotations

import os
import re

from langgraph.config import get_config

from agent.domain.case import Case, outside_warnings
from agent.domain.evidence import RawEvidence
from agent.domain.knowledge_dir import chosen_dir
from agent.domain.models import Baseline, Experiment, RelevantFinding
from agent.planning.catalog import role_spellings
from agent.planning.view import model_features
from agent.record.redact import run_redactor
from agent.record.transcript import Transcript
from agent.record.wire import to_payload
from agent.run.runtime import Runtime
from agent.run.state import RunState, case_of, seed_state
from tools.engines import model_flags
from tools.fingerprint import HostFingerprint, fingerprint, port_holder
from tools.flags import AmbiguousFlagError, FlagCatalog, FlagError, FlagSpec, FlagValue, UnknownFlagError
from tools.flags.values import checked_value
from tools.host import TIME_SCALE_ENV, Host, HostError, TimeScaleError, expand_argv
from tools.knowledge import KnowledgeError, read_findings, relevance
from tools.logtext import decode_log
from tools.model_config import checkpoint_facts, read_model_config
from tools.signatures import Signature
from tools.slurm import JobPending


def unused_host_settings(case: Case) -> list[str]:
    """One line per host setting the case's target does not use (given, so the user expects it to act): the
    SSH ones (``--ssh-key``, ``--known-hosts``, ``--insecure-accept-host-key``, ``--remote-python``) on a
    local host, and ``[host.slurm]`` on a target that is not ``slurm://``."""
    host, out = case.host, []
    if not host.target.startswith(("ssh://", "slurm://")):
        given = [name for name, value in (("ssh_key", host.ssh_key), ("known_hosts", host.known_hosts),
                                          ("insecure_accept_host_key", host.insecure_accept_host_key),
                                          ("remote_python", host.remote_python)) if value]
        out += [f"host.{name} (--{name.replace('_', '-')}) is set but the host is {host.target}: it is not used "
                "(it is for ssh:// and slurm:// hosts)" for name in given]
    if host.slurm is not None and not host.target.startswith("slurm://"):
        out.append(f"[host.slurm] is set but the host is {host.target}: it is not used (it is for slurm:// hosts)")
    return out


class _InputError(Exception):
    """The case cannot be used as written (one line naming the file and field)."""


def intake(state: RunState, rt: Runtime) -> RunState:
    """The intake node: see the module docstring."""
    tr = rt.transcript
    # LangGraph Studio starts a run from {"case_ref": "lab:WORLD"} alone; the CLI gives the full state.
    seed = seed_state(state, get_config().get("configurable", {}).get("thread_id"))
    state = {**state, **seed}
    case = case_of(state)
    tr.redact = run_redactor(case)  # its secrets are never written (the CLI set it already; Studio not)
    for warning in outside_warnings(case) + unused_host_settings(case):  # said, and recorded
        tr.emit("case.warning", {"message": warning}, node="intake")
    tr.emit(
        "run.started",
        {
            "case": case.name,
            "case_file": case.source_path,
            "host": case.host.target,
            "approval": state.get("approval"),
            "budget": case.budget.model_dump(),
            "case_data": case.model_dump(mode="json"),  # for `replay --redecide` (secrets redacted)
            # the folder the run reads (``--knowledge``); None: the repository's own
            "knowledge_dir": chosen_dir(),
        },
        node="intake",
    )
    try:
        fp, baseline = _probe_host(rt, case, host_option=state.get("host_option"))
        case.baseline = baseline
        findings = _read_knowledge(tr, case, fp)
    except _InputError as exc:
        tr.emit("error", {"message": str(exc), "kind": "input"}, node="intake")
        return {"status": "error", "error": str(exc), "error_kind": "input"}
    update: RunState = {
        **seed,
        "case": case.model_dump(mode="json"),
        "fingerprint": fp.model_dump(mode="json"),
        "findings": [f.model_dump(mode="json") for f in findings],
        "baseline": baseline.model_dump(mode="json"),
    }
    if case.observed_log:
        evidence, exp = ingest_log(case, baseline, rt.signatures_for(case))
        update["raw"] = evidence.model_dump(mode="json")
        update["experiments"] = [exp.model_dump(mode="json")]
        tr.emit("observation", {"source": case.observed_log, "experiment_id": exp.id}, node="intake")
    return update


def _probe_host(rt: Runtime, case: Case, *, host_option: str | None) -> tuple[HostFingerprint, Baseline]:
    """Connect, fingerprint the host, read its flag catalog and check the baseline against it.

    Raises _InputError naming the case field that failed (nothing was launched).
    """
    tr = rt.transcript
    where = case.source_path or case.name
    step = "host.target"
    try:
        host = rt.host(case)
        step = "launcher.gpu_query_argv / launcher.version_argv"
        tr.emit(
            "tool.call",
            {"tool": "fingerprint", "argv": expand_argv(case.launcher.gpu_query_argv, host)},
            node="intake",
        )
        fp = fingerprint(
            host,
            gpu_query_argv=expand_argv(case.launcher.gpu_query_argv, host),
            version_argv=expand_argv(case.launcher.version_argv, host),
            check_env_argv=case.launcher.check_env() or None,
            engine=case.launcher.engine_impl(),
            import_names_argv=case.launcher.import_names() or None,
        )
        _read_model_and_cpus(host, case, fp)
        _check_case_port(host, case, fp)
        tr.emit("host.fingerprint", to_payload("host.fingerprint", fp), node="intake")
        step = "launcher.argv (its --help gives the flag catalog)"
        flags = rt.flags(case, fp.engine_version)
        tr.emit(
            "tool.result",
            {
                "tool": "flag_catalog",
                "flags": len(flags.flags),
                "version": flags.version,
                "source": flags.source,
                "catalog": flags.model_dump(mode="json"),  # a re-decided run checks names with it
            },
            node="intake",
        )
        # the host's spelling of each flag role (knowledge/flag_roles.toml), from its --help
        fp.flag_roles = role_spellings(flags)
        step = "baseline.flags"
        baseline = checked_baseline(case, flags)
        for why in not_in_catalog(case, flags):  # launched as written: the host's own refusal is evidence
            tr.emit("case.warning", {"message": f"{where}: baseline.flags: {why} (launched as written)"}, node="intake")
        step = "intent.keep"
        for kept in case.intent.keep:  # a setting the user needs kept is one this host has
            if kept.startswith("-") and flags.lookup(kept) is None:
                raise FlagError(f"{kept} is not an option of the host's --help", flag=kept)
    except JobPending as exc:  # the cluster's queue is full: nothing is wrong with the case
        raise _InputError(f"the Slurm cluster could not start hypoloop's query of the host in time: {exc}") from None
    except TimeScaleError as exc:  # hypoloop's own environment or the case's host.env, not the host
        from_case = TIME_SCALE_ENV in case.host.env and TIME_SCALE_ENV not in os.environ
        raise _InputError(f"{where}: host.env: {exc}" if from_case else str(exc)) from None
    except (HostError, FlagError) as exc:
        if step == "host.target" and host_option:
            raise _InputError(f"--host: {exc}") from None  # the user's option replaced host.target
        raise _InputError(f"{where}: {step}: {exc}") from None
    return fp, baseline


def not_in_catalog(case: Case, flags: FlagCatalog) -> list[str]:
    """Why each baseline flag kept as written is no option of the host's ``--help`` (one line each, with
    the catalog's nearest spelling when it has one, or the options an ambiguous prefix could match)."""
    return [why for n in case.baseline.flags if _LONG_FLAG.fullmatch(n) and (why := _unknown(flags, n))]


def _unknown(flags: FlagCatalog, name: str) -> str:
    """The catalog's one-line refusal of ``name`` as an unknown flag or an ambiguous prefix (the host's
    argparse refuses both at once), or "" (known, or refused otherwise)."""
    try:
        flags.resolve(name)
    except (UnknownFlagError, AmbiguousFlagError) as exc:
        return str(exc)
    except FlagError:
        return ""
    return ""


def checked_baseline(case: Case, flags: FlagCatalog) -> Baseline:
    """The case's baseline with each flag canonical and its value normalised by the host's catalog.

    A ``--long-name`` the host's ``--help`` does not list, or lists only as the prefix of several options,
    is kept as written (its value checked like any text value): a launch script carried over from another
    release is a case to debug, and the host's own refusal of it is the evidence. Raises FlagError (one
    line) for an illegal value of a known flag, a list where the flag takes one value, or one flag given in
    two spellings (``--tp-size`` and ``--tensor-parallel-size``: aliases by its --help).
    """
    baseline = Baseline(env=dict(case.baseline.env))
    spelled: dict[str, str] = {}
    for name, value in case.baseline.flags.items():
        # a TOML list is checked as a list: the catalog takes one only where the flag takes several values
        given = str(value).split() if name in case.list_flags and isinstance(value, str) else value
        if _unknown(flags, name) and _LONG_FLAG.fullmatch(name):
            if value is not False:
                baseline.flags[name] = _as_written(name, given)
            continue
        canon, norm = flags.validate(name, given)
        if canon in spelled:
            raise FlagError(
                f"{spelled[canon]} and {name} are two spellings of one flag ({canon}, by the host's "
                "--help); give it once", flag=canon,
            )
        spelled[canon] = name
        baseline.flags[canon] = norm
    return baseline


#: A long option's name as argparse spells one (``--enable-foo``); anything else unknown stays refused.
_LONG_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_.-]*")


def _as_written(name: str, value: FlagValue) -> str | bool:
    """The value of a flag the host's --help does not list: ``true`` is the bare flag, anything else the
    text checked as any value (no shell characters, whitespace or empty text; a list as its words)."""
    if value is True:
        return True
    spec = FlagSpec(name=name, takes_value=True, nargs="+" if isinstance(value, list | tuple) else None)
    words: list[FlagValue] = list(value) if isinstance(value, list | tuple) else [value]
    if not words:
        raise FlagError(f"{name}: empty list", flag=name)
    return " ".join(checked_value(spec, w) for w in words)


def read_model(host: Host, case: Case, fp: HostFingerprint) -> None:
    """The served model's config.json (where ``--model-path`` points, read through the host) into the
    fingerprint's ``checkpoint``; what cannot be read stays unknown (never an error)."""
    path = next((str(v) for k, v in case.baseline.flags.items() if k in model_flags() and v),
                case.model.path)
    config, where = read_model_config(host, path, {**case.host.env, **case.baseline.env})
    fp.checkpoint_source = where
    if config is not None:
        fp.checkpoint = checkpoint_facts(config)


def _read_model_and_cpus(host: Host, case: Case, fp: HostFingerprint) -> None:
    """The served model's config.json (where ``--model-path`` points, read through the host) and the
    host's CPU count (``launcher.cpu_query_argv``), into the fingerprint; what cannot be read stays unknown (never an error)."""
    read_model(host, case, fp)
    try:
        res = host.run(expand_argv(case.launcher.cpu_query_argv, host), timeout=10.0)
        if res.returncode == 0 and res.stdout.strip().isdigit():
            fp.cpu_count = int(res.stdout.strip())
    except HostError:
        pass


def _check_case_port(host: Host, case: Case, fp: HostFingerprint) -> None:
    """When the case's baseline names a ``--port``, whether something on the host already listens there
    (``fp.taken_port``, ``fp.taken_by``). hypoloop launches on a port of its own (the session owns
    ``--host``/``--port``), so a conflict there never shows in its launches; it is found here instead."""
    eng = case.launcher.engine_impl()
    raw = case.baseline.flags.get(eng.data.port_flag)
    try:
        port = int(str(raw))
    except ValueError:
        return
    if not 0 < port < 65536:
        return
    address = case.baseline.flags.get(eng.data.host_flag)
    held = port_holder(host, port, str(address) if address not in (None, True, False) else None)
    if held is not None and held[0]:
        fp.taken_port, fp.taken_by = port, held[1]


def _read_knowledge(tr: Transcript, case: Case, fp: HostFingerprint) -> list[RelevantFinding]:
    """The case's FINDINGS.md files, each finding with its relevance to this case and host.

    Raises _InputError for a file that cannot be read or parsed.
    """
    findings: list[RelevantFinding] = []
    features = model_features(case)
    for p in case.knowledge:
        path = case.resolve_path(p)
        try:
            found = read_findings(path)
        except KnowledgeError as exc:
            raise _InputError(f"{case.source_path}: knowledge: {exc}") from None
        for f in found:
            r = relevance(f, model=case.model.path, features=features, gpu_name=fp.gpu_name)
            findings.append(RelevantFinding(finding=f, relevance=r))
        tr.emit(
            "knowledge.read",
            {
                "path": str(path),
                "findings": [
                    {
                        "title": f.finding.title,
                        "outcome": f.finding.outcome,
                        "relevance": round(f.relevance, 2),
                        "relevance_exact": f.relevance,
                        "finding": f.finding.model_dump(mode="json"),
                    }
                    for f in findings
                    if f.finding.source == str(path)
                ],
            },
            node="intake",
        )
    return findings


def ingest_log(case: Case, baseline: Baseline, signatures: list[Signature]) -> tuple[RawEvidence, Experiment]:
    """Treat a crash log the user already has as the baseline's first observation (no launch)."""
    path = case.resolve_path(case.observed_log or "")
    text = decode_log(path.read_bytes()).text  # stray NULs as U+FFFD (the case check refused a binary file)
    exp = Experiment(
        id=Experiment.make_id(baseline, None, "baseline"),
        purpose="baseline",
        baseline=baseline,
        rationale=f"observed log {path}",
        status="running",
    )
    return RawEvidence.from_log(exp.id, text, signatures, str(path)), exp
