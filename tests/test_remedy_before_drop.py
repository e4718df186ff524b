"""A feature the user turned on is not given up while the new error names a remedy that keeps it (issue 20,
point 5: root fix before workaround, the user's intent kept).

The user runs speculative decoding with an EAGLE draft head and a setting of their own inside it
(``--enable-multi-layer-eagle``); the server dies while the draft worker is built. Dropping speculative
decoding serves; reverting the user's own setting gets further, to a second error, one that names its own
remedy (a variable). An engineer now sets that variable, which keeps speculative decoding, before dropping
the feature again; and once the variable served, the drop of the whole feature is no "user's own setting"
to revert first: it gives up what the workaround kept.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), the draft worker's assertion
(srt/speculative/multi_layer_eagle_worker_v2.py) and the context-length check (srt/configs/model_config.py
``_derive_context_length``) as SGLang logs them, the repository's knowledge and the rule planner.
"""

from __future__ import annotations

from planner_steps import (
    SGLANG_0_5_23_FLAGS,
    after_failed_launch,
    after_served_launch,
    baseline_failed_with,
    experiment_of,
)

from agent.domain.models import Change
from tools.fingerprint import HostFingerprint

SITE = "/usr/local/lib/python3.12/dist-packages"
HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA RTX 6000 Ada Generation", gpu_count=1,
                       compute_capability="8.9", memory_total_mib=49140, sglang_version="0.5.23")
READY = "[2026-12-01 10:00:00] The server is fired up and ready to roll!\n"
_HEAD = f"""[2026-12-01 09:59:00 TP0] Load weight begin. avail mem=47.39 GB
[2026-12-01 09:59:30 TP0] Load weight end. elapsed=24.52 s, type=LlamaForCausalLM, avail mem=32.43 GB, mem usage=14.96 GB.
[2026-12-01 09:59:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "{SITE}/sglang/srt/managers/scheduler.py", line 1064, in maybe_init_draft_worker
    self.draft_worker = DraftWorkerClass(**draft_worker_kwargs)
"""
#: the multi-layer draft worker's check of the auto-filled draft parameters
MULTI_LAYER = _HEAD + f"""  File "{SITE}/sglang/srt/speculative/multi_layer_eagle_worker_v2.py", line 150, in __init__
    assert self.speculative_num_draft_tokens == self.speculative_num_steps + 1, (
AssertionError: multi-layer EAGLE requires speculative_num_draft_tokens == speculative_num_steps + 1, got 8 and 5
[2026-12-01 09:59:30] Received sigquit from a child process. It usually means the child failed.
"""
#: the draft head's own context length refused at the target's
CONTEXT = _HEAD + f"""  File "{SITE}/sglang/srt/speculative/eagle_worker_v2.py", line 223, in __init__
    self.draft_worker = TpModelWorker(
  File "{SITE}/sglang/srt/configs/model_config.py", line 1314, in _derive_context_length
    raise ValueError(
ValueError: Warning: Target model's context_length (131072) is greater than the derived context_length (2048). \
This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ from \
max_position_embeddings in the model's config. To allow overriding this maximum, set the env var \
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
[2026-12-01 09:59:30] Received sigquit from a child process. It usually means the child failed.
"""
FLAGS = {"--model-path": "/m/model", "--speculative-algorithm": "EAGLE",
         "--speculative-draft-model-path": "/m/draft", "--enable-multi-layer-eagle": True}
DROP = Change(kind="flag", name="--speculative-algorithm", before="EAGLE", after=None)
OWN = Change(kind="flag", name="--enable-multi-layer-eagle", before=True, after=None)
REMEDY = Change(kind="env", name="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", before=None, after="1")


def test_the_remedy_the_new_error_names_goes_before_dropping_the_feature_again() -> None:
    planner, view, _ = baseline_failed_with(HOST, FLAGS, MULTI_LAYER, SGLANG_0_5_23_FLAGS)
    base = view.case.baseline
    after_served_launch(planner, view, experiment_of(base, DROP), READY)
    nxt = after_failed_launch(planner, view, experiment_of(base, OWN), CONTEXT)

    state = planner.history(view)
    assert state.baseline == base.apply(OWN), "getting past the first error is progress"
    assert nxt.experiment is not None, nxt.conclude_reason
    assert nxt.experiment.change == REMEDY, nxt.experiment.change
    # the drop still served under the same load (the run's own launch): it comes back only if the remedy fails
    assert "already served" not in nxt.experiment.rationale

    then = after_served_launch(planner, view, nxt.experiment, READY)
    assert then.experiment is None or then.experiment.change is None \
        or then.experiment.change.name != "--speculative-algorithm", then.experiment.rationale


def test_no_component_of_a_feature_that_is_off_is_suspected() -> None:
    """The error's words ("Target model's ... output") name choices of LoRA and of expert dispatch, neither
    of which runs here: no hypothesis blames them, so they take no share of the ledger from what ran. With
    LoRA served, its choice is a suspect like any other that ran."""
    def components(extra: dict[str, object]) -> set[str]:
        planner, view, _ = baseline_failed_with(HOST, {**FLAGS, **extra}, CONTEXT, SGLANG_0_5_23_FLAGS)
        return {h.id for h in planner.history(view).hypotheses if h.id.startswith("component:")}

    off = components({})
    assert "component:--lora-target-modules" not in off and "component:--deepep-dispatcher-output-dtype" not in off
    assert "component:--speculative-draft-load-format" in off, off  # speculative decoding runs: its choices stay
    assert "component:--lora-target-modules" in components({"--enable-lora": True, "--lora-paths": "/m/lora"})
