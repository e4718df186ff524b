"""SSHHost and `hypoloop ... --host ssh://` against a real OpenSSH server on 127.0.0.1 (no mocks).

The `sshd` fixture (tests/conftest.py, .ci/sshd.py) runs /usr/sbin/sshd as a child with a throwaway
host key and a key made for the session; the "remote" host is this machine, so the remote python is
this interpreter and the lab is importable there.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from clirun import HYPOLOOP, live_processes
from clirun import cli_env as _env
from clirun import run_cli as _hypoloop

from agent.record.transcript import read_transcript
from tools.connect import connect_host
from tools.host import CommandTimeout, Host, HostError
from tools.logwatch import LogWatcher
from tools.probes import Probe, run_probe
from tools.ssh import SSHHost, SSHOptions, parse_target

REPO = Path(__file__).resolve().parent.parent
FAKE_SERVER = str(REPO / "tests" / "fakes" / "fake_server.py")

REMOTE_RUNS = Path("~/.hypoloop/runs").expanduser()  # the default work dir root on the "remote" host


def _opts(sshd: Any, tmp_path: Path, **kw: Any) -> SSHOptions:
    base: dict[str, Any] = {
        "key_path": str(sshd.key),
        "known_hosts": str(sshd.known_hosts),
        "python": sys.executable,
        "workdir_root": str(tmp_path / "remote-runs"),
    }
    base.update(kw)
    return SSHOptions(**base)


@pytest.fixture
def host(sshd: Any, tmp_path: Path) -> Iterator[SSHHost]:
    h = SSHHost(sshd.target, options=_opts(sshd, tmp_path))
    yield h
    h.close()


def _processes(marker: str) -> list[str]:
    """Live (non-zombie) processes whose command line or stdout mentions `marker`."""
    return [f"{pid}: {cmd}" for pid, cmd in live_processes(marker).items()]


def _wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def _read_until(host: SSHHost, watcher: LogWatcher, text: str, timeout: float = 10.0) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines += [ln.text for ln in watcher.poll()]
        if any(text in ln for ln in lines):
            return lines
        time.sleep(0.02)
    raise AssertionError(f"{text!r} not seen; got {lines[-5:]}")


# --- commands and quoting ----------------------------------------------------------------------------


def test_ssh_host_runs_commands_like_a_local_host(host: SSHHost) -> None:
    assert isinstance(host, Host)
    res = host.run(
        ["{python}", "-c", "import sys; print(sys.executable); print('err', file=sys.stderr); sys.exit(3)"]
    )
    assert (res.returncode, res.stdout, res.stderr) == (3, sys.executable + "\n", "err\n")
    with pytest.raises(HostError) as err:
        host.run(["definitely-not-a-command-xyz", "--help"])
    assert "command not found: definitely-not-a-command-xyz" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CommandTimeout) as tmo:
        host.run(["sh", "-c", "sleep 31.25; echo never"], timeout=0.5)
    assert tmo.value.result.returncode == -9
    assert _wait_for(lambda: not _processes("sleep 31.25"), 5), "the timed-out command's group was not killed"


def test_hostile_values_arrive_as_one_literal_argument(host: SSHHost, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    hostile = [
        "x; rm -rf ~",
        f"x; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        "a'b\"c\\d",
        "*",
        "~",
        f"line\n; touch {canary}",
        "--port",
    ]
    res = host.run(["printf", r"%s\0", *hostile])
    assert res.stdout.split("\0")[:-1] == hostile
    res = host.run(["sh", "-c", 'printf %s "$V"'], env={"V": hostile[1]})
    assert res.stdout == hostile[1]
    log = f"{host.workdir('quoting')}/argv.log"
    handle = host.spawn(
        ["{python}", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *hostile], log_path=log
    )
    watcher = LogWatcher(host, handle.log_path)
    assert _wait_for(lambda: not host.is_alive(handle))
    assert json.loads(watcher.flush()[0].text) == hostile
    assert host.exit_code(handle) == 0
    with pytest.raises(HostError, match="not a valid identifier"):
        host.run(["true"], env={"A;B": "1"})
    assert not canary.exists()
    assert Path("~").expanduser().is_dir()


# --- trust and authentication -------------------------------------------------------------------------


def test_unknown_host_key_is_refused_with_the_command_that_trusts_it(sshd: Any, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    with pytest.raises(HostError) as err:
        SSHHost(sshd.target, options=_opts(sshd, tmp_path, known_hosts=str(known)))
    msg = str(err.value)
    assert "\n" not in msg and "is not in" in msg and "SHA256:" in msg and "--insecure-accept-host-key" in msg
    keyscan = msg.split("trust it with: ")[1].split(" (or pass")[0]
    assert keyscan.startswith(f"ssh-keyscan -p {sshd.port} ")
    # Doing what the message says makes the host trusted.
    subprocess.run(keyscan, shell=True, check=True, capture_output=True, timeout=30)
    SSHHost(sshd.target, options=_opts(sshd, tmp_path, known_hosts=str(known))).close()
    # A key that differs from the recorded one is refused too.
    wrong = Path(f"{sshd.wrong_key}.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{sshd.port} {wrong[0]} {wrong[1]}\n")
    with pytest.raises(HostError, match="does not match"):
        SSHHost(sshd.target, options=_opts(sshd, tmp_path, known_hosts=str(known)))
    # --insecure-accept-host-key connects and says the key was not checked.
    h = SSHHost(
        sshd.target, options=_opts(sshd, tmp_path, known_hosts=str(known), insecure_accept_host_key=True)
    )
    assert h.connect_info["host_key_checked"] is False and h.connect_info["host_key"].startswith(
        "ssh-ed25519"
    )
    h.close()


def test_wrong_key_is_a_one_line_auth_error(sshd: Any, tmp_path: Path) -> None:
    r = _hypoloop(
        tmp_path,
        "flags",
        "--host",
        sshd.target,
        "--ssh-key",
        str(sshd.wrong_key),
        "--known-hosts",
        str(sshd.known_hosts),
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "authentication failed for" in r.stderr and "Traceback" not in r.stderr


def test_a_port_that_accepts_then_hangs_up_is_one_line_without_paramikos_traceback(tmp_path: Path) -> None:
    """Something listens on the port but is no SSH server: it accepts, then closes. Paramiko's transport
    thread logs the failed handshake on its own logger; with no handler that fell through to Python's
    last-resort handler and printed two tracebacks before hypoloop's error."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def hang_up() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.close()

    known = tmp_path / "known_hosts"
    known.write_text("")
    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    try:
        r = _hypoloop(tmp_path, "flags", "--host", f"ssh://me@127.0.0.1:{port}",
                      "--known-hosts", str(known))
    finally:
        stop.set()
        t.join()
        listener.close()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "cannot connect to me@127.0.0.1" in r.stderr, r.stderr


