"""Infrastructure is not evidence: a host that fails under a run ends it in error (issue 12, part 3).

A refused authentication, a full disk or a launcher that vanished mid-run ends the run with status
``error`` and a non-zero exit code, the cause in plain words on screen and in the transcript; no further
experiment is launched, nothing concludes ``not_isolated``, and no server is left running (checked in
/proc): stopped where the host is reachable, else stopped by the next run there. A full disk under
hypoloop's own files (checkpoints, transcript, results) is one line, not a traceback, and the run goes
on with ``resume`` once there is room. Local runs and runs over a real OpenSSH server (tests/conftest.py);
the full disks are small tmpfs mounts (``small_disks``). Host-key changes and an sshd without SFTP are
in tests/test_crashproof_ssh.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clirun import HYPOLOOP, cli_env, live_processes, run_cli

from agent.record.transcript import read_transcript
from tools.logwatch import LogLine
from tools.server import launcher_missing

REPO = Path(__file__).resolve().parent.parent
WORLD = REPO / "lab" / "worlds" / "glm5-nvfp4-sm120"


def _events(path: Path) -> list[dict[str, Any]]:
    return [e.model_dump() for e in read_transcript(path)]


def _servers(run_id: str) -> dict[int, str]:
    return live_processes(run_id, only="lab.launch_server")


def _kill_servers(run_id: str) -> None:
    for pid in _servers(run_id):
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def _case(tmp_path: Path, *, host: str = "", launcher: str = "", host_env: str = "") -> Path:
    """The motivating lab case, with another [host] block, launcher argv or host environment entries."""
    text = (WORLD / "case.toml").read_text().replace('knowledge = ["FINDINGS.md"]', "")
    if host:
        text = text.replace('[host]\ntarget = "local"\n', host)
    if launcher:
        text = text.replace('argv = ["{python}", "-m", "lab.launch_server"]', f"argv = {launcher}")
    if host_env:
        text = text.replace('HYPOLOOP_LAB_TIME_SCALE = "0.01" }', f'HYPOLOOP_LAB_TIME_SCALE = "0.01", {host_env} }}')
    case = tmp_path / "case.toml"
    case.write_text(text)
    return case


def _ssh_host(sshd: Any, workdir: Path) -> str:
    return (
        "[host]\n"
        f'target = "{sshd.target}"\n'
        f'ssh_key = "{sshd.key}"\n'
        f'known_hosts = "{sshd.known_hosts}"\n'
        f'remote_python = "{sys.executable}"\n'
        f'remote_workdir = "{workdir}"\n'
        "reconnect_timeout_s = 3\n"
    )


def _run_and_act(
    tmp_path: Path, args: list[str], *, when: str, act: Callable[[], None], scale: str = "0.01", timeout: float = 150
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Start ``hypoloop ARGS --transcript-dir tr``; once its transcript holds an event of type ``when``,
    call ``act``; return the finished process (output captured) and the transcript. The launcher is taken
    away at the baseline's ``server.ready`` (its process has started from it, and the next launch is a probe,
    a stop and a design away): at its ``outcome`` a busy machine's poll could come after the next launch."""
    proc = subprocess.Popen(
        [*HYPOLOOP, *args, "--transcript-dir", "tr"], cwd=tmp_path, env=cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    transcript = None
    try:
        deadline = time.monotonic() + 90
        while transcript is None:
            files = list((tmp_path / "tr").glob("*.jsonl")) if (tmp_path / "tr").is_dir() else []
            if files and any(e["type"] == when for e in _events(files[0])):
                transcript = files[0]
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                out, err = proc.communicate()
                raise AssertionError(f"no {when} event (exit {proc.returncode}): {err[-3000:]}")
            time.sleep(0.02)
        act()
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), transcript


def _traceback(text: str) -> bool:
    """Whether ``text`` holds a Python traceback of hypoloop itself (a server's log lines, shown as
    ``log:N ...``, may quote the server's)."""
    return any(line.startswith("Traceback (most recent call last)") for line in text.splitlines())


