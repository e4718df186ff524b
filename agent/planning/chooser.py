"""Choosing the next experiment from the ledger: the baseline run first, then the untested one-variable
change with the best probability of fixing the symptom per host-second (a workaround scores less, so
root-cause fixes are tested first), a root-cause alternative after a workaround fixed it, the
confirmation run of the best fix, or repeats of a baseline that served although a failure was reported
(bursts of concurrent requests, then plain repeats); else the reason to conclude. The ratio rule (P(fix) /
cost) is the classic rule for sequential search: it minimises the expected cost of finding the fix when
tests are independent."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from agent.domain.models import Baseline, Change, Experiment, Intervention, Outcome, Prediction
from agent.planning.endings import over_budget, package_dead_end, port_taken, tested_any
from agent.planning.foreign import foreign_dead_end
from agent.planning.generation import kernel_filter, kernel_need_said, possible_share
from agent.planning.generators.common import stems
from agent.planning.generators.evidence import failure_evidence
from agent.planning.generators.settings import implicated_setting
from agent.planning.guard import changes_nothing, launched_before
from agent.planning.in_play import InPlay, load_subsystems
from agent.planning.intent import (
    INTENT_LAUNCHES,
    as_narrower,
    dropped_feature,
    drops_feature,
    feature_reverts,
    intent_alternatives,
    keeping_intent,
    narrower_keys,
    ranked,
    remedy_before_drops,
    spent_after_fix,
)
from agent.planning.localise import localiser_of
from agent.planning.matching import FlagMatcher, same_value
from agent.planning.observations import BURST_LEVELS, asked_features, load_level, load_probe_for
from agent.planning.own_revert import own_first, own_reason
from agent.planning.platform_builds import foreign_setting
from agent.planning.seen_serving import seen_first, serving_launches
from agent.planning.served import user_keeps
from agent.planning.switches import broad_switch
from agent.planning.values import ValueEvidence, leaves_no_kv_cache, ran_out_of_memory
from agent.planning.view import COST_ORDER, HistoryState, PlannerView, Proposal, default_launch_cost_s
from agent.planning.weights import weights as tunables
from agent.review.wording import count
from tools.flags import FlagCatalog
from tools.probes import Probe


class Chooser(FlagMatcher):
    """Proposes the next experiment from a ``HistoryState`` (one part of the rule planner,
    ``agent.planning.planner.RulePlanner``) on a host whose flag catalog is ``flags``; ``name`` is
    recorded as its proposer."""

    def __init__(self, flags: FlagCatalog | None, name: str) -> None:
        super().__init__(flags)
        self.name = name

    def propose(self, view: PlannerView, state: HistoryState) -> Proposal:
        """The next experiment, or the reason to conclude. Never repeats an experiment or a rejection."""
        ref = state.reference
        done = {e.id for e in view.experiments if e.status == "done"}
        rejected_ids = {r.experiment_id for r in view.rejections}
        cost = ref.timings.host_seconds if ref and ref.timings.host_seconds > 0 else default_launch_cost_s()
        within_budget = functools.partial(over_budget, view, cost)
        if ref is None:
            return self._first_run(view, state, cost, done, rejected_ids)
        if ref.stage == "ok":
            if not state.fixes:
                return self._reproduce(view, state, cost, within_budget, rejected_ids)
            if state.control_served:
                return Proposal(conclude_reason="the request timeout went away without the change too "
                                f"({state.control_served}): it was load on the host, not what the change fixed")
            if state.confirmed_experiment_id and state.weak and not state.controlled:
                return self._control(view, state, cost, done, rejected_ids)
            if state.confirmed_experiment_id:
                return Proposal(conclude_reason="fix found and confirmed")
            alternative = self._alternative(view, state, cost, done, rejected_ids)
            if alternative is not None:
                return alternative
            return self._confirmation(view, state, cost, rejected_ids)
        if state.unreproduced:
            return self._reproduce_timeout(view, state, cost, rejected_ids)
        if why := within_budget(2):
            return Proposal(conclude_reason=why + " (a test needs room for its confirmation run)")
        return kernel_need_said(self._best_test(view, state, cost, done, rejected_ids), view, ref)

    def _control(
        self, view: PlannerView, state: HistoryState, cost: float, done: set[str], rejected_ids: set[str]
    ) -> Proposal:
        """The configuration the fix changed, launched again without it, after the fix was confirmed on a
        request timeout (``HistoryState.weak``): the fix explains the timeout only if that still fails
        (issue 20, point 6); if it serves, the timeout was the host's load."""
        base, best = state.failing_baseline, state.best_fix
        assert base is not None and best is not None
        probes = state.extra_probes()
        attempt = 1 + sum(1 for e in view.experiments if e.purpose == "baseline" and e.baseline == base)
        exp_id = Experiment.make_id(base, None, "baseline", attempt=attempt, probes=probes)
        if exp_id in rejected_ids or exp_id in done:
            return Proposal(conclude_reason="the control run of the configuration that timed out was rejected")
        if why := over_budget(view, cost, 1):
            return Proposal(conclude_reason=why + f" (no control run: {best.change.describe()} served, but the "
                            "configuration without it was not launched again to show it still times out)")
        return Proposal(experiment=Experiment(
            id=exp_id, purpose="baseline", baseline=base, attempt=attempt, probes=probes, cost_estimate_s=cost,
            rationale=f"control: {best.change.describe()} served and was confirmed, but the failure it answers is "
            "a request timeout, which host load alone can cause or end; the configuration without it is launched "
            "again, and the change is the fix only if that still times out"))

    def _reproduce_timeout(
        self, view: PlannerView, state: HistoryState, cost: float, rejected_ids: set[str]
    ) -> Proposal:
        """The baseline again, unchanged, after a change moved the failure to a request that got no
        answer in time (``HistoryState.unreproduced``): the server came up and logged no error, so the
        change is progress, but a timeout on a host shared with other work is weak evidence; a change
        tested against it could seem to fix what was only load (issue 20, point 6)."""
        probes = state.extra_probes()
        exp_id = Experiment.make_id(state.baseline, None, "baseline", probes=probes)
        if exp_id in rejected_ids:
            return Proposal(conclude_reason="the re-run of the configuration that timed out was rejected")
        if why := over_budget(view, cost, 1):
            return Proposal(conclude_reason=why + " (the request timeout was not reproduced)")
        last = state.adoptions[-1]["change"] if state.adoptions else None
        moved = f"{Change.model_validate(last).describe()} got the server ready; " if last else ""
        return Proposal(
            experiment=Experiment(
                id=exp_id,
                purpose="baseline",
                baseline=state.baseline,
                probes=probes,
                cost_estimate_s=cost,
                rationale=f"{moved}its only failure is a request that got no answer in time, with no error in "
                "the log: on a shared host that may be load, so the same configuration is launched again "
                "before any change is tested against the timeout",
            )
        )

    def _first_run(
        self, view: PlannerView, state: HistoryState, cost: float, done: set[str], rejected_ids: set[str]
    ) -> Proposal:
        """The launch of the unchanged baseline that reproduces the failure (with the case's load)."""
        baseline = state.baseline
        probes = state.extra_probes()
        level = load_level(view.case)
        if level is not None:  # the case says how many requests at once reproduce it
            probes = [load_probe_for(view.case, level)]
        exp_id = Experiment.make_id(baseline, None, "baseline", probes=probes)
        if exp_id in done:
            return Proposal(conclude_reason="the baseline run gave no usable outcome")
        if exp_id in rejected_ids:
            return Proposal(conclude_reason="the baseline run was rejected; nothing to compare against")
        if why := over_budget(view, cost, 1):
            return Proposal(conclude_reason=why)
        return Proposal(
            experiment=Experiment(
                id=exp_id,
                purpose="baseline",
                baseline=baseline,
                probes=probes,
                cost_estimate_s=cost,
                rationale="reproduce the failure on the baseline to collect its log evidence"
                + (f" (with {probes[0].load_text()}, as the case says)" if probes else ""),
            )
        )

    def _confirmation(self, view: PlannerView, state: HistoryState, cost: float, rejected_ids: set[str]) -> Proposal:
        """A re-run of the best fix's configuration (the baseline now), to confirm the fix is not luck."""
        best = state.best_fix
        assert best is not None
        probes = state.extra_probes()
        attempt = state.confirmations + 1
        exp_id = Experiment.make_id(state.baseline, None, "confirm", attempt=attempt, probes=probes)
        if exp_id in rejected_ids:
            return Proposal(conclude_reason="the confirmation run was rejected")
        if why := over_budget(view, cost, 1):
            return Proposal(conclude_reason=why)
        facts = state.failing_reference.facts if state.failing_reference else {}
        nth = ""
        if state.confirmations_needed > 1:
            nth = f" ({attempt} of {state.confirmations_needed}: this run has seen a flaky outcome)"
        return Proposal(
            experiment=Experiment(
                id=exp_id,
                purpose="confirm",
                baseline=state.baseline,
                attempt=attempt,
                probes=probes,
                cost_estimate_s=cost,
                rationale=f"re-run the fixing configuration ({best.change.describe()}) to confirm the fix "
                f"is not luck{nth}",
                predictions=[
                    Prediction(hypothesis_id=h.id, expect="fixed")
                    for h in state.hypotheses
                    if h.status == "supported" and self.prediction(h, best.change, facts) != "persists"
                ],
            )
        )

    def _reproduce(
        self,
        view: PlannerView,
        state: HistoryState,
        cost: float,
        within_budget: Callable[[int], str | None],
        rejected_ids: set[str],
    ) -> Proposal:
        """The baseline served correctly although a failure was reported: launch it again with bursts
        of concurrent requests (``BURST_LEVELS``, escalating within one launch), then plainly (the
        failure may be intermittent; more repeats when the case says so); after that, conclude that it
        could not be reproduced."""
        case = view.case
        runs = state.baseline_runs
        if why_port := port_taken(view):
            return Proposal(conclude_reason=why_port)
        plain_runs = 3 if state.intermittent else 2
        # every repeat runs the case's own load (issue 20, point 6): a load-only failure cannot show without it
        probes: list[Probe] = state.extra_probes()
        if not state.load_tried:
            probes = [load_probe_for(case, n) for n in BURST_LEVELS]
            why = (
                "single requests pass, so send bursts of "
                f"{', '.join(map(str, BURST_LEVELS))} concurrent requests to the unchanged baseline"
            )
        elif runs < plain_runs + 1:
            why = (
                f"the baseline served correctly in {runs} launch{'es' if runs > 1 else ''} (bursts "
                "included) although a failure was reported: launch it again in case the failure is "
                "intermittent"
            )
        else:
            return Proposal(
                conclude_reason=f"the baseline served correctly in {count(runs, 'launch')} (one with bursts of up "
                f"to {BURST_LEVELS[-1]} concurrent requests): the failure could not be reproduced"
            )
        exp_id = Experiment.make_id(state.baseline, None, "baseline", attempt=runs + 1, probes=probes)
        if exp_id in rejected_ids:
            return Proposal(conclude_reason="the repeat of the baseline was rejected")
        if why_not := within_budget(1):
            return Proposal(conclude_reason=why_not)
        return Proposal(
            experiment=Experiment(
                id=exp_id,
                purpose="baseline",
                baseline=state.baseline,
                attempt=runs + 1,
                probes=probes,
                cost_estimate_s=cost,
                rationale=why,
            )
        )

    def _evidence(self, view: PlannerView, ref: Outcome, baseline: Baseline) -> ValueEvidence:
        fp = view.fingerprint
        total = fp.memory_total_mib / 1024 if fp and fp.memory_total_mib else None
        return ValueEvidence(facts=dict(ref.facts), total_gib=total, flags=dict(baseline.flags), out_of_memory=ran_out_of_memory(ref),
                             cpu_count=fp.cpu_count if fp else None, checkpoint=dict(fp.checkpoint) if fp else {})

    def _candidates(
        self,
        view: PlannerView,
        state: HistoryState,
        baseline: Baseline,
        ref: Outcome,
        done: set[str],
        rejected_ids: set[str],
        considered: list[dict[str, Any]],
    ) -> dict[str, tuple[Change, Intervention, str]]:
        """Untested one-variable changes that an open or supported hypothesis predicts may fix ``ref``."""
        rejected_keys = {r.change_key for r in view.rejections if r.change_key}
        probes = state.extra_probes()
        evidence = self._evidence(view, ref, baseline)
        live = [h for h in state.hypotheses if h.status in ("open", "supported")]
        # SGLang's printed settings of the failing run, parsed from its log at most once per step
        server_args = functools.cache(lambda: failure_evidence(ref).server_args)
        in_play = functools.cache(lambda: InPlay(view.fingerprint, baseline, server_args(), self.flags))
        kernel, asked = kernel_filter(view, ref), asked_features(view.experiments, ref, view.case)
        out: dict[str, tuple[Change, Intervention, str]] = {}
        for h in sorted(live, key=lambda h: -h.posterior):
            for iv in h.interventions:
                if (
                    iv.fact
                    and not iv.derive
                    and any(same_value(ref.facts.get(iv.fact), v) for v in iv.values)
                ):
                    considered.append(
                        {"hypothesis": h.id, "skipped": f"{iv.fact} is already {ref.facts[iv.fact]}"}
                    )
                    continue
                change, how = self.realize(iv, baseline, evidence)
                if change is None:
                    considered.append({"hypothesis": h.id, "skipped": how})
                    continue
                if changes_nothing(baseline, change):  # a launch identical to the baseline tests nothing
                    considered.append({"hypothesis": h.id, "skipped": f"{change.describe()} changes nothing"})
                    continue
                if (off := self._inert(change, baseline, ref, server_args)) is not None:
                    considered.append({"hypothesis": h.id, "skipped": off})
                    continue
                if off := _out_of_play(change, in_play(), kernel, evidence, asked, ref):
                    considered.append({"hypothesis": h.id, "skipped": off})
                    continue
                exp_id = Experiment.make_id(baseline, change, "test", probes=probes)
                if exp_id in done:
                    continue
                if (ran := launched_before(baseline, change, view.experiments, probes)) is not None:
                    considered.append({"hypothesis": h.id, "skipped": f"{change.describe()} launches {ran.id}'s configuration again"})
                    continue
                if exp_id in rejected_ids or change.key() in rejected_keys:
                    considered.append({"hypothesis": h.id, "skipped": f"{change.describe()} was rejected"})
                    continue
                prev = out.setdefault(change.key(), (change, iv, how))
                if iv.workaround and not prev[1].workaround:
                    # a change any hypothesis calls a workaround is one (as ``FixKeeper._fix_kind`` and the
                    # conclusion read it): it is ranked as one, whichever hypothesis proposed it first
                    out[change.key()] = (prev[0], prev[1].model_copy(update={"workaround": True}), prev[2])
        return keeping_intent(view, out, self.flags, {h.id for h in state.hypotheses if implicated_setting(h)})

    def _inert(
        self, change: Change, baseline: Baseline, ref: Outcome, server_args: Callable[[], dict[str, str]]
    ) -> str | None:
        """Why changing a flag cannot change the run, or None: it configures a feature whose
        switch (``FlagCatalog.feature_switch``: ``--enable-X`` or an ``--X-mode``) is off in the baseline and the effective
        configuration SGLang printed, so the feature's code never runs."""
        if change.kind != "flag" or self.flags is None:
            return None
        switch = self.flags.feature_switch(change.name)
        if switch is None:
            return None
        off = ("", "none", "null", "false", "0", "off", "disabled")
        if any(str(baseline.flags.get(o, "")).strip().lower() not in off for o in switch.option_strings):
            return None
        dest = switch.name.lstrip("-").replace("-", "_")
        effective = ref.facts.get(dest)
        if effective is None:
            effective = server_args().get(dest)
        if effective is not None and str(effective).strip().lower() not in off:
            return None
        if switch.default is not None and str(switch.default).strip().lower() not in off:
            return None
        return f"{change.name} configures {switch.name}'s feature, which is off here: changing it changes nothing"

    def _score(
        self, state: HistoryState, change: Change, iv: Intervention, cost: float, facts: dict[str, str]
    ) -> tuple[float, float]:
        """(score, P(fix)): P(fix) per host-second, times the performance factor, halved for workarounds."""
        p_fix = 0.0
        for h in state.hypotheses:
            if h.status not in ("open", "supported"):
                continue
            pred = self.prediction(h, change, facts)
            p_fix += h.posterior * tunables().choice.p_fix[pred]
        score = p_fix / max(cost, 1.0) * tunables().choice.performance_factor[iv.cost]
        if iv.workaround:
            score *= tunables().choice.workaround_factor
        return score, p_fix

    def _test(
        self,
        state: HistoryState,
        baseline: Baseline,
        scored: tuple[float, int, Change, float, str],
        cost: float,
        facts: dict[str, str],
        why: str,
        considered: list[dict[str, Any]],
    ) -> Proposal:
        score, _, change, p_fix, how = scored
        live = [h for h in state.hypotheses if h.status in ("open", "supported")]
        probes = state.extra_probes()
        predictions = [
            Prediction(hypothesis_id=h.id, expect=self.prediction(h, change, facts))  # type: ignore[arg-type]
            for h in live
        ]
        tested = [p.hypothesis_id for p in predictions if p.expect != "persists"]
        rationale = f"tests {', '.join(tested)}: P(fix) = {p_fix:.2f} for ~{count(cost, 'host-second', fmt='.0f')}; {why}"
        if how:
            rationale += f"; value: {how}"
        return Proposal(
            experiment=Experiment(
                id=Experiment.make_id(baseline, change, "test", probes=probes),
                purpose="test",
                baseline=baseline,
                change=change,
                probes=probes,
                predictions=predictions,
                rationale=rationale,
                cost_estimate_s=cost,
                score=score,
                proposed_by=self.name,
            ),
            considered=considered,
        )

    def _best_test(
        self, view: PlannerView, state: HistoryState, cost: float, done: set[str], rejected_ids: set[str]
    ) -> Proposal:
        baseline, ref = state.baseline, state.reference
        assert ref is not None
        # Signatures whose component is the case itself (a wrong model path, say) name a fault no launch
        # flag can fix: spending GPU time on flag changes would only repeat the same failure.
        # Likewise a component of the host itself (its port taken by another process): no setting of the
        # model reaches it.
        for where, place in (("case", "in the case"), ("host", "on the host")):
            faults = [m for m in ref.matches if m.kind in ("fatal", "error")
                      and any(c.startswith(where + ".") for c in m.components)]
            if faults:
                m = faults[0]
                lines = f" (log line {m.line_numbers[0]})" if m.line_numbers else ""
                return Proposal(conclude_reason=f"the failure is {place}, not the server's configuration: "
                                f"{m.meaning.rstrip('.')}{lines}; fix the {where} and run again")
        considered: list[dict[str, Any]] = []
        candidates = self._candidates(view, state, baseline, ref, done, rejected_ids, considered)
        if (why := package_dead_end(ref, state) or foreign_dead_end(view, ref, state)) is not None:
            return Proposal(conclude_reason=why, considered=considered)
        if not candidates:
            reason = "no untested change is left that an open hypothesis predicts would fix the failure"
            refuted = [h.id for h in state.hypotheses if h.status == "refuted"]
            if refuted:
                reason += (
                    f"; each change tested alone left the symptom in place ({', '.join(refuted)}), so the "
                    "failure may need several changes at once, or a cause outside the catalog"
                )
            return Proposal(conclude_reason=reason, considered=considered)
        candidates = _narrowed(_localise_if_it_pays(candidates, state, considered), state.localised, considered)
        scored = []
        for order, (change, iv, how) in enumerate(candidates.values()):
            score, p_fix = self._score(state, change, iv, cost, ref.facts)
            scored.append((score, -order, change, p_fix, how))
            considered.append({"change": change.describe(), "p_fix": round(p_fix, 3), "score": score})
        scored = remedy_before_drops(view, scored, state.hypotheses, self.flags)
        launches = serving_launches(view, state.extra_probes())
        if launches and (seen := seen_first(view, launches, baseline, scored, self.flags)):
            return self._test(state, baseline, seen[0], cost, ref.facts, seen[1], considered)
        first = next((t for t in scored if localiser_of(t[2]) is not None), None)
        if first is not None:
            return self._test(state, baseline, first, cost, ref.facts, _localise_first(first[2]), considered)
        scored = ranked(scored, state.hypotheses)
        best_p = possible_share(max(t[3] for t in scored), view, ref, state.hypotheses,
                                lambda h: any(self.prediction(h, t[2], ref.facts) != "persists" for t in scored))
        if best_p < tunables().choice.min_test_p and tested_any(view):
            return Proposal(conclude_reason=f"no untested change is likely enough to be worth a launch (the best "
                            f"has P(fix) = {best_p:.3f}, below {tunables().choice.min_test_p:g})", considered=considered)
        why = f"the best probability per host-second among {count(len(scored), 'candidate change')}"
        return self._test(state, baseline, scored[0], cost, ref.facts, why, considered)

    def _alternative(
        self, view: PlannerView, state: HistoryState, cost: float, done: set[str], rejected_ids: set[str]
    ) -> Proposal | None:
        """After a workaround (or a costly change) fixed the failure: the best untested root-cause change
        from the same failing baseline, if one is likely enough and the budget leaves room for it and a
        confirmation. The user's own settings the failure implicates (``intent_reverts``), and the other
        implementations of the subsystem that reads a value of the user's the workaround dropped
        (``intent_alternatives``), are tried however unlikely the ledger now makes them, up to
        ``INTENT_LAUNCHES`` launches each (``agent.planning.intent``): the workaround silences a check or
        drops what the user chose; a root fix keeps it."""
        best = state.best_fix
        base, ref = state.failing_baseline, state.failing_reference
        featured = own_first(view, state, self.flags, feature_reverts(view, state, self.flags, implicated_setting),
                             spent_after_fix(view, state, lambda ch: ch.after is None) < INTENT_LAUNCHES,
                             dropped_feature(view, state, self.flags))
        if best is None or base is None or ref is None or not (best.workaround or best.cost == "high" or featured):
            return None
        budget = view.case.budget
        if view.launches + 2 > budget.experiments or view.host_seconds + 2 * cost > budget.host_seconds:
            return None
        considered: list[dict[str, Any]] = []
        candidates = self._candidates(view, state, base, ref, done, rejected_ids, considered)
        narrower = narrower_keys(view, state, (c[0] for c in candidates.values()))
        readers = intent_alternatives(view, state, (c[0] for c in candidates.values()), self.flags)
        intent = intent_reverts(view, state, self.flags) | readers | narrower
        scored = []
        for order, (change, iv, how) in enumerate(candidates.values()):
            if (iv.workaround and change.key() not in narrower) or broad_switch(change) is not None \
                    or (COST_ORDER[iv.cost] >= COST_ORDER[best.cost] and change.key() not in narrower | set(featured)):
                continue  # (inside a broad switch-off another implementation is narrower, if a workaround itself)
            score, p_fix = self._score(state, change, as_narrower(iv) if change.key() in narrower else iv, cost, ref.facts)
            if change.key() in featured:  # the user's own settings inside the feature dropped, most implicated first
                score += 2.0 - 0.01 * featured.index(change.key())
            elif change.key() in narrower:
                pass  # tried however unlikely, but after a likelier root fix the ledger names elsewhere
            elif change.key() in intent:  # ahead of the ledger's own choices, whose scores are per host-second;
                score += 1.5 if change.key() in readers else 1.0  # the path the workaround's value selects first
            elif p_fix < tunables().choice.min_alternative_p:
                continue
            scored.append((score, -order, change, p_fix, how))
        if not scored:
            return None
        scored.sort(key=lambda t: (t[0], t[1]), reverse=True)
        considered += [{"change": c.describe(), "p_fix": round(p, 3), "score": s} for s, _, c, p, _ in scored]
        why = (
            f"{best.change.describe()} fixed the failure but is a "
            f"{'workaround' if best.workaround else 'costly change'}: a root-cause fix is tested first"
        )
        if scored[0][2].key() in featured:
            why = own_reason(best.change, scored[0][2])
        elif scored[0][2].key() in narrower:
            why += (f" (a narrower change inside what {best.change.describe()} turned off as a whole: that "
                    "switch-off is a workaround until one is found)")
        elif scored[0][2].key() in intent:
            why += (" (another implementation of the subsystem that reads the user's "
                    f"{best.change.name}, keeping the user's value)" if scored[0][2].name != best.change.name
                    and scored[0][2].after is not None else
                    " (the user's own setting the failure implicates, reverted before the workaround is reported)")
        return self._test(state, base, scored[0], cost, ref.facts, why, considered)


