"""What a newcomer trying hypoloop as a user saw go wrong (2026-12-04), each on real parts: the hypoloop
command run as a process against the lab host, its transcripts and its checkpoint store."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from clirun import HYPOLOOP, cli_env, run_cli, transcript_events


def _result(out: str) -> dict:
    """The ``--json`` result line: the last line of stdout."""
    return json.loads(out.strip().splitlines()[-1])


def test_a_shared_library_that_fails_to_load_is_named_a_library_and_the_package_that_loads_it(tmp_path: Path) -> None:
    """A failed load of a shared library (``libnvrtc.so.12: cannot open shared object file``) that no
    knowledge entry maps to a wheel: the ending calls it a library, never a package, and names as the
    package the distribution whose code loads it (the one ``implicated.package`` holds)."""
    r = run_cli(tmp_path, "run", "lab:qwen3-4b-rtx5080-cu13", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    result = _result(r.stdout)
    imp, reason = result["implicated"], result["reason"]
    assert result["status"] == "not_isolated"
    assert imp["library"] == "libnvrtc.so.12" and imp["package"] == "sglang-kernel"
    assert "libnvrtc.so.12" not in imp["packages"]
    assert "(package libnvrtc.so.12)" not in reason and "runs in libnvrtc.so.12" not in reason
    assert "the library libnvrtc.so.12, which the package sglang-kernel" in reason
    log = next((tmp_path / "home" / "runs" / result["run_id"]).glob(f"{imp['experiment_id']}*.log"))
    analyzed = " ".join(run_cli(tmp_path, "analyze", str(log)).stdout.split())
    assert "the library libnvrtc.so.12" in analyzed and "package libnvrtc" not in analyzed, analyzed


def _lab_case(tmp_path: Path, world: str, **launcher: str) -> Path:
    """A copy of lab world ``world``'s case file whose [launcher] keys ``launcher`` replace the lab's."""
    repo = Path(__file__).resolve().parent.parent
    src = repo / "lab" / "worlds" / world
    lines = []
    for line in (src / "case.toml").read_text().replace("{case_dir}", str(src)).splitlines():
        key = line.split(" =", 1)[0]
        lines.append(f"{key} = {launcher.pop(key)}" if key in launcher else line)
    path = tmp_path / "case.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


#: an import-names query that prints junk with a terminal escape in it, and one whose program is missing
_JUNK = '["{python}", "-c", "print(\'\\\\x1b]0;owned\\\\x07 not json\')"]'
_MISSING = '["/nonexistent/hypoloop-no-such-python", "-c", "pass"]'


def test_a_failing_import_names_query_is_a_one_line_warning_in_run_show_and_doctor(tmp_path: Path) -> None:
    """The [launcher] import_names_argv printing junk (or missing) is not only a note in the transcript:
    ``run``, ``show`` and ``doctor`` say it in one warning line, its text escaped, no traceback."""
    case = _lab_case(tmp_path, "qwen3-4b-rtx5080-cu13", import_names_argv=_JUNK)
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    run_id = _result(r.stdout)["run_id"]
    shown = run_cli(tmp_path, "show", run_id)
    doctor = run_cli(tmp_path, "doctor", "--case", str(case))
    for out in (r.stdout + r.stderr, shown.stdout, doctor.stdout):
        warned = [ln for ln in out.splitlines() if "import_names_argv failed" in ln]
        assert len(warned) == 1 and "not json" in warned[0], out[-3000:]
        assert "\x1b" not in out and "␛" in warned[0] and "Traceback" not in out
    missing = run_cli(tmp_path, "doctor", "--case", str(_lab_case(tmp_path, "qwen3-4b-rtx5080-cu13",
                                                                  import_names_argv=_MISSING)))
    assert [ln for ln in missing.stdout.splitlines() if "import_names_argv failed" in ln], missing.stdout


def _seconds(text: str) -> float | None:
    """A report's duration ("410 s", "6.8 min", "1.2 h") in seconds; None for "—"."""
    value, _, unit = text.strip().partition(" ")
    if value == "—":
        return None
    return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]


