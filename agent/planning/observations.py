"""What one launch says against another: how an outcome compares with the failing reference run
(``classify_observation``), whether a failure's class is gone, the failing import, the load probes that
reproduce a failure under concurrency, and how many passing re-runs a fix on a flaky failure needs."""

from __future__ import annotations

import math
import re

from agent.domain.case import Case
from agent.domain.failure import server_args_of, timed_out_only
from agent.domain.models import STAGE_ORDER, Baseline, Change, Experiment, Outcome
from tools.probes import Probe
from tools.tracebacks import Traceback

#: Probe ids of the concurrency probes this planner adds start with this prefix.
LOAD_PROBE_PREFIX = "load:"
#: Burst sizes sent to a baseline that served single requests correctly, before concluding that the
#: failure does not reproduce (one launch; the probes stop at the first burst that kills the server).
BURST_LEVELS = (8, 32, 128)
#: A case description that says the failure does not always happen.
_FLAKY_WORDS = re.compile(
    r"intermittent|sometimes|flaky|randomly|occasional|now and then|not always|not every|"
    r"every (?:few|other)|\b\d+\s*(?:of|in|out of)\s*\d+\s*(?:launches|runs|starts|attempts|times)",
    re.IGNORECASE,
)

#: The largest chance a confirmation may pass by luck on a flaky failure (issue 20, point 6).
FALSE_CONFIRMATION = 0.05


def confirmations_required(experiments: list[Experiment], outcomes: dict[str, Outcome],
                           said_intermittent: bool = False) -> int:
    """Passing re-runs a fix needs on a flaky failure so that a false confirmation has at most a 5%
    chance: the failure rate p of the configurations seen failing is estimated from every launch of them
    (Laplace's rule, (failures + 1) / (launches + 2), so one failure is not taken for certainty), and a
    broken configuration passes n launches in a row with chance (1 - p)^n; the fixing launch counts as
    one of the n. ``said_intermittent``: the case says the failing configuration also passes on some runs
    (``[reproduce] intermittent``, or its description): while the run has seen it only fail, that is one
    pass of it the user saw, counted with the run's own launches, so that a few failures in a row are not
    read as a failure on every launch; once the run saw it pass, the statement tells nothing more.

    Every change tested is one more chance for a broken change to pass by luck, so the 5% is shared among
    the distinct changes the run has tested (Bonferroni's correction): on a flaky failure a run that tried
    five changes asks each fix for the passes that keep all five together under 5%, not each alone."""
    runs: dict[str, list[bool]] = {}
    tested = {Experiment.make_id(e.config(), None, "config") for e in experiments
              if e.purpose == "test" and e.change is not None}
    for e in experiments:
        o = outcomes.get(e.id)
        if o is None or o.stage == "infra_error":
            continue
        # one configuration's launches together whatever each asked (the first with the case's load, the next
        # with bursts of several sizes): the engine ran the same command each time, and a pass that asked less
        # only makes the rate lower and the re-runs more, never fewer
        runs.setdefault(Experiment.make_id(e.config(), None, "config"), []).append(o.stage == "ok")
    failing = [v for v in runs.values() if False in v]
    fails = sum(v.count(False) for v in failing)
    total = sum(len(v) for v in failing)
    total += int(said_intermittent and fails == total)
    p = min(0.99, (fails + 1) / (total + 2))
    passes = math.ceil(math.log(FALSE_CONFIRMATION / max(1, len(tested))) / math.log(1.0 - p))
    return max(1, passes - 1)


def classify_observation(outcome: Outcome, reference: Outcome) -> str:
    """How an outcome compares with the failing reference run: fixed, persists, changed, advanced,
    different (failed earlier, symptom not reached) or infra (no information).

    Within start-up (load failures, stalls) a run that printed progress lines the reference never
    reached got further ("advanced"); one that stopped short of the reference's progress with another
    failure is "different".
    """
    if outcome.stage == "ok":
        return "fixed"
    if outcome.stage == "infra_error" or reference.stage == "infra_error":
        return "infra"
    so, sr = STAGE_ORDER[outcome.stage], STAGE_ORDER[reference.stage]
    if so > sr:
        return "advanced"
    if so < sr:
        return "different"
    po, pr = progress_ids(outcome), progress_ids(reference)
    starting = outcome.stage in ("load_failed", "timeout")
    if starting and po > pr:
        return "advanced"
    fo, fr = set(outcome.failure_signatures()), set(reference.failure_signatures())
    if starting and po < pr and not (fo & fr):
        return "different"
    if (fo & fr) or (not fo and not fr):
        eo, er = exception_keys(outcome), exception_keys(reference)
        if eo and er and not (eo & er):
            return "changed"  # the same wrapper lines, but another exception underneath
        root = root_exception_key(reference)
        if eo and root is not None and root not in eo:
            return "changed"  # the first error (the root cause) is gone; only a wrapper's words remain
        return "persists"
    return "changed"