def _narrowed(
    candidates: dict[str, tuple[Change, Intervention, str]], localised: list[str], considered: list[dict[str, Any]]
) -> dict[str, tuple[Change, Intervention, str]]:
    """The candidates that configure a subsystem a localising launch's true frames name (``localised``,
    knowledge/subsystems.toml ``flags``/``env``), while any is left; else all of them (issue 20, point 3:
    narrow inside the implicated subsystem)."""
    subs = [s for s in load_subsystems().subsystems if s.id in localised]
    inside = {
        k: c for k, c in candidates.items()
        if any((p := (s.flags if c[0].kind == "flag" else s.env)) is not None and p.search(c[0].name) for s in subs)
    }
    if not inside:
        return candidates
    considered.append({"narrowed": f"to the {', '.join(localised)} subsystem the localising launch's frames "
                       f"name: {len(inside)} of {len(candidates)} candidate changes"})
    return inside


def _out_of_play(change: Change, in_play: InPlay, kernel: Callable[[Change, InPlay], str | None],
                 evidence: ValueEvidence, asked: set[str], ref: Outcome) -> str | None:
    """Why ``change`` cannot matter for the failing run ``ref`` here, or None: its subsystem is not in play, it
    leaves no room for the KV cache, it names a kernel this host cannot run, it is another engine's setting, or
    its code reaches the device only for request features the failing requests never ``asked``."""
    return (in_play.why_not(change) or leaves_no_kv_cache(change.name, change.after, evidence)
            or kernel(change, in_play) or foreign_setting(change, in_play)
            or in_play.off_the_device(change, ref.symptoms, asked) or in_play.not_reached(change, ref))


