"""The rule planner's tunable weights are data (knowledge/planner.toml): they steer its choices, and a
bad file is refused with one line naming the file and the field."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_planner import _history, _ptxas_baseline

from agent.domain.knowledge_dir import use_knowledge
from agent.planning.weights import PlannerWeightsError, default_weights_path, load_weights


def _weights_file(tmp_path: Path, old: str, new: str) -> Path:
    text = default_weights_path().read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "planner.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_the_shipped_weights_load_and_every_number_has_a_comment() -> None:
    w = load_weights()
    assert w.choice.p_fix == {"fixed": 0.9, "may_fix": 0.5, "persists": 0.0}
    commented = False  # a comment since the last blank line (it covers a table header and its rows)
    for i, line in enumerate(default_weights_path().read_text(encoding="utf-8").splitlines()):
        commented = (commented or line.startswith("#")) and bool(line.strip())
        if "=" in line and not line.startswith("#"):
            assert commented, f"planner.toml line {i + 1} has no comment saying where it came from: {line}"
    assert tomllib.loads(default_weights_path().read_text(encoding="utf-8")).keys() == {
        "likelihood",
        "ledger",
        "choice",
    }


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("p_fix = { fixed = 0.9, may_fix = 0.5, persists = 0.0 }", "p_fix = { fixed = 0.9 }", "choice.p_fix"),
        ("workaround_factor = 0.5", "workaround_factor = -1", "choice.workaround_factor"),
        ("unlisted_weight = 0.1", "unlisted_weight = 0.1\nunlisted_wieght = 0.2", "ledger.unlisted_wieght"),
    ],
)
def test_a_bad_weights_file_is_refused_with_one_line_naming_the_field(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    path = _weights_file(tmp_path, old, new)
    with pytest.raises(PlannerWeightsError) as exc:
        load_weights(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: ") and field in message and "\n" not in message


def test_the_cli_refuses_a_bad_weights_file_without_a_traceback(tmp_path: Path) -> None:
    """The CLI reads the repository's file; a copy of the package with a broken file stands in for a user's
    edit (the checkout itself is left alone)."""
    repo = Path(__file__).resolve().parents[1]
    for pkg in ("agent", "tools"):
        subprocess.run(["cp", "-r", str(repo / pkg), str(tmp_path / pkg)], check=True)
    (tmp_path / "knowledge").mkdir()
    broken = _weights_file(tmp_path, "workaround_factor = 0.5", "workaround_factor = 'half'")
    broken.rename(tmp_path / "knowledge" / "planner.toml")
    r = subprocess.run(
        [sys.executable, "-c", "from agent.cli import main; main()", "runs"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "planner.toml: field 'choice.workaround_factor'" in r.stderr


def test_the_weights_file_of_the_knowledge_folder_steers_the_rule_planner(tmp_path: Path) -> None:
    def first_test() -> tuple[str, str]:
        h = _history(
            model={"path": "Qwen/Qwen3-8B", "features": ["dense"]},
            baseline={"flags": {"--attention-backend": "triton"}},
        )
        _ptxas_baseline(h)
        exp = h.propose()
        assert exp is not None and exp.change is not None
        return exp.change.kind, exp.change.name

    assert first_test() == ("env", "TRITON_PTXAS_PATH")  # the root fix before the workaround
    # a knowledge folder (--knowledge) whose planner.toml favours workarounds; its other files fall back
    _weights_file(tmp_path, "workaround_factor = 0.5", "workaround_factor = 1000.0")
    with use_knowledge(tmp_path):
        assert first_test() != ("env", "TRITON_PTXAS_PATH")  # workarounds now score above it
    assert first_test() == ("env", "TRITON_PTXAS_PATH")
