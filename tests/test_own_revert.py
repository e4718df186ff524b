"""The user's own deviation reverted before another value of it is called the fix (issue 20, point 5), end
to end through the CLI and the lab: the user chose an attention backend explicitly, and both another backend
and the flag removed (the engine's default) serve. The removal keeps the user's command closest, so it is
the fix, whichever of the two served first. Test world: ``backend-explicit-choice``."""

from __future__ import annotations

from pathlib import Path

from clirun import lab_case, run_auto

TEST_WORLDS = Path(__file__).parent / "data" / "worlds"
FLAG = "--attention-backend"


def _run(tmp_path: Path, world: str) -> tuple[dict, list[dict]]:
    case = lab_case(tmp_path / f"{world}.toml", TEST_WORLDS / world / "world.toml", model="Qwen/Qwen3-8B",
                    description="the server dies at its first request",
                    baseline=f'flags = {{ "{FLAG}" = "flashinfer", "--mem-fraction-static" = 0.85 }}',
                    budget="experiments = 8\nhost_seconds = 1000000")
    return run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE="0.001", HYPOLOOP_LAB_SEED="t",
                    HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))


def test_the_users_explicit_value_removed_is_the_fix_not_another_value(tmp_path: Path) -> None:
    result, events = _run(tmp_path, "backend-explicit-choice")
    assert result["status"] == "isolated", result["reason"]
    fix = result["root_cause"]["fix"]
    assert fix["name"] == FLAG and fix["after"] is None, fix
    tested = [(e["data"]["change"]["name"], e["data"]["change"]["after"]) for e in events
              if e["type"] == "experiment.proposed" and e["data"]["change"]]
    others = [t for t in tested if t[0] == FLAG and t[1] is not None]
    if others:  # another value served first: the user's own setting was reverted right after it
        assert tested.index((FLAG, None)) == tested.index(others[0]) + 1, tested
        # and the other value is reported apart, as a workaround that also served, not as another root fix
        alternatives = {a["name"]: a for a in result["root_cause"]["alternatives"]}
        assert alternatives[FLAG]["workaround"], alternatives
