"""Case-file mistakes are answered in the case file's words: the key, its table, the nearest known key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import lab_case, run_cli

from agent.domain.case import CaseError, load_case

GOOD = 'name = "x"\n[model]\npath = "m"\n'


def _case(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "case.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + "[budget]\nexperimnts = 3\n", "unknown key 'experimnts' in [budget]; did you mean 'experiments'?"),
        ('knowlege = []\n' + GOOD, "unknown key 'knowlege' in the top level; did you mean 'knowledge'?"),
        (GOOD + "[budjet]\nexperiments = 3\n", "unknown key 'budjet' in the top level; did you mean 'budget'?"),
        (
            GOOD + '[[probes]]\nid = "a"\nkind = "chat"\nprompt = "p"\nexpct = "x"\n',
            "unknown key 'expct' in [[probes]] #1; did you mean 'expect'?",
        ),
        (  # an array's items are counted from 1 in every message, as in "[[probes]] #1" above
            GOOD + '[[probes]]\nid = "a"\nkind = "chat"\nprompt = "p"\n[[probes]]\nid = "b"\nkind = "chat"\n'
            'prompt = "p"\nmax_tokens = "many"\n',
            "field 'probes #2.max_tokens': expected a whole number, got 'many'",
        ),
        (  # an outcome names each probe by its id: two probes with one id could not be told apart
            GOOD + '[[probes]]\nid = "p"\nkind = "chat"\nprompt = "a"\n[[probes]]\nid = "p"\nkind = "chat"\n'
            'prompt = "b"\n',
            "probes #2.id: 'p' is already the id of probes #1; expected an id of its own",
        ),
        (GOOD + '[budget]\nready_timeout_s = "soon"\n', "field 'budget.ready_timeout_s': expected a number, got 'soon'"),
        ('approval = "sometimes"\n' + GOOD, "field 'approval': expected one of 'each', 'risky' or 'auto', got 'sometimes'"),
        ('name = "x"\n[model]\nfeatures = []\n', "required key 'path' is missing in [model]"),
        # a number past 64 bits reached the checkpoint store and ended the run as an internal error
        (GOOD + "[budget]\nexperiments = 99999999999999999999\n", "field 'budget.experiments'"),
        # TOML reads 1e400 as infinity: said in the case file's words, with what was written
        (GOOD + "[budget]\nhost_seconds = 1e400\n", "field 'budget.host_seconds': input should be a finite number, got inf"),
    ],
)
def test_case_error_names_key_and_suggests(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(CaseError) as err:
        load_case(str(_case(tmp_path, text)))
    assert expected in str(err.value)
    assert "Extra inputs" not in str(err.value) and "Input should" not in str(err.value)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('experiments = "8"', "field 'budget.experiments': expected a whole number, got '8'"),
        ('host_seconds = "3600"', "field 'budget.host_seconds': expected a number, got '3600'"),
        ('ready_timeout_s = "600"', "field 'budget.ready_timeout_s': expected a number, got '600'"),
        ('stall_timeout_s = "1.5"', "field 'budget.stall_timeout_s': expected a number, got '1.5'"),
    ],
)
def test_a_number_in_quotes_is_one_line_not_taken_as_the_number(tmp_path: Path, line: str, expected: str) -> None:
    """``experiments = "8"`` was read as 8 without a word (found by a newcomer): a number in quotes is
    refused in one line naming the file, the field and what it takes; TOML integers and floats load."""
    p = _case(tmp_path, GOOD + f"[budget]\n{line}\n")
    r = run_cli(tmp_path, "run", str(p), "--auto")
    assert r.returncode == 2, r.stdout[-2000:]
    assert r.stderr.strip().splitlines() == [f"error: {p}: {expected} (a number is written without quotes)"]
    numbers = _case(tmp_path, GOOD + "[budget]\nexperiments = 8\nhost_seconds = 3600\nready_timeout_s = 1.5e3\n"
                    "stall_timeout_s = 90.5\n")
    budget = load_case(str(numbers)).budget
    assert (budget.experiments, budget.host_seconds, budget.ready_timeout_s, budget.stall_timeout_s) == (
        8, 3600.0, 1500.0, 90.5)


def test_a_missing_knowledge_file_is_counted_from_1_and_a_folder_is_named_as_one(tmp_path: Path) -> None:
    (tmp_path / "FINDINGS.md").write_text("# FINDINGS\n")
    (tmp_path / "notes").mkdir()
    with pytest.raises(CaseError) as err:
        load_case(str(_case(tmp_path, 'knowledge = ["FINDINGS.md", "nope.md"]\n' + GOOD)))
    assert "field 'knowledge #2': nope.md: file not found" in str(err.value)
    with pytest.raises(CaseError) as err:
        load_case(str(_case(tmp_path, 'knowledge = ["notes"]\n' + GOOD)))
    assert "field 'knowledge #1': notes: a folder, not a file" in str(err.value)


def test_cli_case_typo_is_one_line(tmp_path: Path) -> None:
    p = _case(tmp_path, GOOD + "[baseline]\nflgs = {}\n")
    r = run_cli(tmp_path, "run", str(p), "--auto")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: {p}: unknown key 'flgs' in [baseline]; did you mean 'flags'? (known keys: env, flags)"
    ]


def test_a_case_file_that_is_not_text_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "case.toml"
    p.write_bytes(b"\xff\xfe\x00bin")
    r = run_cli(tmp_path, "run", str(p), "--auto")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: {p}: not a text file (expected a TOML case file in UTF-8)"
    ]


@pytest.mark.parametrize("text", ["", "# nothing yet\n"])
def test_an_empty_case_file_is_called_empty(tmp_path: Path, text: str) -> None:
    p = _case(tmp_path, text)
    r = run_cli(tmp_path, "run", str(p), "--auto")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: {p}: the case file is empty (expected at least name, [model] path and [baseline])"
    ]


def test_an_empty_case_argument_and_a_nested_field_are_said_once(tmp_path: Path) -> None:
    """`hypoloop run ""` said ": is a directory with no case.toml in it"; `argv = []` named its field twice
    ("field 'launcher': field 'launcher.argv': ...")."""
    r = run_cli(tmp_path, "run", "", "--auto")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: the case is empty: expected a case file, a case's folder or lab:WORLD"], r.stderr
    p = _case(tmp_path, GOOD + "[launcher]\nargv = []\n")
    r = run_cli(tmp_path, "run", str(p), "--auto")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: {p}: field 'launcher.argv': expected a non-empty list of strings"], r.stderr


def test_a_transcript_dir_that_is_a_dangling_link_says_where_it_points(tmp_path: Path) -> None:
    p = _case(tmp_path, GOOD + "[baseline]\nflags = {}\n")
    (tmp_path / "out").symlink_to(tmp_path / "gone" / "tr")
    r = run_cli(tmp_path, "run", str(p), "--auto", "--transcript-dir", "out")
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: --transcript-dir out: cannot write the transcript: a link to {tmp_path / 'gone' / 'tr'}, "
        "which does not exist"), r.stderr


def test_a_transcript_dir_that_is_a_file_is_one_line_and_leaves_no_run(tmp_path: Path) -> None:
    p = _case(tmp_path, GOOD + "[baseline]\nflags = {}\n")
    (tmp_path / "out").write_text("not a folder")
    r = run_cli(tmp_path, "run", str(p), "--auto", "--transcript-dir", "out")
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1] == (
        "error: --transcript-dir out: cannot write the transcript: a file, expected a folder"), r.stderr
    assert (tmp_path / "out").read_text() == "not a folder"
    assert "no runs" in run_cli(tmp_path, "runs").stdout.lower()


@pytest.mark.parametrize("command", ["flags", "doctor"])
def test_an_empty_launcher_is_one_line(tmp_path: Path, command: str) -> None:
    r = run_cli(tmp_path, command, "--host", "local", "--launcher", "  ")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --launcher '  ': expected the launcher command, e.g. python -m sglang.launch_server"
    ]


def _lab_case(tmp_path: Path, flags: str, extra: str = "") -> Path:
    """The coder-lite lab world's case (its simulated host answers `--help` like SGLang) with ``flags``
    as its baseline flags and ``extra`` appended."""
    import shutil

    folder = tmp_path / "world"
    shutil.copytree(Path(__file__).resolve().parent.parent / "lab" / "worlds" / "coder-lite-h100x2", folder)
    case = folder / "case.toml"
    text = case.read_text()
    start = text.index("flags = ")
    case.write_text(text[:start] + f"flags = {flags}" + text[text.index("\n", start):] + extra)
    return case


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # the host's --help lists --tp-size and --tp as aliases of --tensor-parallel-size
        ('{ "--tp-size" = 2, "--tensor-parallel-size" = 2 }',
         "baseline.flags: --tp-size and --tensor-parallel-size are two spellings of one flag"),
        ('{ "--tp" = 2, "--tp-size" = 2 }', "baseline.flags: --tp and --tp-size are two spellings of one flag"),
        ('{ "tp-size" = 2, "--tp-size" = 2 }', "baseline.flags: tp-size and --tp-size are one flag"),
    ],
)
def test_a_flag_given_twice_in_two_spellings_is_one_line(tmp_path: Path, flags: str, expected: str) -> None:
    _one_line_refusal(tmp_path, _lab_case(tmp_path, flags), expected)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # the model served is model.path; another model here would be dropped at launch yet pasted into the
        # working command (found by a newcomer)
        ('{ "--model-path" = "other/model" }', "baseline.flags: --model-path 'other/model' is not model.path"),
        ('{ "--port" = 99999 }', "baseline.flags: --port '99999' is not a TCP port (expected 1-65535)"),
        ('{ "--port" = "http" }', "baseline.flags: --port 'http' is not a TCP port"),
    ],
)
def test_a_model_or_port_flag_that_cannot_be_what_runs_is_one_line(tmp_path: Path, flags: str, expected: str) -> None:
    _one_line_refusal(tmp_path, _lab_case(tmp_path, flags), expected)


def test_a_kept_setting_the_host_has_no_option_for_is_one_line(tmp_path: Path) -> None:
    # a misspelt flag in [intent] keep would keep nothing, silently (found by a newcomer)
    case = _lab_case(tmp_path, '{ "--tp-size" = 2 }', '\n[intent]\nkeep = ["--context-lenght"]\n')
    _one_line_refusal(tmp_path, case, "intent.keep: --context-lenght is not an option of the host's --help")


def _one_line_refusal(tmp_path: Path, case: Path, expected: str) -> None:
    r = run_cli(tmp_path, "run", str(case), "--auto")
    assert r.returncode == 2, r.stdout[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and str(case) in lines[0], r.stderr


@pytest.mark.parametrize(
    ("flags", "extra", "expected"),
    [
        ('{ "--tp-size" = 2 }', "\n[reproduce]\nconcurrency = true\n",
         "field 'reproduce.concurrency': expected a whole number, got true"),
        ('{ "--tp-size" = 2 }', "\n[reproduce]\naccuracy = false\n",
         "field 'reproduce.accuracy': expected a number, got false"),
        # one value in a list is still a list: --tp-size takes one value
        ('{ "--tp-size" = [2] }', "", "baseline.flags: --tensor-parallel-size: takes one value (an integer), got a list"),
        ('{ "--tp-size" = { n = 2 } }', "", "flag --tp-size: expected a string, number, true"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line(tmp_path: Path, flags: str, extra: str, expected: str) -> None:
    case = _lab_case(tmp_path, flags, extra)
    r = run_cli(tmp_path, "run", str(case), "--auto")
    assert r.returncode == 2, r.stdout[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], r.stderr


def test_a_list_is_accepted_for_a_flag_that_takes_several_values(tmp_path: Path) -> None:
    case = _lab_case(tmp_path, '{ "--tp-size" = 2, "--trust-remote-code" = true, "--cuda-graph-bs" = [1, 2, 4] }')
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    events = [json.loads(line) for line in Path(json.loads(r.stdout.strip().splitlines()[-1])["transcript"]).open()]
    first = next(e for e in events if e["type"] == "experiment.proposed")
    assert first["data"]["baseline"]["flags"]["--cuda-graph-bs"] == "1 2 4"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # (a --long-name the host lacks is launched as written: tests/test_unlisted_baseline_flag.py)
        ('{ "--tp-size" = 2, "--no-such-flag=1" = 1 }',
         "baseline.flags: --no-such-flag=1: pass the flag name and its value separately"),
        ('{ "--tp-size" = 2, "--trust-remote-code" = "yes" }', "baseline.flags: --trust-remote-code: is a switch"),
        ('{ "--tp-size" = 2, "--tensor-parallel-size" = 2 }', "two spellings of one flag"),
    ],
)
def test_a_flag_check_error_leaves_no_run(tmp_path: Path, flags: str, expected: str) -> None:
    """A case the host's --help refuses is bad input: one line, exit 2, and no run in `hypoloop runs`
    (no checkpoint, lock, run folder or transcript); with --json the line of a run that never existed."""
    case = _lab_case(tmp_path, flags)
    _one_line_refusal(tmp_path, case, expected)
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json")
    assert r.returncode == 2
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "run_id": None, "status": "error", "error": json.loads(r.stdout.strip().splitlines()[-1])["error"],
        "exit_code": 2,
    }
    assert expected in json.loads(r.stdout.strip().splitlines()[-1])["error"]
    runs = run_cli(tmp_path, "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    assert json.loads(runs.stdout) == [], runs.stdout
    assert not list(tmp_path.glob("transcripts/*.jsonl"))
    home = tmp_path / "home"
    assert not list((home / "locks").glob("*")) and not (home / "runs").exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "the log is empty"),
        (b"  \n\n", "the log is empty"),
        (bytes(range(256)) * 20, "not a text file"),
        (None, "is a directory"),
        (b"# Notes\n\nOn SM120 the warm-up died with `ptxas fatal: Value 'sm_120a' is not defined`.\n",
         "does not look like a server log"),
    ],
    ids=["empty", "blank", "binary", "directory", "notes"],
)
def test_an_observed_log_that_is_no_log_is_one_line(tmp_path: Path, content: bytes | None, expected: str) -> None:
    """A case's observed_log read as the baseline's log must be one: an empty or binary file was taken for
    a failure at load and the run went on to an 'isolated' fix of a failure that was never there (found
    by a newcomer)."""
    log = tmp_path / "server.log"
    if content is None:
        log.mkdir()
    else:
        log.write_bytes(content)
    p = _case(tmp_path, 'observed_log = "server.log"\n' + GOOD)
    r = run_cli(tmp_path, "run", str(p), "--auto")
    assert r.returncode == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "field 'observed_log'" in lines[0] and expected in lines[0], lines
    assert not list((tmp_path).glob("**/*.jsonl"))  # no run was kept


def test_host_settings_the_target_does_not_use_are_said(tmp_path: Path) -> None:
    """`--ssh-key` with a local host and a [host.slurm] table on it were ignored without a word."""
    world = Path(__file__).parent.parent / "lab" / "worlds" / "glm5-nvfp4-sm120" / "world.toml"
    p = lab_case(tmp_path / "case.toml", world, model="zai-org/GLM-5-NVFP4", baseline="flags = {}",
                 budget="experiments = 1")
    p.write_text(p.read_text() + "[host.slurm]\ngpus = 1\n")
    r = run_cli(tmp_path, "run", str(p), "--auto", "--json", "--ssh-key", str(tmp_path / "id"), "--transcript-dir", "tr")
    events = [json.loads(line) for f in (tmp_path / "tr").glob("*.jsonl") for line in f.read_text().splitlines()]
    said = [e["data"]["message"] for e in events if e["type"] == "case.warning"]
    assert any(m.startswith("host.ssh_key (--ssh-key) is set but the host is local: it is not used") for m in said), (
        said, r.stderr[-2000:])
    assert any(m.startswith("[host.slurm] is set but the host is local: it is not used") for m in said), said
