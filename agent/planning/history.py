"""A run's history read into a ledger and a baseline (``HistoryState``), launch by launch.

The ledger is rebuilt from the evidence on every step, so a refuted hypothesis stays refuted for as long
as the experiment that refuted it is in the history, and a replay of the same history gives the same
decisions. Baseline launches reproduce the failure (or show it only under load, or flaky); tests weigh
the hypotheses, record fixes, and move the baseline past a blocker when the launch got further (a chain
of blockers is solved one link per launch); confirmation runs are read by ``agent.planning.confirm``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.domain.failure import timed_out_only
from agent.domain.models import Change, Evidence, Experiment, Hypothesis, Outcome
from agent.planning.generators.evidence import failure_evidence
from agent.planning.in_play import subsystems_of_frame
from agent.planning.localise import localiser_of
from agent.planning.observations import (
    BURST_LEVELS,
    classify_observation,
    config_key,
    confirmations_required,
    error_templates,
    failed_only_under_load,
    failing_load_probe,
    left_as_it_was,
    load_level,
    load_probe_for,
    speaks_of_flakiness,
)
from agent.planning.served import canonical_flag
from agent.planning.view import HistoryPass, HistoryState, PlannerView
from agent.planning.weights import weights as tunables
from tools.flags import FlagCatalog

if TYPE_CHECKING:  # the parts are given, not built here
    from agent.planning.confirm import FixKeeper
    from agent.planning.ledger import LedgerBook


class HistoryReader:
    """Reads a run's history into a ``HistoryState`` (one part of the rule planner,
    ``agent.planning.planner.RulePlanner``): ``book`` weighs the hypotheses, ``fixes`` keeps the fixes
    and reads the confirmation runs."""

    def __init__(self, book: LedgerBook, fixes: FixKeeper) -> None:
        self.book = book
        self.fixes = fixes

    def history(self, view: PlannerView) -> HistoryState:
        """Rebuild the ledger and the current baseline from the run's history (see module docstring)."""
        said = view.case.reproduce.intermittent or speaks_of_flakiness(view.case)
        st = HistoryState(
            hypotheses=[],
            baseline=view.case.baseline,
            intermittent=said,
            flaky_confirmations=confirmations_required(
                [e for e in view.experiments if e.status == "done"], {o.experiment_id: o for o in view.outcomes},
                said_intermittent=said,
            ),
            case_load=load_probe_for(view.case, level) if (level := load_level(view.case)) else None,
        )
        hp = HistoryPass(view, st)
        for exp in view.experiments:
            out = view.outcome_of(exp.id)
            if out is None or exp.status != "done" or exp.id in hp.consumed:
                continue
            if exp.purpose == "baseline":
                self._baseline_run(hp, exp, out)
                continue
            if st.reference is None:
                continue
            if exp.purpose == "confirm":
                self.fixes.confirm_run(hp, exp, out)
                continue
            self._test_run(hp, exp, out)
        st.hypotheses = list(hp.ledger.values())
        return st

    def _baseline_run(self, hp: HistoryPass, exp: Experiment, out: Outcome) -> None:
        """A launch of the unchanged baseline: the reference run, or a repeat after a passing one."""
        st = hp.state
        if st.weak and st.fixes and exp.baseline == st.failing_baseline and out.stage != "infra_error":
            # a control after a fix of a request timeout: without the fix, does it still time out?
            st.controlled = st.controlled or out.stage != "ok"
            st.control_served = st.control_served or (exp.id if out.stage == "ok" else None)
            return
        st.baseline_runs += 1
        st.load_tried = st.load_tried or any(p.concurrency >= BURST_LEVELS[-1] for p in exp.probes)
        if st.reference is not None and st.reference.stage != "ok":
            return  # the failure is already reproduced; nothing new to learn here
        passed_before = st.reference is not None
        st.reference = out
        if out.stage != "ok":
            if failed_only_under_load(out):
                st.load_probe = failing_load_probe(exp, out)
            elif passed_before:
                st.flaky = True
            hp.refs[config_key(exp.baseline)] = out
            self.book.create(hp.view, out, hp.ledger, hp.weights, exp.baseline)
        self.book.normalise(hp.ledger, hp.weights, set(hp.ledger))

    def _test_run(self, hp: HistoryPass, exp: Experiment, out: Outcome) -> None:
        """A test of one change against a configuration seen failing: weigh the hypotheses by what it
        showed; a fix is recorded, a step past the blocker is adopted into the baseline."""
        st, ledger, weights = hp.state, hp.ledger, hp.weights
        ref = hp.refs.get(config_key(exp.baseline))
        if ref is None:  # a test of a configuration this history never saw fail
            return
        obs = classify_observation(out, ref)
        weak = obs != "fixed" and timed_out_only(out)
        if weak and (rerun := self._rerun(hp, exp)) is not None and rerun.stage == "ok":
            # the timeout did not come back: this change is what made the failing configuration serve,
            # on a configuration seen both timing out and serving (confirmed as a flaky one)
            obs, out, st.flaky = "fixed", rerun, True
        if obs == "fixed" and (same := left_as_it_was(exp.change, out, ref)) is not None:
            self._ran_as_before(hp, exp, out, ref, same)
            return
        self.book.update(ledger, weights, exp, out, obs, ref.facts)
        if localiser_of(exp.change) is not None and obs not in ("fixed", "infra"):
            self._localised(hp, exp, ref, out)
            return
        if out.stage == "ok":
            self.book.refute_by_cause_signature(ledger, out)
        if obs == "fixed" and exp.change is not None:
            self.fixes.adopt_fix(hp, exp, exp.change, ref, out)
        elif obs == "advanced" or (obs == "changed" and class_gone(ref, out)):
            self._past_blocker(hp, exp, ref, out)
            hp.refs[config_key(st.baseline)] = out
            st.weak = weak
            st.unreproduced = weak and self._rerun(hp, exp) is None
        blocker = obs == "advanced" or (obs == "changed" and class_gone(ref, out))
        # Against the current baseline: a failed test that was not adopted leaves the baseline as it
        # was, so its own change is not "the baseline's setting" to revert or to diff (after an
        # adoption the current baseline is this test's configuration).
        # A change that failed earlier than the failure it tested ("different") shows its own failure,
        # not the baseline's: what that error implicates elsewhere explains why the change cannot run, and a
        # test of it on the baseline, which never meets that error, says nothing about the failure being
        # debugged. What it says of the setting the change set (another value its error names) still counts.
        only = (lambda h: _sets(h, exp.change, self.book.flags)) if obs == "different" else None
        created = (
            self.book.create(hp.view, out, ledger, weights, st.baseline, refresh=blocker, only=only)
            if out.stage != "ok" else []
        )
        self.book.normalise(ledger, weights, set(created))

    def _ran_as_before(self, hp: HistoryPass, exp: Experiment, out: Outcome, ref: Outcome, same: str) -> None:
        """A change that served although the engine ran the setting it changed as before (``same``: the
        ``key=value`` both printed settings lines show, ``left_as_it_was``): the launch was the failing
        configuration again, so its success says the failure is flaky and nothing about any cause; the
        hypotheses that predicted this change would fix it are refuted (it changes nothing the engine runs),
        and no fix is recorded."""
        assert exp.change is not None
        hp.state.flaky = True
        change = exp.change.describe()
        for h in hp.ledger.values():
            if h.status in ("refuted", "confirmed") or self.book.prediction(h, exp.change, ref.facts) == "persists":
                continue
            h.status = "refuted"
            h.evidence.append(Evidence(
                kind="experiment", experiment_id=exp.id, effect="refutes",
                detail=f"with {change} the engine still ran {same}, as in the failing run: the change "
                       "leaves what it sets as it was, so it cannot be the fix (the launch served by luck: "
                       "the failure is flaky)"))
        self.book.refute_by_cause_signature(hp.ledger, out)
        self.book.normalise(hp.ledger, hp.weights, set())

    @staticmethod
    def _rerun(hp: HistoryPass, exp: Experiment) -> Outcome | None:
        """The outcome of the later launch of ``exp``'s configuration as an unchanged baseline (the
        re-run that reproduces a request timeout, ``Chooser``), or None; it is read here, with the test it
        repeats, and skipped where the history reaches it."""
        seen = False
        for e in hp.view.experiments:
            seen = seen or e.id == exp.id
            if not seen or e.purpose != "baseline" or e.status != "done" or e.baseline != exp.config():
                continue
            out = hp.view.outcome_of(e.id)
            if out is not None and out.stage != "infra_error":
                hp.consumed.add(e.id)
                return out
        return None

    def _localised(self, hp: HistoryPass, exp: Experiment, ref: Outcome, out: Outcome) -> None:
        """A localising launch that did not serve (issue 20, point 3): its report is the true one, so the
        ledger records where the kernel failed (``LedgerBook.weigh_by_localiser``) and the candidates are
        read again from its frames; when those frames are not the ones the error surfaced in, a candidate
        they propose again gets at least the weight they give it (it was weighed against a frame that was
        not where the kernel failed). It is never adopted into the baseline, whatever it changed: it only
        changes how the failure is reported, and the next experiment is tested against the configuration
        the user runs."""
        created = self.book.create(hp.view, out, hp.ledger, hp.weights, hp.state.baseline,
                                   refresh=self.book.frame_moved(hp.view, exp, ref, out))
        hp.state.localised = self.book.weigh_by_localiser(hp.view, hp.ledger, hp.weights, exp, ref, out)
        self.book.normalise(hp.ledger, hp.weights, set(created))

    def _past_blocker(self, hp: HistoryPass, exp: Experiment, ref: Outcome, out: Outcome) -> None:
        """Past a blocker: a later stage, further progress lines at the same stage, or another error once
        the failure's class is gone (a chain of blockers is solved one link per launch). An error of the
        same class in other words is not progress (issue 20, point 4): adopting it would lose the
        evidence of the first. The test's configuration becomes the baseline; the hypotheses that
        explained the blocker lose weight."""
        st = hp.state
        st.adoptions.append(self.fixes.adoption(exp, ref, out))
        st.baseline, st.reference = exp.config(), out
        for h in hp.ledger.values():  # they explained the blocker that is gone
            if h.status != "open":
                continue
            own = exp.change is not None and self.book.prediction(h, exp.change, ref.facts) != "persists"
            # Its own variable is set now: its other values would only undo the step past it.
            hp.weights[h.id] *= tunables().ledger.passed_blocker_own if own else tunables().ledger.passed_blocker
        st.fixes, st.failing_baseline, st.failing_reference = [], None, None
        st.confirmations, st.localised = 0, []


