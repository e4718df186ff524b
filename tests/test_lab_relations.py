"""Relations between settings in fault conditions (issue 21, item 5): `expr` over settings and model facts,
parsed and evaluated by a whitelist walk of the syntax tree (lab/expr.py), never `eval`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import expr
from lab.rules import plan_launch
from lab.world import WorldError, load_world

REPO = Path(__file__).resolve().parents[1]
WORLD = REPO / "tests" / "data" / "worlds" / "spec-draft-relation" / "world.toml"
BASE = ["--model-path", "Qwen/Qwen3-8B"]


def _faults(*argv: str) -> list[str]:
    return [f.id for f in plan_launch(load_world(str(WORLD)), [*BASE, *argv]).faults]


def test_draft_tokens_must_be_steps_plus_one() -> None:
    eagle = ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1", "--speculative-num-steps", "3"]
    assert _faults(*eagle, "--speculative-num-draft-tokens", "5") == ["draft-tokens-not-steps-plus-one"]
    assert _faults(*eagle, "--speculative-num-draft-tokens", "4") == []
    assert _faults(*eagle[:2], "--speculative-eagle-topk", "4", "--speculative-num-steps", "3",
                   "--speculative-num-draft-tokens", "5") == []
    assert _faults() == []  # unset settings: the relation does not hold


def test_a_setting_compared_with_a_model_fact() -> None:
    assert _faults("--cuda-graph-max-bs-prefill", "65536") == ["prefill-graph-beyond-context"]
    assert _faults("--cuda-graph-max-bs-prefill", "8192") == []


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "tp_size.__class__",
        "(lambda: 1)()",
        "[x for x in range(3)]",
        "open('/etc/passwd')",
        "tp_size[0]",
        "f'{tp_size}'",
    ],
)
def test_anything_outside_the_language_is_refused_when_the_world_loads(tmp_path: Path, text: str) -> None:
    with pytest.raises(expr.ExprError):
        expr.parse(text)
    bad = tmp_path / "world.toml"
    bad.write_text(WORLD.read_text().replace(
        'expr = "cuda_graph_max_bs_prefill > model.context_length"', f"expr = {json.dumps(text)}"
    ))
    with pytest.raises(WorldError, match=r"fault #2\.when\.expr"):
        load_world(str(bad))


def test_an_unknown_key_in_an_expression_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "world.toml"
    bad.write_text(WORLD.read_text().replace("model.context_length", "model.no_such_fact"))
    with pytest.raises(WorldError, match=r"fault #2\.when\.expr: .*unknown model key 'model.no_such_fact'"):
        load_world(str(bad))


def test_the_language() -> None:
    values = {"a": 4, "b": "3", "c": None, "model.context_length": 40960, "s": "EAGLE"}
    get = values.get
    cases = {
        "a == b + 1": True, "a * 2 >= 8 and not c": True, "c > 1": False, "c == None": True,
        "max(a, 10) // 3 == 3": True, "s in ['EAGLE', 'EAGLE3']": True, "1 < a < 5": True,
        "a if c else b": True, "model.context_length % 1024 == 0": True, "a / 0 > 1": False,
    }
    for text, want in cases.items():
        assert expr.holds(expr.parse(text), get) is want, text
