"""Small things a newcomer met at the command line, each run as a user runs it: a case file saved with a
byte-order mark loads; ``findings add --to`` never creates a mistyped folder; ``doctor`` ends its lines
where their text does; ``run`` refusing a case at intake prints the error alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clirun import HYPOLOOP, cli_env, run_auto, run_cli

WORLD = Path(__file__).parents[1] / "lab" / "worlds" / "glm5-nvfp4-sm120" / "case.toml"


def _case(tmp_path: Path, extra_flag: str = "") -> str:
    """The lab world's case without its knowledge file, optionally with one more baseline flag."""
    text = WORLD.read_text().replace('knowledge = ["FINDINGS.md"]', "")
    return text.replace('"--quantization" = "modelopt_fp4"', f'"--quantization" = "modelopt_fp4"{extra_flag}')


def test_a_case_file_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    case = tmp_path / "case.toml"
    case.write_bytes(b"\xef\xbb\xbf" + _case(tmp_path).encode())
    result, _ = run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE="0.004")
    assert result["status"] not in ("error",), result


def test_run_refusing_a_case_at_intake_prints_the_error_alone(tmp_path: Path) -> None:
    case = tmp_path / "case.toml"
    case.write_text(_case(tmp_path, ', "--mem-fraction-static" = "lots"'))  # an illegal value of a listed flag
    r = run_cli(tmp_path, "run", str(case), "--auto")
    assert r.returncode == 2, r.stderr
    assert r.stdout == "", r.stdout  # no header of a run that never was
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--mem-fraction-static" in lines[0], r.stderr


def test_findings_add_refuses_a_missing_folder_in_one_line(tmp_path: Path) -> None:
    result, _ = run_auto(tmp_path, Path("lab:glm5-nvfp4-sm120"), HYPOLOOP_LAB_TIME_SCALE="0.004")
    assert result["status"] == "isolated", result
    target = tmp_path / "notes" / "typo" / "FINDINGS.md"
    r = run_cli(tmp_path, "findings", "add", result["transcript"], "--to", str(target))
    assert r.returncode == 2 and not (tmp_path / "notes").exists(), (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(target) in lines[0], r.stderr
    a_file = tmp_path / "notes.md"
    a_file.write_text("x\n")
    r = run_cli(tmp_path, "findings", "add", result["transcript"], "--to", str(a_file / "FINDINGS.md"))
    assert r.returncode == 2 and "is not a folder" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # a file that cannot be opened for writing (a link into a folder that is gone): one line, no traceback
    (tmp_path / "gone.md").symlink_to(tmp_path / "gone" / "FINDINGS.md")
    r = run_cli(tmp_path, "findings", "add", result["transcript"], "--to", str(tmp_path / "gone.md"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "cannot write" in r.stderr, r.stderr
    ok = run_cli(tmp_path, "findings", "add", result["transcript"], "--to", str(tmp_path / "FINDINGS.md"))
    assert ok.returncode == 0 and (tmp_path / "FINDINGS.md").is_file(), ok.stderr  # its folder exists


def test_doctor_prints_no_trailing_spaces(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "doctor", "--case", "lab:glm5-nvfp4-sm120", COLUMNS="100")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) > 3
    assert [ln for ln in r.stdout.splitlines() if ln != ln.rstrip()] == [], r.stdout


def test_a_directory_given_for_a_file_says_so(tmp_path: Path) -> None:
    """A folder given where a case file or a transcript goes: a case's folder stands for its case.toml;
    any other folder is named as a directory in one line, not 'not found' (found by a newcomer)."""
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    r = run_cli(tmp_path, "run", str(empty), "--auto")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: {empty}: is a directory with no case.toml in it (expected a case file)"
    ]
    r = run_cli(tmp_path, "replay", str(empty))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: {empty}: is a directory (expected a run's transcript, a .jsonl file)"
    ]
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "case.toml").write_text(_case(tmp_path))
    result, _ = run_auto(tmp_path, folder, HYPOLOOP_LAB_TIME_SCALE="0.004")
    assert result["status"] != "error" and result["launches"] >= 1, result


