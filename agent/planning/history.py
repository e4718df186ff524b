"""A run's history read into a ledger and a baseline (``HistoryState``), launch by launch.

The ledger is rebuilt from the evidence on every step, so a refuted hypothesis stays refuted for as long
as the experiment that refuted it is in the history, and a replay of the same history gives the same
decisions. Baseline launches reproduce the failure (or show it only under load, or flaky); tests weigh
the hypotheses, record fixes, and move the baseline past a blocker when the launch got further (a chain
of blockers is solved one link per launch); confirmation runs are read by ``agent.planning.confirm``.
"""

from __future__ import annotations

from agent.domain.models import Experiment, Hypothesis, Outcome
from agent.planning.confirm import FixKeeper
from agent.planning.observations import (
    BURST_LEVELS,
    class_gone,
    classify_observation,
    config_key,
    confirmations_required,
    failed_only_under_load,
    failing_load_probe,
    load_level,
    load_probe_for,
    speaks_of_flakiness,
)
from agent.planning.view import HistoryState, PlannerView
from agent.planning.weights import weights as tunables


class HistoryReader(FixKeeper):
    """Reads a run's history into a ``HistoryState``."""

    def history(self, view: PlannerView) -> HistoryState:
        """Rebuild the ledger and the current baseline from the run's history (see module docstring)."""
        self._case = view.case
        self._checkpoint = view.fingerprint.checkpoint if view.fingerprint else {}
        ledger: dict[str, Hypothesis] = {}
        weights: dict[str, float] = {}
        st = HistoryState(
            hypotheses=[],
            baseline=view.case.baseline,
            intermittent=view.case.reproduce.intermittent or speaks_of_flakiness(view.case),
            flaky_confirmations=confirmations_required(
                [e for e in view.experiments if e.status == "done"], {o.experiment_id: o for o in view.outcomes}
            ),
            case_load=load_probe_for(view.case, level) if (level := load_level(view.case)) else None,
        )
        refs: dict[str, Outcome] = {}  # configuration -> its failing outcome
        for exp in view.experiments:
            out = view.outcome_of(exp.id)
            if out is None or exp.status != "done":
                continue
            if exp.purpose == "baseline":
                self._baseline_run(view, st, exp, out, ledger, weights, refs)
                continue
            if st.reference is None:
                continue
            if exp.purpose == "confirm":
                self._confirm_run(view, st, exp, out, ledger, weights)
                continue
            self._test_run(view, st, exp, out, ledger, weights, refs)
        st.hypotheses = list(ledger.values())
        return st

    def _baseline_run(
        self,
        view: PlannerView,
        st: HistoryState,
        exp: Experiment,
        out: Outcome,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        refs: dict[str, Outcome],
    ) -> None:
        """A launch of the unchanged baseline: the reference run, or a repeat after a passing one."""
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
            refs[config_key(exp.baseline)] = out
            self._create(view, out, ledger, weights, exp.baseline)
        self._normalise(ledger, weights, set(ledger))

    def _test_run(
        self,
        view: PlannerView,
        st: HistoryState,
        exp: Experiment,
        out: Outcome,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
        refs: dict[str, Outcome],
    ) -> None:
        """A test of one change against a configuration seen failing: weigh the hypotheses by what it
        showed; a fix is recorded, a step past the blocker is adopted into the baseline."""
        ref = refs.get(config_key(exp.baseline))
        if ref is None:  # a test of a configuration this history never saw fail
            return
        obs = classify_observation(out, ref)
        self._update(ledger, weights, exp, out, obs, ref.facts)
        if out.stage == "ok":
            self._refute_by_cause_signature(ledger, out)
        if obs == "fixed" and exp.change is not None:
            self._adopt_fix(st, exp, exp.change, ref, out, ledger)
        elif obs == "advanced" or (obs == "changed" and class_gone(ref, out)):
            self._past_blocker(st, exp, ref, out, ledger, weights)
            refs[config_key(st.baseline)] = out
        blocker = obs == "advanced" or (obs == "changed" and class_gone(ref, out))
        # Against the current baseline: a failed test that was not adopted leaves the baseline as it
        # was, so its own change is not "the baseline's setting" to revert or to diff (after an
        # adoption the current baseline is this test's configuration).
        created = self._create(view, out, ledger, weights, st.baseline, refresh=blocker) if out.stage != "ok" else []
        self._normalise(ledger, weights, set(created))

    def _past_blocker(
        self,
        st: HistoryState,
        exp: Experiment,
        ref: Outcome,
        out: Outcome,
        ledger: dict[str, Hypothesis],
        weights: dict[str, float],
    ) -> None:
        """Past a blocker: a later stage, further progress lines at the same stage, or another error once
        the failure's class is gone (a chain of blockers is solved one link per launch). An error of the
        same class in other words is not progress (issue 20, point 4): adopting it would lose the
        evidence of the first. The test's configuration becomes the baseline; the hypotheses that
        explained the blocker lose weight."""
        st.adoptions.append(self._adoption(exp, ref, out))
        st.baseline, st.reference = exp.config(), out
        for h in ledger.values():  # they explained the blocker that is gone
            if h.status != "open":
                continue
            own = exp.change is not None and self.prediction(h, exp.change, ref.facts) != "persists"
            # Its own variable is set now: its other values would only undo the step past it.
            weights[h.id] *= tunables().ledger.passed_blocker_own if own else tunables().ledger.passed_blocker
        st.fixes, st.failing_baseline, st.failing_reference = [], None, None
        st.confirmations = 0
