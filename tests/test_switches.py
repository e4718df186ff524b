"""Root fix before workaround (issue 20, point 5): once a change that took a whole subsystem out served,
the other implementation of that subsystem, chosen by an environment variable (knowledge/switches.toml,
from the code that reads it), is tested from the failing baseline before the workaround is reported; on a
platform the variable is not read on, nothing is proposed.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), the repository's knowledge
and the rule planner; the failing log is ROCm's HSA abort as every rank prints it.
"""

from __future__ import annotations

from pathlib import Path

from test_localise import FLAGS, H200, MI300X, SERVED, _launch

from agent.domain.case import Case
from agent.domain.knowledge_dir import use_knowledge
from agent.domain.models import Conclusion
from agent.planning.catalog import load_catalog
from agent.planning.generators.switches import SWITCH_PREFIX
from agent.planning.planner import PlannerView, RulePlanner
from agent.planning.switches import load_switches
from tools.fingerprint import HostFingerprint

ARGS = "[2026-12-02 10:00:00] server_args=ServerArgs(model_path='/m/q', tp_size=8)\n"
HSA = (":0:rocdevice.cpp            :3020: 8243150981 us:  Callback: Queue 0x7f2a4c600000 Aborting with error : "
       "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016\n"
       "[2026-12-02 10:01:00] Received sigquit from a child process. It usually means the child failed.\n")


def _eight(fp: HostFingerprint) -> tuple[RulePlanner, PlannerView]:
    case = Case.model_validate({"name": "c", "model": {"path": "/m/q"},
                                "baseline": {"flags": {"--tp-size": 8}, "env": {}}})
    return RulePlanner(load_catalog(), FLAGS), PlannerView(case=case, fingerprint=fp.model_copy(update={"gpu_count": 8}))


def _served_without_the_subsystem(fp: HostFingerprint) -> tuple[RulePlanner, PlannerView]:
    planner, view = _eight(fp)
    _launch(planner, view, ARGS + HSA)
    off = _launch(planner, view, ARGS + SERVED, status="ready")
    assert off.change is not None and off.change.name == "--disable-custom-all-reduce", off.change
    return planner, view


def test_after_the_subsystem_off_served_the_other_implementation_is_tested_from_the_failing_baseline() -> None:
    planner, view = _served_without_the_subsystem(MI300X)
    nxt = planner.propose(view, planner.history(view)).experiment
    sw = next(s for s in load_switches() if "rocm" in s.platforms)
    assert nxt is not None and nxt.change is not None
    assert (nxt.change.kind, nxt.change.name, nxt.change.after) == ("env", sw.env, sw.other)
    assert "--disable-custom-all-reduce" not in nxt.baseline.flags  # the workaround is not kept under it
    assert "workaround" in nxt.rationale


def test_a_switch_read_on_another_platform_is_not_proposed() -> None:
    planner, view = _served_without_the_subsystem(H200)
    state = planner.history(view)
    rocm_only = {s.env for s in load_switches() if "cuda" not in s.platforms}
    assert rocm_only and not any(iv.names[0] in rocm_only for h in state.hypotheses for iv in h.interventions)


def test_a_switch_weighs_as_much_as_another_implementation_of_an_implicated_component() -> None:
    from agent.planning.generators import component, switches

    assert switches.WEIGHT == component.BASE_WEIGHT
    assert switches.SUSPECT_FACTOR == component.SUSPECT_FACTOR


def test_an_asynchronous_fault_makes_the_default_implementation_of_a_switch_a_suspect_without_the_catalog(
    tmp_path: Path,
) -> None:
    """Without any symptom rule (the empty-catalog ablation), ROCm's hardware exception on a TP 8 launch
    makes AITER's custom all-reduce a suspect: it ran (the collectives are in play with 8 ranks), and the
    fault's report names no place. Its other implementation is the test, the subsystem off a workaround.
    On one GPU no collective runs, so nothing of it is proposed."""
    from bench.run import empty_catalog_knowledge

    sw = next(s for s in load_switches() if "rocm" in s.platforms)
    with use_knowledge(empty_catalog_knowledge(tmp_path)):
        planner, view = _eight(MI300X)
        _launch(planner, view, ARGS + HSA)
        ledger = {h.id: h for h in planner.history(view).hypotheses}
        h = ledger.get(f"{SWITCH_PREFIX}{sw.id}")
        assert h is not None, sorted(ledger)
        assert not any(i.startswith("symptom:") for i in ledger), sorted(ledger)
        root, off = h.interventions
        assert (root.kind, root.names, root.values, root.workaround) == ("env", [sw.env], [sw.other], False)
        assert off.names == sw.turned_off_by[:1] and off.workaround

        case = Case.model_validate({"name": "c", "model": {"path": "/m/q"}, "baseline": {"flags": {}, "env": {}}})
        one = PlannerView(case=case, fingerprint=MI300X)
        _launch(planner, one, ARGS.replace("tp_size=8", "tp_size=1") + HSA)
        assert not any(h.id == f"{SWITCH_PREFIX}{sw.id}" for h in planner.history(one).hypotheses)


