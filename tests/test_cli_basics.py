"""The small things a newcomer tries first, on the real command: --version, listing the lab worlds,
one spelling of a waiting run's status in every --json output, listings that fit 80 columns when piped,
typed flag defaults from a saved --help, and options refused in one line when malformed."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from clirun import HYPOLOOP, cli_env, run_cli

ROOT = Path(__file__).resolve().parent.parent
HELP_0523 = ROOT / "tests" / "data" / "help_sglang_0.5.23.txt"


def _piped(tmp_path: Path, *args: str):  # no terminal and no COLUMNS: what `| less` or a script sees
    import subprocess

    env = cli_env(tmp_path)
    env.pop("COLUMNS", None)
    return subprocess.run([*HYPOLOOP, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_version_prints_the_installed_version_and_the_checkout_commit(tmp_path: Path) -> None:
    """From a git checkout the version names its commit; with no git on PATH it still prints the version."""
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not run from a git checkout, or no git")
    head = subprocess.run([git, "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    done = run_cli(tmp_path, "--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"hypoloop {version('hypoloop')} (commit {head})"
    no_git = run_cli(tmp_path, "--version", PATH=str(tmp_path))  # an empty folder: no git to run
    assert no_git.returncode == 0 and not no_git.stderr
    assert no_git.stdout.strip() == f"hypoloop {version('hypoloop')}"


def test_lab_list_names_every_world_with_its_description(tmp_path: Path) -> None:
    worlds = {p.parent.name: tomllib.loads(p.read_text())["description"] for p in (ROOT / "lab" / "worlds").glob("*/case.toml")}
    done = run_cli(tmp_path, "lab", "list", "--json")
    assert done.returncode == 0, done.stderr
    assert {r["world"]: r["description"] for r in json.loads(done.stdout)} == worlds
    text = _piped(tmp_path, "lab", "list")
    assert all(f"lab:{w}" in text.stdout for w in worlds)
    assert max(len(line) for line in text.stdout.splitlines()) <= 80


def test_a_waiting_run_has_one_status_spelling_in_every_json(tmp_path: Path) -> None:
    waiting = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--json")
    assert waiting.returncode == 3, waiting.stderr
    run_json = json.loads(waiting.stdout.strip().splitlines()[-1])
    runs = json.loads(run_cli(tmp_path, "runs", "--json").stdout)
    show = json.loads(run_cli(tmp_path, "show", run_json["run_id"], "--json").stdout.strip().splitlines()[-1])
    assert run_json["status"] == "waiting_for_approval"
    assert [r["status"] for r in runs] == ["waiting_for_approval"]
    assert show["status"] == "waiting_for_approval"
    # people read it with spaces, and piped the listing keeps to 80 columns
    listed = _piped(tmp_path, "runs")
    assert "waiting for approval" in listed.stdout
    assert max(len(line) for line in listed.stdout.splitlines()) <= 80


def test_replay_and_report_take_the_run_id_that_runs_lists(tmp_path: Path) -> None:
    """`hypoloop runs` lists run ids; replay and report read a run by its id as by its transcript file (also
    from the state folder's runs/, where a folder carries the run's name), and an id the store does not know,
    or a name too long for the system, is one line."""
    waiting = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--json")
    assert waiting.returncode == 3, waiting.stderr
    run_id = json.loads(waiting.stdout.strip().splitlines()[-1])["run_id"]
    replayed = run_cli(tmp_path, "replay", run_id)
    assert replayed.returncode == 0, replayed.stderr
    assert run_id in replayed.stdout and "reproduce the baseline" in replayed.stdout
    report = run_cli(tmp_path, "report", run_id)
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith(f"# hypoloop run {run_id}")
    unknown = run_cli(tmp_path, "replay", "20990101-000000-abcdef")
    assert unknown.returncode == 2 and not unknown.stdout
    assert len(unknown.stderr.strip().splitlines()) == 1 and "no run '20990101-000000-abcdef'" in unknown.stderr
    # standing in the run's own folder's parent (its server logs are there), the folder named like the run
    # does not hide the run
    import subprocess

    runs = tmp_path / "home" / "runs"
    (runs / run_id).mkdir(parents=True, exist_ok=True)  # made at the run's first launch
    there = subprocess.run([*HYPOLOOP, "replay", run_id], cwd=runs, env=cli_env(tmp_path), capture_output=True,
                           text=True, timeout=180)
    assert there.returncode == 0 and "reproduce the baseline" in there.stdout, there.stderr
    # a name the system refuses (too long) is one line, not a traceback
    long = run_cli(tmp_path, "report", "x" * 300)
    assert long.returncode == 2 and not long.stdout
    assert len(long.stderr.strip().splitlines()) == 1 and "too long" in long.stderr


def test_flags_listing_fits_80_columns_when_piped(tmp_path: Path) -> None:
    done = _piped(tmp_path, "flags", "--from-file", str(HELP_0523))
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    assert "--quantization-param-path" in done.stdout


def test_a_saved_help_text_and_a_host_together_are_one_line_not_a_silent_choice(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "flags", "--host", "local", "--from-file", str(HELP_0523))
    assert done.returncode == 2 and done.stdout == "", done.stdout[-500:]
    assert done.stderr.strip().count("\n") == 0 and "--from-file" in done.stderr and "--host" in done.stderr


def test_flag_defaults_are_never_read_out_of_prose_about_something_else(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "flags", "--from-file", str(HELP_0523), "--json")
    flags = json.loads(done.stdout)["flags"]
    # "... KV cache scaling factors default to 1.0": a path with no default, not a float 1.0
    assert (flags["--quantization-param-path"]["value_type"], flags["--quantization-param-path"]["default"]) == ("str", None)
    # a default the help states for the flag itself is still read, typed
    assert (flags["--triton-attention-num-kv-splits"]["value_type"], flags["--triton-attention-num-kv-splits"]["default"]) == ("int", "8")


def test_malformed_options_are_one_line_errors(tmp_path: Path) -> None:
    log = next((ROOT / "tests" / "data" / "logs_0.5.23").glob("*.log"))
    for args, word in (
        (("analyze", str(log), "--compute-capability", "abc"), "--compute-capability"),
        (("analyze", str(log), "--gpu-name", " "), "--gpu-name"),
    ):
        done = run_cli(tmp_path, *args)
        assert done.returncode == 2, (args, done.stdout)
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and word in lines[0] and "Traceback" not in done.stderr
    assert os.environ.get("HYPOLOOP_HOME") != str(tmp_path)  # the runs above used their own home


def test_auto_with_another_approval_mode_is_refused_before_a_run_exists(tmp_path: Path) -> None:
    """`--auto` is `--approve auto`: given with `--approve each` it used to win silently and launch
    without asking (found by a newcomer run); a contradiction is one line, exit 2, and no run."""
    for args in (("run", "lab:glm5-nvfp4-sm120", "--approve", "each", "--auto"),
                 ("resume", "no-such-run", "--approve", "risky", "--auto")):
        done = run_cli(tmp_path, *args)
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert done.returncode == 2 and len(lines) == 1 and "contradict" in lines[0], (args, done.stderr)
    listed = run_cli(tmp_path, "runs", "--json")
    assert json.loads(listed.stdout or "[]") == []


def test_an_option_given_twice_is_refused_in_one_line_and_a_repeatable_one_is_not(tmp_path: Path) -> None:
    """click keeps the last of two values without a word (`--parallel 2 --parallel 3` ran 3 at once);
    an option meant to repeat (`resume --set`) still repeats."""
    twice = run_cli(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--parallel", "2", "--parallel=3")
    assert twice.returncode == 2
    assert twice.stderr.strip().splitlines() == [
        "error: --parallel '2' and --parallel '3': one option given twice (the last would win silently); give it once"
    ]
    flag = run_cli(tmp_path, "runs", "--json", "--json")
    assert flag.returncode == 2 and "--json and --json: one option given twice" in flag.stderr
    listed = run_cli(tmp_path, "runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []  # nothing ran
    repeat = run_cli(tmp_path, "resume", "no-such-run", "--decision", "edit", "--set", "A=1", "--set", "B=2")
    assert "given twice" not in repeat.stderr and "no-such-run" in repeat.stderr
    after = run_cli(tmp_path, "analyze", "--json", "--", "--json")  # after `--` a word is an argument, never an option
    assert "given twice" not in after.stderr


def _reader_gone(tmp_path: Path, *args: str, timeout: float = 600) -> tuple[int, str]:
    """``hypoloop ARGS | head -0``: its output's reader is gone before it writes a line (so every write
    meets a closed pipe, whatever the timing). Returns the exit code and stderr."""
    import subprocess

    proc = subprocess.Popen(
        [*HYPOLOOP, *args], cwd=tmp_path, env=cli_env(tmp_path), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def test_output_into_a_reader_that_went_away_ends_quietly(tmp_path: Path) -> None:
    """`hypoloop runs | head -1` exited 1 with a BrokenPipeError traceback."""
    transcript = ROOT / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"
    for args in (("runs",), ("replay", str(transcript)), ("--help",)):
        code, err = _reader_gone(tmp_path, *args)
        assert code == 0 and "Traceback" not in err and "BrokenPipe" not in err, (args, err)


def test_a_run_whose_reader_went_away_still_ends_and_stops_its_servers(tmp_path: Path) -> None:
    """A run whose output goes nowhere stops as after Ctrl-C (tests/test_reader_gone.py: mid-launch),
    never before it stops the servers it launched, and says why in its transcript."""
    from clirun import live_processes

    code, err = _reader_gone(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--transcript-dir", "tr")
    assert code == 130 and "Traceback" not in err, err[-2000:]
    (transcript,) = (tmp_path / "tr").glob("*.jsonl")
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert events[-1]["type"] == "run.ended" and events[-1]["data"]["status"] == "interrupted"
    assert "went away" in events[-1]["data"]["reason"]
    launched = sum(e["type"] == "server.launched" for e in events)
    assert sum(e["type"] == "server.stopped" for e in events) == launched
    assert not live_processes(transcript.stem, only="lab.launch_server")


def test_the_printed_resume_command_works_pasted_into_another_terminal(tmp_path: Path) -> None:
    """A run started with HYPOLOOP_HOME (and the lab's clock) set printed a bare `hypoloop resume RUN`,
    which in a fresh terminal looked in ~/.hypoloop and found no such run."""
    import re
    import shlex
    import subprocess

    waiting = run_cli(tmp_path, "run", "lab:nccl-p2p-hang")  # no terminal: waits for the first approval
    assert waiting.returncode == 3, waiting.stderr[-2000:]
    said = " ".join(waiting.stdout.split())
    m = re.search(r"Answer with: (.*?hypoloop resume \S+)", said)
    assert m is not None, said[-2000:]
    words = shlex.split(m[1])
    assert f"HYPOLOOP_HOME={tmp_path / 'home'}" in words and "HYPOLOOP_LAB_TIME_SCALE=0.004" in words
    pasted = " ".join(shlex.join(HYPOLOOP) if w == "hypoloop" else shlex.quote(w) for w in words)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fresh = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_")}  # another terminal
    fresh["HOME"] = str(elsewhere)  # whose ~/.hypoloop holds no runs
    done = subprocess.run(["bash", "-c", f"{pasted} --decision stop"], cwd=elsewhere, env=fresh,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    listed = run_cli(tmp_path, "runs", "--json")
    assert [r["status"] for r in json.loads(listed.stdout)] == ["finished"]


@pytest.mark.parametrize("args", [("runs",), ("run", "lab:glm5-nvfp4-sm120", "--auto"), ("show", "20260101-000000-abcdef")])
def test_hypoloop_home_that_is_a_file_is_one_clear_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    """HYPOLOOP_HOME set to a file said only "File exists"."""
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    for value, culprit in ((home, "it is a file"), (home / "sub", f"{home} is a file")):
        r = run_cli(tmp_path, *args, HYPOLOOP_HOME=str(value))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0].startswith(f"error: HYPOLOOP_HOME={value}: ") and culprit in lines[0], lines[0]
        assert "set HYPOLOOP_HOME to a folder" in lines[0] and "File exists" not in lines[0]


def test_reading_commands_do_not_create_a_mistyped_hypoloop_home(tmp_path: Path) -> None:
    """`runs` and `show` only read: a HYPOLOOP_HOME that does not exist (a typo) is reported, not created
    with all its parents, which hid the typo (a newcomer found `runs` printing "no runs" and making it)."""
    home = tmp_path / "typo" / "x" / "y"
    listed = run_cli(tmp_path, "runs", HYPOLOOP_HOME=str(home))
    assert listed.returncode == 0 and f"no runs in {home} (no such folder)" in listed.stdout, listed.stdout
    assert json.loads(run_cli(tmp_path, "runs", "--json", HYPOLOOP_HOME=str(home)).stdout) == []
    shown = run_cli(tmp_path, "show", "20260101-000000-abcdef", HYPOLOOP_HOME=str(home))
    assert shown.returncode == 2 and shown.stderr.strip().splitlines() == [
        f"error: no run 20260101-000000-abcdef: HYPOLOOP_HOME {home} does not exist"], shown.stderr
    assert not (tmp_path / "typo").exists()


def test_a_folder_hypoloop_home_points_at_keeps_its_mode_and_an_empty_value_is_not_the_current_folder(
    tmp_path: Path,
) -> None:
    """HYPOLOOP_HOME at an existing shared folder (a sticky 1777 one, like /tmp) turned it 0700 even on
    a read-only `runs`; HYPOLOOP_HOME= (empty) used and tightened the current folder (a newcomer found both)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    r = run_cli(tmp_path, "runs", HYPOLOOP_HOME=str(shared))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    fresh = tmp_path / "made-by-hypoloop"  # made by a command that writes there (`resume` takes its lock)
    assert "no run" in run_cli(tmp_path, "resume", "20260101-000000-abcdef", HYPOLOOP_HOME=str(fresh)).stderr
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700  # a folder it makes itself is private
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o755)
    fake_home = tmp_path / "user"
    fake_home.mkdir()
    r = run_cli(work, "resume", "20260101-000000-abcdef", HYPOLOOP_HOME="", HOME=str(fake_home))
    assert "no run" in r.stderr, r.stderr
    assert stat.S_IMODE(work.stat().st_mode) == 0o755 and list(work.iterdir()) == []
    assert (fake_home / ".hypoloop").is_dir()


