"""Knowledge that is data is read from the knowledge folder in force (``--knowledge DIR``): a swapped
folder's files are the ones read, and a file the folder lacks falls back to the repository's."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.domain.knowledge_dir import default_dir, use_knowledge
from agent.planning.generators.common import alternative_choices
from agent.planning.generators.implementations import (
    ImplementationsError,
    implementations,
    load_implementations,
)
from tools.flags import parse_help

DATA = Path(__file__).parent / "data"
FLAGS = parse_help((DATA / "help_sglang_0.5.9.txt").read_text(), source="fixture")


def _folder(tmp_path: Path, old: str, new: str) -> Path:
    """A knowledge folder holding only an edited copy of the repository's implementations.toml."""
    text = (default_dir() / "implementations.toml").read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "implementations.toml").write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path


def test_the_alternatives_of_a_backend_follow_the_folders_implementations_file(tmp_path: Path) -> None:
    spec = FLAGS.resolve("--attention-backend")
    shipped = alternative_choices(spec, "fa3", "NVIDIA H100")
    assert shipped[:3] == ["triton", "torch_native", "flashinfer"]  # portable first
    assert "aiter" not in shipped and "intel_xpu" not in shipped  # other vendors' left out on NVIDIA
    folder = _folder(
        tmp_path,
        'portable = ["triton", "torch_native", "pytorch", "torch", "flashinfer"]\n'
        "portable_source = ",
        'portable = ["flashinfer"]\nportable_source = ',
    )
    text = (folder / "implementations.toml").read_text()
    (folder / "implementations.toml").write_text(text.replace("other_vendor = 'aiter|wave|", "other_vendor = 'aiter|"))
    with use_knowledge(folder):
        swapped = alternative_choices(spec, "fa3", "NVIDIA H100")
        assert implementations().load.batch_caps == ("--max-running-requests", "--cuda-graph-max-bs")
    assert swapped[0] == "flashinfer" and swapped[1:3] == ["triton", "torch_native"]
    assert "wave" in swapped and "aiter" not in swapped
    assert alternative_choices(spec, "fa3", "NVIDIA H100") == shipped  # the repository's again


def test_a_bad_implementations_file_is_one_line_naming_the_field(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "batch_caps = [", "batch_caps = 3\nunused = [")
    with pytest.raises(ImplementationsError) as exc:
        load_implementations(folder / "implementations.toml")
    message = str(exc.value)
    assert message.startswith(f"{folder / 'implementations.toml'}: field 'load.batch_caps'") and "\n" not in message
