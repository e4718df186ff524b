"""Help screens a user can act on: choices and defaults shown, every option described, no type tags."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from clirun import run_cli

from agent.cli import _tidy_help, app

COMMANDS = ["run", "analyze", "flags", "replay", "report", "runs", "show", "resume", "findings add"]


def test_every_option_is_described() -> None:
    command = typer.main.get_command(app)
    _tidy_help(command)
    missing = []

    def walk(cmd: object, path: str) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")
        for p in getattr(cmd, "params", []):
            if not (getattr(p, "help", None) or "").strip():
                missing.append(f"{path} {p.name}")

    walk(command, "hypoloop")
    assert missing == []


def test_help_shows_choices_and_no_type_tags(tmp_path: Path) -> None:
    for cmd in COMMANDS:
        r = run_cli(tmp_path, *cmd.split(), "--help", COLUMNS="150")
        assert r.returncode == 0, r.stderr
        tags = re.findall(r"<(?:bool|str|int|float|path|text)>", r.stdout)
        assert tags == [], f"hypoloop {cmd} --help shows type tags {tags}"
    run_help = run_cli(tmp_path, "run", "--help", COLUMNS="150").stdout
    assert re.search(r"--approve\s+each\|risky\|auto", run_help)
    assert re.search(r"--planner\s+rules\|llm", run_help)
    assert "[default: rules]" in run_help
    resume_help = run_cli(tmp_path, "resume", "--help", COLUMNS="150").stdout
    assert re.search(r"--decision\s+approve\|edit\|reject\|stop", resume_help)
    report_help = run_cli(tmp_path, "report", "--help", COLUMNS="150").stdout
    assert re.search(r"--format\s+md\|html", report_help) and "[default: md]" in report_help


def test_a_value_outside_the_choices_is_one_line(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--approve", "sometimes")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: Invalid value for '--approve': 'sometimes' is not one of 'each', 'risky', 'auto'. "
        "(see hypoloop run --help)"
    ]
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--aprove", "each")
    assert r.returncode == 2 and "Possible options: --approve" in r.stderr and len(r.stderr.strip().splitlines()) == 1