def test_the_answer_hint_lists_exactly_the_options_that_apply_to_the_waiting_experiment(tmp_path: Path) -> None:
    """The hint offered 'edit' (and --set) for the baseline, which has no change to edit, and left out
    --experiment; the hint for a change offers both, and each hint's command works as printed."""
    import re
    import shlex

    waiting = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120")  # no terminal: waits at the baseline
    assert waiting.returncode == 3, waiting.stderr[-2000:]
    (run,) = json.loads(run_cli(tmp_path, "runs", "--json").stdout)
    shown_json = json.loads(run_cli(tmp_path, "show", run["run_id"], "--json").stdout.strip().splitlines()[-1])
    run_id, baseline = run["run_id"], shown_json["pending"]["experiment"]["id"]
    said = " ".join(waiting.stdout.split())
    m = re.search(r"Answer with: (.*?hypoloop resume .*)$", said)
    assert m is not None, said[-2000:]
    hint = m[1].strip()
    assert hint.endswith(f"resume {run_id} --experiment {baseline} --decision approve/reject/stop [--reason TEXT]"), hint
    shown = " ".join(run_cli(tmp_path, "show", run_id).stdout.split())
    assert f"--experiment {baseline} [--decision approve/reject/stop] [--reason TEXT]" in shown and "edit" not in shown
    # the printed command, with one of its decisions, answers the baseline; the next one waits for a change
    words = shlex.split(re.sub(r"\[[^]]*\]", "", hint.split("hypoloop ", 1)[1]))  # the optional parts left out
    # pasted without picking a decision, it is refused as an invalid choice: nothing is approved or run
    pasted = run_cli(tmp_path, *words)
    assert pasted.returncode == 2 and "approve/reject/stop" in pasted.stderr, pasted.stderr[-2000:]
    assert json.loads(run_cli(tmp_path, "show", run_id, "--json").stdout.strip().splitlines()[-1])["pending"][
        "experiment"]["id"] == baseline
    args = [w if "/" not in w else "approve" for w in words]
    done = run_cli(tmp_path, *args)
    assert done.returncode == 3, done.stderr[-2000:]
    nxt = json.loads(run_cli(tmp_path, "show", run_id, "--json").stdout.strip().splitlines()[-1])["pending"]
    assert nxt["experiment"]["change"] and nxt["experiment"]["id"] != baseline
    said = " ".join(done.stdout.split())
    assert (f"--experiment {nxt['experiment']['id']} --decision approve/edit/reject/stop [--reason TEXT] "
            "[--set NAME=VALUE]") in said
