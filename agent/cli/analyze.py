"""``hypoloop analyze``: read a server log without launching anything and say what it shows."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.common import (
    KnowledgeOpt,
    fail,
    read_log_text,
    using_knowledge,
)
from agent.cli.drive import check_knowledge
from agent.domain.case import Case, CaseError, LauncherSpec, ModelSpec, load_case
from agent.domain.knowledge_dir import knowledge_file
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.catalog import CatalogError
from agent.planning.planner import PlannerView, RulePlanner, model_features
from agent.planning.values import effective_before, suggestions_in_log
from agent.planning.view import Proposal
from agent.record.redact import redact_data, run_redactor
from agent.review.render import print_hanging, shown_line
from agent.review.wording import count
from tools.connect import connect_host
from tools.engines import detect_log
from tools.fingerprint import HostFingerprint, fingerprint
from tools.flags import FlagCatalog, catalog_from_server_args, non_default_flags
from tools.host import HostError, expand_argv
from tools.knowledge import infer_features
from tools.sanitize import SafeConsole
from tools.signatures import for_engine, load_signatures

if TYPE_CHECKING:  # the heavy modules (LangGraph, the LLM client) load only in the commands that need them
    from agent.domain.models import Hypothesis, Outcome, RelevantFinding
    from agent.planning.catalog import CatalogEntry
    from tools.signatures import Signature


def analyze(
    logfile: Annotated[Path, typer.Argument(help="a server log (e.g. a crash log you already have)")],
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    case: Annotated[
        str | None, typer.Option(help="take model, baseline and knowledge from this case file")
    ] = None,
    compute_capability: Annotated[
        str | None, typer.Option(help="the host's GPU compute capability, e.g. 12.0")
    ] = None,
    gpu_name: Annotated[str | None, typer.Option(help="the host's GPU name")] = None,
    cpu_only: Annotated[bool, typer.Option("--cpu-only", help="the host has no GPU or other accelerator")] = False,
    cpus: Annotated[int | None, typer.Option(help="the host's CPU count (checks values such as CPU lists)")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="also list progress and fact signatures")] = False,
    knowledge: KnowledgeOpt = None,
) -> None:
    """Read a log without launching anything: signatures, stage, facts, ranked hypotheses, first experiment.

    With --case, the case's host is asked for its GPUs (a query, no launch) unless --compute-capability
    or --gpu-name is given, and the case's knowledge files count as evidence. Without a host, the log's
    own lines that show the platform (``log_says`` in knowledge/subsystems.toml, e.g. SGLang's "No
    accelerator [name] is available") or --cpu-only say the host is CPU-only.
    """
    if cpu_only and (gpu_name or compute_capability):
        fail("--cpu-only: a CPU-only host has no --gpu-name or --compute-capability; give one or the other")
    if cpus is not None and cpus < 1:
        fail(f"--cpus {cpus}: expected the host's CPU count, a whole number of at least 1")
    if compute_capability is not None and not re.fullmatch(r"\d{1,2}\.\d", compute_capability.strip()):
        fail(f"--compute-capability {compute_capability!r}: expected MAJOR.MINOR as nvidia-smi shows it, e.g. 12.0 or 9.0")
    if gpu_name is not None and not gpu_name.strip():
        fail("--gpu-name: expected the GPU's name as nvidia-smi shows it, not an empty string")
    options = AnalyzeOptions(logfile, json_out, case, compute_capability and compute_capability.strip(), gpu_name,
                             show_all, cpu_only=cpu_only, cpus=cpus)
    with using_knowledge(knowledge):
        check_knowledge()
        analyze_log(options)


@dataclass(frozen=True)
class AnalyzeOptions:
    """``analyze``'s options, checked: the log, JSON or text output, the case file (None: none), what the
    command line says of the host (GPU name, compute capability as MAJOR.MINOR, CPU-only, CPU count) and
    whether progress and fact signatures are listed too."""

    logfile: Path
    json_out: bool
    case: str | None
    compute_capability: str | None
    gpu_name: str | None
    show_all: bool
    cpu_only: bool = False
    cpus: int | None = None


def analyze_log(options: AnalyzeOptions) -> None:
    """Print what the log shows (a JSON document with ``json_out``); bad input is one line, exit 2."""
    from agent.domain.evidence import RawEvidence
    from agent.run.nodes.analyze import classify_outcome

    logfile, json_out, case = options.logfile, options.json_out, options.case
    text = read_log_text(logfile)
    if not text.strip():
        fail(f"{logfile}: the log is empty")
    c, sigs, catalog = _analyze_setup(logfile, case, text)
    # What is shown and printed as JSON comes from the log: its secrets (an api_key in the printed server
    # arguments, a token, the case's secret variables) are redacted first, as in a run.
    text = redact_data(text, run_redactor(c))
    if not c.model.features:
        c.model.features = sorted(infer_features(text[:20000]))
    exp = Experiment(
        id=Experiment.make_id(c.baseline, None, "baseline"),
        purpose="baseline",
        baseline=c.baseline,
        status="done",
    )
    evidence = RawEvidence.from_log(exp.id, text, sigs, str(logfile))
    outcome = classify_outcome(evidence)
    notes: list[str] = []
    fp = _analyze_host(options, c, text, notes)
    findings = _analyze_findings(c, fp) if case else []
    # Without the host's --help, the log's own server-args line says which release's flag spellings apply.
    host_flags = _case_host_flags(c, notes) if case else None
    if host_flags is not None:  # the case's baseline is checked against the host's --help, as a run does
        c.baseline = _case_baseline(c, host_flags)
    flags = host_flags or catalog_from_server_args(text)
    _read_case_source(c if case else None, outcome, flags, notes)  # as a run's analyze step does
    view = PlannerView(case=c, fingerprint=fp, findings=findings, experiments=[exp], outcomes=[outcome])
    planner = RulePlanner(catalog, flags)
    hist = planner.history(view)
    clean = _served_cleanly(outcome)  # no failure: no hypothesis has a signature behind it
    proposal = _NOTHING_FAILED if clean else planner.propose(view, hist)
    ranked = [] if clean else sorted(hist.hypotheses, key=lambda h: -h.posterior)
    verdict = _log_verdict(outcome)
    suggestions = suggestions_in_log(text.split("\n"))
    if json_out:
        doc = _analyze_json(logfile, outcome, verdict, ranked, proposal, suggestions)
        pkg = None if doc["first_experiment"] else _package_only(ranked, catalog)
        doc["package_change"] = {"hypothesis": pkg[0].id, "package": pkg[0].package, "what": pkg[1]} if pkg else None
        print(json.dumps(doc))
        return
    console = SafeConsole()
    print_hanging(console, f"[bold]{escape(str(logfile))}[/]: stage reached [bold]{outcome.stage}[/] — {verdict}")
    for note in notes:  # under the heading, its continuation lines under the note (a narrow terminal)
        print_hanging(console, f"  [dim]{escape(note)}[/]")
    _print_log_findings(console, outcome, ranked, options.show_all)
    _print_log_advice(console, outcome, proposal, suggestions, text, ranked, catalog)
    from agent.planning.generators.remedies import left_out

    unfit = left_out(planner.generator_input(view, outcome, c.baseline))
    if unfit:  # an error's example for another machine is never proposed as read: say what became of it
        console.print("\n[bold]values checked against this host[/]")
        for why in unfit:
            print_hanging(console, f"  {escape(why)}")


def _analyze_host(options: AnalyzeOptions, c: Case, text: str, notes: list[str]) -> HostFingerprint:
    """What is known of the host: the command line's GPU or CPU-only options, else the case's host's
    GPUs (asked, no launch), else the platform a line of the log shows; a note says where from."""
    gpu_name, compute_capability, cpu_only = options.gpu_name, options.compute_capability, options.cpu_only
    fp = HostFingerprint(gpu_name=gpu_name, compute_capability=compute_capability,
                         gpu_vendor="none" if cpu_only else None, gpu_count=0 if cpu_only else None,
                         cpu_count=options.cpus)
    if options.case and not (gpu_name or compute_capability or cpu_only):
        fp = _analyze_host_fingerprint(c, fp, notes)
    if not (fp.gpu_vendor or fp.gpu_name or fp.compute_capability):
        fp = _analyze_platform_from_log(text, fp, notes)
    return fp


def _analyze_setup(logfile: Path, case: str | None, text: str) -> tuple[Case, list[Signature], list[CatalogEntry]]:
    """(the case, log signatures, hypothesis catalog) for ``analyze``; bad input ends the command in one line."""
    try:
        c = load_case(case) if case else Case(
            name=logfile.name, model=_model_from_log(text), launcher=LauncherSpec.model_validate({"engine": detect_log(text)}),
            # Without the case, the settings the log says were set away from their defaults are its baseline.
            baseline=Baseline(flags=dict(non_default_flags(text) or _served_chosen(text))),
        )
        # A log of unknown origin whose engine cannot be told is read with every signature.
        engine = c.launcher.engine if case or detect_log(text) else None
        sigs = for_engine(load_signatures(knowledge_file("signatures.toml")), engine)
        from agent.planning.catalog import load_catalog

        catalog = load_catalog()
    except (CaseError, CatalogError, ValueError) as exc:
        fail(str(exc))
    return c, sigs, catalog


def _served_chosen(text: str) -> dict[str, str]:
    """The served settings (knowledge/served.toml) a settings line that prints every setting (SGLang's
    ``server_args``) shows away from the value printed when the flag is not given: the user's own, the
    baseline a run of this log's case would start from (``--quantization fp8``, ``--tp-size 2``)."""
    from agent.domain.failure import parse_server_args
    from agent.planning.served import served_settings
    from tools.engines import settings_marker_in

    printed = next((parse_server_args(line) for line in text.splitlines() if settings_marker_in(line)), {})
    return served_settings().chosen_in_log(printed) if printed else {}


def _analyze_host_fingerprint(c: Case, fp: HostFingerprint, notes: list[str]) -> HostFingerprint:
    """The case's host's GPUs (asked over its connection), else ``fp``; a note says which, for the user."""
    from agent.run.runtime import ssh_options
    try:
        qhost = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
        try:
            fp = fingerprint(
                qhost, gpu_query_argv=expand_argv(c.launcher.gpu_query_argv, qhost), version_argv=None
            )
            from agent.run.nodes.intake import read_model

            read_model(qhost, c, fp)  # the model's config.json, as a run's intake reads it
        finally:
            qhost.close()
        if fp.gpu_count or fp.gpu_name:
            notes.append(f"host {c.host.target}: {fp.gpu_count} x {fp.gpu_name} (compute capability "
                         f"{fp.compute_capability})")
        else:  # no GPU answered the query: say so, not "0 x None"
            cpus = f", {fp.cpu_count} CPUs" if fp.cpu_count else ""
            notes.append(f"host {c.host.target}: CPU-only{cpus}")
    except HostError as exc:
        notes.append(f"could not ask the case's host for its GPUs ({exc}); give --compute-capability")
    return fp


def _case_host_flags(c: Case, notes: list[str]) -> FlagCatalog | None:
    """The case host's flag catalog from its launcher's own help, as a run reads it (``--help``, no
    launch; cached in $HYPOLOOP_HOME), or None with a note when the host cannot be asked."""
    from agent.cli.common import state_dir
    from agent.run.runtime import ssh_options
    from tools.flags import FlagError, load_flag_catalog

    try:
        host = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
        try:
            return load_flag_catalog(host, expand_argv(c.launcher.argv, host), cache_dir=state_dir() / "flag-cache",
                                     version=None, help_args=c.launcher.engine_impl().data.help_args)
        finally:
            host.close()
    except (HostError, FlagError) as exc:
        notes.append(f"could not read the case host's flags ({exc}); the log's own settings line stands in")
        return None


def _case_baseline(c: Case, flags: FlagCatalog) -> Baseline:
    """The case's baseline checked against the host's flag catalog as a run's intake checks it (each flag
    canonical, its value normalised); a flag the host refuses ends the command in one line naming the case
    file and field, exit 2 (as ``run`` does)."""
    from agent.run.nodes.intake import checked_baseline
    from tools.flags import FlagError

    try:
        return checked_baseline(c, flags)
    except FlagError as exc:
        fail(f"{c.source_path or c.name}: baseline.flags: {exc}")


def _read_case_source(c: Case | None, outcome: Outcome, flags: FlagCatalog | None, notes: list[str]) -> None:
    """Set ``outcome.source_reading`` (and the missing-import facts) from the installed source at the
    log's traceback frames on the case's host, read-only, as a run's analyze step does
    (``tools.source_guards``); a note when the host cannot be asked, or (no case, ``c`` None) that the
    source was not read."""
    from agent.run.runtime import ssh_options
    from tools.source_guards import read_guards
    from tools.tracebacks import missing_import

    if outcome.stage in ("ok", "ready", "infra_error") or not outcome.log_excerpt:
        return
    text = "\n".join(line.text for line in outcome.log_excerpt)
    if "Traceback (most recent call last)" not in text and missing_import(text, []) is None:
        return
    if c is None:
        notes.append("the installed source at the traceback was not read (no host): --case CASE reads it on "
                     "the case's host, as a run does, and may find a setting that guards the failing line")
        return
    try:
        host = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
        try:
            reading = read_guards(host.read_text, text, flags)
        finally:
            host.close()
    except HostError as exc:
        notes.append(f"could not read the installed source on the case's host ({exc})")
        return
    outcome.source_reading = reading
    if reading.missing is not None:
        outcome.facts.setdefault("missing_module", reading.missing.module)
        outcome.facts.setdefault("missing_package", reading.missing.package)
    notes.append(f"read the installed source at the traceback's frames on {c.host.target} "
                 f"({count(reading.files_read, 'file')})")


def _analyze_platform_from_log(text: str, fp: HostFingerprint, notes: list[str]) -> HostFingerprint:
    """``fp`` with the platform a line of the log shows (knowledge/subsystems.toml ``log_says``), when
    nothing else told it; a note quotes the line, for the user."""
    from agent.planning.in_play import SubsystemsError, gpu_vendor_of, load_subsystems, platform_in_log

    try:
        know = load_subsystems()
        found = platform_in_log(text, know)
    except SubsystemsError as exc:
        fail(str(exc))
    if found is None:
        return fp
    platform, line = found
    vendor = gpu_vendor_of(platform, know)
    if vendor is None:
        return fp
    notes.append(f"the log shows a {platform} host (no host was asked): {line}")
    return fp.model_copy(update={"gpu_vendor": vendor, "gpu_count": 0 if vendor == "none" else fp.gpu_count})


def _analyze_findings(c: Case, fp: HostFingerprint) -> list[RelevantFinding]:
    """The case's knowledge files' findings, each with its relevance to this model and GPU."""
    from agent.planning.planner import RelevantFinding
    from tools.knowledge import KnowledgeError, read_findings, relevance

    findings: list[RelevantFinding] = []
    for p in c.knowledge:
        try:
            read = read_findings(c.resolve_path(p))
        except KnowledgeError as exc:  # the one line a run gives for the same case (nodes/intake.py)
            fail(f"{c.source_path}: knowledge: {exc}")
        for f in read:
            findings.append(
                RelevantFinding(
                    finding=f,
                    relevance=relevance(
                        f, model=c.model.path, features=model_features(c), gpu_name=fp.gpu_name
                    ),
                )
            )
    return findings


def _analyze_json(
    logfile: Path, outcome: Outcome, verdict: str, ranked: list[Hypothesis], proposal: Proposal,
    suggestions: list[tuple[int, str]],
) -> dict[str, Any]:
    """The ``analyze --json`` document: stage, verdict, signatures, facts, hypotheses and the advice."""
    return {
        "log": str(logfile),
        "stage": outcome.stage,
        "verdict": verdict,
        "signatures": [
            {"id": m.signature_id, "kind": m.kind, **_bounded_lines(m.line_numbers),
             "text": m.first_line}
            for m in outcome.matches
        ],
        "facts": outcome.facts,
        "hypotheses": [
            {
                "id": h.id,
                "component": h.component,
                "statement": h.statement,
                "posterior": h.posterior,
            }
            for h in ranked
        ],
        "first_experiment": {
            **proposal.experiment.change.model_dump(),
            "effective_before": effective_before(
                proposal.experiment.change.kind,
                proposal.experiment.change.name,
                proposal.experiment.change.before,
                _log_values(outcome),
            ),
        }
        if proposal.experiment and proposal.experiment.change
        else None,
        "alternatives": [
            {"change": a["change"], "p_fix": a["p_fix"]}
            for a in proposal.considered
            if a.get("change")
            and not (proposal.experiment and proposal.experiment.change
                     and a["change"] == proposal.experiment.change.describe())
        ],
        "sglang_suggestions": [{"line": n, "text": t} for n, t in suggestions],
        "reason": proposal.conclude_reason,
    }


def _print_log_findings(console: Console, outcome: Outcome, ranked: list[Hypothesis], show_all: bool) -> None:
    """Print the log's matched signatures, effective config and ranked hypotheses."""
    shown = [m for m in outcome.matches if m.kind in ("fatal", "error", "warning", "ready") or show_all]
    console.print("\n[bold]signatures[/] (first line number, kind, id: first matching line)")
    for m in shown:
        style = {"fatal": "red", "error": "red", "warning": "yellow", "ready": "green"}.get(m.kind, "dim")
        more = f" (+{len(m.line_numbers) - 1} more)" if len(m.line_numbers) > 1 else ""
        print_hanging(
            console,
            f"  L{m.line_numbers[0] if m.line_numbers else '?':<5} [{style}]{m.kind:<8}[/] {m.signature_id}{more}: "
            f"[dim]{escape(shown_line(m.first_line).strip())}[/]",
        )
    hidden = len(outcome.matches) - len(shown)
    if hidden:
        console.print(f"  [dim]({count(hidden, 'progress or fact signature')} not shown; --all shows them)[/]")
    if outcome.facts:
        console.print("\n[bold]effective config[/]")
        for k, v in outcome.facts.items():
            print_hanging(console, f"  {k} = {escape(str(v))}")
    if not ranked:  # never an empty heading: say what the catalog made of the log
        console.print("\n[bold]hypotheses[/]: none — no entry of the hypothesis catalog explains these log lines")
        return
    console.print("\n[bold]hypotheses[/] (probability, id, component)")
    for hy in ranked:
        print_hanging(console, f"  {hy.posterior:.2f}  {escape(hy.id)}  [dim]({escape(hy.component)})[/]")
        print_hanging(console, f"        {escape(hy.statement)}", hang=0)


def _package_only(ranked: list[Hypothesis], catalog: list[CatalogEntry]) -> tuple[Hypothesis, str] | None:
    """The most probable open hypothesis whose cause no launch setting reaches (a catalog entry with a
    ``package``, knowledge/hypotheses.toml) and what to change instead, or None."""
    fixes = {e.id: e.package_fix for e in catalog if e.package}
    for h in ranked:
        if h.status == "open" and h.package and not h.interventions and h.id in fixes:
            return h, fixes[h.id] or f"a release of {h.package} that does not have this cause"
    return None


def _print_log_advice(
    console: Console, outcome: Outcome, proposal: Proposal, suggestions: list[tuple[int, str]], log_text: str = "",
    ranked: list[Hypothesis] | None = None, catalog: list[CatalogEntry] | None = None,
) -> None:
    """Print the first experiment (or why none: when a failed import stops the server before any flag is
    read, that only a package change can help, naming the package), the planner's alternatives and
    SGLang's own suggestions."""
    from tools.tracebacks import missing_import

    console.print()
    first = proposal.experiment.change if proposal.experiment else None
    if proposal.experiment and first:
        print_hanging(
            console,
            f"first experiment: [bold magenta]{escape(_advice_text(first, _log_values(outcome)))}[/] — "
            f"{escape(proposal.experiment.rationale)}",
        )
    else:
        missing = missing_import(log_text) if log_text else None
        if missing is not None and _imports_before_flags(outcome):  # no flag or variable reaches it
            print_hanging(
                console,
                f"[bold]only a package change can help[/]: the server fails importing {escape(missing.module)} "
                f"(log line {missing.log_line}: {escape(missing.text)}) before it reads any launch flag; "
                f"install or fix {escape(missing.what())} in the server's Python, then "
                "launch again",
            )
        elif missing is not None:  # a lazy import in code that runs after the flags were read
            print_hanging(
                console,
                f"[bold]a package change, or a setting that avoids this import[/]: the server fails importing "
                f"{escape(missing.module)} (log line {missing.log_line}: {escape(missing.text)}) in code that "
                "runs after it read its launch flags, so a flag or variable may lead there; install or fix "
                f"{escape(missing.what())}, or look for what guards the import in the "
                "installed source at the traceback's frames (analyze --case CASE reads it on the case's host, "
                "as a run does)",
            )
        elif (pkg := _package_only(ranked or [], catalog or [])) is not None:
            hyp, fix = pkg
            print_hanging(
                console,
                f"[bold]only a package or model change can help[/]: {escape(hyp.statement)}; no launch flag or "
                f"variable reaches this cause. Change the package [bold]{escape(str(hyp.package))}[/]: {escape(fix)}",
            )
        else:
            print_hanging(console, f"no experiment to propose: {escape(str(proposal.conclude_reason))}")
    others = [a for a in proposal.considered if a.get("change") and (first is None or a["change"] != first.describe())]
    if others:
        console.print("\n[bold]alternatives[/] (the planner's other candidates, P(fix))")
        for alt in others:
            shown = _clean_after(str(alt["change"]))
            print_hanging(console, f"  {alt['p_fix']:.2f}  {escape(_with_log_before(shown, _log_values(outcome)))}")
    if suggestions:
        lines = f"{suggestions[0][0]}-{suggestions[-1][0]}" if len(suggestions) > 1 else str(suggestions[0][0])
        console.print(f"\n[bold]SGLang's own suggestions[/] (log line{'s' if len(suggestions) > 1 else ''} {lines})")
        for n, text in suggestions:
            print_hanging(console, f"  L{n:<5} {escape(text)}")


def _log_values(outcome: Outcome) -> dict[str, str]:
    """What the log shows the server ran with: its printed settings (SGLang's server_args, vLLM's
    non-default args; a printed ``None`` says nothing), overridden by the facts the signatures read."""
    return {**{k: v for k, v in outcome.server_args.items() if v not in ("None", "")}, **outcome.facts}


def _clean_after(described: str) -> str:
    """``name: before → after`` (``Change.describe``) with a value copied from prose losing the sentence's
    full stop; ``(on)`` and ``(unset)`` are hypoloop's words, whose closing bracket stays."""
    from agent.planning.values import clean_value

    head, arrow, after = described.rpartition(" → ")
    if not arrow or after in ("(on)", "(unset)"):
        return described
    return f"{head}{arrow}{clean_value(after)}"


def _with_log_before(described: str, facts: dict[str, str]) -> str:
    """``name: (unset) → v`` (``Change.describe``) with the log's effective value as the "before"."""
    m = re.match(r"^(?P<name>--\S+): \(unset\) → (?P<after>.*)$", described)
    if m is None:
        return described
    before = effective_before("flag", m["name"], None, facts)
    return described if before is None else f"{m['name']}: {before} (in the log) → {m['after']}"


def _advice_text(change: Change, facts: dict[str, str]) -> str:
    """A proposed change as advice: its "before" is the value the log shows the server ran with when
    the baseline leaves the flag unset (``--cuda-graph-max-bs: 160 (in the log) → 112``); a value
    copied out of a sentence is shown without its punctuation."""
    from agent.planning.values import clean_value

    change = change.model_copy(update={"after": clean_value(change.after)})  # no sentence's full stop
    if change.kind != "flag" or change.before is not None:
        return change.describe()
    return _with_log_before(change.describe(), facts)


#: ``analyze --json``: at most this many line numbers and line ranges per signature (a log that repeats
#: one warning a million times must not give a million-number JSON line).
LINES_CAP = 20


def _bounded_lines(lines: list[int]) -> dict[str, Any]:
    """``lines`` (the first LINES_CAP line numbers), ``line_count`` (all of them), ``line_ranges``
    (consecutive runs as [first, last], the first LINES_CAP of them) and ``truncated``."""
    ranges: list[list[int]] = []
    for n in sorted(set(lines)):
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return {
        "lines": lines[:LINES_CAP],
        "line_count": len(lines),
        "line_ranges": ranges[:LINES_CAP],
        "truncated": len(lines) > LINES_CAP or len(ranges) > LINES_CAP,
    }


#: What analyze says of a log that reached ready and shows no failure: no signature is behind any change
#: (a failure only requests show, a timeout or a wrong answer, is not in the server's log).
_NOTHING_FAILED = Proposal(conclude_reason=(
    "the log shows the server ready and no failure: no signature is behind any change. A failure that only "
    "requests show (a timeout, a wrong answer) is not in the server's log: run the case (hypoloop run), "
    "whose probes send them"))


def _served_cleanly(outcome: Outcome) -> bool:
    """Whether the log reached ready and shows no failure signature (its own shutdown left out)."""
    return outcome.stage == "ready" and not outcome.failure_signatures()


def _log_verdict(outcome: Any) -> str:
    """One sentence on what a log alone shows (no probes were sent, so "ready" is as far as it can tell)."""
    failing = outcome.failure_signatures()
    if outcome.stage == "ready" and not failing:
        return "the server reached ready and no failure signature appears"
    if outcome.stage == "load_failed" and not failing:
        return "the log ends before the server was ready and shows no error (still loading, or cut off)"
    if failing:
        return f"failure: {', '.join(dict.fromkeys(failing))}"
    return "no failure signature found"


def _model_from_log(text: str) -> Any:
    import re


    # SGLang's server_args (model_path='M'); vLLM's "non-default args: {'model': 'M'" / "serving model M".
    m = (
        re.search(r"model_path=['\"]([^'\"]+)['\"]", text)
        or re.search(r"non-default args: \{.*?'model': '([^']+)'", text)
        or re.search(r"serving model (\S+)", text)
    )
    return ModelSpec(path=m.group(1) if m else "unknown")



def _imports_before_flags(outcome: Outcome) -> bool:
    """Whether the failing import ran while only module-level code did (the entry point still importing,
    before it read any launch flag): no frame outside Python's own runner is a function of the server.
    False when one was on the way (e.g. ``server_args.resolve_once``): the flags had been read, and one may
    guard the import; True when no traceback shows either."""
    from tools.tracebacks import parse_numbered_lines

    tbs = parse_numbered_lines(((ll.line, ll.text) for ll in outcome.log_excerpt), unique=False)
    importing = [tb for tb in tbs if (tb.exception or "").rsplit(".", 1)[-1] in ("ImportError", "ModuleNotFoundError")]
    if not importing:
        return True
    # Python's own runner (``<frozen runpy>``, or runpy.py on an older Python) is not the server
    own = [f for f in importing[-1].frames if not (f.path.startswith("<frozen") or f.path.endswith("/runpy.py"))]
    return all(f.function == "<module>" for f in own)
