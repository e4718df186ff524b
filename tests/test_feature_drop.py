"""A feature the user turned on and configured with settings of their own (issue 20, point 5), end to end
through the CLI and the lab: when dropping the whole feature served, the user's own settings inside it are
reverted first, the one the failing frames' names spell before the others, and dropping the feature is
reported only when none of them serves. Test worlds: ``feature-own-variable`` (the user's variable inside
the feature is the cause) and ``feature-broken-whole`` (the feature fails whatever the user set in it)."""

from __future__ import annotations

from pathlib import Path

from clirun import lab_case, run_auto

TEST_WORLDS = Path(__file__).parent / "data" / "worlds"
VARIABLE = "SGLANG_NGRAM_TRIE_V2"
SELECTOR = "--speculative-algorithm"


def _run(tmp_path: Path, world: str) -> tuple[dict, list[dict]]:
    case = lab_case(tmp_path / f"{world}.toml", TEST_WORLDS / world / "world.toml", model="Qwen/Qwen3-8B",
                    description="the server dies at its first request",
                    baseline=(f'flags = {{ "{SELECTOR}" = "NGRAM", "--speculative-ngram-max-bfs-breadth" = 8 }}\n'
                              f'env = {{ {VARIABLE} = "1" }}'),
                    budget="experiments = 8\nhost_seconds = 1000000")
    return run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE="0.001", HYPOLOOP_LAB_SEED="t",
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def _tested(events: list[dict]) -> list[dict]:
    return [e["data"]["change"] for e in events if e["type"] == "experiment.proposed" and e["data"]["change"]]


def test_the_users_variable_inside_a_dropped_feature_is_the_fix_not_the_drop(tmp_path: Path) -> None:
    result, events = _run(tmp_path, "feature-own-variable")
    assert result["status"] == "isolated", result["reason"]
    fix = result["root_cause"]["fix"]
    assert fix["name"] == VARIABLE and fix["after"] is None, fix
    tested = [(c["name"], c["after"]) for c in _tested(events)]
    if (SELECTOR, None) in tested:  # the drop served first: the user's variable was reverted after it
        assert tested.index((VARIABLE, None)) > tested.index((SELECTOR, None)), tested


def test_a_feature_broken_whatever_the_user_set_is_still_reported_dropped(tmp_path: Path) -> None:
    result, events = _run(tmp_path, "feature-broken-whole")
    assert result["status"] == "isolated", result["reason"]
    fix = result["root_cause"]["fix"]
    assert fix["name"] == SELECTOR and fix["after"] is None, fix
    tested = [(c["name"], c["after"]) for c in _tested(events)]
    after_drop = tested[tested.index((SELECTOR, None)) + 1:]
    # the user's own settings inside the feature were tried first, at most two launches of them
    inside = [t for t in after_drop if t in ((VARIABLE, None), ("--speculative-ngram-max-bfs-breadth", None))]
    assert inside and len(inside) <= 2, tested
    assert after_drop.index(inside[0]) == 0 and inside[0] == (VARIABLE, None), tested