def test_a_bad_host_option_is_named_as_the_option_not_as_the_case_file(sshd: Any, tmp_path: Path) -> None:
    r = _hypoloop(
        tmp_path,
        "run",
        "lab:glm5-nvfp4-sm120",
        "--auto",
        "--host",
        sshd.target,
        "--ssh-key",
        str(sshd.wrong_key),
        "--known-hosts",
        str(sshd.known_hosts),
    )
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: --host: {sshd.target}") and "authentication failed for" in err, err
    assert "case.toml" not in err


def test_the_host_option_wins_over_an_unusable_host_in_the_case_file(sshd: Any, tmp_path: Path) -> None:
    src = (REPO / "lab" / "worlds" / "glm5-nvfp4-sm120" / "case.toml").read_text()
    case = tmp_path / "case.toml"
    case.write_text(
        src.replace('[host]\ntarget = "local"\n', '[host]\ntarget = "ssh://nobody@host:99999"\n').replace(
            'knowledge = ["FINDINGS.md"]', ""
        )
    )
    r = _hypoloop(tmp_path, "run", str(case), "--auto", "--json")
    assert r.returncode == 2 and "field 'host.target'" in r.stderr  # the file alone is unusable
    assert json.loads(r.stdout.strip().splitlines()[-1])["status"] == "error"  # --json: still a result line
    bad = _hypoloop(tmp_path, "run", str(case), "--auto", "--json", "--host", "ssh://x:99999")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == (
        "error: --host: ssh://x:99999: the port is not a number in 1-65535"
    )
    # A working --host replaces it: the run reaches the host (here: refused by its key check, exit 2).
    r = _hypoloop(
        tmp_path, "run", str(case), "--auto", "--host", sshd.target, "--ssh-key", str(sshd.wrong_key),
        "--known-hosts", str(sshd.known_hosts),
    )  # fmt: skip
    assert r.returncode == 2 and "authentication failed for" in r.stderr and "host.target" not in r.stderr