def sibling_passes(fix: Change, other: Change) -> bool:
    """Whether ``other``, a change that also made the failing configuration serve, counts as a pass of the
    fix ``fix`` towards its confirmation: another value of the same variable (a flag set otherwise, or
    removed). If the variable did not matter and the failure were flaky, each of them would have served by
    luck, with the same chance as a re-run of the fix, so a false confirmation stays as unlikely."""
    return other is not fix and other.kind == fix.kind and other.name == fix.name and other.after != fix.after


def left_as_it_was(change: Change | None, outcome: Outcome, reference: Outcome) -> str | None:
    """``key=value`` when the flag ``change`` set or removed shows the same value in the engine's printed
    settings line (SGLang's ``server_args=``, vLLM's ``non-default args``; ``server_args_of``) of ``outcome``
    as in the failing ``reference``'s: the engine resolved it to what it ran before (``--attention-backend``
    unset on a CPU host is ``intel_amx`` again), so the launch ran the failing configuration and anything it
    showed is not the change's doing. None when the change is not a flag's, or either line lacks the key."""
    if change is None or change.kind != "flag":
        return None
    key = change.name.lstrip("-").replace("-", "_")
    now, before = server_args_of(outcome.log_excerpt), server_args_of(reference.log_excerpt)
    if key not in now or key not in before or now[key] != before[key]:
        return None
    return f"{key}={now[key]}"


def error_templates(outcome: Outcome) -> set[str]:
    """The exception lines of an outcome with the values blanked: quoted and parenthesised text and
    numbers (``ValueError: ... (fp8) does not match ... (awq).`` -> ``ValueError: ... (#) does not match
    ... (#).``)."""
    out = set()
    for tb in _tracebacks(outcome):
        if not tb.exception_line:
            continue
        t = re.sub(r"\([^()]*\)|'[^']*'|\"[^\"]*\"|`[^`]*`", "#", tb.exception_line)
        out.add(re.sub(r"\d+(?:\.\d+)?", "#", t)[:200])
    return out


def exception_keys(outcome: Outcome) -> set[str]:
    """The exception lines of an outcome's tracebacks with numbers blanked (``RuntimeError: size #``),
    so the same error with other figures is the same error."""
    return {
        re.sub(r"\d+(?:\.\d+)?", "#", tb.exception_line)[:160]
        for tb in _tracebacks(outcome)
        if tb.exception_line
    }


def root_exception_key(outcome: Outcome) -> str | None:
    """The exception line of the outcome's first traceback, numbers blanked (as `exception_keys`), or
    None. The first error logged is the root cause; what follows re-raises it in other words (vLLM's API
    server: "RuntimeError: Engine core initialization failed. See root cause above.", vllm/v1/engine/
    utils.py 0.32.0; SGLang's launcher after a scheduler's exception)."""
    for tb in _tracebacks(outcome):
        if tb.exception_line:
            return re.sub(r"\d+(?:\.\d+)?", "#", tb.exception_line)[:160]
    return None


def progress_ids(outcome: Outcome) -> set[str]:
    """Ids of the progress signatures a launch printed (how far its start-up got)."""
    return {m.signature_id for m in outcome.matches if m.kind == "progress"}


def load_level(case: Case) -> int | None:
    """How many concurrent requests reproduce the failure, from the case (``[reproduce] concurrency``);
    None when the case says neither that nor a traffic shape."""
    n = case.reproduce.concurrency
    return n if n > 1 or case.reproduce.load() is not None else None


def speaks_of_flakiness(case: Case) -> bool:
    """Whether the case's description says the failure does not happen every time."""
    return bool(_FLAKY_WORDS.search(case.description or ""))


