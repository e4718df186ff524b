"""A setting the engine refuses for this model was never served: changing it is a candidate and can be the
root fix (knowledge/served.toml ``divides``, ``checkpoint_only``). Read with vLLM 0.32.0's real --help."""

from __future__ import annotations

from pathlib import Path

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.planning.generators import GeneratorInput
from agent.planning.generators.settings import SettingsVsDefaultsGenerator
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import parse_help
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
# vllm/config/model.py verify_with_parallel_config, vLLM 0.32.0
ERROR = ("(APIServer pid=1) ERROR 12-02 02:20:10 [utils.py:1] ValueError: Total number of attention heads (2) "
         "must be divisible by tensor parallel size (3).\n")


def _reverts(checkpoint: dict[str, str], tp: int) -> list[str]:
    raw = RawEvidence.from_log("exp-1", ERROR, for_engine(load_signatures(), "vllm"), "x.log")
    out = classify_outcome(raw.model_copy(update={"status": "crashed"}))
    flags = parse_help((DATA / "help_vllm_0.32.0_all.txt").read_text(encoding="utf-8"), source="vllm 0.32.0")
    case = Case.model_validate({"name": "c", "launcher": {"engine": "vllm"}, "model": {"path": "/m/tiny"},
                                "baseline": {"flags": {"--tensor-parallel-size": tp}, "env": {}}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out, flags=flags, outcomes=[out],
                         fingerprint=HostFingerprint(gpu_count=0, cpu_count=2, checkpoint=checkpoint))
    return [h.id for h in SettingsVsDefaultsGenerator().generate(inp)]


def test_a_tensor_parallel_size_the_heads_cannot_take_is_reverted() -> None:
    assert _reverts({"num_attention_heads": "2", "keys": "num_attention_heads"}, 3) == ["revert:--tensor-parallel-size"]


def test_a_layout_the_model_can_take_or_an_unknown_model_is_not_reverted() -> None:
    # reverting it takes other devices: a change of the deployment, not a cause to test
    assert _reverts({"num_attention_heads": "4", "keys": "num_attention_heads"}, 2) == []
    assert _reverts({}, 3) == []


def test_a_revert_on_vllm_says_vllms_default_applies() -> None:
    raw = RawEvidence.from_log("exp-1", ERROR, for_engine(load_signatures(), "vllm"), "x.log")
    out = classify_outcome(raw.model_copy(update={"status": "crashed"}))
    flags = parse_help((DATA / "help_vllm_0.32.0_all.txt").read_text(encoding="utf-8"), source="vllm 0.32.0")
    case = Case.model_validate({"name": "c", "launcher": {"engine": "vllm"}, "model": {"path": "/m/tiny"},
                                "baseline": {"flags": {"--max-model-len": 4096}, "env": {}}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out, flags=flags, outcomes=[out],
                         fingerprint=HostFingerprint(gpu_count=0, cpu_count=2))
    (h,) = SettingsVsDefaultsGenerator().generate(inp)
    assert "vLLM's default applies" in h.statement and "SGLang" not in h.statement
