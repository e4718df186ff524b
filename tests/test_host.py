"""LocalHost: commands, detached process groups, incremental reads, verified termination; fingerprint."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.fingerprint import fingerprint, parse_gpu_csv
from tools.host import CommandTimeout, Host, HostError, LocalHost, expand_argv, terminate_all

FAKES = Path(__file__).parent / "fakes"
FAKE_SERVER = str(FAKES / "fake_server.py")
FAKE_SMI = str(FAKES / "fake_nvidia_smi.py")


def _alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def _wait_for(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def host() -> Iterator[LocalHost]:
    h = LocalHost()
    yield h
    h.close()
    assert terminate_all() == []


def test_local_host_satisfies_protocol(host: LocalHost) -> None:
    assert isinstance(host, Host)
    assert host.name == "local"
    assert host.python == sys.executable


def test_python_placeholder_expands_to_sys_executable(host: LocalHost) -> None:
    assert expand_argv(["{python}", "-m", "x", "a{python}b"], host) == [
        sys.executable,
        "-m",
        "x",
        f"a{sys.executable}b",
    ]
    res = host.run(["{python}", "-c", "import sys; print(sys.executable)"])
    assert res.stdout.strip() == sys.executable


def test_run_captures_stdout_stderr_and_returncode(host: LocalHost) -> None:
    res = host.run(["{python}", "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert res.returncode == 3
    assert res.stdout == "out\n"
    assert res.stderr == "err\n"
    assert res.duration_s > 0


def test_run_command_not_found_raises_one_line_host_error(host: LocalHost) -> None:
    with pytest.raises(HostError) as err:
        host.run(["definitely-not-a-command-xyz", "--help"])
    assert "definitely-not-a-command-xyz" in str(err.value)
    assert "\n" not in str(err.value)


def test_spawn_command_not_found_raises_host_error(host: LocalHost, tmp_path: Path) -> None:
    with pytest.raises(HostError, match="command not found: /no/such/binary"):
        host.spawn(["/no/such/binary"], log_path=str(tmp_path / "x.log"))


def test_run_timeout_kills_the_whole_process_group(host: LocalHost, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(600)\n"
    )
    start = time.monotonic()
    with pytest.raises(CommandTimeout) as err:
        host.run(["{python}", "-c", code], timeout=1.0)
    assert time.monotonic() - start < 8.0
    assert "timed out" in str(err.value)
    assert err.value.result.returncode == -9
    child = int(pid_file.read_text())
    assert _wait_for(lambda: not _alive(child), timeout=5.0), "grandchild survived the timeout"


def test_host_env_is_merged_and_process_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HYPOLOOP_LAB_TIME_SCALE", raising=False)
    h = LocalHost(env={"HYPOLOOP_LAB_TIME_SCALE": "0.01", "HYPOLOOP_TEST_VAR": "from-case"})
    assert h.time_scale == 0.01
    res = h.run(["{python}", "-c", "import os; print(os.environ['HYPOLOOP_TEST_VAR'])"])
    assert res.stdout.strip() == "from-case"
    res = h.run(
        ["{python}", "-c", "import os; print(os.environ['HYPOLOOP_TEST_VAR'])"],
        env={"HYPOLOOP_TEST_VAR": "call"},
    )
    assert res.stdout.strip() == "call"

    monkeypatch.setenv("HYPOLOOP_LAB_TIME_SCALE", "0.5")
    assert LocalHost(env={"HYPOLOOP_LAB_TIME_SCALE": "0.01"}).time_scale == 0.5
    monkeypatch.delenv("HYPOLOOP_LAB_TIME_SCALE")
    assert LocalHost().time_scale == 1.0
    with pytest.raises(HostError, match="HYPOLOOP_LAB_TIME_SCALE"):
        LocalHost(env={"HYPOLOOP_LAB_TIME_SCALE": "fast"})


def test_spawn_sends_stdout_and_stderr_to_log_and_runs_in_own_group(host: LocalHost, tmp_path: Path) -> None:
    log = tmp_path / "sub" / "server.log"
    log.parent.mkdir()
    log.write_text("old content that must be truncated\n")
    code = "import os, sys; print('to-out'); print('to-err', file=sys.stderr); print(os.environ['V'])"
    handle = host.spawn(["{python}", "-c", code], log_path=str(log), env={"V": "merged"})
    assert handle.pgid == handle.pid
    assert _wait_for(lambda: not host.is_alive(handle))
    assert host.exit_code(handle) == 0
    text = log.read_text()
    assert "old content" not in text
    assert "to-out" in text and "to-err" in text and "merged" in text
    assert host.terminate(handle) is True


def test_read_from_reads_by_offset_and_tolerates_missing_file(host: LocalHost, tmp_path: Path) -> None:
    f = tmp_path / "log"
    assert host.read_from(str(f), 0) == b""
    f.write_bytes(b"hello world")
    assert host.read_from(str(f), 6) == b"world"
    assert host.read_from(str(f), 0, max_bytes=5) == b"hello"
    assert host.read_from(str(f), 100) == b""


def test_terminate_sigkills_a_leader_that_ignores_sigterm_and_its_grandchild(
    host: LocalHost, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    handle = host.spawn(
        [
            "{python}",
            FAKE_SERVER,
            "--ignore-sigterm",
            "--child",
            "stubborn",
            "--child-pid-file",
            str(pid_file),
            "--then",
            "hang",
        ],
        log_path=str(tmp_path / "server.log"),
    )
    assert _wait_for(pid_file.exists)
    child = int(pid_file.read_text())
    assert _alive(child) and host.is_alive(handle)
    assert os.getpgid(child) == handle.pgid

    start = time.monotonic()
    assert host.terminate(handle, grace_s=0.5) is True
    assert time.monotonic() - start < 6.0
    assert not _alive(handle.pid)
    assert not _alive(child)
    assert not Path(f"/proc/{handle.pid}").exists(), "leader left as a zombie"
    assert host.exit_code(handle) == -9
    assert host.terminate(handle) is True  # idempotent


def test_terminate_uses_sigterm_first(host: LocalHost, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    handle = host.spawn(["{python}", FAKE_SERVER, "--line", "up", "--then", "hang"], log_path=str(log))
    assert _wait_for(lambda: "up" in log.read_text())
    assert host.terminate(handle, grace_s=5.0) is True
    assert host.exit_code(handle) == 0
    assert "Received SIGTERM" in log.read_text()


def test_terminate_all_stops_every_spawned_group(tmp_path: Path) -> None:
    h = LocalHost()
    handles = [
        h.spawn(["{python}", FAKE_SERVER, "--then", "hang"], log_path=str(tmp_path / f"{i}.log"))
        for i in range(2)
    ]
    stopped = terminate_all(grace_s=1.0)
    assert sorted(stopped) == sorted(x.pid for x in handles)
    assert all(not _alive(x.pid) for x in handles)
    assert terminate_all() == []


def test_a_server_port_is_never_one_a_client_connection_may_take(host: LocalHost) -> None:
    # CI found a launch on hypoloop's own port failing "[Errno 98] address already in use": the port the
    # kernel picked for bind(0) is an ephemeral one, and a client connection of another process took it
    # as its source port before the server bound it. The run then blamed the deployment.
    lo, hi = (int(w) for w in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    picked = [host.free_port() for _ in range(50)]
    assert not [p for p in picked if lo <= p <= hi]
    assert len(set(picked)) == len(picked)  # never handed out twice
    with socket.socket() as held:  # nor one something listens on
        held.bind(("127.0.0.1", picked[0]))
        held.listen()
        assert picked[0] not in {LocalHost().free_port() for _ in range(200)}


def test_free_port_and_workdir(host: LocalHost, tmp_path: Path) -> None:
    port = host.free_port()
    assert 1024 < port < 65536
    assert host.forward_port(port) == port
    h = LocalHost(root=str(tmp_path / "runs"))
    d = h.workdir("run-1")
    assert Path(d).is_dir() and d.endswith("run-1")
    with pytest.raises(HostError):
        h.workdir("../escape")


# --- fingerprint ------------------------------------------------------------------------------------


def test_fingerprint_parses_gpu_rows_and_version(host: LocalHost) -> None:
    fp = fingerprint(
        host,
        gpu_query_argv=["{python}", FAKE_SMI],
        version_argv=["{python}", "-c", "print('some warning'); print(' 0.5.9 ')"],
    )
    assert fp.gpu_name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert fp.gpu_count == 2
    assert fp.compute_capability == "12.0"
    assert fp.memory_total_mib == 97887
    assert fp.driver_version == "580.95.05"
    assert fp.sglang_version == "0.5.9"


def test_a_host_without_a_working_gpu_tool_is_cpu_only_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11: a host without nvidia-smi (CPU only, AMD) is a host; what each tool said is kept."""
    monkeypatch.setenv("FAKE_SMI_MODE", "fail")
    monkeypatch.setenv("PATH", "/nonexistent")  # no amd-smi / rocm-smi either
    h = LocalHost()
    fp = fingerprint(h, gpu_query_argv=["{python}", FAKE_SMI], version_argv=None)
    assert (fp.gpu_vendor, fp.gpu_count, fp.gpu_name) == ("none", 0, None)
    assert any("exited with 9" in n for n in fp.notes) and all("\n" not in n for n in fp.notes)
    monkeypatch.setenv("FAKE_SMI_MODE", "empty")
    fp = fingerprint(h, gpu_query_argv=["{python}", FAKE_SMI], version_argv=None)
    assert fp.gpu_vendor == "none" and any("no GPU" in n for n in fp.notes)
    fp = fingerprint(h, gpu_query_argv=["nvidia-smi-missing"], version_argv=None)
    assert fp.gpu_vendor == "none" and any("command not found: nvidia-smi-missing" in n for n in fp.notes)
    monkeypatch.setenv("FAKE_SMI_MODE", "ok")
    with pytest.raises(HostError, match="version command"):
        fingerprint(
            h, gpu_query_argv=["{python}", FAKE_SMI], version_argv=["{python}", "-c", "raise SystemExit(1)"]
        )


def test_parse_gpu_csv_tolerates_header_units_and_na() -> None:
    rows = parse_gpu_csv(
        "name, compute_cap, memory.total [MiB], driver_version\nNVIDIA H100, [N/A], 81559 MiB, 550.1\n"
    )
    assert rows == [("NVIDIA H100", None, 81559, "550.1")]
    with pytest.raises(HostError):
        parse_gpu_csv("garbage line\n")


def test_port_holder_tells_a_listening_port_from_a_free_one(host: LocalHost) -> None:
    import socket

    from tools.fingerprint import port_holder

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        held = port_holder(host, port, "0.0.0.0")
        assert held is not None and held[0]
        if held[1] is not None:  # ss named it: this very process
            assert f"pid {os.getpid()}" in held[1]
    assert port_holder(host, port) == (False, None)