def _assert_ended_in_error(r: subprocess.CompletedProcess[str], transcript: Path, cause: str) -> list[dict[str, Any]]:
    """The run ended in error over ``cause`` (a phrase of the plain-words message): exit 1, the cause on
    screen and in the transcript, nothing launched or concluded after the failure."""
    assert r.returncode == 1, r.stderr[-3000:]
    assert not _traceback(r.stderr) and "internal error" not in r.stdout + r.stderr
    # the screen wraps long lines (its width, the tmp path's length): the phrase is looked for across breaks
    assert cause in " ".join((r.stdout + r.stderr).split()), (r.stdout[-2000:], r.stderr[-2000:])
    events = _events(transcript)
    types = [e["type"] for e in events]
    first_error = types.index("error")
    assert cause in events[first_error]["data"]["message"]
    after = types[first_error:]
    assert "experiment.proposed" not in after and "server.launching" not in after, after  # nothing more ran
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert conclusion["status"] == "error" and cause in conclusion["reason"]
    assert events[-1]["type"] == "run.ended" and events[-1]["data"]["status"] == "error"
    assert not any(e["data"].get("status") == "not_isolated" for e in events)
    return events


# ------------------------------------------------------------------------------------------ launcher


def _launcher_package(tmp_path: Path) -> Path:
    """A package whose ``launch_server`` module starts the lab server, as ``sglang.launch_server`` does
    SGLang's: ``python -m labwrap.launch_server``."""
    pkg = tmp_path / "site" / "labwrap"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("import runpy\nrunpy.run_module('lab.launch_server', run_name='__main__')\n")
    return pkg


def _launcher_script(tmp_path: Path) -> Path:
    """An executable launcher (a script with the interpreter in its first line) that starts the lab server."""
    script = tmp_path / "bin" / "launch_server"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_module('lab.launch_server', run_name='__main__')\n")
    script.chmod(0o755)
    return script


def test_a_launcher_module_removed_mid_run_ends_the_run_in_error(tmp_path: Path) -> None:
    """The launcher's module is uninstalled after the baseline: the next launch prints Python's "No module
    named" and exits. That is the host, not the deployment (the old code counted it as a load failure
    and spent the budget on six more such launches, then concluded not_isolated)."""
    pkg = _launcher_package(tmp_path)
    case = _case(tmp_path, launcher='["{python}", "-m", "labwrap.launch_server"]',
                 host_env=f'PYTHONPATH = "{pkg.parent}"')
    r, transcript = _run_and_act(tmp_path, ["run", str(case), "--auto"], when="server.ready",
                                 act=lambda: shutil.rmtree(pkg))
    try:
        events = _assert_ended_in_error(r, transcript, "the launcher's module labwrap.launch_server is not installed")
    finally:
        _kill_servers(transcript.stem)
    assert not _servers(transcript.stem)
    assert [e["type"] for e in events].count("experiment.proposed") == 2  # the baseline and the one that failed


def test_a_launcher_removed_mid_run_ends_a_parallel_run_in_error(tmp_path: Path) -> None:
    """The launcher program is gone when a batch of experiments starts (--parallel 2): every member fails
    to start, and the run ends in error instead of counting them as outcomes and designing more (the old
    batch code ended the run only for an unreachable host)."""
    script = _launcher_script(tmp_path)
    case = _case(tmp_path, launcher=f'["{script}"]')
    r, transcript = _run_and_act(tmp_path, ["run", str(case), "--auto", "--parallel", "2"], when="server.ready",
                                 act=script.unlink)
    try:
        events = _assert_ended_in_error(r, transcript, f"command not found: {script}")
    finally:
        _kill_servers(transcript.stem)
    assert not _servers(transcript.stem)
    assert [e["type"] for e in events].count("server.launched") == 1  # the baseline only
    assert any((e["data"].get("batch") or {}).get("size") == 2 for e in events if e["type"] == "experiment.proposed")


def test_a_module_the_server_imports_is_evidence_not_a_missing_launcher() -> None:
    """Only the launcher's own module (or script, or exit status 127) is the host's failure; a module the
    server fails to import is the deployment's."""
    def lines(*texts: str) -> list[LogLine]:
        return [LogLine(line=i + 1, text=t, seen_monotonic=0.0) for i, t in enumerate(texts)]

    argv = ["/venv/bin/python", "-m", "sglang.launch_server", "--port", "30000"]
    assert launcher_missing(argv, lines("/venv/bin/python: No module named sglang.launch_server"), 1)
    assert launcher_missing(argv, lines(
        "/venv/bin/python: Error while finding module specification for 'sglang.launch_server' "
        "(ModuleNotFoundError: No module named 'sglang')"), 1)
    traceback = lines("Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
                      "ModuleNotFoundError: No module named 'sglang.launch_server'")
    assert launcher_missing(argv, traceback, 1) is None
    assert launcher_missing(argv, lines("ModuleNotFoundError: No module named 'flashinfer'"), 1) is None
    assert launcher_missing(["run.sh"], lines("run.sh: 3: exec: python: not found"), 127)
    assert launcher_missing(argv, lines("[2026-01-01 00:00:00] Load weight begin."), 1) is None


