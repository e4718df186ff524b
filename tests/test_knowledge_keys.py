"""No knowledge file ignores what it does not know: an unknown table or key (a typo, a newcomer's junk) in
any file of a --knowledge folder is refused before anything runs, in one line naming the file and the
key, as a missing field is. Silently dropped, a misspelt key (``min_exclusiv``) changed nothing and said
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from clirun import run_cli
from test_knowledge_files import _repository_knowledge  # noqa: F401  (autouse: the repository's folder)

from agent.cli.drive import check_knowledge
from agent.domain.knowledge_dir import KNOWLEDGE_FILES, default_dir, use_knowledge

#: (file, text replaced, by, what the error must name): a junk key inside an entry of each file, nested
#: tables included.
JUNK_IN_ENTRY = [
    ("engines.toml", "[sglang]\n", "[sglang]\nbogus_key = 1\n", "bogus_key"),
    ("signatures.toml", "[[signature]]\n", "[[signature]]\nbogus_key = 1\n", "bogus_key"),
    ("hypotheses.toml", '{ signature = "probability_tensor_nan" }',
     '{ signature = "probability_tensor_nan", bogus_key = 1 }', "when_any #1.bogus_key"),
    ("hypotheses.toml", "[[hypothesis.intervention]]\n", "[[hypothesis.intervention]]\nbogus_key = 1\n",
     "intervention #1.bogus_key"),
    ("symptoms.toml", "[[hypothesis]]\n", "[[hypothesis]]\nbogus_key = 1\n", "bogus_key"),
    ("flag_roles.toml", "[[role]]\n", "[[role]]\nbogus_key = 1\n", "bogus_key"),
    ("limits.toml", "\nmin_exclusive = true", "\nmin_exclusiv = true", "min_exclusiv"),
    ("risky.toml", "[[risky]]\n", "[[risky]]\nbogus_key = 1\n", "bogus_key"),
    ("served.toml", "[[setting]]\n", "[[setting]]\nbogus_key = 1\n", "bogus_key"),
    ("subsystems.toml", "in_play_any = [{ platform", "in_play_any = [{ bogus_key = 1, platform", "bogus_key"),
    ("subsystems.toml", "[[platform]]\n", "[[platform]]\nbogus_key = 1\n", "bogus_key"),
    ("planner.toml", "[ledger]\n", "[ledger]\nbogus_key = 1\n", "ledger.bogus_key"),
    ("implementations.toml", "[load]\n", "[load]\nbogus_key = 1\n", "load.bogus_key"),
    ("hardware.toml", "[[gpu]]\n", "[[gpu]]\nbogus_key = 1\n", "bogus_key"),
    ("model_families.toml", "[[word]]\n", "[[word]]\nbogus_key = 1\n", "bogus_key"),
    ("config_facts.toml", "[[alias]]\n", "[[alias]]\nbogus_key = 1\n", "bogus_key"),
    ("packages.toml", "[generic_runtimes]\n", "[generic_runtimes]\nbogus_key = 1\n", "generic_runtimes.bogus_key"),
    ("probe_set.toml", "[[item]]\n", "[[item]]\nbogus_key = 1\n", "bogus_key"),
    ("localisers.toml", "[[localiser]]\n", "[[localiser]]\nbogus_key = 1\n", "bogus_key"),
    ("budgets.toml", "[[budget]]\n", "[[budget]]\nbogus_key = 1\n", "bogus_key"),
    ("served.toml", "[description]\nneed", "[description]\nbogus_key = 1\nneed", "description: unknown table or key 'bogus_key'"),
    ("switches.toml", "[[switch]]\n", "[[switch]]\nbogus_key = 1\n", "bogus_key"),
    ("switches.toml", "[[broad]]\n", "[[broad]]\nbogus_key = 1\n", "bogus_key"),
    ("resolution.toml", "[[fallback]]\n", "[[fallback]]\nbogus_key = 1\n", "bogus_key"),
    ("libraries.toml", "[[library]]\n", "[[library]]\nbogus_key = 1\n", "bogus_key"),
    ("value_types.toml", "[[message]]\n", "[[message]]\nbogus_key = 1\n", "bogus_key"),
    ("toolchain.toml", "[[tool]]\n", "[[tool]]\nbogus_key = 1\n", "bogus_key"),
]


def _refused(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What check_knowledge (run, analyze, replay --redecide) says of ``folder``: its one error line."""
    capsys.readouterr()
    with use_knowledge(folder), pytest.raises(typer.Exit) as exc:
        check_knowledge()
    err = capsys.readouterr().err
    assert exc.value.exit_code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def _copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    folder = tmp_path / f"k-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    text = (default_dir() / name).read_text(encoding="utf-8")
    assert old in text, (name, old)
    (folder / name).write_text(text.replace(old, new, 1), encoding="utf-8")
    return folder


def test_every_knowledge_file_refuses_an_unknown_table_and_an_unknown_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_knowledge()  # the repository's own files have no junk
    assert {name for name, *_ in JUNK_IN_ENTRY} == set(KNOWLEDGE_FILES)
    for name in KNOWLEDGE_FILES:
        text = (default_dir() / name).read_text(encoding="utf-8")
        folder = _copy(tmp_path, name, text, text + "\n[junk_table]\nx = 1\n")
        err = _refused(folder, capsys)
        assert f"{folder / name}" in " ".join(err.split()) and "junk_table" in err, (name, err)
    for name, old, new, said in JUNK_IN_ENTRY:
        folder = _copy(tmp_path, name, old, new)
        err = " ".join(_refused(folder, capsys).split())
        assert f"{folder / name}" in err and said in err, (name, err)


def test_a_misspelt_limit_key_is_one_line_from_analyze(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "limits.toml", "\nmin_exclusive = true", "\nmin_exclusiv = true")
    log = tmp_path / "server.log"
    log.write_text("[2026-01-02 03:04:05] starting\n")
    r = run_cli(tmp_path, "analyze", str(log), "--knowledge", str(folder))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "limits.toml: limit #1: unknown table or key 'min_exclusiv'" in r.stderr
