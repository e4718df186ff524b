"""A pre-quantized checkpoint loads only with its own quantization method (SGLang 0.5.23 configs/model_config.py
_verify_quantization): another --quantization value is refused before the weights load ("Quantization method
specified in the model config (X) does not match the quantization method specified in the `quantization`
argument (Y)."), except the pairs the release lists as compatible and the requantizing methods. Such a value is
no candidate an engineer launches (knowledge/served.toml ``accepts``, read by ``Served.unservable``)."""

from __future__ import annotations

from planner_steps import SGLANG_0_5_23_FLAGS

from agent.planning.served import served_settings

FLAGS = SGLANG_0_5_23_FLAGS


def _refused(declared: str | None, value: str) -> bool:
    checkpoint = {"architecture": "LlamaForCausalLM"} | ({"quant_method": declared} if declared else {})
    return served_settings().unservable(FLAGS, "--quantization", value, checkpoint)


def test_another_method_than_the_checkpoints_never_loads_it() -> None:
    assert _refused("bitsandbytes", "awq")
    assert _refused("bitsandbytes", "fp8")
    assert _refused("bitsandbytes", "mxfp8")
    assert _refused("fp8", "w8a8_fp8")


def test_the_checkpoints_own_method_its_other_spellings_and_listed_pairs_load() -> None:
    assert not _refused("bitsandbytes", "bitsandbytes")
    assert not _refused("awq", "awq_marlin")
    assert not _refused("modelopt", "modelopt_fp4")
    assert not _refused("fp8", "modelopt_fp4")
    assert not _refused("compressed-tensors", "w8a8_int8")
    assert not _refused("bitsandbytes", "quark_mxfp4")


def test_a_checkpoint_without_a_quantization_config_keeps_the_online_methods() -> None:
    """No quantization_config: an online method (fp8) quantizes the weights at load; a method that needs the
    checkpoint's own files (awq) cannot."""
    assert not _refused(None, "fp8")
    assert _refused(None, "awq")
