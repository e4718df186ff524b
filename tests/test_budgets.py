"""A budget the user set too small is raised to what one request needs, not removed (issue 20, point 5).

Real parts: vLLM 0.32.0's own ``--help=all`` (tests/data/help_vllm_0.32.0_all.txt), the log real vLLM
0.32.0 wrote on this CPU host with ``--kv-cache-memory-bytes 4096`` (tests/data/logs_vllm_0.32.0/
kv-too-small.log: "No available memory for the cache blocks", which states no figure), the bed's tiny
Llama's config.json read from disk through the real ``LocalHost``, and the rule planner with the
repository's knowledge (and with an empty answer catalog, as the bench's ablation runs it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.knowledge_dir import use_knowledge
from agent.domain.models import Baseline, Change
from agent.planning.budgets import budget_bytes, budget_of, need_bytes, raised_value
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, Proposal, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from agent.run.nodes.intake import _read_model_and_cpus
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.host import LocalHost
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_vllm_0.32.0_all.txt").read_text(), source="fixture", version="0.32.0")
LOGS = DATA / "logs_vllm_0.32.0"
#: The bed's tiny Llama (.ci/real-engines): 2 layers, 1 KV head of 64, bfloat16, 512 positions.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16", "head_dim": 64,
    "hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2,
    "max_position_embeddings": 512, "vocab_size": 459,
}
CPU_HOST = HostFingerprint(gpu_vendor="none", gpu_count=0, sglang_version="0.32.0+cpu", cpu_count=2)
ON_PURPOSE = "vLLM will not start with the small KV budget we gave it to save memory"


def _fingerprint(tmp_path: Path) -> tuple[HostFingerprint, str]:
    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    fp = CPU_HOST.model_copy(deep=True)
    case = Case.model_validate({"name": "c", "model": {"path": str(model)}, "launcher": {"engine": "vllm"},
                                "baseline": {"flags": {}}})
    _read_model_and_cpus(LocalHost(), case, fp)
    return fp, str(model)


def _after_baseline(tmp_path: Path, description: str, log: str = "kv-too-small") -> tuple[RulePlanner, PlannerView, Proposal]:
    """The case's baseline launched once and failing with the recorded real ``log``; the next proposal."""
    fp, model = _fingerprint(tmp_path)
    case = Case.model_validate({
        "name": "c", "description": description, "launcher": {"engine": "vllm"}, "model": {"path": model},
        "baseline": {"flags": {"--enforce-eager": True, "--kv-cache-memory-bytes": "4096"}},
        "budget": {"experiments": 4},
    })
    view = PlannerView(case=case, fingerprint=fp)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    first = first.model_copy(update={"status": "done"})
    text = (LOGS / f"{log}.log").read_text(encoding="utf-8")
    raw = RawEvidence.from_log(first.id, text, for_engine(load_signatures(), "vllm"), "x.log")
    view.experiments.append(first)
    view.outcomes.append(classify_outcome(raw.model_copy(update={"status": "crashed"})))
    view.launches = 1
    return planner, view, planner.propose(view, planner.history(view))


@contextmanager
def _empty_catalog(tmp_path: Path) -> Iterator[None]:
    """The bench's ablation: every file that maps a symptom to a remedy emptied."""
    folder = tmp_path / "knowledge"
    folder.mkdir()
    for name in ("hypotheses.toml", "symptoms.toml"):
        (folder / name).write_text("")
    with use_knowledge(folder):
        yield


def _raise_of(prop: Proposal) -> Change:
    exp = prop.experiment
    assert exp is not None and exp.change is not None, prop.conclude_reason
    return exp.change


def test_a_budget_set_to_save_memory_is_raised_to_what_one_request_needs_not_removed(tmp_path: Path) -> None:
    """vLLM's error states no figure; one request of the tiny Llama's 512 tokens takes 2 x 2 layers x 1 KV
    head x 64 x 2 bytes x 512 = 256 KiB, so the budget is raised past that, and kept."""
    with _empty_catalog(tmp_path):
        _, _, prop = _after_baseline(tmp_path, ON_PURPOSE)
    change = _raise_of(prop)
    assert (change.kind, change.name, change.before) == ("flag", "--kv-cache-memory-bytes", "4096")
    budget = budget_of("flag", "--kv-cache-memory-bytes")
    assert budget is not None and change.after is not None
    assert (budget_bytes(budget, change.after) or 0) >= 256 * 1024