def load_probe_for(case: Case, level: int) -> Probe:
    """The case's first probe, sent ``level`` times at once, shaped like the case's traffic."""
    base = case.probes[0]
    update = {"id": f"{LOAD_PROBE_PREFIX}{base.id}:x{level}", "concurrency": level, "shape": case.reproduce.load()}
    return base.model_copy(update=update)


def asked_features(experiments: list[Experiment], outcome: Outcome, case: Case) -> set[str]:
    """The request features (tools/load_shapes.py: tools, json_schema, ...) the launch of ``outcome`` asked
    for in any of its probes, and those of the case's reported traffic (``[reproduce]``): what its requests
    may have made the server do."""
    exp = next((e for e in experiments if e.id == outcome.experiment_id), None)
    shapes = [p.shape for p in (exp.probes if exp is not None else []) if p.shape is not None]
    return {str(f) for sh in [*shapes, case.reproduce] for f in sh.features}


def import_time_failure(outcome: Outcome) -> str | None:
    """The package whose import failed, when the failing traceback shows the exception was raised while
    the entry point was still importing its modules, before any of its functions ran (so before SGLang
    parsed a single argument): its outermost own frames are ``<module>`` frames, the entry point's and at
    least one module it imported at module level, and no import happened inside a function on the way
    (``_raised_while_importing``); else None. No launch flag reaches such code.

    Unsound evidence it does not take (issue 20: a setting may still matter): an import error raised
    through a function (a lazy import behind a backend, device or kernel choice, SGLang's model
    registry's ``importlib.import_module``), a traceback of a worker process (it starts in a function run
    after the arguments were read), an exception other than an import error raised in a function that
    import-time code called (a platform or device probe). Not either when the installed source shows a
    variable or argument guarding the path to that import (``Outcome.source_reading``: a lazy import
    behind ``if server_args.x == ...`` or ``if envs.X.get()`` is avoided by changing that). The package
    named is the one the import error names (``No module named 'deep_gemm'``) when the reading has it."""
    reading = outcome.source_reading
    if reading is not None and reading.leads:
        return None
    for tb in _tracebacks(outcome):
        if not _raised_while_importing(tb):
            continue
        if reading is not None and reading.missing is not None:
            return reading.missing.package
        pkgs = [f.package for f in tb.frames if f.package and f.package != "sglang"]
        return pkgs[0] if pkgs else "a module"
    return None


def _raised_while_importing(tb: Traceback) -> bool:
    """Whether ``tb`` was raised by code no launch setting decides to run: its own frames (not Python's
    frozen runner, not native ones), outermost first, are the entry point's ``<module>`` frame, then
    optionally functions of the entry point's own file (its launcher: SGLang 0.5.23's
    ``launch_server.run_server`` imports the HTTP server unconditionally), then ``<module>`` frames of
    modules imported at module level, and no ``<module>`` frame follows a function frame after that (an
    import done inside a function of the server: a lazy import behind a backend, device or kernel choice).
    An exception other than an import error counts only when the imported chain is module-level code to
    the end (raised by the statement being imported, not by a function it called, such as a platform
    probe)."""
    own = [f for f in reversed(tb.frames) if not f.path.startswith("<frozen") and not f.native]
    if not own or own[0].function != "<module>":
        return False  # not the entry point's import: a worker process, or a function of the server
    entry = own[0].path
    launcher = 1 + next((i for i, f in enumerate(own[1:]) if f.function == "<module>" or f.path != entry),
                        len(own) - 1)
    chain = own[launcher:] if launcher > 1 else own
    imported = next((i for i, f in enumerate(chain) if f.function != "<module>"), len(chain))
    if imported == len(chain):
        return launcher == 1 or imported > 0  # module-level code only (after the entry's own launcher)
    importing = (tb.exception or "").rsplit(".", 1)[-1] in ("ImportError", "ModuleNotFoundError")
    modules_imported = imported - (1 if launcher == 1 else 0)  # the entry's own frame is not an import
    return importing and modules_imported >= 1 and all(f.function != "<module>" for f in chain[imported:])


def failing_load_probe(exp: Experiment, outcome: Outcome) -> Probe | None:
    """The smallest burst of ``exp`` that failed in ``outcome`` (every later experiment sends it)."""
    failed = {p.probe_id for p in outcome.probes if not p.ok}
    bursts = sorted((p for p in exp.probes if p.concurrency > 1 and p.id in failed), key=lambda p: p.concurrency)
    return bursts[0] if bursts else next((p for p in exp.probes if p.concurrency > 1), None)


