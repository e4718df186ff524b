"""A feature drop that served while the failure ran in the code of another setting the user chose (issue
20, point 5; "0 wrong isolated"): two pipeline stages with the hierarchical cache crash under load in the
pipeline stages' event loop; dropping the hierarchical cache serves and holds on its re-run, but the frames
never ran in its code, so the run ends not_isolated, the drop a workaround and the user's --pp-size named.
When the crash is raised inside the hierarchical cache's own code, the drop stays the answer.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), the repository's knowledge
(knowledge/subsystems.toml ``pipeline_parallel`` and ``hierarchical_cache``), the log reader, the rule
planner's history and the ending; the tracebacks follow SGLang 0.5.23's scheduler
(srt/managers/scheduler_pp_mixin.py event_loop_pp), as in https://github.com/sgl-project/sglang/pull/27285.
"""

from __future__ import annotations

from test_localise import FLAGS, H200, SERVED, SITE

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change, Conclusion, Experiment
from agent.planning.catalog import load_catalog
from agent.planning.conclusion import conclusion_of
from agent.planning.planner import PlannerView, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from tools.probes import ProbeResult
from tools.signatures import for_engine, load_signatures

FEATURE = "--enable-hierarchical-cache"
ARGS = "[2026-12-02 10:00:00] server_args=ServerArgs(model_path='/m/q', pp_size=2, enable_hierarchical_cache=True)\n"
LOOP = f"""[2026-12-02 10:01:00] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 4001, in run_scheduler_process
    scheduler.run_event_loop()
  File "{SITE}/sglang/srt/managers/scheduler_pp_mixin.py", line 187, in event_loop_pp
    result = self.run_batch(self.cur_batch)
"""
IN_THE_MODEL = LOOP + f"""  File "{SITE}/sglang/srt/managers/scheduler.py", line 2694, in run_batch
    batch_result = self.model_worker.forward_batch_generation(
  File "{SITE}/sglang/srt/layers/radix_attention.py", line 124, in forward
    k = k.view(-1, self.tp_k_head_num, self.qk_head_dim)
RuntimeError: shape '[3013, -1, 128]' is invalid for input of size 8192000
"""
IN_THE_FEATURE = LOOP + f"""  File "{SITE}/sglang/srt/mem_cache/hiradix_cache.py", line 640, in init_load_back
    assert node.host_value is not None
AssertionError
"""


def _ending(crash: str, flags: dict[str, object]) -> Conclusion:
    """The ending of a run whose baseline (``flags``) crashed with ``crash`` under load, whose test without
    the hierarchical cache served and whose re-run of that held."""
    case = Case.model_validate({"name": "c", "model": {"path": "/m/q"}, "baseline": {"flags": flags, "env": {}}})
    planner, view = RulePlanner(load_catalog(), FLAGS), PlannerView(case=case, fingerprint=H200)
    drop = Change(kind="flag", name=FEATURE, before=True, after=None)
    off = Baseline(flags={k: v for k, v in case.baseline.flags.items() if k != FEATURE}, env={})
    runs = [(Experiment(id="e1", purpose="baseline", baseline=case.baseline, status="done"), ARGS + crash, "crashed"),
            (Experiment(id="e2", purpose="test", baseline=case.baseline, change=drop, status="done"), SERVED, "ready"),
            (Experiment(id="e3", purpose="confirm", baseline=off, attempt=1, status="done"), SERVED, "ready")]
    sigs = for_engine(load_signatures(), "sglang")
    ok = [ProbeResult(probe_id="chat", ok=True, status="ok", http_status=200, text="Paris", latency_s=1.5)]
    for exp, log, status in runs:
        raw = RawEvidence.from_log(exp.id, log, sigs, "x.log").model_copy(
            update={"status": status} | ({"probes": ok} if status == "ready" else {}))
        view.experiments.append(exp)
        view.outcomes.append(classify_outcome(raw))
        view.launches += 1
    state = {"case": case.model_dump(mode="json"), "status": "done", "fingerprint": H200.model_dump(mode="json"),
             "experiments": [e.model_dump(mode="json") for e in view.experiments],
             "outcomes": [o.model_dump(mode="json") for o in view.outcomes],
             "hypotheses": [h.model_dump(mode="json") for h in planner.history(view).hypotheses]}
    return conclusion_of(state)  # type: ignore[arg-type]


def test_a_drop_that_avoids_a_failure_in_another_users_setting_is_a_workaround_not_the_fix() -> None:
    c = _ending(IN_THE_MODEL, {"--pp-size": 2, FEATURE: True})
    assert c.status == "not_isolated" and c.fix is None, c.reason
    assert "only a workaround" in c.reason and "--pp-size 2" in c.reason and "event_loop_pp" in c.reason, c.reason
    assert [a["name"] for a in c.alternatives if a["workaround"]] == [FEATURE]


def test_a_drop_that_avoids_a_failure_in_the_features_own_code_is_still_the_answer() -> None:
    c = _ending(IN_THE_FEATURE, {"--pp-size": 2, FEATURE: True})
    assert c.status == "isolated", c.reason
    assert c.fix is not None and c.fix.name == FEATURE and c.fix.after is None


def test_without_a_setting_of_the_users_where_it_failed_the_drop_stays_the_answer() -> None:
    """The same frames with the pipeline size left to the engine: no setting of the user's is implicated."""
    c = _ending(IN_THE_MODEL, {FEATURE: True})
    assert c.status == "isolated", c.reason