def test_flags_command_reads_the_catalog_over_ssh(sshd: Any, tmp_path: Path) -> None:
    r = _hypoloop(
        tmp_path,
        "flags",
        "--case",
        "lab:glm5-nvfp4-sm120",
        *_ssh_args(sshd),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert "bf16" in json.loads(r.stdout)["flags"]["--kv-cache-dtype"]["choices"]


def test_ssh_config_alias_is_honoured(sshd: Any, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host gpubox\n"
        "  HostName 127.0.0.1\n"
        f"  Port {sshd.port}\n"
        f"  User {sshd.user}\n"
        f"  IdentityFile {sshd.key}\n"
        f"  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    h = connect_host("ssh://gpubox", ssh=SSHOptions(ssh_config=str(config)))
    try:
        assert h.run(["echo", "ok"]).stdout == "ok\n"
    finally:
        h.close()
    with pytest.raises(HostError, match="expected ssh://"):
        parse_target("ssh://gpubox/path")
    with pytest.raises(HostError, match="more than one '@'"):
        parse_target("ssh://a@b@gpubox:22")
    with pytest.raises(HostError, match="1-65535"):
        parse_target("ssh://gpubox:0")
    with pytest.raises(HostError, match="no spaces"):
        parse_target("ssh://gpu box")


# --- servers, logs, forwarding, reconnect -----------------------------------------------------------------


def _fake_server(host: SSHHost, name: str, *args: str) -> tuple[Any, int]:
    port = host.free_port()
    argv = ["{python}", FAKE_SERVER, "--port", str(port), *args]
    return host.spawn(argv, log_path=f"{host.workdir(name)}/server.log"), port


def test_server_survives_a_dropped_connection_and_reading_resumes(
    host: SSHHost, sshd: Any, tmp_path: Path
) -> None:
    lines = [arg for i in range(60) for arg in ("--line", f"loading step {i}")]
    handle, port = _fake_server(host, "drop", *lines, "--interval", "0.03", "--then", "serve")
    watcher = LogWatcher(host, handle.log_path)
    seen = _read_until(host, watcher, "loading step 5")
    assert sshd.cut_connections() >= 1  # kill the sshd processes serving this connection
    seen += _read_until(host, watcher, "ready to roll", timeout=20)
    steps = [ln for ln in seen if ln.startswith("loading step")]
    assert steps == [f"loading step {i}" for i in range(60)]  # every line once, in order
    assert host.stats.reconnects >= 1
    assert host.is_alive(handle)
    # Requests reach the server on the host's loopback through the (re-established) tunnel.
    base = f"http://127.0.0.1:{host.forward_port(port)}"
    assert httpx.get(f"{base}/health", timeout=5).status_code == 200
    for probe in (
        Probe(id="chat", kind="chat", prompt="capital of France?", expect="Paris"),
        Probe(id="gen", kind="generate", prompt="The capital of France is", expect="Paris"),
    ):
        assert run_probe(base, probe, model="fake", timeout_s=10).status == "ok"
    assert host.terminate(handle, grace_s=2)
    assert not host.is_alive(handle)
    assert not _processes(str(tmp_path / "remote-runs"))


def test_terminate_kills_the_group_and_verifies_the_port_is_free(host: SSHHost, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    handle, port = _fake_server(
        host,
        "stubborn",
        "--ignore-sigterm",
        "--child",
        "stubborn",
        "--child-pid-file",
        str(pid_file),
        "--then",
        "serve",
    )
    watcher = LogWatcher(host, handle.log_path)
    _read_until(host, watcher, "ready to roll")
    assert _wait_for(pid_file.exists)
    child = int(pid_file.read_text())
    t0 = time.monotonic()
    assert host.terminate(handle, grace_s=0.3)  # TERM is ignored: KILL after the grace
    assert time.monotonic() - t0 < 5
    assert (
        not Path(f"/proc/{child}").exists()
        or Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "Z"
    )
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)


def test_a_proc_entry_that_fails_at_read_time_reads_as_gone(host: SSHHost) -> None:
    """A server that exits between the SFTP open and read of /proc/PID/stat makes the SFTP server answer a
    bare "Failure"; that means the process is gone, not that the host failed. /proc/PID/mem of a live
    process fails the same way at read time (address 0 is not mapped), deterministically."""
    sleeper = host.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"]).stdout.strip()
    try:
        assert host._sftp_small(f"/proc/{sleeper}/mem", 16) is None
        assert host._sftp_small(f"/proc/{sleeper}/stat", 4096)  # and the connection still works
    finally:
        host.run(["kill", sleeper])


def test_exit_code_of_a_server_that_ended(host: SSHHost) -> None:
    handle, _ = _fake_server(host, "exit", "--line", "bye", "--then", "exit", "--exit-code", "3")
    assert _wait_for(lambda: not host.is_alive(handle), 10)
    assert host.exit_code(handle) == 3
    assert host.terminate(handle, grace_s=0.1)


@pytest.mark.parametrize("follow", [True, False], ids=["stream", "sftp"])
def test_log_is_read_incrementally_never_twice(sshd: Any, tmp_path: Path, follow: bool) -> None:
    h = SSHHost(sshd.target, options=_opts(sshd, tmp_path, follow=follow))
    try:
        writer = (
            "import sys, time\n"
            "for i in range(400):\n"
            "    sys.stdout.write(f'line {i:05d} ' + 'x' * 200 + '\\n'); sys.stdout.flush()\n"
            "    if i % 50 == 0: time.sleep(0.02)\n"
        )
        handle = h.spawn(["{python}", "-c", writer], log_path=f"{h.workdir('inc')}/w.log")
        watcher = LogWatcher(h, handle.log_path)
        got: list[str] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(got) < 400:
            alive = h.is_alive(handle)
            got += [ln.text[:10] for ln in watcher.poll()]
            if not alive:
                got += [ln.text[:10] for ln in watcher.flush()]
                break
            time.sleep(0.02)
        assert got == [f"line {i:05d}" for i in range(400)]
        size = Path(handle.log_path).stat().st_size
        assert size - 100 <= h.stats.log_bytes <= size  # each byte crossed the wire once
        assert h.read_from(handle.log_path, 5, 4) == b"0000"  # any offset, not only the end
    finally:
        h.close()


# --- the whole agent over SSH -----------------------------------------------------------------------------






def _ssh_args(sshd: Any) -> list[str]:
    return [
        "--host",
        sshd.target,
        "--ssh-key",
        str(sshd.key),
        "--known-hosts",
        str(sshd.known_hosts),
        "--remote-python",
        sys.executable,
    ]


def _events(path: Path) -> list[dict[str, Any]]:
    return [e.model_dump() for e in read_transcript(path)]


@pytest.fixture
def remote_runs() -> Iterator[list[str]]:
    """Run ids whose remote work dirs (~/.hypoloop/runs/RUN_ID on the "remote" host) are removed after."""
    ids: list[str] = []
    yield ids
    for run_id in ids:
        for entry in _processes(run_id):  # only after a failed assertion: never leave a server behind
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(int(entry.split(":")[0])), signal.SIGKILL)
        shutil.rmtree(REMOTE_RUNS / run_id, ignore_errors=True)


def _assert_isolated_like_local(result: dict[str, Any]) -> None:
    # The same root cause and fix as the local run (tests/test_run_lab.py).
    assert result["status"] == "isolated", result
    fix = result["root_cause"]["fix"]
    assert (fix["kind"], fix["name"]) == ("flag", "--kv-cache-dtype")
    assert fix["after"] in ("bf16", "bfloat16")
    assert result["root_cause"]["component"] == "attention.dsa_decode"


def test_run_over_ssh_reaches_the_same_fix_as_locally(
    sshd: Any, tmp_path: Path, remote_runs: list[str]
) -> None:
    r = _hypoloop(
        tmp_path,
        "run",
        "lab:glm5-nvfp4-sm120",
        "--auto",
        *_ssh_args(sshd),
        "--json",
        "--transcript-dir",
        "tr",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    remote_runs.append(result["run_id"])
    _assert_isolated_like_local(result)
    events = _events(tmp_path / result["transcript"])
    connected = next(e for e in events if e["type"] == "host.connected")["data"]
    assert connected["host_key_checked"] is True and connected["target"] == sshd.target
    launched = [e for e in events if e["type"] == "server.launched"]
    stopped = [e for e in events if e["type"] == "server.stopped"]
    assert len(launched) == result["launches"] == len(stopped) and all(e["data"]["verified"] for e in stopped)
    assert all(e["data"]["log"].startswith(str(REMOTE_RUNS / result["run_id"])) for e in launched)
    assert all(Path(e["data"]["log"] + ".pid").is_file() for e in launched)  # PID file beside each log
    assert not _processes(result["run_id"])


def test_hostile_flag_value_is_refused_before_any_shell(
    sshd: Any, tmp_path: Path, remote_runs: list[str]
) -> None:
    src = (REPO / "lab" / "worlds" / "glm5-nvfp4-sm120" / "case.toml").read_text()
    case = tmp_path / "case.toml"
    case.write_text(
        src.replace('"--tp-size" = 8,', '"--tp-size" = 8, "--served-model-name" = "x; rm -rf ~",').replace(
            'knowledge = ["FINDINGS.md"]', ""
        )
    )
    known = tmp_path / "empty_known_hosts"
    known.write_text("")
    args = [a if a != str(sshd.known_hosts) else str(known) for a in _ssh_args(sshd)]
    r = _hypoloop(
        tmp_path,
        "run",
        str(case),
        "--auto",
        *args,
        "--insecure-accept-host-key",
        "--json",
        "--transcript-dir",
        "tr",
    )
    assert r.returncode == 2  # bad input: refused before anything reached the host
    result = json.loads(r.stdout.strip().splitlines()[-1])
    # bad input leaves no run (no transcript, nothing in `hypoloop runs`): nothing was launched
    assert result["run_id"] is None and result["status"] == "error" and "--served-model-name" in result["error"]
    assert not list((tmp_path / "tr").glob("*.jsonl"))
    # The insecure option is said on screen.
    assert "NOT checked" in r.stderr
    assert Path("~").expanduser().is_dir()


def test_a_json_flag_value_reaches_the_server_as_one_literal_argument(
    sshd: Any, tmp_path: Path, remote_runs: list[str]
) -> None:
    """--json-model-override-args takes JSON (quotes, spaces, braces); over SSH it is shell-quoted as one
    word, so even shell syntax inside the JSON arrives literally and runs nothing."""
    mark = tmp_path / "PWNED"
    value = json.dumps({"index_topk_pattern": "FF SS", "note": f"$(touch {mark}); touch {mark} `id`"})
    src = (REPO / "lab" / "worlds" / "glm5-nvfp4-sm120" / "case.toml").read_text()
    case = tmp_path / "case.toml"
    case.write_text(
        src.replace('"--tp-size" = 8,', f'"--tp-size" = 8, "--json-model-override-args" = {json.dumps(value)},')
        .replace('knowledge = ["FINDINGS.md"]', "")
    )
    r = _hypoloop(tmp_path, "run", str(case), "--auto", *_ssh_args(sshd), "--json", "--transcript-dir", "tr")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    remote_runs.append(result["run_id"])
    _assert_isolated_like_local(result)
    assert not mark.exists()
    events = _events(tmp_path / result["transcript"])
    launched = [e["data"] for e in events if e["type"] == "server.launched"]
    for ev in launched:  # what the server itself parsed (its server_args= line), once per launch
        log = Path(ev["log"]).read_text()
        assert f"json_model_override_args={value!r}" in log
    entry = next(e["data"] for e in events if e["type"] == "conclusion")["findings_entry"]
    assert f"--json-model-override-args '{value}'" in entry  # quoted for a shell, so it reads back


def _start(tmp_path: Path, *args: str, scale: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*HYPOLOOP, *args],
        cwd=tmp_path,
        env=_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def _wait_launched(tmp_path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list((tmp_path / "tr").glob("*.jsonl"))
        if files and any(e["type"] == "server.launched" for e in _events(files[0])):
            return files[0]
        if proc.poll() is not None:
            raise AssertionError(f"hypoloop ended early: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    raise AssertionError("the run never launched a server")


def _finish(proc: subprocess.Popen[str], timeout: float = 90) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_connection_cut_while_loading_reconnects_and_finishes(
    sshd: Any, tmp_path: Path, remote_runs: list[str]
) -> None:
    proc = _start(
        tmp_path,
        "run",
        "lab:glm5-nvfp4-sm120",
        "--auto",
        *_ssh_args(sshd),
        "--json",
        "--transcript-dir",
        "tr",
        scale="0.004",
    )
    transcript = _wait_launched(tmp_path, proc)
    remote_runs.append(transcript.stem)
    time.sleep(0.3)  # the server is loading (ready after ~1.8 s at this scale)
    assert not any(e["type"] == "server.ready" for e in _events(transcript))
    assert sshd.cut_connections() >= 1
    out, err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    _assert_isolated_like_local(result)
    types = [e["type"] for e in _events(transcript)]
    assert "host.connection_lost" in types and "host.reconnected" in types
    assert types.index("host.reconnected") < types.index("server.ready")  # same launch, no relaunch
    assert types.count("server.launched") == result["launches"]
    assert not _processes(transcript.stem)


def test_ctrl_c_over_ssh_stops_the_remote_server(sshd: Any, tmp_path: Path, remote_runs: list[str]) -> None:
    proc = _start(
        tmp_path,
        "run",
        "lab:glm5-nvfp4-sm120",
        "--auto",
        *_ssh_args(sshd),
        "--transcript-dir",
        "tr",
        scale="0.05",
    )
    transcript = _wait_launched(tmp_path, proc)
    remote_runs.append(transcript.stem)
    assert _wait_for(lambda: bool(_processes(transcript.stem)), 10), "the remote server should be loading"
    proc.send_signal(signal.SIGINT)
    _finish(proc, timeout=30)
    assert proc.returncode == 130
    assert not _processes(transcript.stem)
    assert _events(transcript)[-1]["data"]["status"] == "interrupted"


def test_unreachable_host_ends_in_error_and_the_orphan_is_stopped_at_the_next_start(
    own_sshd: Any, tmp_path: Path, remote_runs: list[str]
) -> None:
    src = (REPO / "lab" / "worlds" / "glm5-nvfp4-sm120" / "case.toml").read_text()
    host_block = (
        "[host]\n"
        f'target = "{own_sshd.target}"\n'
        f'ssh_key = "{own_sshd.key}"\n'
        f'known_hosts = "{own_sshd.known_hosts}"\n'
        f'remote_python = "{sys.executable}"\n'
        f'remote_workdir = "{tmp_path / "remote-runs"}"\n'  # only this test's runs are looked at
        "reconnect_timeout_s = 1\n"
    )
    case = tmp_path / "case.toml"
    case.write_text(
        src.replace('[host]\ntarget = "local"\n', host_block).replace('knowledge = ["FINDINGS.md"]', "")
    )
    proc = _start(tmp_path, "run", str(case), "--auto", "--json", "--transcript-dir", "tr", scale="0.05")
    transcript = _wait_launched(tmp_path, proc)
    run_id = transcript.stem
    remote_runs.append(run_id)
    assert _wait_for(lambda: bool(_processes(run_id)), 10)
    own_sshd.stop()  # the host stays unreachable
    out, err = _finish(proc)
    assert proc.returncode == 1, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "error" and "could not be re-established" in result["error"]
    assert result["launches"] == 1 and result["host_seconds"] > 0  # the cut-off launch used the host
    events = _events(transcript)  # intact: every line parses, and the run's end is recorded
    assert events[-1]["type"] == "run.ended" and events[-1]["data"]["status"] == "error"
    assert _processes(run_id), "the server is still on the host (nobody could stop it)"

    # The host comes back; the next start finds the orphan by its PID file and stops it (--auto).
    own_sshd.start()
    case2 = tmp_path / "case2.toml"
    case2.write_text(case.read_text().replace('"--tp-size" = 8,', '"--tp-size" = 8, "--no-such-flag" = 1,'))
    r = _hypoloop(tmp_path, "run", str(case2), "--auto", "--json", "--transcript-dir", "tr2")
    second = json.loads(r.stdout.strip().splitlines()[-1])
    remote_runs.append(second["run_id"])
    events = _events(tmp_path / second["transcript"])
    orphans = next(e for e in events if e["type"] == "host.orphans")["data"]["orphans"]
    assert [Path(o["pid_file"]).parent.name for o in orphans] == [run_id]
    assert "orchestrator" in orphans[0]["why"]
    stopped = [e["data"] for e in events if e["type"] == "host.orphan_stopped"]
    assert stopped and all(s["verified"] for s in stopped)
    assert "orphaned server" in r.stderr
    assert not _processes(run_id)