def _narrower_tried_and_failed() -> tuple[RulePlanner, PlannerView]:
    """Custom all-reduce off served on a TP 8 ROCm host; the planner's narrower launches inside the
    collectives (at most two, each inside what the switch-off took out) all fail with the same fault,
    and it then confirms the switch-off."""
    from agent.planning.intent import inside_broad
    from agent.planning.switches import broad_switch

    planner, view = _served_without_the_subsystem(MI300X)
    off = view.experiments[-1]
    broad = broad_switch(off.change)
    assert broad is not None
    narrower = []
    for _ in range(4):
        nxt = planner.propose(view, planner.history(view)).experiment
        assert nxt is not None
        if nxt.purpose != "test":
            break
        assert nxt.change is not None and inside_broad(broad, nxt.change), nxt.change
        narrower.append(_launch(planner, view, ARGS + HSA))
    assert 1 <= len(narrower) <= 2
    assert nxt.purpose == "confirm" and nxt.baseline == off.config()
    _launch(planner, view, ARGS + SERVED, status="ready")
    return planner, view


def _ending(planner: RulePlanner, view: PlannerView) -> Conclusion:
    from agent.planning.conclusion import conclusion_of

    state = {"case": view.case.model_dump(mode="json"), "status": "done",
             "fingerprint": view.fingerprint.model_dump(mode="json") if view.fingerprint else None,
             "experiments": [e.model_dump(mode="json") for e in view.experiments],
             "outcomes": [o.model_dump(mode="json") for o in view.outcomes],
             "hypotheses": [h.model_dump(mode="json") for h in planner.history(view).hypotheses]}
    return conclusion_of(state)  # type: ignore[arg-type]


def test_a_switch_off_whose_every_implementation_failed_is_the_fix() -> None:
    """Custom all-reduce off served (a broad switch-off, knowledge/switches.toml [[broad]]); the planner
    tried the other custom all-reduce this platform has (the [[switch]]) from the failing configuration
    before confirming, and it failed too: both implementations the switch-off takes out fail here, so
    nothing narrower is left and the switch-off is the fix, isolated, with the tests that show it in the
    reason (issue 20, point 5)."""
    planner, view = _narrower_tried_and_failed()
    sw = next(s for s in load_switches() if "rocm" in s.platforms)
    tried = next(e for e in view.experiments if e.change is not None and e.change.name == sw.env)
    c = _ending(planner, view)
    assert c.status == "isolated", c.reason
    assert c.fix is not None and c.fix.name == "--disable-custom-all-reduce"
    assert "is the fix, not a workaround" in c.reason and tried.id in c.reason
    assert not any(a["workaround"] and a["name"] == "--disable-custom-all-reduce" for a in c.alternatives)


def test_a_switch_off_stays_a_workaround_when_its_implementations_are_not_known_to_be_all(tmp_path: Path) -> None:
    """The same run, with a knowledge folder whose [[broad]] entry does not say the switches list every
    implementation it takes out (``closed``): a narrower change may exist that the planner does not know,
    so the run ends not_isolated naming the switch-off as the workaround, never isolated."""
    import shutil

    src = Path(__file__).resolve().parents[1] / "knowledge" / "switches.toml"
    folder = tmp_path / "k"
    folder.mkdir()
    text = src.read_text()
    assert "closed = true" in text
    (folder / "switches.toml").write_text(text.replace("closed = true\n", ""))
    shutil.copy(src.parent / "subsystems.toml", folder / "subsystems.toml")
    with use_knowledge(folder):
        planner, view = _narrower_tried_and_failed()
        c = _ending(planner, view)
    assert c.status == "not_isolated" and c.fix is None
    assert "a broad switch-off" in c.reason and "only a workaround" in c.reason and "--disable-custom-all-reduce" in c.reason


def test_a_switch_off_is_a_workaround_while_the_other_implementation_is_untested() -> None:
    """Custom all-reduce off served and held, but the other custom all-reduce was never launched: the
    run ends not_isolated naming the switch-off as the workaround."""
    planner, view = _served_without_the_subsystem(MI300X)
    off = view.experiments[-1]
    confirm = off.model_copy(update={"id": "exp-confirm", "purpose": "confirm", "change": None,
                                     "baseline": off.config()})
    view.experiments.append(confirm)
    view.outcomes.append(view.outcomes[-1].model_copy(update={"experiment_id": confirm.id}))
    c = _ending(planner, view)
    assert c.status == "not_isolated" and c.fix is None, c.reason
    assert "a broad switch-off" in c.reason


def test_off_cuda_the_overlap_schedulers_barrier_is_tried_before_overlap_off_is_reported() -> None:
    """On one MI300X (no collectives run) a hardware exception; the overlap scheduler off serves. On a
    platform other than CUDA SGLang runs that scheduler without its write-after-read barrier unless a
    variable asks for it (scheduler.py ``is_cuda() or envs.SGLANG_ENABLE_WAR_BARRIER.get()``): the barrier
    on, the overlap kept, is the next test. On an H200 the barrier always runs: nothing is proposed."""
    from planner_steps import after_served_launch, baseline_failed_with, experiment_of

    from agent.domain.models import Change

    off = Change(kind="flag", name="--disable-overlap-schedule", before=None, after=True)
    sw = next(s for s in load_switches() if "--disable-overlap-schedule" in s.turned_off_by)
    for fp, expected in ((MI300X, True), (H200, False)):
        planner, view, _ = baseline_failed_with(fp.model_copy(update={"gpu_count": 1}), {"--model-path": "/m/q"},
                                                ARGS.replace("tp_size=8", "tp_size=1") + HSA, FLAGS)
        nxt = after_served_launch(planner, view, experiment_of(view.case.baseline, off), ARGS + SERVED).experiment
        barrier = nxt is not None and nxt.change is not None and (nxt.change.kind, nxt.change.name) == ("env", sw.env)
        assert barrier is expected, nxt
        if expected:
            assert nxt is not None and nxt.change is not None and nxt.change.after == sw.other
            assert "workaround" in nxt.rationale