# ------------------------------------------------------------------------------------------ full disk


def test_a_full_disk_under_the_run_folder_ends_the_run_in_error(tmp_path: Path, small_disks: Any) -> None:
    """The disk holding the host's run folder (the servers' logs; locally also the saved results) fills
    up after the baseline: the next launch is refused in plain words, not started blind (the old code
    started it, its log could not be written, and the run died on an internal error)."""
    runs = small_disks.mount(tmp_path / "home" / "runs")
    r, transcript = _run_and_act(tmp_path, ["run", f"lab:{WORLD.name}", "--auto", "--json"], when="outcome",
                                 act=lambda: small_disks.fill(runs))
    try:
        _assert_ended_in_error(r, transcript, "is full")
    finally:
        _kill_servers(transcript.stem)
    assert not _servers(transcript.stem)
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "error" and f"the disk holding {runs}" in result["error"]
    assert result["launches"] == 1


@pytest.mark.parametrize("where", ["checkpoints", "transcript"])
def test_a_full_disk_under_hypoloops_own_files_is_one_line_and_resume_goes_on(
    tmp_path: Path, small_disks: Any, where: str
) -> None:
    """hypoloop's own checkpoint store or transcript cannot be written any more (ENOSPC) after the
    baseline: one line naming what could not be written, exit 1, a JSON result with status error,
    every server stopped; nothing done before is lost: with room again, `resume` finishes the run."""
    home = tmp_path / "home"
    if where == "checkpoints":
        # Room for a whole run's checkpoints once the filler is gone (a 3-launch run's store is ~6 MB now).
        disk = small_disks.mount(home, size_mb=32)
        small_disks.mount(home / "runs", size_mb=64)  # the run folder has room: only the store is full
    else:
        disk = small_disks.mount(tmp_path / "tr")
    r, transcript = _run_and_act(tmp_path, ["run", f"lab:{WORLD.name}", "--auto", "--json"], when="outcome",
                                 act=lambda: small_disks.fill(disk))
    run_id = transcript.stem
    try:
        assert r.returncode == 1, r.stderr[-3000:]
        assert not _traceback(r.stderr) and "internal error" not in r.stderr
        said = [line for line in r.stderr.splitlines() if "the disk is full" in line]
        assert len(said) == 1, r.stderr[-3000:]
        what = "checkpoint store" if where == "checkpoints" else str(transcript)
        assert what in said[0] and f"hypoloop resume {run_id}" in said[0]
        result = json.loads(r.stdout.strip().splitlines()[-1])
        assert result["status"] == "error" and "the disk is full" in result["error"] and result["run_id"] == run_id
        assert not _servers(run_id)
        small_disks.free(disk)
        again = run_cli(tmp_path, "resume", run_id, "--auto", "--json")
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout.strip().splitlines()[-1])["status"] == "isolated"
    finally:
        _kill_servers(run_id)
    assert not _servers(run_id)
    assert any(e["type"] == "run.resumed" for e in _events(transcript))


