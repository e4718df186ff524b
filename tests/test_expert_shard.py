"""A rank's slice of the routed experts that a quantization block refuses (issue 20: the user's intent kept,
root fix over workaround). SGLang slices every routed expert over the MoE layer's tensor-parallel ranks
(``moe_tp_size = tp_size // ep_size``, srt/model_executor/model_runner_components/moe_ep_setup.py 0.5.23);
with block-FP8 weights a slice that is not a whole number of blocks is refused while the model is built
("The output_size of gate's and up's weight = 192 is not divisible by weight quantization block_n = 128.",
srt/layers/quantization/fp8.py create_fp8_moe_weight_; sgl-project/sglang#23265). Fewer ranks give GPUs back
(a workaround); expert parallelism as wide as the tensor parallelism hands each rank whole experts on the
same GPUs, which is the fix. In process (the planner's proposal after a real-shaped log) and end to end on
the lab world written from that thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_world
from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, fingerprint_with_model

from tools.fingerprint import HostFingerprint

SITE = "/usr/local/lib/python3.12/dist-packages"
H100X8 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=8,
                         compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")
CONFIG = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
          "num_attention_heads": 32, "num_key_value_heads": 4, "num_hidden_layers": 48, "num_experts": 128,
          "num_experts_per_tok": 8, "moe_intermediate_size": 768, "max_position_embeddings": 40960,
          "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
LOG = f"""[2026-12-04 10:00:00] server_args=ServerArgs(model_path='MODEL', tp_size=8, ep_size=1)
[2026-12-04 10:00:20 TP0] Load weight begin. avail mem=78.50 GB
[2026-12-04 10:00:21 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "{SITE}/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 561, in __init__
    self.quant_method.create_weights(
  File "{SITE}/sglang/srt/layers/quantization/fp8.py", line 1589, in create_fp8_moe_weight_
    raise ValueError(
ValueError: SENTENCE
[2026-12-04 10:00:21] Received sigquit from a child process. It usually means the child failed.
"""


@pytest.mark.parametrize(("sentence", "expert"), [
    ("The output_size of gate's and up's weight = 96 is not divisible by weight quantization block_n = 128.", True),
    ("Weight input_size_per_partition = 96 is not divisible by weight quantization block_k = 128.", False),
], ids=["experts", "dense"])
def test_a_refused_slice_of_the_experts_is_given_whole_experts_first(tmp_path: Path, sentence: str,
                                                                     expert: bool) -> None:
    fp, model = fingerprint_with_model(tmp_path, CONFIG, H100X8)
    log = LOG.replace("MODEL", model).replace("SENTENCE", sentence)
    planner, view, prop = baseline_failed_with(fp, {"--model-path": model, "--tp-size": 8}, log, SGLANG_0_5_23_FLAGS)
    ledger = {h.id: h for h in planner.history(view).hypotheses}
    assert ("ranks:--ep-size=8" in ledger) is expert, sorted(ledger)
    assert prop.experiment is not None and prop.experiment.change is not None, prop.conclude_reason
    if expert:  # whole experts on the same GPUs before fewer GPUs
        assert prop.experiment.change.describe() == "--ep-size: (unset) → 8", prop.experiment.change
        assert not ledger["ranks:--ep-size=8"].interventions[0].workaround
        assert ledger["ranks:--tp-size=4"].interventions[0].workaround  # four GPUs given back


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_the_lab_case_ends_on_expert_parallelism_as_the_fix(tmp_path: Path, catalog: str) -> None:
    result, _ = run_world(tmp_path, "minimax-m27-h100x8", catalog)
    assert result["status"] == "isolated", result["reason"]
    fix = result["root_cause"]["fix"]
    assert fix["name"] == "--ep-size" and fix.get("workaround") is not True, fix
