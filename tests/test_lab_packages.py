"""Installed packages on the lab host (issue 21, item 3): the release's pins with a world's versions over
them, shown by `python -m lab.pip` and `python -m lab.check_env` as pip and SGLang's check_env show them;
a fault can depend on an installed version; a world records what changed and when."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from lab import make_versions
from lab.rules import plan_launch, version_key
from lab.world import WorldError, load_world
from tools.host import LocalHost

REPO = Path(__file__).resolve().parents[1]
UPGRADED = REPO / "tests" / "data" / "worlds" / "upgraded-flashinfer" / "world.toml"


@pytest.fixture(autouse=True)
def _hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # the lab writes the model's config.json there


def _run(world: str | Path, *argv: str) -> tuple[int, str, str]:
    host = LocalHost(env={"HYPOLOOP_LAB_WORLD": str(world)})
    r = host.run([sys.executable, *argv])
    return r.returncode, r.stdout, r.stderr


def test_pip_and_check_env_show_the_release_pins_read_from_its_wheel() -> None:
    meta = (make_versions.source_dir("0.5.9") / "sglang-0.5.9.dist-info" / "METADATA").read_text()
    pins = dict(re.findall(r"^Requires-Dist: (sgl-kernel|flashinfer_python|transformers|torch)==([^;\s]+)$", meta, re.M))
    assert len(pins) == 4
    code, out, _ = _run("cuda-graph-oom", "-m", "lab.pip", "list")
    assert code == 0 and out.splitlines()[0].split() == ["Package", "Version"]
    listed = dict(line.split() for line in out.splitlines()[2:])
    for name, version in pins.items():
        assert listed[name.replace("_", "-")] == version
    code, out, _ = _run("cuda-graph-oom", "-m", "lab.check_env")
    assert code == 0
    assert f"sgl_kernel: {pins['sgl-kernel']}" in out and f"PyTorch: {pins['torch']}" in out
    assert "sglang: 0.5.9" in out


def test_a_world_upgrade_shows_in_pip_show_freeze_and_check_env() -> None:
    code, out, _ = _run(UPGRADED, "-m", "lab.pip", "show", "flashinfer_python")
    assert code == 0 and "Name: flashinfer-python" in out and "Version: 0.6.4" in out
    code, out, _ = _run(UPGRADED, "-m", "lab.pip", "freeze")
    assert "flashinfer-python==0.6.4" in out.splitlines()
    code, out, _ = _run(UPGRADED, "-m", "lab.check_env")
    assert "flashinfer_python: 0.6.4" in out
    code, out, err = _run(UPGRADED, "-m", "lab.pip", "show", "no-such-package")
    assert code == 1 and "WARNING: Package(s) not found: no-such-package" in err


def test_a_fault_depends_on_the_installed_version(tmp_path: Path) -> None:
    argv = ["--model-path", "Qwen/Qwen3-8B"]
    assert [f.id for f in plan_launch(load_world(str(UPGRADED)), argv).faults] == ["flashinfer-abi-after-upgrade"]
    pinned = tmp_path / "world.toml"
    text = UPGRADED.read_text()
    text = text.replace('flashinfer-python = "0.6.4"', 'flashinfer-python = "0.6.3"')
    text = re.sub(r"\[\[package_change\]\]\nname = \"flashinfer-python\".*?\n\n", "", text, flags=re.S)
    pinned.write_text(text)
    assert plan_launch(load_world(str(pinned)), argv).faults == []
    assert plan_launch(load_world(str(UPGRADED)), [*argv, "--attention-backend", "triton"]).faults == []


def test_the_world_says_what_changed_and_when() -> None:
    world = load_world(str(UPGRADED))
    change = world.package_changes[0]
    assert (change.name, change.before, change.after) == ("flashinfer-python", "0.6.3", "0.6.4")
    assert "2026-11-30" in change.when


def test_a_history_that_contradicts_the_installed_version_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "world.toml"
    bad.write_text(UPGRADED.read_text().replace('after = "0.6.4"\nwhen = "yesterday, 2026-11-30 17:40"\nnote',
                                                'after = "0.6.5"\nwhen = "yesterday, 2026-11-30 17:40"\nnote'))
    with pytest.raises(WorldError, match=r"package_change #1\.after: '0\.6\.5' is not what \[packages\]"):
        load_world(str(bad))
    bad.write_text(UPGRADED.read_text().replace('flashinfer-python = "0.6.4"', "flashinfer-python = 6"))
    with pytest.raises(WorldError, match=r"packages\.flashinfer-python: expected a version string"):
        load_world(str(bad))


def test_versions_order_as_pip_orders_them() -> None:
    order = ["0.6.3rc1", "0.6.3", "0.6.3.post1", "0.6.4", "0.6.10", "1.0"]
    assert sorted(order, key=version_key) == order
    assert version_key("2.9.1+cu128") == version_key("2.9.1") and version_key("1.0.0") == version_key("1")