def _localise_if_it_pays(
    candidates: dict[str, tuple[Change, Intervention, str]], state: HistoryState, considered: list[dict[str, Any]]
) -> dict[str, tuple[Change, Intervention, str]]:
    """``candidates`` without the localising launches when the failure comes and goes (seen flaky, or the
    case says so): such a launch pays only on a failure that reproduces every time. On an intermittent one
    a localising launch that serves says nothing (the fault may just not have fired), one that fails shows
    a failure already seen, and the best change needs its confirmation runs anyway (issue 20, point 3:
    localise first only where it pays)."""
    if not (state.flaky or state.intermittent):
        return candidates
    kept = {k: c for k, c in candidates.items() if localiser_of(c[0]) is None}
    if len(kept) < len(candidates) and kept:
        considered.append({"skipped": "a localising launch: the failure comes and goes, so a launch that "
                           "serves would not say where it is"})
        return kept
    return candidates


def _localise_first(change: Change) -> str:
    """Why a localiser is launched before any guess (issue 20, point 3)."""
    return (
        f"localise first: the log says its stack may be wrong, so the frame the error surfaced in is not "
        f"evidence; {change.describe()} fixes nothing but makes the report true, and the next change is "
        "narrowed to the subsystem its frames name"
    )


def intent_reverts(view: PlannerView, state: HistoryState, flags: FlagCatalog | None) -> set[str]:
    """Keys of the changes that revert a setting of the failing baseline the failure implicates
    (``agent.planning.generators.settings.implicated_setting``, or a setting sharing a word with the
    workaround that served: a variable that allows a longer X beside the user's ``--X``; any of them when
    the workaround turned off a setting the user keeps, ``agent.planning.served.user_keeps``) as the case
    itself sets it (not one this run adopted past a blocker), while fewer than ``INTENT_LAUNCHES`` such
    reverts were launched after the best fix; else empty. Never the removal of a feature's selector
    (``agent.planning.intent.drops_feature``): it gives up the whole feature the workaround kept."""
    best, base = state.best_fix, state.failing_baseline
    if best is None or base is None or spent_after_fix(view, state, lambda ch: ch.after is None) >= INTENT_LAUNCHES:
        return set()
    workaround_words = stems(best.change.name.lstrip("-"))
    # the workaround turned off what the user needs (a feature the description says is on for a purpose):
    # each of the user's own deliberate settings is a candidate root fix, not only the implicated ones
    drops_kept = best.change.kind == "flag" and best.change.name in user_keeps(view.case)
    out: set[str] = set()
    for h in state.hypotheses:
        if h.status not in ("open", "supported") or not h.id.startswith("revert:"):
            continue
        for iv in h.interventions:
            if iv.workaround:
                continue
            for name in iv.names:
                users = view.case.baseline.value(iv.kind, name)
                if same_value(users, None) or not same_value(users, base.value(iv.kind, name)):
                    continue  # not the user's own setting: this run set it (a blocker's change)
                revert = Change(kind=iv.kind, name=name, before=base.value(iv.kind, name), after=None)
                if drops_feature(view.case.baseline, revert, flags) is None and (
                        drops_kept or implicated_setting(h) or stems(name.lstrip("-")) & workaround_words):
                    out.add(revert.key())
    return out





