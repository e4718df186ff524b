"""Case-file mistakes are answered in the case file's words: the key, its table, the nearest known key."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_cli

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
        (GOOD + '[budget]\nready_timeout_s = "soon"\n', "field 'budget.ready_timeout_s': expected a number, got 'soon'"),
        ('approval = "sometimes"\n' + GOOD, "field 'approval': expected one of 'each', 'risky' or 'auto', got 'sometimes'"),
        ('name = "x"\n[model]\nfeatures = []\n', "required key 'path' is missing in [model]"),
        # a number past 64 bits reached the checkpoint store and ended the run as an internal error
        (GOOD + "[budget]\nexperiments = 99999999999999999999\n", "field 'budget.experiments'"),
    ],
)
def test_case_error_names_key_and_suggests(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(CaseError) as err:
        load_case(str(_case(tmp_path, text)))
    assert expected in str(err.value)
    assert "Extra inputs" not in str(err.value) and "Input should" not in str(err.value)


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


@pytest.mark.parametrize("command", ["flags", "doctor"])
def test_an_empty_launcher_is_one_line(tmp_path: Path, command: str) -> None:
    r = run_cli(tmp_path, command, "--host", "local", "--launcher", "  ")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --launcher '  ': expected the launcher command, e.g. python -m sglang.launch_server"
    ]
