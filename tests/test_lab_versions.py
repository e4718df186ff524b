"""The lab's flag files are the real releases' flag surfaces (issue 21, item 1): every option of
`python -m sglang.launch_server` of each imitated release, with its spellings, dest, type, choices,
default and nargs, as the release's own `server_args.py` builds them; list-valued flags work in the lab's
parser, hypoloop's flag catalog, a case's baseline and the launched command.

The releases' wheels are fetched from the package registry into `$HOME/.cache/hypoloop/sglang-X-src`
(once; `.ci/run` does the same), as `lab/make_versions.py` does."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from lab import make_versions
from lab.rules import parse_command_line, plan_launch
from lab.world import load_version, load_world

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=make_versions.RELEASES)
def release(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def real_options(release: str) -> list[dict]:
    """The release's parser as its own server_args.py builds it (run in a child process)."""
    return make_versions.parser_of(release)


def _value(flag_default: object) -> object:
    return list(flag_default) if isinstance(flag_default, tuple) else flag_default


def test_every_real_option_is_in_the_lab_with_its_type_choices_default_and_nargs(
    release: str, real_options: list[dict]
) -> None:
    version = load_version(release)
    by_option = {opt: flag for flag in version.flags for opt in flag.option_strings()}
    assert len(version.flags) == len(real_options)
    for real in real_options:
        name = real["option_strings"][0]
        flag = by_option.get(name)
        assert flag is not None, f"{release}: {name} is missing from lab/versions/{release}.toml"
        assert set(real["option_strings"]) <= set(flag.option_strings()), name
        assert flag.dest == real["dest"], name
        if real["action"] == "store":
            assert flag.action == "store" and flag.type == real["type"], name
            assert (list(flag.choices) if flag.choices is not None else None) == real["choices"], name
            assert flag.nargs == (real["nargs"] if real["nargs"] in ("+", "*", "?") else None), name
            if real["default"] is not None and real["default"] != []:
                assert _value(flag.default) == real["default"], name
        elif real["action"] in ("store_true", "boolean_optional", "store_const", "warn"):
            assert flag.action == real["action"], name
        assert (flag.deprecated is not None) == real["deprecated"], name


def test_every_option_string_is_spelled_in_the_release_source(release: str) -> None:
    """Independent of the generator: each option string of the lab's file is spelled in the release's
    own source (server_args.py or its arg_groups/), as the literal or as the field name it is built from
    (0.5.17+ builds `--model-path` from the field `model_path`), so no flag is invented."""
    src = make_versions.source_dir(release) / "sglang" / "srt"
    text = "\n".join(
        p.read_text(encoding="utf-8")
        for p in [src / "server_args.py", *sorted((src / "arg_groups").rglob("*.py"))] if p.is_file()
    )
    version = load_version(release)
    missing = [
        opt for flag in version.flags for opt in (flag.name, *flag.aliases)
        if opt not in text and opt[2:] not in text and opt[2:].replace("-", "_") not in text
    ]
    assert not missing, f"{release}: option strings not in the release's source: {missing[:10]}"


def test_the_flag_files_match_a_regeneration(release: str, real_options: list[dict]) -> None:
    path = REPO / "lab" / "versions" / f"{release}.toml"
    assert path.read_text(encoding="utf-8") == make_versions.version_toml(release, real_options), (
        f"{path} differs from what `python -m lab.make_versions {release}` writes"
    )


def test_the_real_surfaces_are_whole() -> None:
    """0.5.9's parser has 331 options (the issue's count): the lab no longer imitates a 133-flag subset."""
    counts = {r: len(load_version(r).flags) for r in make_versions.RELEASES}
    assert counts["0.5.9"] == 331 and counts["0.5.23"] == 531 and 331 < counts["0.5.17"] < 531


