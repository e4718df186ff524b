"""A chain whose two blockers are the same kind of error: a kernel refuses this GPU generation in the attention
backend, and once another attention backend is set, a kernel of the MoE runner refuses it too (the shape of
a B200 launch command run on SM120 cards: sgl-project/sglang#24633 for the attention's TRT-LLM prefill,
flashinfer-ai/flashinfer#3670 for the TRT-LLM-gen MoE). An architecture check is raised where the check is
made, so the same class of error raised in another subsystem's code is another failure: the first blocker is
passed, the change is adopted into the baseline and the next experiment is in the MoE runner (issue 20,
point 4). The same error class in the same subsystem is not progress, and an asynchronous device fault that
surfaces elsewhere is not either (its frame is not where it happened). In process: the planner's proposals
after launches that failed with real-shaped SGLang logs."""

from __future__ import annotations

from pathlib import Path

from planner_steps import (
    SGLANG_0_5_23_FLAGS,
    after_failed_launch,
    baseline_failed_with,
    experiment_of,
    fingerprint_with_model,
)

from agent.domain.models import Change, Experiment
from tools.fingerprint import HostFingerprint

FLAGS = SGLANG_0_5_23_FLAGS
SITE = "/usr/local/lib/python3.12/dist-packages"
SM120 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition", gpu_count=1,
                        compute_capability="12.0", memory_total_mib=97887, sglang_version="0.5.23")
MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32,
    "num_key_value_heads": 4, "num_hidden_layers": 48, "num_experts": 128, "num_experts_per_tok": 8,
    "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
}
FLAGS_SET = {"--attention-backend": "trtllm_mha", "--moe-runner-backend": "flashinfer_trtllm", "--tp-size": 1}

#: Frames as SGLang 0.5.23 srt/layers/attention/ and flashinfer's prefill (the error text is flashinfer's
#: TllmGenFmhaRunner check, sgl-project/sglang#40558).
ATTENTION_REFUSES = f"""[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', attention_backend='trtllm_mha', moe_runner_backend='flashinfer_trtllm')
[2026-12-04 10:00:30] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
  File "{SITE}/sglang/srt/layers/radix_attention.py", line 183, in forward
    return get_attn_backend().forward(
  File "{SITE}/sglang/srt/layers/attention/trtllm_mha_backend.py", line 702, in forward_extend
    o = flashinfer.prefill.trtllm_batch_context_with_kv_cache(
  File "{SITE}/flashinfer/prefill.py", line 3417, in trtllm_batch_context_with_kv_cache
    run_func(
tvm.error.InternalError: Error in function 'TllmGenFmhaRunner' at {SITE}/flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:37: Unsupported architecture
[2026-12-04 10:00:30] Received sigquit from a child process. It usually means the child failed.
"""

#: The MoE runner's kernel (SGLang 0.5.23 srt/layers/moe/moe_runner/flashinfer_trtllm.py; flashinfer's
#: fused_moe/core.py SM100 module check).
MOE_REFUSES = f"""[2026-12-04 10:10:00] server_args=ServerArgs(model_path='MODEL', attention_backend='triton', moe_runner_backend='flashinfer_trtllm')
[2026-12-04 10:10:30] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
  File "{SITE}/sglang/srt/layers/moe/moe_runner/runner.py", line 199, in run
    return self.fused_func(dispatch_output, quant_info, self.config)
  File "{SITE}/sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py", line 1828, in fused_experts_none_to_flashinfer_trtllm
    return fused_experts_none_to_flashinfer_trtllm_bf16(
  File "{SITE}/flashinfer/fused_moe/core.py", line 2604, in trtllm_bf16_moe
    result = get_trtllm_moe_sm100_module().trtllm_bf16_moe(
RuntimeError: Check failed: (major == 10) is false: This kernel requires SM100 (Blackwell), got compute capability 12.0
[2026-12-04 10:10:30] Received sigquit from a child process. It usually means the child failed.
"""

#: Another attention backend whose kernel refuses the GPU in the attention's own code: the same failure.
OTHER_ATTENTION_REFUSES = ATTENTION_REFUSES.replace("trtllm_mha_backend.py\", line 702", "flashmla_backend.py\", line 410")


def _attention_changed(proposed: Experiment, backend: str = "triton") -> Experiment:
    """The test of another attention backend against the proposed experiment's baseline."""
    change = Change(kind="flag", name="--attention-backend", before="trtllm_mha", after=backend)
    return experiment_of(proposed.baseline, change)


def test_the_same_kind_of_error_in_another_subsystem_passes_the_first_blocker(tmp_path: Path) -> None:
    fp, model = fingerprint_with_model(tmp_path, MOE, SM120)
    planner, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS_SET},
                                               ATTENTION_REFUSES.replace("MODEL", model), FLAGS)
    assert prop.experiment is not None, prop.conclude_reason
    nxt = after_failed_launch(planner, view, _attention_changed(prop.experiment), MOE_REFUSES.replace("MODEL", model))
    state = planner.history(view)
    assert state.adoptions and state.baseline.flags.get("--attention-backend") == "triton", state.adoptions
    assert nxt.experiment is not None and nxt.experiment.change is not None, nxt.conclude_reason
    assert nxt.experiment.change.name == "--moe-runner-backend", nxt.experiment.change
    # the next test keeps the attention backend that got past the first blocker
    assert nxt.experiment.baseline.flags.get("--attention-backend") == "triton"


def test_the_same_error_in_the_same_subsystem_is_not_progress(tmp_path: Path) -> None:
    fp, model = fingerprint_with_model(tmp_path, MOE, SM120)
    planner, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS_SET},
                                               ATTENTION_REFUSES.replace("MODEL", model), FLAGS)
    assert prop.experiment is not None, prop.conclude_reason
    after_failed_launch(planner, view, _attention_changed(prop.experiment, "flashmla"),
                        OTHER_ATTENTION_REFUSES.replace("MODEL", model))
    state = planner.history(view)
    assert not state.adoptions and state.baseline.flags.get("--attention-backend") == "trtllm_mha", state.adoptions


def test_an_asynchronous_fault_surfacing_elsewhere_is_not_progress(tmp_path: Path) -> None:
    """An illegal memory access is reported by whatever call synchronises next: the same fault printed
    in the MoE runner's frame after an attention change says nothing about where it happened."""
    fp, model = fingerprint_with_model(tmp_path, MOE, SM120)
    imas = ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
            "might be incorrect.\n")
    before = ATTENTION_REFUSES.replace(
        "tvm.error.InternalError: Error in function 'TllmGenFmhaRunner' at "
        f"{SITE}/flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:37: Unsupported architecture\n", imas)
    after = MOE_REFUSES.replace(
        "RuntimeError: Check failed: (major == 10) is false: This kernel requires SM100 (Blackwell), got compute "
        "capability 12.0\n", imas)
    assert before != ATTENTION_REFUSES and after != MOE_REFUSES
    planner, view, prop = baseline_failed_with(fp, {"--model-path": model, **FLAGS_SET}, before.replace("MODEL", model),
                                               FLAGS)
    assert prop.experiment is not None, prop.conclude_reason
    after_failed_launch(planner, view, _attention_changed(prop.experiment), after.replace("MODEL", model))
    assert not planner.history(view).adoptions