def test_with_the_catalog_the_removal_of_a_budget_set_on_purpose_is_a_workaround_ranked_last(tmp_path: Path) -> None:
    _, _, prop = _after_baseline(tmp_path, ON_PURPOSE)
    change = _raise_of(prop)
    assert change.name == "--kv-cache-memory-bytes" and change.after is not None  # a budget, not its removal
    # whatever size is launched, a budget above the user's is the raise's own test (any larger one holds it)
    assert prop.experiment is not None and "raise:--kv-cache-memory-bytes" in prop.experiment.rationale
    scores = {c["change"]: c["score"] for c in prop.considered if "change" in c}
    removal = next(s for c, s in scores.items() if c.startswith("--kv-cache-memory-bytes") and "(unset)" in c)
    assert removal < max(scores.values())


def test_without_words_of_intent_the_budget_may_still_be_removed_first(tmp_path: Path) -> None:
    """A case that does not say why it set the budget keeps the removal an ordinary candidate (vLLM then
    sizes the cache itself); the raise is among the candidates beside it."""
    with _empty_catalog(tmp_path):
        _, _, prop = _after_baseline(tmp_path, "vLLM will not start")
    assert _raise_of(prop).name == "--kv-cache-memory-bytes"
    changes = [c["change"] for c in prop.considered if "change" in c]
    budget = budget_of("flag", "--kv-cache-memory-bytes")
    assert budget is not None
    raised = [c.rsplit(" ", 1)[-1] for c in changes if c.startswith("--kv-cache-memory-bytes: 4096 → ")]
    assert "(unset)" in raised, changes
    assert any((budget_bytes(budget, v) or 0) >= 256 * 1024 for v in raised if v != "(unset)"), changes


@pytest.mark.parametrize(("description", "kept"), [
    (ON_PURPOSE, True),
    ("we cap the memory vLLM may take with an explicit KV budget", True),
    ("our memory budget is tight", True),
    ("vLLM will not start since we upgraded", False),
    ("the memory of the last run is gone", False),
])
def test_the_description_says_when_the_user_bounded_memory_on_purpose(description: str, kept: bool) -> None:
    from agent.planning.budgets import bounded_on_purpose

    case = Case.model_validate({"name": "c", "description": description, "model": {"path": "/m"},
                                "baseline": {"flags": {"--kv-cache-memory-bytes": "4096"}}})
    budget = budget_of("flag", "--kv-cache-memory-bytes")
    assert budget is not None
    assert (bounded_on_purpose(case, budget) is not None) is kept


def test_the_need_the_error_states_comes_before_the_arithmetic() -> None:
    """vLLM's message when the budget holds some blocks but not one request states the need in GiB
    (vllm/v1/core/kv_cache_utils.py ``_check_enough_kv_cache_memory``); the signature keeps the figure."""
    line = ("(EngineCore pid=1) ERROR 12-02 13:39:50 [core.py:1510] ValueError: To serve at least one request "
            "with the model's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
            "available KV cache memory (1.00 GiB). Based on the available memory, the estimated maximum model "
            "length is 8192. Try increasing `gpu_memory_utilization` ...")
    raw = RawEvidence.from_log("e", line, for_engine(load_signatures(), "vllm"), "x.log")
    assert raw.facts.get("kv_cache_needed_gib") == "16.00"
    budget = budget_of("flag", "--kv-cache-memory-bytes")
    assert budget is not None
    need, how = need_bytes(budget, raw.facts, Baseline(), {})
    assert need == 16 * 2**30 and "states" in how
    assert raised_value(budget, need) == "32G"
    env = budget_of("env", "VLLM_CPU_KVCACHE_SPACE")
    assert env is not None and raised_value(env, need) == "32"
