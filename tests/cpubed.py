"""The real-engine bed's CPU host as the planner's unit tests see it: the tiny Llama's config.json read
from disk as intake reads it, SGLang 0.5.23's real ``--help``, and a real log turned into an outcome
(shared by tests/test_parallel_layout.py and tests/test_quantization_layout.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Outcome
from agent.planning.generators import GeneratorInput
from agent.run.nodes.analyze import classify_outcome
from agent.run.nodes.intake import _read_model_and_cpus
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.host import LocalHost
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SIGS = for_engine(load_signatures(), "sglang")
#: The bed's tiny Llama (.ci/tiny_llama.py): 2 attention heads, 1 KV head, head size 64, 512 positions.
TINY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 64, "num_hidden_layers": 2, "max_position_embeddings": 512,
}


def bed_host(tmp_path: Path, vendor: str = "none") -> tuple[HostFingerprint, str]:
    """A host's fingerprint (CPU-only by default, 2 CPUs) with the tiny model's config.json read from disk
    under ``tmp_path``, as intake reads it; and the model's path."""
    model = tmp_path / "tiny-llama"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    fp = HostFingerprint(gpu_vendor=vendor, gpu_count=0 if vendor == "none" else 1, sglang_version="0.5.23",
                         cpu_count=2)
    case = Case.model_validate({"name": "c", "model": {"path": str(model)},
                                "baseline": {"flags": {"--model-path": str(model)}}})
    _read_model_and_cpus(LocalHost(), case, fp)
    return fp, str(model)


def bed_case(name: str, model: str, flags: dict[str, Any]) -> Case:
    """A case serving ``model`` with ``flags``, spelled as the host's ``--help`` names them."""
    case = Case.model_validate({"name": name, "model": {"path": model},
                                "baseline": {"flags": {"--model-path": model, **flags}}})
    case.baseline = Baseline(flags={FLAGS.resolve(k).name: v for k, v in case.baseline.flags.items()})
    return case


def crashed(exp_id: str, log: str) -> Outcome:
    """The outcome of a launch that crashed with the server log ``log``."""
    raw = RawEvidence.from_log(exp_id, log, SIGS, "x.log").model_copy(update={"status": "crashed"})
    return classify_outcome(raw)


def generator_input(case: Case, baseline: Baseline, log: str, fp: HostFingerprint, exp_id: str) -> GeneratorInput:
    """What a candidate generator sees after the launch ``exp_id`` of ``baseline`` crashed with ``log``
    (no hypothesis catalog)."""
    out = crashed(exp_id, log)
    return GeneratorInput(case=case, baseline=baseline, reference=out, fingerprint=fp, flags=FLAGS,
                          catalog=[], outcomes=[out])
