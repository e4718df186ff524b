"""hypoloop installed from a wheel, not from the checkout: what `pip install .` gives a user works outside the
repository (the knowledge folder, the report templates and the lab's worlds travel with the code)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from clirun import cli_env

REPO = Path(__file__).resolve().parents[1]


def _source_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and new ones git does not ignore) copied to ``dest``: a build there
    sees no ``build/`` folder left by an earlier build, which would hide a file the package data lacks."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True, timeout=60,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_a_wheel_install_runs_the_demo_and_writes_the_report_outside_the_repository(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    source = _source_copy(tmp_path / "source")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("hypoloop-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"knowledge/{p.name}" for p in (REPO / "knowledge").glob("*.toml")}
    assert shipped and shipped <= names, f"knowledge files missing from the wheel: {sorted(shipped - names)}"
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    # the installed copy first on the path, the checkout nowhere (a user's machine)
    env = cli_env(work, PYTHONPATH=str(target))
    env.pop("HYPOLOOP_KNOWLEDGE", None)
    hypoloop = [sys.executable, "-c", "from agent.cli import main; main()"]
    where = subprocess.run(
        [sys.executable, "-c", "import agent, tools; print(agent.__file__, tools.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert where.stdout.count(str(target)) == 2, where.stdout + where.stderr
    run = subprocess.run(
        [*hypoloop, "run", "lab:glm5-nvfp4-sm120", "--auto", "--json"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["status"] == "isolated"
    report = work / "report.html"
    made = subprocess.run(
        [*hypoloop, "report", result["transcript"], "--format", "html", "-o", str(report)],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "<html" in report.read_text(encoding="utf-8").lower()
    assert not os.path.exists(work / "knowledge")
