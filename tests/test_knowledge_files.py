"""The findings reader's data is the knowledge folder's: GPUs (hardware.toml), model families and feature
words (model_families.toml), effective-config facts (config_facts.toml). A swapped folder (``--knowledge``,
``$HYPOLOOP_KNOWLEDGE``) is the one read; a broken file is one line naming the file and the field."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import run_cli

from agent.domain.knowledge_dir import ENV_VAR, use_knowledge
from tools.knowledge import KnowledgeError, gpu_names, infer_features, parse_findings, relevance
from tools.knowledge_files import steady

NOTES = """\
## 2026-03-01 — Zorblax-9B on 4x Quasar Q7: works

```
# serving fine now
python -m sglang.launch_server --model-path acme/Zorblax-9B --tp-size 4
```
kv_pool_dtype: bf16
"""


@pytest.fixture(autouse=True)
def _repository_knowledge() -> Iterator[None]:
    """The test's own environment must not choose the folder."""
    saved = os.environ.pop(ENV_VAR, None)
    yield
    if saved is not None:
        os.environ[ENV_VAR] = saved


def _folder(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "knowledge"
    folder.mkdir()
    for name, text in files.items():
        (folder / f"{name}.toml").write_text(text)
    return folder


HARDWARE = """
[[gpu]]
name = "Quasar Q7"
pattern = 'Quasar\\s*Q7'
arch = "qx1"
source = "a made-up card"

[[gpu]]
name = "Quasar Q5"
pattern = 'Quasar\\s*Q5'
arch = "qx1"
source = "a made-up card"
"""
FAMILIES = """
[[family]]
pattern = 'zorblax'
features = ["moe", "mla"]
source = "a made-up family"

[[word]]
feature = "dsa"
pattern = 'sparse-ish'
source = "a made-up word"

[names]
prefixes = ["Zorblax"]
source = "a made-up publisher"
"""
FACTS = """
keys = ["kv_cache_dtype"]
source = "made up"

[[alias]]
name = "kv_pool_dtype"
fact = "kv_cache_dtype"
source = "a made-up spelling"
"""


def test_a_swapped_folders_files_are_the_ones_read(tmp_path: Path) -> None:
    before = parse_findings(NOTES)[0]
    assert before.gpus == [] and before.features == [] and before.facts == {}
    assert gpu_names("8x H100") == ["H100"] and infer_features("Kimi-K2") == {"moe", "mla"}

    folder = _folder(tmp_path, hardware=HARDWARE, model_families=FAMILIES, config_facts=FACTS)
    with use_knowledge(folder):
        finding = parse_findings(NOTES)[0]
        assert finding.hardware == "4x Quasar Q7" and finding.gpus == ["Quasar Q7"]
        assert finding.model == "acme/Zorblax-9B"
        assert finding.features == ["mla", "moe"]
        assert finding.facts == {"kv_cache_dtype": "bf16"}
        assert infer_features("a sparse-ish attention") == {"dsa"}
        # the folder's GPUs replace the repository's: H100 is not in it
        assert gpu_names("8x H100") == []
        # same architecture as the folder says: half the hardware weight
        score = relevance(finding, model="other/Thing", features=set(), gpu_name="Quasar Q5")
        assert score == pytest.approx(0.55 * 0.5)
    assert gpu_names("4x Quasar Q7") == [] and infer_features("Zorblax") == set()


def test_a_file_the_folder_lacks_is_the_repositorys(tmp_path: Path) -> None:
    folder = _folder(tmp_path, model_families=FAMILIES)
    with use_knowledge(folder):
        assert gpu_names("NVIDIA H200") == ["H200"]
        assert infer_features("Zorblax") == {"moe", "mla"}


def test_a_file_added_to_the_folder_or_edited_while_the_process_runs_is_read_again(tmp_path: Path) -> None:
    folder = _folder(tmp_path, model_families=FAMILIES)
    with use_knowledge(folder):
        assert gpu_names("4x Quasar Q7") == [] and gpu_names("NVIDIA H200") == ["H200"]  # the repository's
        (folder / "hardware.toml").write_text(HARDWARE)
        assert gpu_names("4x Quasar Q7") == ["Quasar Q7"] and gpu_names("NVIDIA H200") == []
        (folder / "hardware.toml").write_text(HARDWARE.replace("Quasar\\s*Q7", "Nebula\\s*N100"))
        assert gpu_names("4x Nebula N100") == ["Quasar Q7"] and gpu_names("4x Quasar Q7") == []
        (folder / "hardware.toml").unlink()
        assert gpu_names("NVIDIA H200") == ["H200"]


def test_one_planner_decision_reads_one_version_of_a_file_and_the_next_reads_the_edit(tmp_path: Path) -> None:
    # the rule planner reads the folder inside a `steady` block per decision (its history, its proposal)
    folder = _folder(tmp_path, model_families=FAMILIES, hardware=HARDWARE)
    with use_knowledge(folder):
        with steady():
            assert gpu_names("4x Quasar Q7") == ["Quasar Q7"]
            (folder / "hardware.toml").write_text(HARDWARE.replace("Quasar\\s*Q7", "Nebula\\s*N100"))
            assert gpu_names("4x Quasar Q7") == ["Quasar Q7"]  # not half one version, half the other
        assert gpu_names("4x Nebula N100") == ["Quasar Q7"] and gpu_names("4x Quasar Q7") == []


@pytest.mark.parametrize(
    ("name", "text", "field"),
    [
        ("hardware", '[[gpu]]\nname = "X"\npattern = "X"\narch = "sm1"\n', "gpu #1.source"),
        ("hardware", '[[gpu]]\nname = "X"\npattern = "X("\narch = "sm1"\nsource = "s"\n', "gpu #1.pattern"),
        ("model_families", '[[family]]\npattern = "x"\nfeatures = []\nsource = "s"\n', "family #1.features"),
        ("config_facts", 'keys = ["a"]\nsource = "s"\n[[alias]]\nname = "b"\n', "alias #1.fact"),
        ("config_facts", "keys = [\n", "not a TOML file"),
    ],
)
def test_a_broken_file_is_one_line_naming_the_file_and_field(tmp_path: Path, name: str, text: str, field: str) -> None:
    folder = _folder(tmp_path, **{name: text})
    with use_knowledge(folder), pytest.raises(KnowledgeError) as err:
        parse_findings(NOTES)
    message = str(err.value)
    assert "\n" not in message and str(folder / f"{name}.toml") in message and field in message


def test_a_run_with_a_broken_file_is_refused_before_it_exists(tmp_path: Path) -> None:
    """A broken model_families.toml in --knowledge is one line and exit 2, and leaves no run behind."""
    folder = _folder(tmp_path, model_families='[[family]]\npattern = "x("\nfeatures = ["moe"]\nsource = "s"\n')
    r = run_cli(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--knowledge", str(folder), timeout=600)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "model_families.toml: family #1.pattern: not a regular expression" in r.stderr
    listed = run_cli(tmp_path, "runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


BROKEN_PLANNER_FILES = {
    "planner.toml": ("bogus = 1\n", "planner.toml: field 'likelihood'"),
    "implementations.toml": ("[nothing]\n", "implementations.toml: field 'choices'"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_PLANNER_FILES))
@pytest.mark.parametrize("command", ["run", "analyze", "replay --redecide"])
def test_every_command_that_plans_refuses_a_broken_planner_file_in_one_line(
    tmp_path: Path, command: str, name: str
) -> None:
    """A broken planner.toml or implementations.toml in --knowledge: run refuses it before a run exists
    (no launch spent), analyze and replay --redecide before reading anything; one line, exit 2."""
    folder = tmp_path / "knowledge"
    folder.mkdir()
    text, said = BROKEN_PLANNER_FILES[name]
    (folder / name).write_text(text)
    repo = Path(__file__).resolve().parents[1]
    target = {
        "run": ["lab:nccl-p2p-hang", "--auto"],
        "analyze": [str(repo / "tests" / "data" / "logs_vllm_0.32.0" / "tp2-no-bind.log")],
        "replay --redecide": [str(sorted((repo / "transcripts" / "reference").glob("*.jsonl"))[0]), "--redecide"],
    }[command]
    r = run_cli(tmp_path, command.split()[0], *target, "--knowledge", str(folder), timeout=600)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and said in r.stderr, r.stderr
    listed = run_cli(tmp_path, "runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