def failed_only_under_load(outcome: Outcome) -> bool:
    """Single-request probes passed and a concurrency probe failed."""
    single = [p for p in outcome.probes if not p.probe_id.startswith(LOAD_PROBE_PREFIX)]
    load = [p for p in outcome.probes if p.probe_id.startswith(LOAD_PROBE_PREFIX)]
    return bool(single) and all(p.ok for p in single) and any(not p.ok for p in load)


def config_key(baseline: Baseline) -> str:
    """A key of a configuration (flags and env): the same for two launches of one configuration."""
    return Experiment.make_id(baseline, None, "config")


def _tracebacks(outcome: Outcome) -> list[Traceback]:
    """The Python tracebacks in an outcome's kept log lines, in log order, every rank's (as
    ``agent.planning.generators.evidence.parse_tracebacks`` reads them; parsing: ``tools.tracebacks``): the
    outcome's own (``Outcome.tracebacks``, parsed once per object), none when it kept no log lines."""
    return outcome.tracebacks if outcome.log_excerpt else []


def timeout_control(fix: Experiment, experiments: list[Experiment], outcomes: dict[str, Outcome]) -> tuple[bool, str | None, bool]:
    """What the run showed of a fix of a request timeout (issue 20, point 6: a change that "fixes" a
    timeout is confirmed against it): (whether the configuration ``fix`` changed was reached by a test
    whose only failure was a request timing out, ``agent.domain.failure.timed_out_only``, as the rule
    planner's ``HistoryState.weak`` says; the id of a later launch of that
    configuration unchanged, a control, that served; whether a control failed again). A timeout that
    went away without the change too was load on the host, not what the change fixed."""
    tried = [(e, outcomes[e.id]) for e in experiments if e.id in outcomes and outcomes[e.id].stage != "infra_error"]
    weak = any(e.purpose == "test" and e.config() == fix.baseline and timed_out_only(o) for e, o in tried)
    after = [(e, o) for e, o in tried[next((i for i, (e, _) in enumerate(tried) if e.id == fix.id), len(tried)):]
             if e.purpose == "baseline" and e.baseline == fix.baseline]
    served = next((e.id for e, o in after if o.stage == "ok"), None)
    return weak, served, any(o.stage != "ok" for _, o in after)


def sibling_confirmations(fix_exp: Experiment, experiments: dict[str, Experiment], outcomes: dict[str, Outcome],
                          load_id: str | None) -> list[Experiment]:
    """The other tests of the fix's own variable on the configuration it fixed that served (with the case's
    load, ``load_id``) and whose engine did not resolve the change back (``left_as_it_was``): each is one
    pass towards the fix's confirmation (``sibling_passes``; read by the conclusion)."""
    fix, ref = fix_exp.change, failing_reference_of(fix_exp, experiments, outcomes)
    if fix is None:
        return []
    out = []
    for e in experiments.values():
        o = outcomes.get(e.id)
        if (e.purpose != "test" or e.change is None or e.baseline != fix_exp.baseline or o is None
                or o.stage != "ok" or not sibling_passes(fix, e.change)
                or (load_id is not None and all(p.id != load_id for p in e.probes))
                or (ref is not None and left_as_it_was(e.change, o, ref))):
            continue
        out.append(e)
    return out


def failing_reference_of(fix_exp: Experiment, experiments: dict[str, Experiment],
                         outcomes: dict[str, Outcome]) -> Outcome | None:
    """The latest failing outcome of the configuration ``fix_exp`` changed, or None."""
    return next((outcomes[e.id] for e in reversed(list(experiments.values()))
                 if e.config() == fix_exp.baseline and e.id in outcomes and outcomes[e.id].stage != "ok"), None)


def seen_flaky(experiments: dict[str, Experiment], outcomes: dict[str, Outcome]) -> bool:
    """Whether one configuration both served and failed in this run (same flags and env, same probes)."""
    seen: dict[str, set[bool]] = {}
    for e in experiments.values():
        o = outcomes.get(e.id)
        if o is None or o.stage == "infra_error":
            continue
        key = Experiment.make_id(e.config(), None, "config", probes=e.probes)
        seen.setdefault(key, set()).add(o.stage == "ok")
    return any(len(v) > 1 for v in seen.values())