def test_the_lab_help_lists_every_flag_and_the_catalog_reads_each(tmp_path: Path) -> None:
    import subprocess

    from tools.flags import parse_help

    for world, release in (("cuda-graph-oom", "0.5.9"), ("r1-distill-graph-oom", "0.5.23")):
        r = subprocess.run(
            [sys.executable, "-m", "lab.launch_server", "--help"], capture_output=True, text=True, cwd=REPO,
            env={"HYPOLOOP_LAB_WORLD": world, "PATH": "/usr/bin:/bin"}, check=False,
        )
        assert r.returncode == 0, r.stderr
        catalog = parse_help(r.stdout)
        version = load_version(release)
        for flag in version.flags:
            assert catalog.lookup(flag.name) is not None, f"{release}: {flag.name} not read from --help"
            if flag.is_list:
                assert catalog.lookup(flag.name).nargs == flag.nargs, flag.name  # type: ignore[union-attr]


# ----------------------------------------------------------------------------------- list-valued flags


def test_a_list_valued_flag_parses_in_the_lab_in_every_release() -> None:
    for release, name, dest in (
        ("0.5.9", "--cuda-graph-bs", "cuda_graph_bs"),
        ("0.5.17", "--cuda-graph-bs-decode", "cuda_graph_bs_decode"),
        ("0.5.23", "--cuda-graph-bs-decode", "cuda_graph_bs_decode"),
    ):
        version = load_version(release)
        args, user = parse_command_line(version, ["--model-path", "m", name, "1", "2", "4", "8"])
        assert args[dest] == [1, 2, 4, 8] and user[dest] == [1, 2, 4, 8], release


def test_a_list_valued_baseline_reaches_the_launched_lab_server(tmp_path: Path) -> None:
    """A case baseline `"--cuda-graph-bs" = [1, 2, 4, 8]` is one flag with four values: the catalog
    accepts it, the launch command carries four words, and the lab parses them as one list."""
    from agent.domain.case import load_case
    from agent.domain.models import command_text
    from tools.flags import parse_help
    from tools.server import render_command

    case = tmp_path / "case.toml"
    original = (REPO / "lab" / "worlds" / "cuda-graph-oom" / "case.toml").read_text()
    case.write_text(original.replace('flags = { "--tp-size" = 4,', 'flags = { "--cuda-graph-bs" = [1, 2, 4, 8], "--tp-size" = 4,'))
    (tmp_path / "FINDINGS.md").write_text("")
    assert "[1, 2, 4, 8]" in case.read_text()
    loaded = load_case(str(case))
    assert loaded.baseline.flags["--cuda-graph-bs"] == "1 2 4 8"
    world = load_world("cuda-graph-oom")
    import subprocess

    help_text = subprocess.run(
        [sys.executable, "-m", "lab.launch_server", "--help"], capture_output=True, text=True, cwd=REPO,
        env={"HYPOLOOP_LAB_WORLD": "cuda-graph-oom", "PATH": "/usr/bin:/bin"}, check=True,
    ).stdout
    catalog = parse_help(help_text)
    flags = catalog.normalize(loaded.baseline.flags)
    assert flags["--cuda-graph-bs"] == "1 2 4 8"
    with pytest.raises(ValueError, match="not an integer"):
        catalog.normalize({"--cuda-graph-bs": "1 2 x"})
    argv = render_command([], world.model.path, flags, host="127.0.0.1", port=1)
    assert argv[argv.index("--cuda-graph-bs") + 1 : argv.index("--cuda-graph-bs") + 5] == ["1", "2", "4", "8"]
    assert "--cuda-graph-bs 1 2 4 8" in command_text(flags)
    plan = plan_launch(world, argv[:-4])
    assert plan.effective["cuda_graph_bs"] == [1, 2, 4, 8]


def test_a_json_value_is_still_one_word() -> None:
    from tools.flags import value_words

    assert value_words('{"a": 1, "b": [1, 2]}') == ['{"a": 1, "b": [1, 2]}']
    assert value_words("1 2 4") == ["1", "2", "4"] and value_words("auto") == ["auto"]


def test_make_versions_writes_nothing_but_stdlib_imports() -> None:
    """The generator is lab code: it imports SGLang only by a computed name, in its child process."""
    text = (REPO / "lab" / "make_versions.py").read_text()
    assert not re.search(r"^\s*(from|import)\s+sglang", text, re.M)
    assert json.loads(json.dumps(make_versions.RELEASES)) == list(make_versions.RELEASES)
