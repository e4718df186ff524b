"""A failing frame's name that has two words of the user's setting side by side implicates it (issue 20, point 3:
narrow inside the implicated subsystem; point 5: the user's own deliberate settings there first).

The user opted into an experimental cache with ``SGLANG_ENABLE_UNIFIED_RADIX_TREE=1``; the scheduler crashes in
``mem_cache/unified_radix_cache.py``. The frame never spells the setting's last word ("tree"), so a rule that
wants every word of the name misses it; an engineer reads "unified radix" in both and reverts the opt-in
first. A setting that shares only one such word, or that shares the pair with another of the user's settings,
is not singled out.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its scheduler exception as SGLang
logs it, the repository's knowledge and the rule planner.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import after_failed_launch

from agent.domain.case import Case
from agent.domain.models import Baseline
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, RulePlanner
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/usr/local/lib/python3.12/dist-packages"
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA B200", gpu_count=2, compute_capability="10.0",
                       memory_total_mib=183359, sglang_version="0.5.23")
CRASH = f"""[2026-12-01 10:00:00] The server is fired up and ready to roll!
[2026-12-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/sglang/srt/managers/scheduler.py", line 1102, in event_loop_overlap
    batch = self.get_next_batch_to_run()
  File "{SITE}/sglang/srt/mem_cache/unified_radix_cache.py", line 812, in load_back
    self._restore(node)
  File "{SITE}/sglang/srt/mem_cache/unified_cache_components/swa_component.py", line 233, in build_hicache_transfers
    assert host_indices.numel() == device_indices.numel()
AssertionError
[2026-12-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


def _implicated(env: dict[str, str]) -> dict[str, str]:
    """The reverts of ``env``'s variables and what implicates each (empty when nothing does)."""
    base = Baseline(flags={"--model-path": "/m/model", "--tp-size": "2"}, env=env)
    case = Case.model_validate({"name": "c", "model": {"path": "/m/model"}, "baseline": base.model_dump()})
    view = PlannerView(case=case, fingerprint=HOST)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None
    after_failed_launch(planner, view, first, CRASH)
    out = {}
    for h in planner.history(view).hypotheses:
        if h.id.startswith("revert:") and h.id[len("revert:"):] in env:
            out[h.id[len("revert:"):]] = " ".join(e.detail for e in h.evidence if "side by side" in e.detail)
    return out


def test_two_words_of_the_setting_side_by_side_in_a_failing_frame_implicate_it() -> None:
    said = _implicated({"SGLANG_ENABLE_UNIFIED_RADIX_TREE": "1", "SGLANG_ENABLE_TORCH_COMPILE": "1"})
    assert "unified radix" in said["SGLANG_ENABLE_UNIFIED_RADIX_TREE"], said
    assert not said["SGLANG_ENABLE_TORCH_COMPILE"]


def test_a_single_shared_word_or_a_pair_another_setting_shares_implicates_nothing() -> None:
    said = _implicated({"SGLANG_RADIX_EVICT_TREE": "1", "SGLANG_UNIFIED_LOG": "1"})
    assert not any(said.values()), said
    said = _implicated({"SGLANG_ENABLE_UNIFIED_RADIX_TREE": "1", "SGLANG_UNIFIED_RADIX_DEBUG": "1"})
    assert not any(said.values()), said