def test_analyze_with_a_case_refuses_an_illegal_baseline_value_as_run_does(tmp_path: Path) -> None:
    case = tmp_path / "case.toml"
    case.write_text(_case(tmp_path, ', "--mem-fraction-static" = "lots"'))  # (an unlisted flag is launched)
    log = tmp_path / "crash.log"
    log.write_text('Traceback (most recent call last):\n  File "/x.py", line 1, in f\nRuntimeError: boom\n')
    analyzed = run_cli(tmp_path, "analyze", str(log), "--case", str(case))
    ran = run_cli(tmp_path, "run", str(case), "--auto")
    assert analyzed.returncode == ran.returncode == 2, (analyzed.stderr, ran.stderr)
    lines = analyzed.stderr.strip().splitlines()
    assert len(lines) == 1 and "baseline.flags" in lines[0] and "--mem-fraction-static" in lines[0], analyzed.stderr
    assert lines == ran.stderr.strip().splitlines()  # the same line as run's
    assert analyzed.stdout == ""  # no reading of a log against a case the host cannot run


def test_a_base_url_that_is_not_an_http_url_is_one_line_naming_the_option(tmp_path: Path) -> None:
    for url in ("not a url", "localhost:8000/v1", "ftp://host/v1"):
        r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--planner", "llm", "--model", "m", "--base-url", url,
                    "--auto", "--transcript-dir", "tr")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (url, r.returncode, r.stderr[-2000:])
        assert "--base-url" in lines[0] and "http:// or https://" in lines[0], lines
        assert not (tmp_path / "tr").exists()  # refused before any run began


def test_a_bad_lab_time_scale_is_named_as_itself_not_as_the_host_target(tmp_path: Path) -> None:
    """``HYPOLOOP_LAB_TIME_SCALE=abc`` was reported as a problem of the case's ``host.target`` (found by a
    newcomer): the line names the variable, its value and what it takes; set in the case's host.env, the
    case file and that field too."""
    for value in ("abc", "-1"):
        r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", HYPOLOOP_LAB_TIME_SCALE=value)
        assert r.returncode == 2, r.stderr[-2000:]
        assert r.stderr.strip().splitlines() == [
            f"error: HYPOLOOP_LAB_TIME_SCALE={value!r}: expected a positive number (the lab's clock: a lab "
            "world's durations are multiplied by it, e.g. 0.01; unset or 1 on a real host)"
        ]
    case = tmp_path / "case.toml"
    case.write_text(_case(tmp_path).replace('HYPOLOOP_LAB_TIME_SCALE = "0.01"', 'HYPOLOOP_LAB_TIME_SCALE = "fast"'))
    env = cli_env(tmp_path)
    env.pop("HYPOLOOP_LAB_TIME_SCALE")
    r = subprocess.run([*HYPOLOOP, "run", str(case), "--auto"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=180, stdin=subprocess.DEVNULL)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith(f"error: {case}: host.env: HYPOLOOP_LAB_TIME_SCALE='fast': expected a positive number")


def test_a_path_with_a_newline_or_control_character_stays_on_the_error_line(tmp_path: Path) -> None:
    """A path given on the command line was printed raw in the error naming it, so a newline in it broke
    the one-line error in two (found by a newcomer): control characters are shown as their pictures."""
    bad = "bad\nname\x1b[31m\t.jsonl"
    shown = "bad␊name␛[31m␉.jsonl"
    for args, said in (
        (("replay", bad), f"error: {shown}: no such transcript file"),
        (("report", bad), f"error: {shown}: cannot read: No such file or directory"),
        (("run", bad, "--auto"), f"error: {shown}: case file not found"),
        (("findings", "add", bad, "--to", "F.md"), f"error: {shown}: cannot read: No such file or directory"),
    ):
        r = run_cli(tmp_path, *args)
        assert r.returncode == 2 and r.stderr.splitlines() == [said], (args, r.stderr)


def test_a_mistyped_lab_world_is_one_short_line_with_the_nearest_name(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm12", "--auto")
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and len(line) < 200, line  # not every world's name on one line
    assert "did you mean lab:glm5-nvfp4-sm120?" in line and "hypoloop lab list" in line, line