def test_a_transcript_made_read_only_mid_run_is_one_line_and_resume_goes_on(tmp_path: Path) -> None:
    """The transcript is made immutable (``chattr +i``: even root cannot write it) after the baseline: one
    line saying hypoloop's own file is not writable and naming it, exit 1, no traceback, every server
    stopped; once it is writable again, `resume` finishes the run."""
    probe = tmp_path / "probe"
    probe.write_text("x")
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    holder: dict[str, Path] = {}

    def lock() -> None:
        holder["t"] = next((tmp_path / "tr").glob("*.jsonl"))
        subprocess.run(["chattr", "+i", str(holder["t"])], check=True)

    r, transcript = _run_and_act(tmp_path, ["run", f"lab:{WORLD.name}", "--auto"], when="outcome", act=lock)
    run_id = transcript.stem
    try:
        assert r.returncode == 1, r.stderr[-3000:]
        assert not _traceback(r.stderr) and "internal error" not in r.stderr, r.stderr[-3000:]
        said = [line for line in r.stderr.splitlines() if "not writable" in line]
        assert len(said) == 1 and str(transcript) in said[0] and f"hypoloop resume {run_id}" in said[0], r.stderr
        assert not _servers(run_id)
    finally:
        subprocess.run(["chattr", "-i", str(holder.get("t", transcript))], capture_output=True)
        _kill_servers(run_id)
    again = run_cli(tmp_path, "resume", run_id, "--auto", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["status"] == "isolated"


# ------------------------------------------------------------------------------------------ over SSH


def test_an_authentication_refused_mid_run_ends_the_run_in_error(own_sshd: Any, tmp_path: Path) -> None:
    """The run's key is removed from the host's authorized_keys while the baseline loads, and the
    connection drops: the reconnect is refused. The run ends in error saying so (the key path is not
    taken for a secret), and that the server it could not reach is left for the next run there, which
    stops it."""
    case = _case(tmp_path, host=_ssh_host(own_sshd, tmp_path / "remote-runs"))
    authorized = own_sshd.workdir / "authorized_keys"
    trusted = authorized.read_text()

    def revoke() -> None:
        authorized.write_text("")
        assert own_sshd.cut_connections() >= 1

    r, transcript = _run_and_act(tmp_path, ["run", str(case), "--auto", "--json"], when="server.launched",
                                 act=revoke, scale="0.05")
    run_id = transcript.stem
    try:
        _assert_ended_in_error(r, transcript, "authentication failed")
        result = json.loads(r.stdout.strip().splitlines()[-1])
        assert "the host refused the key" in result["error"] and "<redacted>" not in result["error"]
        assert result["launches"] == 1
        assert "could not be stopped from here" in result["error"] and "next run on that host" in result["error"]
        assert _servers(run_id), "nobody could reach the host to stop the server"
        # Trusted again: the next run there finds the orphan and stops it (--auto), then ends on its own
        # bad flag before launching anything.
        authorized.write_text(trusted)
        case2 = tmp_path / "case2.toml"
        case2.write_text(case.read_text().replace('"--tp-size" = 8,', '"--tp-size" = 8, "--no-such-flag" = 1,'))
        second = run_cli(tmp_path, "run", str(case2), "--auto", "--json", "--transcript-dir", "tr2")
        events = _events(Path(json.loads(second.stdout.strip().splitlines()[-1])["transcript"]))
        stopped = [e["data"] for e in events if e["type"] == "host.orphan_stopped"]
        assert stopped and all(s["verified"] for s in stopped)
    finally:
        _kill_servers(run_id)
    assert not _servers(run_id)


@pytest.mark.parametrize("what", ["module", "program"])
def test_a_launcher_removed_mid_run_over_ssh_ends_the_run_in_error(own_sshd: Any, tmp_path: Path, what: str) -> None:
    """The launcher's module (uninstalled) or program (deleted) is gone on the host after the baseline."""
    if what == "module":
        gone = _launcher_package(tmp_path)
        case = _case(tmp_path, host=_ssh_host(own_sshd, tmp_path / "remote-runs"),
                     launcher='["{python}", "-m", "labwrap.launch_server"]', host_env=f'PYTHONPATH = "{gone.parent}"')
        cause = "the launcher's module labwrap.launch_server is not installed"
    else:
        gone = _launcher_script(tmp_path)
        case = _case(tmp_path, host=_ssh_host(own_sshd, tmp_path / "remote-runs"), launcher=f'["{gone}"]')
        cause = f"command not found: {gone}"
    r, transcript = _run_and_act(tmp_path, ["run", str(case), "--auto"], when="server.ready",
                                 act=lambda: shutil.rmtree(gone) if gone.is_dir() else gone.unlink())
    try:
        _assert_ended_in_error(r, transcript, cause)
    finally:
        _kill_servers(transcript.stem)
    assert not _servers(transcript.stem)


def test_a_full_disk_on_the_host_over_ssh_ends_the_run_in_error(
    own_sshd: Any, tmp_path: Path, small_disks: Any
) -> None:
    """The host's disk under the run folder fills up after the baseline: the next launch is refused at
    once in plain words (the old code waited 20 s for a PID file that could not be written)."""
    remote = small_disks.mount(tmp_path / "remote-runs")
    case = _case(tmp_path, host=_ssh_host(own_sshd, remote))
    r, transcript = _run_and_act(tmp_path, ["run", str(case), "--auto"], when="outcome",
                                 act=lambda: small_disks.fill(remote))
    try:
        _assert_ended_in_error(r, transcript, "is full")
    finally:
        _kill_servers(transcript.stem)
    assert not _servers(transcript.stem)
    events = _events(transcript)
    error = next(e for e in events if e["type"] == "error")
    failed = next(e for e in reversed(events) if e["type"] == "server.launching")
    assert error["ts"] - failed["ts"] < 10  # refused at once, not after waiting for the server
