"""A fix confirmed by another value of its own variable (issue 20, points 5 and 6).

The user set ``--attention-backend triton`` and the server crashes in the triton backend. Another backend
serves; the user's own setting is then reverted (the smallest change from the user's command), and that
serves too. Two launches without the user's value both served: if the variable did not matter and the
failure were flaky, both would have been luck, as unlikely as a passing re-run of the revert. So the revert
is confirmed by its sibling and no re-run is launched; a reviewer sees which launch confirmed it.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its scheduler exception and
``server_args=`` line as SGLang logs them, the repository's knowledge, the rule planner and the conclusion.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import after_failed_launch

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.catalog import load_catalog
from agent.planning.conclusion import conclusion_of
from agent.planning.planner import PlannerView, Proposal, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.probes import ProbeResult
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/usr/local/lib/python3.12/dist-packages"
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1,
                       compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")


def _args(backend: str) -> str:
    return (f"[2026-12-01 09:59:00] server_args=ServerArgs(model_path='/m/model', attention_backend='{backend}', "
            "tp_size=1)\n[2026-12-01 10:00:00] The server is fired up and ready to roll!\n")


CRASH = _args("triton") + f"""[2026-12-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/sglang/srt/layers/attention/triton_backend.py", line 612, in forward_decode
    assert self.kv_indptr is not None
AssertionError
[2026-12-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


def _served(planner: RulePlanner, view: PlannerView, exp: Experiment, log: str) -> Proposal:
    raw = RawEvidence.from_log(exp.id, log, for_engine(load_signatures(), "sglang"), "x.log")
    probes = [ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1)]
    view.experiments.append(exp.model_copy(update={"status": "done"}))
    view.outcomes.append(classify_outcome(raw.model_copy(update={"status": "ready", "probes": probes})))
    view.launches += 1
    return planner.propose(view, planner.history(view))


def _test(case: Case, change: Change) -> Experiment:
    return Experiment(id=Experiment.make_id(case.baseline, change, "test"), purpose="test", baseline=case.baseline,
                      change=change, attempt=1, status="done")


def _run() -> tuple[Case, PlannerView, RulePlanner, Experiment]:
    base = Baseline(flags={"--model-path": "/m/model", "--attention-backend": "triton"})
    case = Case.model_validate({"name": "c", "model": {"path": "/m/model"}, "baseline": base.model_dump()})
    view = PlannerView(case=case, fingerprint=HOST)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    after_failed_launch(planner, view, first, CRASH)
    other = _test(case, Change(kind="flag", name="--attention-backend", before="triton", after="flashinfer"))
    return case, view, planner, other


def test_a_revert_that_serves_after_another_value_served_is_confirmed_without_a_re_run() -> None:
    case, view, planner, other = _run()
    nxt = _served(planner, view, other, _args("flashinfer"))
    revert = nxt.experiment
    assert revert is not None and revert.purpose == "test", nxt.conclude_reason
    assert revert.change == Change(kind="flag", name="--attention-backend", before="triton", after=None), \
        "the user's own setting is reverted before another value of it is kept"

    done = _served(planner, view, revert, _args("fa3"))  # the engine's own choice on this host
    assert done.experiment is None, f"no re-run: {done.experiment and done.experiment.rationale}"
    state = planner.history(view)
    assert state.confirmed_experiment_id == revert.id
    assert state.best_fix is not None and state.best_fix.change == revert.change

    run = {"case": case.model_dump(), "experiments": [e.model_dump() for e in view.experiments],
           "outcomes": [o.model_dump() for o in view.outcomes],
           "hypotheses": [h.model_dump() for h in state.hypotheses], "conclude_reason": done.conclude_reason}
    ending = conclusion_of(run)  # type: ignore[arg-type]
    assert ending.status == "isolated", ending.reason
    assert ending.fix == revert.change
    assert ending.confirmation_experiment_id in (other.id, revert.id)


def test_a_sibling_the_engine_resolved_back_confirms_nothing() -> None:
    """The other value served, but the revert's launch printed the user's value again: that launch ran the
    failing configuration, so it is no second pass of anything and the other value still needs its re-run."""
    case, view, planner, other = _run()
    revert = _served(planner, view, other, _args("flashinfer")).experiment
    assert revert is not None and revert.change is not None and revert.change.after is None
    nxt = _served(planner, view, revert, _args("triton"))
    state = planner.history(view)
    assert state.confirmed_experiment_id is None
    assert nxt.experiment is not None and nxt.experiment.purpose == "confirm", nxt.conclude_reason
