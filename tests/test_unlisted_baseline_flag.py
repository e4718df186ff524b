"""A baseline flag the host's ``--help`` does not list (a launch script carried over from another release)
is a case to debug, not bad input: the run launches it as written, reads the host's own argparse refusal,
and removes the flag as a blocker before it looks for the failure behind it."""

from __future__ import annotations

from pathlib import Path

from clirun import changes_tested, lab_case, run_auto

WORLD = Path(__file__).resolve().parent.parent / "lab" / "worlds" / "cuda-graph-oom" / "world.toml"
MODEL = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
RETIRED = "--enable-retired-option"  # no option of any release's --help


def _case(tmp_path: Path) -> Path:
    flags = f'flags = {{ "--tp-size" = 4, "{RETIRED}" = true, "--mem-fraction-static" = 0.9 }}'
    return lab_case(tmp_path / "case.toml", WORLD, model=MODEL, baseline=flags, budget="experiments = 10")


def test_a_baseline_flag_the_host_lacks_is_launched_and_removed_as_a_blocker(tmp_path: Path) -> None:
    result, events = run_auto(tmp_path, _case(tmp_path), HYPOLOOP_LAB_TIME_SCALE="0.004")
    warnings = [e["data"]["message"] for e in events if e["type"] == "case.warning"]
    assert any(RETIRED in w and "launched as written" in w for w in warnings), warnings
    first = next(e for e in events if e["type"] == "tool.call" and e["data"].get("tool") == "launch_server")
    assert RETIRED in first["data"]["argv"]  # the user's own command line, as written
    assert result["launches"] >= 2 and result["status"] == "isolated", result
    assert {"kind": "flag", "name": RETIRED, "before": True, "after": None} in result["root_cause"]["blockers"]


def test_a_misspelt_flag_the_launcher_names_is_removed_first(tmp_path: Path) -> None:
    """The demo case with a misspelt flag carrying a value (a newcomer's case): the launcher's refusal names
    it ("unrecognized arguments: --kv-cache-dtypo bf16"), so removing it is the first change tested, before
    any other suspect of a failed launch."""
    from clirun import run_case_copy, transcript_events

    from lab.world import WORLDS_DIR

    old = '"--quantization" = "modelopt_fp4" }'
    result, _ = run_case_copy(tmp_path, WORLDS_DIR / "glm5-nvfp4-sm120",
                              **{old: '"--quantization" = "modelopt_fp4", "--kv-cache-dtypo" = "bf16" }'})
    events = transcript_events(Path(result["transcript"]))
    tested = changes_tested(events)
    assert tested and tested[0]["name"] == "--kv-cache-dtypo" and tested[0]["after"] is None, tested


def test_the_warning_about_a_flag_the_host_lacks_is_shown_live_and_in_replay(tmp_path: Path) -> None:
    """The warning reaches the person at the terminal, not only the transcript: the live run prints it once
    (before the first launch), and ``replay`` of the run shows it too."""
    from clirun import run_cli

    case = _case(tmp_path)
    live = run_cli(tmp_path, "run", str(case), "--auto", "--transcript-dir", str(tmp_path / "tr"), timeout=300)
    assert live.returncode == 0, live.stderr[-3000:]
    out = " ".join((live.stdout + live.stderr).split())  # the warning wraps at the terminal's width
    warning = f"warning: {case}: baseline.flags: {RETIRED}: unknown flag"
    assert out.count(warning) == 1, out[:3000]
    assert "launched as written" in out[out.index(warning):out.index("server launched")], "warned before the launch"
    transcript = next((tmp_path / "tr").glob("*.jsonl"))
    shown = run_cli(tmp_path, "replay", str(transcript))
    assert shown.returncode == 0 and f"warning: {case}: baseline.flags: {RETIRED}" in shown.stdout, shown.stdout[:3000]


def test_a_misspelt_flag_is_set_right_with_the_users_value_after_its_removal(tmp_path: Path) -> None:
    """A newcomer's demo case with ``--tp-sise 8``: the launcher refuses it and it is removed first; then the
    flag it is one slip from (``--tp-size``) is set to the user's 8, and that restores what the user asked for
    rather than changing it: the run ends on the demo's own fix, not on "a change of what is served". A flag
    further from every listed one (RETIRED above) is only removed."""
    from clirun import run_case_copy, transcript_events

    from lab.world import WORLDS_DIR

    result, _ = run_case_copy(tmp_path, WORLDS_DIR / "glm5-nvfp4-sm120", **{'"--tp-size" = 8': '"--tp-sise" = 8'})
    tested = changes_tested(transcript_events(Path(result["transcript"])))
    assert [(c["name"], c["after"]) for c in tested[:2]] == [("--tp-sise", None), ("--tensor-parallel-size", "8")], tested
    assert result["status"] == "isolated", result
    assert result["root_cause"]["fix"]["name"] == "--kv-cache-dtype", result["root_cause"]


def test_a_baseline_flag_that_is_an_ambiguous_prefix_is_launched_as_written(tmp_path: Path) -> None:
    """A launch script's ``--schedule lpm`` where the host's --help has several options starting so (argparse:
    "ambiguous option"): like an unlisted flag it is the user's own command, launched as written with a
    warning naming the options it could match, not refused before any launch."""
    flags = 'flags = { "--tp-size" = 4, "--schedule" = "lpm", "--mem-fraction-static" = 0.9 }'
    case = lab_case(tmp_path / "case.toml", WORLD, model=MODEL, baseline=flags, budget="experiments = 10")
    result, events = run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE="0.004")
    warnings = [e["data"]["message"] for e in events if e["type"] == "case.warning"]
    assert any("--schedule: ambiguous option" in w and "launched as written" in w for w in warnings), warnings
    first = next(e for e in events if e["type"] == "tool.call" and e["data"].get("tool") == "launch_server")
    argv = first["data"]["argv"]
    assert argv[argv.index("--schedule") + 1] == "lpm", argv  # the user's own command line, as written
    assert result["status"] != "error" and result["launches"] >= 1, result
