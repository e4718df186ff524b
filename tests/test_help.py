"""Help screens a user can act on: choices and defaults shown, every option described, no type tags."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from clirun import run_cli

from agent.cli import app
from agent.cli.entry import tidy_help

COMMANDS = ["run", "analyze", "flags", "replay", "report", "runs", "show", "resume", "findings add"]


def test_every_option_is_described() -> None:
    command = typer.main.get_command(app)
    tidy_help(command)
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
    assert re.search(r"--decision\s+approve\|approve-all\|edit\|reject\|stop", resume_help)
    report_help = run_cli(tmp_path, "report", "--help", COLUMNS="150").stdout
    assert re.search(r"--format\s+md\|html", report_help)
    flat = " ".join(report_help.split())
    assert "[default: html for an --output ending in .html or .htm, else md]" in flat


def test_a_value_outside_the_choices_is_one_line(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--approve", "sometimes")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: Invalid value for '--approve': 'sometimes' is not one of 'each', 'risky', 'auto'. "
        "(see hypoloop run --help)"
    ]
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--aprove", "each")
    assert r.returncode == 2 and "Possible options: --approve" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _words(text: str) -> list[str]:
    """The words of a help screen with box drawing and line breaks gone: what a reader must find in it."""
    return re.sub(r"[│╭╮╰╯─]", " ", text).split()


def test_no_help_screen_is_cut_at_80_or_60_columns(tmp_path: Path) -> None:
    """Every command's help on a narrow terminal: nothing ends in '…', every option name and every word of
    every option's description appears whole (wrapping may break a word only at the line's end, so a long
    word is checked with the line breaks joined), and no line is wider than the terminal."""
    command = typer.main.get_command(app)
    tidy_help(command)
    for columns in (80, 60):
        for cmd in ["", *COMMANDS, "findings"]:
            r = run_cli(tmp_path, *cmd.split(), "--help", COLUMNS=str(columns))
            assert r.returncode == 0, r.stderr
            where = f"hypoloop {cmd} --help at {columns} columns"
            assert "…" not in r.stdout and "..." not in r.stdout.replace("[ARGS]...", ""), f"{where}:\n{r.stdout}"
            too_wide = [line for line in r.stdout.splitlines() if len(line) > columns]
            assert too_wide == [], f"{where}: lines wider than the terminal {too_wide}"
            joined = "".join(_words(r.stdout))
            sub = command
            for part in cmd.split():
                sub = sub.commands[part]  # type: ignore[attr-defined]
            for p in getattr(sub, "params", []):
                for name in getattr(p, "opts", []) if p.param_type_name == "option" else []:
                    assert name in _words(r.stdout) or f"{name}," in " ".join(_words(r.stdout)), f"{where}: {name}"
                for word in (p.help or "").split():
                    assert word in joined, f"{where}: the help of {p.name} lost {word!r}"
            for name, child in getattr(sub, "commands", {}).items():
                first = (child.help or "").split("\n\n")[0].split()
                for word in first:
                    assert word in joined, f"{where}: the summary of {name} lost {word!r}"


def test_a_bare_command_group_prints_its_help(tmp_path: Path) -> None:
    """`hypoloop` and `hypoloop findings` with nothing after them show the usage and the commands (on
    stdout, exit code 2 as click gives), not a silent exit."""
    for cmd, children in (("", ["run", "report", "findings"]), ("findings", ["add"])):
        r = run_cli(tmp_path, *cmd.split(), COLUMNS="100")
        where = f"bare `hypoloop {cmd}`"
        assert r.returncode == 2, f"{where}: {r.returncode}"
        assert r.stdout.startswith(f"Usage: hypoloop {cmd}".rstrip() + " [OPTIONS] COMMAND"), f"{where}:\n{r.stdout}"
        assert "Commands:" in r.stdout, f"{where}:\n{r.stdout}"
        listed = [line.split()[0] for line in r.stdout.split("Commands:")[1].splitlines() if line.startswith("  ")]
        for child in children:
            assert child in listed, f"{where} does not list {child}:\n{r.stdout}"


@pytest.mark.parametrize("args", [
    ["run", "lab:glm5-nvfp4-sm120", "--json", "--bogus"],
    ["run", "lab:glm5-nvfp4-sm120", "--json", "--approve", "sometimes"],
    ["show", "nope", "--json"],
    ["flags", "--json"],
])
def test_a_usage_error_with_json_ends_with_the_error_line_too(tmp_path: Path, args: list[str]) -> None:
    """With ``--json`` a script reads the last stdout line: a usage mistake (an unknown option, a value not
    among the choices) and a failure before the command's own output give the error's JSON line, as a
    failed run does (found by a newcomer: only ``--parallel 0`` did)."""
    r = run_cli(tmp_path, *args)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    last = json.loads(r.stdout.strip().splitlines()[-1])
    assert last["status"] == "error" and last["exit_code"] == 2 and last["error"] in r.stderr, last