def _sets(h: Hypothesis, change: Change | None, flags: FlagCatalog | None) -> bool:
    """Whether one of ``h``'s interventions sets the variable ``change`` changed (another value of it), a flag
    in any spelling the host's ``--help`` gives it (``flags``)."""
    if change is None:
        return False
    name = canonical_flag(flags, change.name) if change.kind == "flag" else change.name
    return any(iv.kind == change.kind and name in {canonical_flag(flags, n) if iv.kind == "flag" else n for n in iv.names}
               for iv in h.interventions)


#: Symptom classes that only say where a failure happened, not what kind it is.
_GENERIC_CLASSES = frozenset({"startup_error", "crash_at_decode"})

#: Symptom classes a host-side check raises where the check is made (a kernel's architecture check, an
#: import), so the frame they surface in is where they happened: unlike an asynchronous device fault
#: (knowledge/localisers.toml), the same class raised in another subsystem's code is another failure.
_RAISED_WHERE_CHECKED = frozenset({"unsupported_arch", "import_error"})


def class_gone(reference: Outcome, outcome: Outcome) -> bool:
    """Whether the failure of ``reference`` is absent from ``outcome``: its specific symptom classes (out
    of memory at load, NaN, illegal memory access, an import error, ...) are, or the only classes both
    share are ones raised where they are checked (``_RAISED_WHERE_CHECKED``) and the outcome raised them
    in another subsystem's code (``failing_subsystems``: the attention's kernel refused the GPU, now the
    MoE runner's does; the first blocker of a chain is passed). Two generic start-up errors with
    different exceptions count as different classes."""
    ref = set(failure_evidence(reference).symptoms) - _GENERIC_CLASSES
    out = set(failure_evidence(outcome).symptoms) - _GENERIC_CLASSES
    shared = ref & out
    if shared and not (shared <= _RAISED_WHERE_CHECKED and _moved(reference, outcome)):
        return False
    # the same error with other values (a quoted name, a figure) is the same failure in other words
    return not (error_templates(reference) & error_templates(outcome))


def _moved(reference: Outcome, outcome: Outcome) -> bool:
    """Whether both outcomes failed in code of known subsystems and no subsystem is common to both."""
    before, now = failing_subsystems(reference), failing_subsystems(outcome)
    return bool(before and now and not before & now)


def failing_subsystems(outcome: Outcome) -> frozenset[str]:
    """The ids of the subsystems (knowledge/subsystems.toml ``modules``) whose code the innermost frame of
    the outcome's first traceback that lies in any subsystem's code is in; empty when none does. The
    first traceback is the root error (later ones re-raise it or are other ranks')."""
    for tb in failure_evidence(outcome).tracebacks:
        if not tb.frames:
            continue
        for fr in tb.frames:  # innermost first
            if fr.module and (subs := subsystems_of_frame(f"{fr.module}.{fr.function}")):
                return frozenset(s.id for s in subs)
        break
    return frozenset()
