"""Root fix before workaround, the user's intent kept (issue 20, point 5), end to end through the CLI and
the lab: the case's baseline turns a feature on (routed-expert capture) and its description says it is on
for a purpose ("enabled for the trainer") without naming the flag. Only long prompts fail. Turning the
feature off serves, but it is a workaround that changes the deployment: where a user's own setting is the
root fix (chunked prefill turned off), the run ends isolated on it; where nothing else serves, it ends
not_isolated naming the drop as the workaround, after trying the user's own settings. Without the
description's words the same drop is an ordinary revert of the user's setting.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from clirun import lab_case, run_auto

TEST_WORLDS = Path(__file__).parent / "data" / "worlds"
FEATURE = "--enable-return-routed-experts"
FLAGS = (f'{{ "{FEATURE}" = true, "--chunked-prefill-size" = -1, "--disable-radix-cache" = true, '
         '"--max-running-requests" = 64 }')
ON_PURPOSE = "Our RL rollout server with routing replay enabled for the trainer. Long prompts kill it."
SERVED_WITH = "We serve Qwen3-8B with routed-expert capture for our RL rollouts. Long prompts kill it."
PLAIN = "Our server dies when a long prompt comes in; short ones are fine."


def _run(tmp_path: Path, world: str, description: str) -> tuple[dict, list[dict]]:
    case = lab_case(tmp_path / f"{world}.toml", TEST_WORLDS / world / "world.toml", model="Qwen/Qwen3-8B",
                    description=description, baseline=f"flags = {FLAGS}\n[reproduce]\nprompt_tokens = 12000",
                    budget="experiments = 8\nhost_seconds = 1000000")
    return run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE="0.001", HYPOLOOP_LAB_SEED="t",
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def _root_fixes(world: str) -> set[str]:
    truth = tomllib.loads((TEST_WORLDS / world / "world.toml").read_text())["truth"]
    return {f["name"] for f in truth["fixes"] if f.get("root", True)}


def _tested(events: list[dict]) -> list[dict]:
    return [e["data"]["change"] for e in events if e["type"] == "experiment.proposed" and e["data"]["change"]]


def test_a_users_own_setting_is_the_root_fix_and_the_feature_is_kept(tmp_path: Path) -> None:
    world = "feature-on-purpose-long-prompt"
    result, _ = _run(tmp_path, world, ON_PURPOSE)
    assert result["status"] == "isolated", result["reason"]
    fix = result["root_cause"]["fix"]
    assert fix["name"] in _root_fixes(world) and fix["name"] != FEATURE, fix
    for alt in result["root_cause"]["alternatives"]:
        if alt["name"] == FEATURE and alt.get("result") == "fixed":
            assert alt["workaround"] is True, alt


@pytest.mark.parametrize("description", [ON_PURPOSE, SERVED_WITH], ids=["enabled-for", "served-with"])
def test_when_only_turning_the_feature_off_serves_it_is_named_a_workaround(tmp_path: Path, description: str) -> None:
    # "We serve MODEL with FEATURE" says the feature is part of what the user deploys, as "enabled for" does
    result, events = _run(tmp_path, "feature-on-purpose-any-prompt", description)
    assert result["status"] == "not_isolated", result
    assert result["root_cause"] is None
    assert [w["name"] for w in result["workarounds"]] == [FEATURE], result["workarounds"]
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert FEATURE in conclusion["reason"] and "workaround" in conclusion["reason"], conclusion["reason"]
    tests = _tested(events)
    dropped = next(i for i, c in enumerate(tests) if c["name"] == FEATURE and c["after"] is None)
    later = [c for c in tests[dropped + 1:] if c["name"] != FEATURE]
    # the root fix was looked for among the user's own settings before the workaround was reported,
    # unless they had all been tried before the drop served
    users = {"--chunked-prefill-size", "--disable-radix-cache", "--max-running-requests"}
    assert later or users <= {c["name"] for c in tests[:dropped]}, tests


def test_without_words_of_need_turning_the_users_feature_off_is_an_ordinary_revert(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, "feature-on-purpose-any-prompt", PLAIN)
    assert result["status"] == "isolated", result
    assert result["root_cause"]["fix"]["name"] == FEATURE