def test_the_reports_crash_after_is_on_the_clock_of_its_host_time(tmp_path: Path) -> None:
    """A launch that served, then crashed under the probes: its "crash after" and its "host time" are on
    one clock (the request phase as real seconds), so the crash is never after the launch's whole host
    time (within the table's rounding)."""
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    report = run_cli(tmp_path, "report", _result(r.stdout)["run_id"])
    assert report.returncode == 0, report.stderr[-2000:]
    rows = [ln.split("|")[1:-1] for ln in report.stdout.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    crashed = [(_seconds(c[6]), _seconds(c[7])) for c in rows if _seconds(c[6]) is not None and _seconds(c[5])]
    assert crashed, rows  # a launch that was ready, then crashed
    for crash, host in crashed:
        assert crash is not None and host is not None and crash <= host + 3.0, (crash, host)
    assert "on the clock of *host time*" in report.stdout


def test_confirmed_never_stands_bare_beside_a_small_probability(tmp_path: Path) -> None:
    """Two hypotheses predicted the fix a run confirmed; the ledger gives the less likely one a small share.
    ``show`` and ``replay`` print "confirmed" beside that probability only with what the number means."""
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    run_id = _result(r.stdout)["run_id"]
    for args in (("show", run_id), ("replay", run_id)):
        out = run_cli(tmp_path, *args).stdout
        said = re.findall(r"confirmed (\S+) (.*?)p=(\d\.\d\d)( as the root cause)?", out)
        assert said, out[-3000:]
        small = [s for s in said if float(s[2]) < 0.5]
        assert small, said  # the run confirmed one below 0.5: its line says what the number is
        assert all(s[1] == "(its fix held) " and s[3] for s in small), said


def test_findings_add_takes_a_run_id_and_names_the_failure_a_flaky_run_debugged(tmp_path: Path) -> None:
    """A flaky failure whose first launch served (lab seed "s3": the fault is dormant, then live): the
    findings entry's symptom is the failure the run debugged, not the first launch's "ok"; and the run id
    ``hypoloop runs`` lists is accepted in place of the transcript's path, as ``show`` and ``replay`` do."""
    world = Path(__file__).resolve().parent / "data" / "worlds" / "flaky-nan" / "world.toml"
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "flaky"\ndescription = "the server sometimes crashes at the first request"\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{world}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        '[model]\npath = "org/Small-MoE-FP8"\n[baseline]\nflags = {}\n[budget]\nexperiments = 8\n'
    )
    lab = {"HYPOLOOP_LAB_SEED": "s3", "HYPOLOOP_LAB_STATE": str(tmp_path / "lab-state")}
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json", **lab)
    assert r.returncode == 0, r.stderr[-3000:]
    result = _result(r.stdout)
    assert result["status"] == "isolated"
    stages = [json.loads(ln)["data"]["stage"] for ln in Path(result["transcript"]).read_text().splitlines()
              if json.loads(ln)["type"] == "outcome"]
    assert stages[0] == "ok" and stages[1] != "ok"  # the first baseline served, the second failed
    added = run_cli(tmp_path, "findings", "add", result["run_id"], "--to", str(tmp_path / "FINDINGS.md"))
    assert added.returncode == 0, added.stderr
    symptom = next(ln for ln in (tmp_path / "FINDINGS.md").read_text().splitlines() if ln.startswith("- Symptom:"))
    assert symptom.startswith(f"- Symptom: {stages[1]}") and "probability tensor" in symptom, symptom


def test_an_infinite_or_nan_number_in_a_case_is_a_one_line_error_naming_the_field(tmp_path: Path) -> None:
    """TOML's ``inf`` and ``nan`` are floats; a budget of ``inf`` host-seconds is no budget. ``run`` refuses
    the case before anything runs: exit 2, one line naming the field, no traceback."""
    for value in ("inf", "nan"):
        case = _lab_case(tmp_path, "qwen3-4b-rtx5080-cu13")
        case.write_text(case.read_text().replace("host_seconds = 28800", f"host_seconds = {value}"))
        r = run_cli(tmp_path, "run", str(case), "--auto")
        assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "budget.host_seconds" in lines[0] and "finite" in lines[0], r.stderr
        assert not (tmp_path / "transcripts").exists() or not list((tmp_path / "transcripts").iterdir())


