"""A change that fails earlier than the failure it tested shows its own failure, not the deployment's: the
baseline serves and then crashes at decode; reverting one of the user's settings makes the launch die during
start-up in another subsystem (the shape of a DP-attention layout whose flag was removed while its --dp-size
stayed, which then trips over the MoE runner). What that new error implicates explains why the change cannot
run; the baseline never meets it, so no hypothesis of it is tested on the baseline (found on a sealed world
where three launches chased a MoE runner that the reported hang never touched). In process: the planner's
ledger and next proposal after launches that failed with real-shaped SGLang logs."""

from __future__ import annotations

from pathlib import Path

from planner_steps import (
    SGLANG_0_5_23_FLAGS,
    TRITON_DECODE_CRASH,
    after_failed_launch,
    baseline_failed_with,
    experiment_of,
    fingerprint_with_model,
)

from agent.domain.models import Change
from tools.fingerprint import HostFingerprint

SITE = "/usr/local/lib/python3.12/dist-packages"
H100X2 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=2,
                         compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")
MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32,
    "num_key_value_heads": 4, "num_hidden_layers": 48, "num_experts": 128, "num_experts_per_tok": 8,
    "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
}
FLAGS = {"--attention-backend": "triton", "--tp-size": 2, "--dp-size": 2, "--enable-dp-attention": True}

#: Start-up dies in the MoE runner (frames as SGLang 0.5.23 srt/layers/moe/moe_runner/), before any ready line.
MOE_STARTUP_CRASH = f"""[2026-12-04 10:10:00] server_args=ServerArgs(model_path='MODEL', attention_backend='triton', tp_size=2, dp_size=2)
[2026-12-04 10:10:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "{SITE}/sglang/srt/layers/moe/moe_runner/runner.py", line 61, in __init__
    self.runner_core = TritonRunnerCore(config)
  File "{SITE}/sglang/srt/layers/moe/moe_runner/triton.py", line 88, in __init__
    raise ValueError(f"moe runner: expert shards {{n}} do not divide the dispatch groups {{g}}")
ValueError: moe runner: expert shards 2 do not divide the dispatch groups 4
[2026-12-04 10:10:30] Received sigquit from a child process. It usually means the child failed.
"""


def test_what_a_change_that_failed_earlier_implicates_is_not_tested_on_the_baseline(tmp_path: Path) -> None:
    fp, model = fingerprint_with_model(tmp_path, MOE, H100X2)
    planner, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS},
                                               TRITON_DECODE_CRASH, SGLANG_0_5_23_FLAGS)
    assert prop.experiment is not None, prop.conclude_reason
    base = prop.experiment.baseline
    detour = experiment_of(base, Change(kind="flag", name="--enable-dp-attention", before=True, after=None))
    nxt = after_failed_launch(planner, view, detour, MOE_STARTUP_CRASH.replace("MODEL", model))
    state = planner.history(view)
    assert not state.adoptions, state.adoptions  # a failure earlier than the reported one is no step past it
    born_of_detour = [h.id for h in state.hypotheses
                      if any(e.experiment_id == detour.id for e in h.evidence) and "moe" in h.id]
    assert not born_of_detour, born_of_detour
    assert nxt.experiment is not None and nxt.experiment.change is not None, nxt.conclude_reason
    assert "moe" not in nxt.experiment.change.name, nxt.experiment.change


#: The change's own setting refused in start-up, the error naming the value to use instead (the shape of
#: SGLang 0.5.23's NVFP4 MoE check: srt/layers/quantization/modelopt_quant.py apply, "Unsupported moe_runner_backend
#: for NVFP4 MoE: triton. Use --moe-runner-backend flashinfer_cutlass instead.").
OWN_SETTING_REFUSED = f"""[2026-12-04 10:10:00] server_args=ServerArgs(model_path='MODEL', moe_runner_backend='triton')
[2026-12-04 10:10:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "{SITE}/sglang/srt/layers/quantization/modelopt_quant.py", line 3366, in apply
    raise NotImplementedError(
NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE: triton. Use --moe-runner-backend flashinfer_cutlass instead.
[2026-12-04 10:10:30] Received sigquit from a child process. It usually means the child failed.
"""


def test_what_a_failed_change_says_of_its_own_setting_still_counts(tmp_path: Path) -> None:
    """The same detour, when the change set the MoE runner and its error names the value to use instead: that
    value is a candidate for the baseline (another value of the setting the change touched)."""
    fp, model = fingerprint_with_model(tmp_path, MOE, H100X2)
    flags = {"--model-path": model, "--tp-size": 2, "--moe-runner-backend": "flashinfer_trtllm"}
    planner, view, prop = baseline_failed_with(fp, flags, TRITON_DECODE_CRASH, SGLANG_0_5_23_FLAGS)
    assert prop.experiment is not None, prop.conclude_reason
    base = prop.experiment.baseline
    detour = experiment_of(base, Change(kind="flag", name="--moe-runner-backend", before="flashinfer_trtllm",
                                        after="triton"))
    after_failed_launch(planner, view, detour, OWN_SETTING_REFUSED.replace("MODEL", model))
    ledger = {h.id for h in planner.history(view).hypotheses}
    assert "remedy:--moe-runner-backend=flashinfer_cutlass" in ledger, sorted(ledger)
