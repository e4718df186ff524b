"""Root fix before workaround, and the user's intent kept (issue 20, point 5), end to end through the CLI
and the lab: a --context-length past the model's window stops the launch with an error that names a
variable silencing the check (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, a workaround). hypoloop must
find the root fix (removing the user's own setting) within a budget of four launches, report the
workaround apart from it when it served too, and never call a change of a setting the user keeps the fix.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from clirun import lab_case, run_auto

TEST_WORLDS = Path(__file__).parent / "data" / "worlds"
GUARD = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
#: baseline, the workaround, the revert of the user's setting, the confirmation
BUDGET = 4


def _run(tmp_path: Path, world: str, extra: str = "") -> tuple[dict, list[dict]]:
    case = lab_case(tmp_path / f"{world}.toml", TEST_WORLDS / world / "world.toml", model="Qwen/Qwen3-8B",
                    baseline='flags = { "--context-length" = 131072 }',
                    budget=f"experiments = {BUDGET}\nhost_seconds = 1000000\n{extra}")
    return run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE="0.001", HYPOLOOP_LAB_SEED="t",
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def _root_fixes(world: str) -> set[str]:
    truth = tomllib.loads((TEST_WORLDS / world / "world.toml").read_text())["truth"]
    return {f["name"] for f in truth["fixes"] if f.get("root", True)}


def _tested(events: list[dict]) -> list[dict]:
    return [e["data"]["change"] for e in events if e["type"] == "experiment.proposed" and e["data"]["change"]]


@pytest.mark.parametrize("world", ["context-past-window", "context-past-window-unquoted"])
def test_the_users_setting_is_reverted_and_is_the_root_fix(tmp_path: Path, world: str) -> None:
    result, events = _run(tmp_path, world)
    assert result["status"] == "isolated", result["reason"]
    fix = result["root_cause"]["fix"]
    assert fix["name"] in _root_fixes(world) and fix["name"] != GUARD, fix
    assert result["launches"] <= BUDGET
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    if any(c["name"] == GUARD for c in _tested(events)):  # the workaround served first: reported apart
        assert [w["name"] for w in result["workarounds"]] == [GUARD], result["workarounds"]
        assert f"root fix: {fix['name']}" in conclusion["reason"] and GUARD in conclusion["reason"]
        alt = next(a for a in result["root_cause"]["alternatives"] if a["name"] == GUARD)
        assert alt["workaround"] is True and alt["result"] == "fixed"


def test_an_error_quoting_the_users_value_has_it_reverted_before_the_workaround(tmp_path: Path) -> None:
    result, events = _run(tmp_path, "context-past-window")
    tests = _tested(events)
    assert tests[0]["name"] == "--context-length" and tests[0]["after"] is None, tests
    assert result["workarounds"] == []


def test_a_setting_the_user_keeps_is_never_the_fix(tmp_path: Path) -> None:
    result, events = _run(tmp_path, "context-past-window-unquoted", '[intent]\nkeep = ["--context-length"]\n')
    assert result["status"] == "not_isolated", result
    assert result["root_cause"] is None
    assert [w["name"] for w in result["workarounds"]] == [GUARD], result
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert "only a workaround" in conclusion["reason"] and "no root fix found" in conclusion["reason"]


# ----- a chain whose later link only a drop of the user's own FP8 KV cache serves -----------------------

#: the user's own deployment: a context past the window (link 1), and an FP8 KV cache read by a backend the
#: user chose (link 2); both the FP8 cache and the backend are set away from SGLang's defaults
KV_FLAGS = '{ "--context-length" = 131072, "--kv-cache-dtype" = "fp8_e5m2", "--attention-backend" = "flashinfer" }'
KV_BUDGET = 10


def _run_kv(tmp_path: Path, world: str) -> tuple[dict, list[dict]]:
    case = lab_case(tmp_path / f"{world}.toml", TEST_WORLDS / world / "world.toml", model="Qwen/Qwen3-8B",
                    baseline=f"flags = {KV_FLAGS}", budget=f"experiments = {KV_BUDGET}\nhost_seconds = 1000000")
    return run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE="0.001", HYPOLOOP_LAB_SEED="t",
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def _chain_roots(world: str) -> list[set[tuple[str, object]]]:
    chain = tomllib.loads((TEST_WORLDS / world / "world.toml").read_text())["truth"]["chain"]
    return [{(f["name"], None if f["value"] is False else f["value"]) for f in link if f["root"]} for link in chain]


def _drops_fp8(change: dict) -> bool:
    return change["name"] == "--kv-cache-dtype" and not str(change["after"] or "").startswith("fp8")


def test_a_later_link_served_by_dropping_the_users_fp8_cache_has_its_root_fix_found(tmp_path: Path) -> None:
    """Dropping the user's FP8 KV cache is a workaround: the run looks for the root fix among the other
    implementations of the subsystem that reads it (the attention backends) and ends isolated on one that
    keeps the user's FP8 cache, each link's fix a root fix, the drop (if it was launched) reported apart."""
    world = "fp8-kv-backend-chain"
    result, events = _run_kv(tmp_path, world)
    assert result["status"] == "isolated", result
    fix = result["root_cause"]["fix"]
    links = _chain_roots(world)
    assert (fix["name"], fix["after"]) in links[1], fix
    assert not _drops_fp8(fix)
    blockers = result["root_cause"]["blockers"]
    assert [(b["name"], b["after"]) for b in blockers if (b["name"], b["after"]) in links[0]], blockers
    assert not [b for b in blockers if _drops_fp8(b)], blockers  # the user's FP8 cache is kept on the way
    for alt in result["root_cause"]["alternatives"]:
        if alt["name"] == "--kv-cache-dtype" and alt.get("result") == "fixed":
            assert alt["workaround"] is True, alt
    assert result["launches"] <= len(links) + 3 + 2  # the chain, its confirmation, and the root-fix search


def test_a_later_link_only_a_drop_of_the_users_fp8_cache_serves_never_ends_isolated(tmp_path: Path) -> None:
    """When no backend reads the user's FP8 cache right, the drop that serves is named as a workaround that
    changes the deployment and the run ends not_isolated, after trying other backends that keep it."""
    result, events = _run_kv(tmp_path, "fp8-kv-any-backend-chain")
    assert result["status"] == "not_isolated", result
    assert result["root_cause"] is None
    assert [w["name"] for w in result["workarounds"]] == ["--kv-cache-dtype"], result["workarounds"]
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert "changes the deployment" in conclusion["reason"], conclusion["reason"]
    tests = _tested(events)
    dropped = next(i for i, c in enumerate(tests) if _drops_fp8(c))
    kept = [c for c in tests[dropped + 1:] if c["name"] == "--attention-backend" and c["after"] is not None]
    assert kept, tests  # the root fix was looked for, keeping the user's FP8 cache, before concluding
