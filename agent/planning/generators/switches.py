"""Switches: after a change that took a whole subsystem out served, the other implementation of that
subsystem, chosen by an environment variable (``knowledge/switches.toml``, read by
``agent.planning.switches``; issue 20, point 5: root fix before workaround).

The hypothesis is "the implementation the switch selects by default on this platform is the one that
fails": it predicts that both the other implementation and taking the subsystem out fix the failure, so
the workaround that served supports it, and the chooser tests the narrower change before the workaround
is reported (``Chooser._alternative``). Only on a platform the switch is read on, with the subsystem in
play, and not when the switch already holds the other value.

Before any workaround, an asynchronous device fault (an illegal memory access, a device-side assert, a ROCm
hardware exception: issue 20, points 3 and 8) makes every implementation the run used a suspect, since the
frame it surfaced in is not where it happened: the implementation a switch selects by default on this
platform ran if its subsystem is in play, so it is a suspect as a backend the failing run used is for the
component generator (``SUSPECT_FACTOR``), its other implementation the test.

A silent stall names no place either (symptom ``hang`` with the server never ready, the log stopped with no
error; or a ready server's request that never got an answer, no error logged: stage ``serve``): the
implementation a switch selects by default is a suspect when the stall came at a stage during which that
implementation runs and the ranks wait on it (the switch's ``stall_stages``: NCCL's peer-to-peer transport
carries the first collectives at distributed init, a custom all-reduce every forward pass), with the same
weight. Its test takes the whole subsystem out where a flag does (the ranks then no longer wait in it; once
that serves, the other implementation is tried as above), else sets the switch's other value.

Wrong numbers name no place either (NaN/Inf, garbage, a graded drop in accuracy: values carry them to where
they are noticed): the implementation a switch selects by default is a suspect, with the same weight, when
it computes on the activations of every forward pass (the switch's ``computes``: a custom all-reduce sums
the ranks' partial results, each implementation in its own order; a transport computes nothing); its other
implementation is the test, before the whole subsystem is taken out.

An error whose own frames run in the package the default implementation is (the switch's ``package``,
entered from the engine's code the switch gates, its ``callers``: SGLang's DeepGEMM wrapper calling into
``deep_gemm``) names the place itself: that implementation failed, and the other value, which stops the engine
calling the package, is a strong candidate (``PACKAGE_WEIGHT``), read before generic remedies the error's
boilerplate lists. A change goes to the spelling the baseline sets when it sets a legacy one (``legacy``: the
engine rewrites it over the current name at start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.domain.failure import timed_out_only
from agent.domain.models import Change, Evidence, Hypothesis, Intervention
from agent.planning.generators.common import engine_package, norm
from agent.planning.in_play import InPlay
from agent.planning.matching import same_value
from agent.planning.served import run_platform
from agent.planning.switches import Switch, load_switches

if TYPE_CHECKING:
    from agent.planning.generators import GeneratorInput

__all__ = ["SWITCH_PREFIX", "SwitchGenerator"]

#: Ledger ids of switch hypotheses start with this.
SWITCH_PREFIX = "switch:"
#: Its weight: the component generator's ``BASE_WEIGHT``, for the same claim ("another implementation of
#: the implicated component avoids it"); no new tunable.
WEIGHT = 0.08
#: A suspect's share of it: the component generator's ``SUSPECT_FACTOR`` (a backend the failing run used,
#: where a kernel failed and no frame names it); no new tunable.
SUSPECT_FACTOR = 0.4
#: Its weight when the failing error's own frames run in the switch's package: the toolchain generator's
#: ``WEIGHT`` (the component generator's ``BASE_WEIGHT`` 0.08 times ``PACKAGE_FACTOR`` 2 times
#: ``EXPLICIT_FACTOR`` 2), for the same strength of evidence (the error's own frames name what failed, as a
#: user's choice whose package the failing frames run in); no new tunable.
PACKAGE_WEIGHT = 0.32
#: The stage name of a stall on a ready server (a request that never got an answer), for ``stall_stages``.
SERVING = "serve"
#: Symptoms of an asynchronous device fault, whose printed frame is not where the kernel failed.
_ASYNC_FAULTS = frozenset({"illegal_memory_access", "device_assert", "device_fault"})
#: Symptoms of wrong numbers (NaN/Inf, garbage, a graded drop): values, not a faulting kernel, carry them to
#: where they are noticed, so no frame says which computation made them (knowledge/localisers.toml).
_WRONG_NUMBERS = frozenset({"nan_inf", "garbage_output", "accuracy_drop"})


def _package_lines(sw: Switch, inp: GeneratorInput) -> list[int]:
    """The log lines of the failing launch's tracebacks whose frames enter ``sw``'s package from the engine's
    code the switch gates (the nearest engine frame outside the package's first frame is one of ``callers``),
    or [] (no such package, or no such frame)."""
    if sw.package is None or inp.evidence.stage == "ok":
        return []
    engine, package = engine_package(inp), norm(sw.package)
    out = []
    for tb in inp.evidence.tracebacks:
        outer = tb.frames[::-1]  # frames are innermost first: the package's entry is its outermost frame
        first = next((i for i, fr in enumerate(outer) if fr.package and norm(fr.package) == package), None)
        if first is None:
            continue
        caller = next((fr for fr in reversed(outer[:first]) if fr.package == engine), None)
        if caller is not None and sw.calls_package(caller.module):
            out.append(outer[first].log_line or tb.start_line)
    return out


def _served_without(sw: Switch, inp: GeneratorInput) -> tuple[str, str] | None:
    """(flag, experiment id) of a test of this run that took ``sw``'s subsystem out and served, or None."""
    ok = {o.experiment_id for o in inp.run_outcomes if o.stage == "ok"}
    for e in inp.experiments:
        ch = e.change
        if e.id in ok and e.baseline == inp.baseline and ch is not None and ch.kind == "flag" and ch.name in sw.turned_off_by \
                and ch.after not in (None, False):
            return ch.name, e.id
    return None


class SwitchGenerator:
    """One candidate per switch whose subsystem a served workaround took out (see module docstring)."""

    name = "switches"
    #: It reads the whole run (a later test of the failing configuration that served without the
    #: subsystem), so its answers for a launch are never kept (``agent.planning.candidate_memo``).
    reads_run = True

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Candidates ``switch:ID``."""
        switches = load_switches()
        if not switches:
            return []
        platform = run_platform(inp.fingerprint, inp.baseline)
        faulted = inp.evidence.stage != "ok" and bool(_ASYNC_FAULTS & set(inp.evidence.symptoms))
        wrong = inp.evidence.stage != "ok" and bool(_WRONG_NUMBERS & set(inp.evidence.symptoms))
        stalled_at = _silent_stall_stage(inp)
        out = []
        for sw in switches:
            name = sw.spelling(inp.baseline.env)
            if platform not in sw.platforms or same_value(inp.baseline.value(sw.kind, name), sw.value(sw.other)):
                continue
            served = _served_without(sw, inp)
            ran = _package_lines(sw, inp)
            stalled = stalled_at is not None and stalled_at in sw.stall_stages
            computed = wrong and sw.computes
            if served is None and not (ran or stalled or computed or (faulted and sw.turned_off_by)):
                continue
            in_play = InPlay(inp.fingerprint, inp.baseline, inp.reference.server_args, inp.flags)
            # frames in the package are proof that its implementation ran here, whatever the facts say
            if not ran and in_play.why_not(Change(kind=sw.kind, name=name, before=inp.baseline.value(sw.kind, name),
                                                  after=sw.value(sw.other))) is not None:
                continue
            out.append(self._hypothesis(sw, inp, served, stalled_at if stalled else None,
                                        computed and not (faulted and sw.turned_off_by), ran))
        return out

    def _hypothesis(self, sw: Switch, inp: GeneratorInput, served: tuple[str, str] | None,
                    stalled_at: str | None = None, computed: bool = False, ran: list[int] | None = None) -> Hypothesis:
        """The candidate of one switch: supported by the workaround that served, else by the failing error's
        own frames in its package (``ran``: their log lines), else a suspect of an asynchronous device fault
        (its default implementation ran where the kernel may have failed), of a silent stall at a stage where
        it first runs (``stalled_at``), or of wrong numbers its default implementation computed on
        (``computed``: the switch's ``computes``)."""
        flag = served[0] if served is not None else (sw.turned_off_by[0] if sw.turned_off_by else None)
        if served is not None:
            exp_id = served[1]
            why = f"{flag} took the whole subsystem out and the server served"
            evidence = Evidence(kind="experiment", detail=f"{flag} took {sw.subsystem} out and the server served",
                                experiment_id=exp_id)
            weight = WEIGHT
        elif ran:
            why = (f"the failing error's own frames run in {sw.package}, entered from the code {sw.name} gates: "
                   f"{sw.implementation} is what failed")
            evidence = Evidence(kind="fact", detail=why, experiment_id=inp.evidence.experiment_id, lines=ran[:3])
            weight = PACKAGE_WEIGHT
        elif stalled_at is not None:
            why = (f"the server went silent during {stalled_at} with no error (a stall names no place) and "
                   f"{sw.implementation} first runs there, the ranks waiting on it: {sw.subsystem} is in play here")
            evidence = Evidence(kind="fact", detail=why, experiment_id=inp.evidence.experiment_id)
            weight = WEIGHT * SUSPECT_FACTOR
        elif computed:
            why = (f"the answers came out wrong with no frame to say which computation made them, and "
                   f"{sw.implementation} computes on every forward pass's activations: "
                   f"{sw.subsystem} is in play here")
            evidence = Evidence(kind="fact", detail=why, experiment_id=inp.evidence.experiment_id)
            weight = WEIGHT * SUSPECT_FACTOR
        else:
            why = (f"a kernel faulted asynchronously (where the error surfaced is not where it happened) and "
                   f"{sw.implementation} ran: {sw.subsystem} is in play here")
            evidence = Evidence(kind="fact", detail=why, experiment_id=inp.evidence.experiment_id)
            weight = WEIGHT * SUSPECT_FACTOR
        name = sw.spelling(inp.baseline.env)
        # turning a package's kernels off trades their speed away (cost "low"); the others pick a peer
        other = Intervention(kind=sw.kind, names=[name], values=[sw.value(sw.other)], decisive=True,
                             cost="low" if sw.package else "none",
                             note=f"{sw.alternative} instead of {sw.implementation}")
        if flag is None:
            interventions = [other]
        else:
            whole = Intervention(kind="flag", names=[flag], values=[True], decisive=True, cost="low",
                                 workaround=True, note=f"no {sw.subsystem} implementation at all")
            # a stall is localised first: with the whole subsystem out the ranks no longer wait in it (the
            # workaround that serves then brings this switch's narrower test back, the `served` path)
            interventions = [whole] if stalled_at is not None else [other, whole]
        return Hypothesis(
            id=f"{SWITCH_PREFIX}{sw.id}",
            statement=f"{sw.implementation}, which {name} selects by default ({sw.default}) on this "
            f"platform, is the {sw.subsystem} implementation that fails; {sw.alternative} "
            f"({name}={sw.other}) avoids it",
            component=sw.subsystem,
            weight=weight,
            rationale=f"{why}; {sw.name} chooses its implementation ({sw.source})",
            generator=self.name,
            evidence=[evidence],
            interventions=interventions,
        )


def _silent_stall_stage(inp: GeneratorInput) -> str | None:
    """The stage at which the failing launch went silent: its ``stall_stage`` fact when it never became
    ready and its log shows no error (symptom ``hang``, no traceback), ``SERVING`` when a ready server's
    only failure is a request that got no answer with no error in the log (``timed_out_only``) and single
    requests were not answered either (not only a burst), else None."""
    ev = inp.evidence
    if timed_out_only(ev):
        # requests lost only in a burst while single ones were answered: the loop runs every batch and did
        # serve; what the burst adds (queues, routing of replies) is on the request path, not in the loop
        return None if ev.burst_failed else SERVING
    if ev.stage != "timeout" or "hang" not in ev.symptoms or ev.tracebacks:
        return None
    return ev.facts.get("stall_stage")