def test_analyze_names_the_words_a_feature_shares_with_the_failing_code_whole_never_stems(tmp_path: Path) -> None:
    """The words a component hypothesis says the failing code shares with a feature flag are the flag's own
    words ("experts, fusion"), never the stems they are compared by ("expert, fus"; "ait" for "aiter")."""
    r = run_cli(tmp_path, "run", "lab:glm5-shared-experts-fusion", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    logs = sorted((tmp_path / "home" / "runs" / _result(r.stdout)["run_id"]).glob("*.log"))
    said = []
    for log in logs:
        out = " ".join(run_cli(tmp_path, "analyze", str(log)).stdout.split())
        said += re.findall(r"The ([a-z0-9 ]+) feature breaks in the failing component \(([^)]*)\)", out)
    assert said, "no component hypothesis in the analysis of any launch"
    for feature, words in said:
        assert all(w in feature.split() for w in words.split(", ")), (feature, words)


def test_an_amd_gpu_is_named_by_its_gfx_arch_in_findings_and_the_run(tmp_path: Path) -> None:
    """An AMD GPU's architecture is a gfx name: the findings entry and the run's host line say ``arch gfx…``,
    never the "compute capability" PyTorch derives for it."""
    r = run_cli(tmp_path, "run", "lab:glm5-fp8-mi325x", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    result = _result(r.stdout)
    assert result["status"] == "isolated", result
    host = next(ln for ln in r.stderr.splitlines() + r.stdout.splitlines() if ln.strip().startswith("host:"))
    added = run_cli(tmp_path, "findings", "add", result["transcript"], "--to", str(tmp_path / "F.md"), "--dry-run")
    hardware = next(ln for ln in added.stdout.splitlines() if ln.startswith("- Hardware:"))
    for line in (host, hardware):
        assert re.search(r"arch gfx\d+", line) and "compute capability" not in line, line


def test_runs_keeps_to_a_40_column_terminal_and_never_splits_a_run_id(tmp_path: Path) -> None:
    """``hypoloop runs`` at COLUMNS=40: no line is wider than the terminal; each run id is on a line whole."""
    r = run_cli(tmp_path, "run", "lab:qwen3-4b-rtx5080-cu13", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    run_id = _result(r.stdout)["run_id"]
    out = run_cli(tmp_path, "runs", COLUMNS="40").stdout
    assert all(len(ln) <= 40 for ln in out.splitlines()), out
    assert any(ln.split() and ln.split()[0] == run_id for ln in out.splitlines()), out


def test_runs_counts_a_server_a_killed_run_started_before_it_recorded_the_launch(tmp_path: Path) -> None:
    """``kill -9`` of hypoloop after it wrote down a launch (``server.launching``) and spawned the server,
    before it recorded ``server.launched``: ``runs`` shows the server left running, and counts its launch
    (not "0 launches"). The window is milliseconds wide, so the run is killed once the server is launched
    and the transcript is cut back to what a kill in that window leaves: the intent, no launch record."""
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE="0.05")
    p = subprocess.Popen([*HYPOLOOP, "run", "lab:glm5-nvfp4-sm120", "--auto", "--transcript-dir", "tr"],
                         cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    pgid = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and pgid is None:
            found = list((tmp_path / "tr").glob("*.jsonl"))
            launched = [e for e in transcript_events(found[0]) if e["type"] == "server.launched"] if found else []
            pgid = int(launched[0]["data"]["pgid"]) if launched else None
            time.sleep(0.05)
        assert pgid is not None, "the run never launched a server"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        lines = found[0].read_text().splitlines(keepends=True)
        cut = next(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == "server.launched")
        found[0].write_text("".join(lines[:cut]))
        listed = json.loads(run_cli(tmp_path, "runs", "--json").stdout)
        assert len(listed) == 1 and listed[0]["status"] == "interrupted", listed
        assert len(listed[0]["leftovers"]) == 1 and listed[0]["launches"] == 1, listed
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
