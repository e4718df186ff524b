"""Running the ``hypoloop`` command as a user does, for the end-to-end tests (a real process each time)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HYPOLOOP = [sys.executable, "-c", "from agent.cli import main; main()"]


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a test run: its own HYPOLOOP_HOME, a fast lab clock, no real OpenAI key."""
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    env.update({"HYPOLOOP_HOME": str(tmp_path / "home"), "HYPOLOOP_LAB_TIME_SCALE": "0.004", "COLUMNS": "160"})
    env.update(extra)
    return env


def run_cli(tmp_path: Path, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess[str]:
    """``hypoloop ARGS`` in ``tmp_path`` with no stdin (so never a terminal); output captured as text."""
    return subprocess.run(
        [*HYPOLOOP, *args],
        cwd=tmp_path,
        env=cli_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


#: the [launcher] table of a case that runs the lab's stand-in server on this machine
LAB_LAUNCHER = (
    '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
    'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
    'import_names_argv = ["{python}", "-m", "lab.metadata"]\n'
    'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
)


def lab_case(path: Path, world: Path, *, model: str, baseline: str, budget: str,
             description: str = "the server stops at start-up", name: str | None = None) -> Path:
    """Write a case file at ``path`` that runs the lab world file ``world``: ``baseline`` is the body of the
    [baseline] table and ``budget`` of [budget] (TOML lines); ``name`` defaults to the world's folder."""
    path.write_text(
        f'name = "{name or world.parent.name}"\ndescription = "{description}"\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{world}" }}\n{LAB_LAUNCHER}'
        f'[model]\npath = "{model}"\n[baseline]\n{baseline}\n[budget]\n{budget}\n'
    )
    return path


def run_auto(tmp_path: Path, case: Path, *, timeout: float = 300, **env: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``hypoloop run CASE --auto --json`` in ``tmp_path`` with none of the developer's own ``HYPOLOOP_*``
    settings (``env`` sets the lab's, e.g. its clock, seed and state folder); its result line and its
    transcript's events. A non-zero exit fails the test with the end of stderr."""
    run_env = {k: v for k, v in cli_env(tmp_path).items() if not k.startswith("HYPOLOOP_")}
    run_env.update(HYPOLOOP_HOME=str(tmp_path / "home"), **env)
    r = subprocess.run(
        [*HYPOLOOP, "run", str(case), "--auto", "--json", "--transcript-dir", str(tmp_path / "tr")],
        cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return result, transcript_events(Path(result["transcript"]))


def run_world(tmp_path: Path, world: str, catalog: str = "catalog") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run_auto`` on the development lab world ``world``'s own case (lab/worlds), the lab seeded and its state
    under ``tmp_path``; ``catalog`` "empty" runs it under the bench's ablation (``agent-empty``)."""
    from bench.run import empty_catalog_knowledge
    from lab.world import WORLDS_DIR

    env = {"HYPOLOOP_LAB_SEED": "t", "HYPOLOOP_LAB_STATE": str(tmp_path / "lab-state")}
    if catalog == "empty":
        env["HYPOLOOP_KNOWLEDGE"] = str(empty_catalog_knowledge(tmp_path))
    return run_auto(tmp_path, WORLDS_DIR / world / "case.toml", **env)


def run_case_copy(tmp_path: Path, case_dir: Path, *, timeout: float = 240,
                  **replace: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """``hypoloop run CASE --auto --json`` on a copy of the world folder ``case_dir`` (its ``case.toml``, each
    key of ``replace`` swapped for its value; a key the case lacks fails the test); the result line and the
    finished process. A non-zero exit fails the test."""
    work = tmp_path / case_dir.name
    shutil.copytree(case_dir, work, symlinks=False)
    case = work / "case.toml"
    text = case.read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    case.write_text(text)
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json", "--transcript-dir", str(tmp_path), timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r


def live_processes(marker: str, *, only: str | None = None) -> dict[int, str]:
    """``{pid: command line}`` of live (not zombie or dead) processes, other than this one and pytest,
    whose command line or stdout file mentions ``marker`` (a run id); ``only``: text the command line
    must contain too (``"lab.launch_server"`` for lab servers)."""
    found: dict[int, str] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] in "ZX" or "pytest" in cmd or (only is not None and only not in cmd):
            continue
        try:
            out = os.readlink(f"/proc/{pid}/fd/1")
        except OSError:
            out = ""
        if marker in cmd or marker in out:
            found[int(pid)] = cmd
    return found


def transcript_events(path: Path) -> list[dict[str, Any]]:
    """The events of a transcript as dicts, skipping a line a kill tore and a line a test damaged."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a line torn by the kill
        if isinstance(ev, dict) and "type" in ev:  # not a line a test damaged on purpose
            out.append(ev)
    return out


def paste_until_ready(command: str, cwd: Path, **env: str) -> list[str]:
    """Paste a launch command hypoloop printed into bash (``python`` on PATH is this interpreter, the
    lab's own ``HYPOLOOP_LAB*`` settings dropped, ``env`` added) with a free ``--port``; the server's output
    up to its ready line ("ready to roll"), a traceback, or its end. The server is killed afterwards."""
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    shell_env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_LAB")}
    shell_env.update(PATH=f"{Path(sys.executable).parent}:{shell_env['PATH']}", **env)
    proc = subprocess.Popen(
        ["bash", "-c", command + f" --port {port}"], cwd=cwd, env=shell_env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "ready to roll" in line or "Traceback" in line:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return seen


@contextlib.contextmanager
def lab_bench_env(root: Path, time_scale: str) -> Iterator[Path]:
    """This process's environment for in-process agent runs on lab worlds (``bench.methods.run_agent``):
    its own HYPOLOOP_HOME and lab state under ``root``, the lab clock at ``time_scale``, no world named
    by the caller's environment; restored on exit. Yields ``root``."""
    keys = ("HYPOLOOP_HOME", "HYPOLOOP_LAB_TIME_SCALE", "HYPOLOOP_LAB_STATE", "HYPOLOOP_LAB_WORLD")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["HYPOLOOP_HOME"] = str(root / "home")
    os.environ["HYPOLOOP_LAB_TIME_SCALE"] = time_scale
    os.environ["HYPOLOOP_LAB_STATE"] = str(root / "lab-state")
    os.environ.pop("HYPOLOOP_LAB_WORLD", None)
    try:
        yield root
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def changes_tested(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changes a run's transcript events show it tested, in order (baseline launches and
    confirmations left out)."""
    return [e["data"]["change"] for e in events
            if e["type"] == "experiment.proposed" and e["data"].get("change") and e["data"]["purpose"] != "confirm"]
