"""Fixes and confirmation runs: a change that made the failing configuration serve is recorded as a
fix (root cause or workaround, and its performance cost); the best fix becomes the baseline and is
launched again to confirm it. A confirmation that fails means a flaky failure: the fix is dropped and the
hypotheses that predicted it are refuted or reopened."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from agent.domain.models import Change, Evidence, Experiment, Hypothesis, Outcome
from agent.planning.budgets import removes_budget_on_purpose
from agent.planning.generators.settings import implicated_setting
from agent.planning.intent import drops_feature, feature_suspects
from agent.planning.observations import config_key, sibling_passes
from agent.planning.own_revert import own_reverts_for
from agent.planning.own_tuning import tuning_tests
from agent.planning.required import required_by_error
from agent.planning.served import OnHost, run_platform, served_settings, user_keeps
from agent.planning.switches import broad_switch
from agent.planning.view import COST_ORDER, Fix, HistoryPass, HistoryState
from agent.planning.weights import weights as tunables

if TYPE_CHECKING:  # the ledger is given, not built here
    from agent.planning.ledger import LedgerBook


class FixKeeper:
    """Keeps the fixes of a run's history and reads its confirmation runs (one part of the rule planner,
    ``agent.planning.planner.RulePlanner``); ``book`` is the ledger part it weighs hypotheses with."""

    def __init__(self, book: LedgerBook) -> None:
        self.book = book

    def confirm_run(self, hp: HistoryPass, exp: Experiment, out: Outcome) -> None:
        """A re-run of the best fix: one more confirmation, or the fix did not hold (flaky)."""
        st, ledger, weights = hp.state, hp.ledger, hp.weights
        best = st.best_fix
        if best is None:
            return
        backing = self._backing(st, best.change, ledger.values())
        if out.stage == "ok":
            st.confirmations += 1
            self._confirmed(st, exp, best, backing)
            self.book.refute_by_cause_signature(ledger, out)
            self.book.normalise(ledger, weights, set())
            return
        self._did_not_hold(st, exp, out, backing, ledger, weights)
        self.book.create(hp.view, out, ledger, weights, exp.baseline)
        self.book.normalise(ledger, weights, set())

    @staticmethod
    def _confirmed(st: HistoryState, exp: Experiment, best: Fix, backing: list[Hypothesis],
                   sibling: Change | None = None) -> None:
        """``best`` passed once more (``exp``: a re-run of it, or a test of its variable, ``sibling_passes``):
        once enough passed, its supported hypotheses are confirmed."""
        if st.confirmations < st.confirmations_needed:
            return
        st.confirmed_experiment_id = exp.id
        for h in backing:
            if h.status == "supported":
                h.status = "confirmed"
                h.evidence.append(
                    Evidence(
                        kind="experiment",
                        experiment_id=exp.id,
                        effect="confirms",
                        detail=(f"the fixing configuration ({best.change.describe()}) served correctly again"
                                if sibling is None else
                                f"{best.change.describe()} served, and so did another value of the same setting "
                                f"({sibling.describe()}): if the setting did not matter both would have been "
                                "luck, so that counts as a confirmation"),
                    )
                )

    def _did_not_hold(
        self, st: HistoryState, exp: Experiment, out: Outcome, backing: list[Hypothesis],
        ledger: dict[str, Hypothesis], weights: dict[str, float],
    ) -> None:
        """The fix did not hold: the symptom came back with nothing changed, so the outcome is flaky.
        The fix is dropped (the next best, else the failing baseline, is the baseline again) and the
        hypotheses that predicted it are refuted (decisive) or reopened."""
        best = st.best_fix
        assert best is not None
        facts = st.failing_reference.facts if st.failing_reference else {}
        st.confirm_failed = True
        st.flaky = True
        st.confirmations = 0
        for h in backing:
            if h.status in ("refuted", "confirmed"):
                continue
            decisive = self.book.prediction(h, best.change, facts) == "fixed"
            h.status = "refuted" if decisive else "open"
            lw = tunables().ledger
            weights[h.id] *= lw.failed_confirmation_decisive if decisive else lw.failed_confirmation_may_fix
            h.evidence.append(
                Evidence(
                    kind="experiment",
                    experiment_id=exp.id,
                    effect="refutes" if decisive else "weakens",
                    detail=f"{best.change.describe()} did not hold on a re-run ({out.stage}): its earlier "
                    "success was luck in a flaky failure",
                )
            )
        self._luck_says_nothing(ledger, weights, best, exp, backing)
        st.fixes = [f for f in st.fixes if f.experiment_id != best.experiment_id]
        nxt = st.best_fix
        if nxt is not None:
            st.baseline = nxt.config
        elif st.failing_baseline is not None:
            st.baseline, st.reference = st.failing_baseline, st.failing_reference

    @staticmethod
    def _luck_says_nothing(
        ledger: dict[str, Hypothesis], weights: dict[str, float], best: Fix, exp: Experiment,
        backing: list[Hypothesis],
    ) -> None:
        """Take back what the lucky success of ``best`` said against the hypotheses that predicted the
        failure would persist: once its re-run ``exp`` failed, that success was a draw of a flaky failure,
        as likely under each of them as under the change's own hypotheses, so it is no evidence against
        them (without this, two lucky successes left every other cause below the launch threshold)."""
        went_away = tunables().likelihood["persists"]["fixed"]
        backed = {h.id for h in backing}
        for h in ledger.values():
            if h.id in backed or h.status != "open" or h.id not in weights:
                continue
            if not any(e.kind == "experiment" and e.experiment_id == best.experiment_id and e.effect == "weakens"
                       for e in h.evidence):
                continue
            weights[h.id] /= went_away
            h.evidence.append(Evidence(
                kind="experiment", experiment_id=exp.id, effect="neutral",
                detail=f"{best.change.describe()} did not hold on a re-run: its success in {best.experiment_id} "
                       "was luck in a flaky failure, which says nothing against this hypothesis"))

    def adopt_fix(self, hp: HistoryPass, exp: Experiment, change: Change, ref: Outcome, out: Outcome) -> None:
        """Record a fix of ``exp.baseline`` (``change`` made it serve: ``out`` against the failing ``ref``);
        the best fix so far becomes the baseline."""
        st = hp.state
        if st.failing_baseline is None or config_key(st.failing_baseline) != config_key(exp.baseline):
            st.failing_baseline, st.failing_reference, st.fixes = exp.baseline, ref, []
        workaround, cost = self._fix_kind(hp, change, ref)
        before = st.best_fix
        around = not (st.flaky or st.intermittent) and bool(
            own_reverts_for(hp.view.case.baseline, exp.baseline, change, hp.ledger.values(), self.book.flags,
                            drops_feature(hp.view.case.baseline, change, self.book.flags))
            or tuning_tests(hp.view.case.baseline, exp.baseline, change, self.book.flags))
        st.fixes.append(Fix(experiment_id=exp.id, change=change, config=exp.config(), workaround=workaround,
                            cost=cost, around_own=around))
        best = st.best_fix
        assert best is not None
        if before is None or best.experiment_id != before.experiment_id:
            st.adoptions.append(self.adoption(exp, ref, out))
            st.baseline, st.reference = best.config, out
            st.confirmations = sum(1 for f in st.fixes if sibling_passes(best.change, f.change))
        elif sibling_passes(best.change, change):
            st.confirmations += 1
        if st.confirmations and not best.workaround:
            # another value of the fix's own variable served too: under "the variable does not matter and the
            # passes were luck" that is as unlikely as a re-run passing, so it counts as one (a workaround's
            # re-run still waits for the root-cause search after it)
            other = next((f.change for f in st.fixes if sibling_passes(best.change, f.change)), None)
            self._confirmed(st, exp, best, self._backing(st, best.change, hp.ledger.values()), other)

    def _backing(self, st: HistoryState, change: Change, hyps: Iterable[Hypothesis]) -> list[Hypothesis]:
        """The hypotheses that predict ``change`` fixes the failing reference (or may)."""
        facts = st.failing_reference.facts if st.failing_reference else {}
        return [h for h in hyps if self.book.prediction(h, change, facts) != "persists"]

    def _fix_kind(
        self, hp: HistoryPass, change: Change, ref: Outcome
    ) -> tuple[bool, Literal["none", "low", "medium", "high"]]:
        """Whether a change is a workaround and its performance cost, from the interventions it matches. A
        change the failing ``ref``'s error states as required (``agent.planning.required``) is no workaround:
        the engine refused the user's combination without it."""
        view, facts = hp.view, ref.facts
        if required_by_error(change, [ref]):
            return False, "low"
        checkpoint = view.fingerprint.checkpoint if view.fingerprint else {}
        platform = run_platform(view.fingerprint, hp.state.baseline)
        if served_settings().changes_deployment(change.kind, change.name, change.after, self.book.flags,
                                                user_keeps(view.case, self.book.flags, view.outcomes), checkpoint, change.before,
                                                OnHost(platform, facts)) \
                or removes_budget_on_purpose(view.case, change.kind, change.name, change.after):
            return True, "high"  # it changes what is served: at most a workaround (knowledge/served.toml)
        base = hp.state.failing_baseline
        if base is not None and not (hp.state.flaky or hp.state.intermittent) and feature_suspects(view.case.baseline, base, change, hp.ledger.values(),
                                                 self.book.flags, implicated_setting):
            # a feature the user turned on and configured, dropped, while the failure implicates the user's own
            # setting inside it: costly (what the feature gave), so a revert of that setting that serves is kept
            return False, "high"
        ivs = [iv for h in hp.ledger.values() for iv in h.interventions if self.book.matches(change, iv, facts)]
        # a broad switch-off (knowledge/switches.toml [[broad]]) is a workaround whatever proposed it
        broad = broad_switch(change) is not None
        if not ivs:
            return broad, "medium" if broad else "low"
        worst = max(ivs, key=lambda iv: COST_ORDER[iv.cost])
        return broad or any(iv.workaround for iv in ivs), worst.cost

    @staticmethod
    def adoption(exp: Experiment, ref: Outcome, out: Outcome) -> dict[str, Any]:
        """The ``HistoryState.adoptions`` record of ``exp`` moving the baseline from ``ref``'s stage to ``out``'s."""
        return {
            "experiment_id": exp.id,
            "change": exp.change.model_dump() if exp.change else None,
            "from_stage": ref.stage,
            "to_stage": out.stage,
        }
