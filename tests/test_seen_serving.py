"""A change whose configuration the run already saw serve is tried first on the next blocker (issue 20: the
fewest launches; the run's own evidence before generic guesses).

The user runs with the hierarchical cache and sizes it with ``--hicache-size``; the server does not start
(the host pool does not fit). Dropping the hierarchical cache serves; reverting the size gets further and
crashes under requests instead. From that new baseline, dropping the hierarchical cache gives a launch that
differs from the one that served only in ``--hicache-size``, which configures nothing once the cache is off:
the run has seen that configuration serve, so it is the next test, ahead of generic switches.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its error and exception texts
as SGLang logs them, the repository's knowledge and the rule planner.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import after_failed_launch, after_served_launch, baseline_failed_with, experiment_of

from agent.domain.case import Case
from agent.domain.models import Baseline, Change
from agent.planning.planner import PlannerView
from agent.planning.seen_serving import _inert_differences
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/usr/local/lib/python3.12/dist-packages"
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=2,
                       compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")
READY = "[2026-12-01 10:00:00] The server is fired up and ready to roll!\n"
#: the host pool's size check at start-up (mem_cache/memory_pool_host.py, HostKVCache.__init__)
NO_ROOM = f"""[2026-12-01 09:59:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler = Scheduler(
  File "{SITE}/sglang/srt/mem_cache/memory_pool_host.py", line 120, in __init__
    raise ValueError(
ValueError: Not enough host memory available. Requesting 160.00 GB but only have 141.20 GB free. Please reduce the size of the hierarchical cache.
[2026-12-01 09:59:30] Received sigquit from a child process. It usually means the child failed.
"""
#: a crash under requests in the cache's load-back path
UNDER_LOAD = READY + f"""[2026-12-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_pp()
  File "{SITE}/sglang/srt/managers/scheduler_pp_mixin.py", line 212, in event_loop_pp
    self.process_batch_result(batch, result)
  File "{SITE}/sglang/srt/mem_cache/hiradix_cache.py", line 702, in check_hicache_events
    kv = kv.view(n, -1, 128)
RuntimeError: shape '[3013, -1, 128]' is invalid for input of size 8192000
[2026-12-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""




def test_a_configuration_seen_serving_is_the_next_test_on_the_blocker_after() -> None:
    planner, view, _ = baseline_failed_with(HOST, {"--model-path": "/m/model", "--pp-size": "2",
                                                   "--enable-hierarchical-cache": True, "--hicache-size": "160"},
                                            NO_ROOM, FLAGS)
    base = view.case.baseline

    drop = Change(kind="flag", name="--enable-hierarchical-cache", before=True, after=None)
    dropped = experiment_of(base, drop)
    after_served_launch(planner, view, dropped, READY)
    size = Change(kind="flag", name="--hicache-size", before="160", after=None)
    nxt = after_failed_launch(planner, view, experiment_of(base, size), UNDER_LOAD)

    state = planner.history(view)
    assert state.baseline == base.apply(size), "getting past the start-up failure is progress"
    assert nxt.experiment is not None, nxt.conclude_reason
    assert nxt.experiment.change == Change(kind="flag", name="--enable-hierarchical-cache", before=True, after=None)
    assert f"already served in {dropped.id}" in nxt.experiment.rationale
    assert "--hicache-size" in nxt.experiment.rationale


@pytest.mark.parametrize("switched_on", [
    {"--pp-size": "2"},
    {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "/m/draft"},
    {"--disaggregation-mode": "prefill"},
    {"--lora-paths": "/m/lora"},
    {"--moe-a2a-backend": "deepep"},
    {"--enable-hierarchical-cache": True, "--hicache-size": "160"},
])
def test_a_feature_switched_on_in_one_configuration_is_never_a_setting_that_configures_nothing(
        switched_on: dict[str, object]) -> None:
    """A feature's own switch is in play wherever it is on: a launch with it is not the configuration without it
    (found by a newcomer: judged with the switch removed, each of these looked out of play)."""
    plain = Baseline(flags={"--model-path": "/m/model"})
    with_it = Baseline(flags={"--model-path": "/m/model", **switched_on})
    view = PlannerView(case=Case.model_validate({"name": "c", "model": {"path": "/m/model"}}), fingerprint=HOST)
    assert _inert_differences(plain, with_it, view, FLAGS) is None
    assert _inert_differences(with_it, plain, view, FLAGS) is None
    size_only = Baseline(flags={"--model-path": "/m/model", "--hicache-size": "160"})
    assert _inert_differences(plain, size_only, view, FLAGS) == ["--hicache-size"]
