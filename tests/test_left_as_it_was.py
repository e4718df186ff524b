"""A change the engine resolved back to what it ran before is no test of anything (issue 20, point 6).

Unsetting a flag whose default the engine resolves to the same value (``--attention-backend`` unset on a
host where SGLang picks the user's backend anyway) launches the failing configuration again. If that launch
serves on a flaky failure, the success was luck: the change is not a fix, the hypotheses that predicted it
would fix it are ruled out, and the run now knows the failure is flaky.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its ``server_args=`` line
as SGLang logs it, the repository's knowledge and the rule planner.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import after_failed_launch

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, RulePlanner
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
ARGS = "[2026-12-01 09:59:00] server_args=ServerArgs(model_path='/m/model', attention_backend='triton', tp_size=1)\n"
READY = ARGS + "[2026-12-01 10:00:00] The server is fired up and ready to roll!\n"
CRASH = READY + f"""[2026-12-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/sglang/srt/layers/attention/triton_backend.py", line 612, in forward_decode
    assert self.kv_indptr is not None
AssertionError
[2026-12-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


def test_a_change_the_engine_resolved_back_to_the_failing_value_is_not_a_fix_even_when_it_served() -> None:
    base = Baseline(flags={"--model-path": "/m/model", "--attention-backend": "triton"})
    case = Case.model_validate({"name": "c", "model": {"path": "/m/model"}, "baseline": base.model_dump()})
    view = PlannerView(case=case, fingerprint=HOST)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    after_failed_launch(planner, view, first, CRASH)
    revert = [h for h in planner.history(view).hypotheses if h.id == "revert:--attention-backend"]
    assert revert and revert[0].status == "open"

    change = Change(kind="flag", name="--attention-backend", before="triton", after=None)
    test = Experiment(id=Experiment.make_id(case.baseline, change, "test"), purpose="test", baseline=case.baseline,
                      change=change, attempt=1, status="done")
    # the engine picked triton again without the flag, and the launch served
    raw = RawEvidence.from_log(test.id, READY, for_engine(load_signatures(), "sglang"), "x.log")
    view.experiments.append(test)
    view.outcomes.append(classify_outcome(raw.model_copy(update={
        "status": "ready", "probes": [ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1)]})))
    view.launches += 1

    state = planner.history(view)
    assert not state.fixes, "a launch of the failing configuration that served is not a fix"
    assert state.flaky, "the failing configuration served: the failure is flaky"
    h = next(h for h in state.hypotheses if h.id == "revert:--attention-backend")
    assert h.status == "refuted"
    assert any("attention_backend=triton" in e.detail for e in h.evidence)
    nxt = planner.propose(view, state).experiment
    assert nxt is None or nxt.purpose != "confirm", "nothing to confirm"
