"""ServerSession against a real fake server process: ready, fatal, exit, stall, timeout, stop."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.host import LocalHost, terminate_all
from tools.probes import DEFAULT_PROBES, Probe, run_probe
from tools.server import (
    ServerSession,
    SessionOptions,
    WatchEvent,
    render_command,
)
from tools.signatures import SignatureMatcher, load_signatures

ROOT = Path(__file__).resolve().parent.parent
FAKE_SERVER = str(Path(__file__).parent / "fakes" / "fake_server.py")
SIGS = load_signatures()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.fixture
def host() -> Iterator[LocalHost]:
    h = LocalHost()
    yield h
    h.close()
    assert terminate_all() == [], "a test left a process running"


def _session(
    host: LocalHost, tmp_path: Path, args: list[str], *, events: list[WatchEvent] | None = None, **kw: object
) -> ServerSession:
    port = host.free_port()
    argv = render_command(["{python}", FAKE_SERVER], "fake-model", {}, host="127.0.0.1", port=port)
    argv[2:2] = args  # keep --model-path/--host/--port from render_command
    opts: dict[str, object] = {"ready_timeout_s": 30.0}
    opts.update(kw)
    return ServerSession(
        host,
        argv,
        env={},
        log_path=str(tmp_path / "server.log"),
        port=port,
        matcher=SignatureMatcher(SIGS),
        on_event=events.append if events is not None else None,
        options=SessionOptions(**opts),  # type: ignore[arg-type]
    )


def test_render_command_orders_flags_and_handles_booleans() -> None:
    argv = render_command(
        ["{python}", "-m", "sglang.launch_server"],
        "zai-org/GLM-5-NVFP4",
        {
            "--tp-size": 8,
            "--trust-remote-code": True,
            "--disable-cuda-graph": False,
            "--kv-cache-dtype": "bf16",
            "--json-model-override-args": '{"a": 1}',
            "--port": 1234,
            "--cuda-graph-max-bs": None,
        },
        host="127.0.0.1",
        port=30001,
    )
    assert argv == [
        "{python}",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "zai-org/GLM-5-NVFP4",
        "--tp-size",
        "8",
        "--trust-remote-code",
        "--kv-cache-dtype",
        "bf16",
        "--json-model-override-args",
        '{"a": 1}',
        "--host",
        "127.0.0.1",
        "--port",
        "30001",
    ]
    with pytest.raises(ValueError):
        render_command(["x"], "m", {"tp-size": 8}, host="h", port=1)


def test_ready_is_detected_from_the_log_without_fixed_waits(host: LocalHost, tmp_path: Path) -> None:
    events: list[WatchEvent] = []
    lines = [
        "Load weight begin. avail mem=94.00 GB",
        "Load weight end. avail mem=40.00 GB, mem usage=54.00 GB.",
    ]
    with _session(
        host, tmp_path, [*sum((["--line", x] for x in lines), []), "--then", "serve"], events=events
    ) as s:
        start = time.monotonic()
        result = s.wait_ready()
        elapsed = time.monotonic() - start
        assert result.status == "ready", [x.text for x in result.lines]
        assert result.health_status == 200
        assert result.base_url == f"http://127.0.0.1:{s.port}"
        assert result.t_ready_s is not None and result.t_ready_s < 10
        assert elapsed < 10
        ids = [m.signature_id for m in result.matches]
        assert ids[:2] == ["load_weight_begin", "load_weight_end"]
        assert "uvicorn_running" in ids and ids[-1] == "server_ready"
        assert result.facts["avail_mem_gb"] == "40.00"
        assert [e.kind for e in events if e.kind != "line"] == ["ready"]
        assert len(result.detection_delays_s) == len(result.lines)
        assert all(0 <= d < 2.0 for d in result.detection_delays_s)
        handle = s.handle
        assert handle is not None
    assert not _alive(handle.pid)
    assert s.result().status == "ready"  # our own stop() does not turn a ready launch into a crash


def test_session_reacts_to_the_ready_line_within_a_fraction_of_a_second(
    host: LocalHost, tmp_path: Path
) -> None:
    trigger = tmp_path / "go"
    args = [
        "--trigger-file",
        str(trigger),
        "--trigger-line",
        "The server is fired up and ready to roll!",
        "--then",
        "hang",
    ]
    with _session(host, tmp_path, args) as s:
        s.start()
        written: list[float] = []

        def fire() -> None:
            time.sleep(0.5)  # the session is polling by now; the reaction is measured from here
            written.append(time.monotonic())
            trigger.touch()

        t = threading.Thread(target=fire)
        t.start()
        result = s.wait_ready()
        t.join()
        assert result.status == "ready"
        ready_line = next(x for x in result.lines if "ready to roll" in x.text)
        reaction = ready_line.seen_monotonic - written[0]
        print(f"server session reaction time (file touched -> line seen): {reaction * 1000:.1f} ms")
        assert 0 <= reaction < 0.5
        assert result.detection_delays_s[-1] < 0.5


def test_fatal_line_returns_promptly_even_if_the_process_lingers(host: LocalHost, tmp_path: Path) -> None:
    events: list[WatchEvent] = []
    args = [
        "--line",
        "Load weight begin. avail mem=94.00 GB",
        "--line",
        "[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "--line",
        "AssertionError",
        "--then",
        "hang",
    ]
    with _session(host, tmp_path, args, events=events, ready_timeout_s=60.0) as s:
        start = time.monotonic()
        result = s.wait_ready()
        elapsed = time.monotonic() - start
        assert result.status == "crashed"
        assert elapsed < 15  # the bounded traceback grace (2 s), not the 60 s timeout
        ids = {m.signature_id for m in result.matches}
        assert {"scheduler_exception", "assertion_error_bare"} <= ids
        assert [e.kind for e in events if e.kind != "line"][0] == "fatal"
        assert result.exit_code is None  # still running: stop() must end it
        assert s.handle is not None and host.is_alive(s.handle)
        assert s.stop(grace_s=2.0) is True
        assert not host.is_alive(s.handle)


def test_crash_and_exit_is_reported_with_exit_code_and_all_lines(host: LocalHost, tmp_path: Path) -> None:
    with _session(host, tmp_path, ["--line", "Load weight begin. avail mem=1.00 GB", "--then", "crash"]) as s:
        result = s.wait_ready()
    assert result.status == "crashed"
    assert result.lines[-1].text.endswith("It usually means the child failed.")
    assert {"device_side_assert", "sigquit_from_child"} <= {m.signature_id for m in result.matches}


def test_exit_without_fatal_line_is_exited_and_keeps_the_unterminated_tail(
    host: LocalHost, tmp_path: Path
) -> None:
    events: list[WatchEvent] = []
    args = ["--line", "starting", "--then", "exit", "--exit-code", "3", "--tail", "last words"]
    with _session(host, tmp_path, args, events=events) as s:
        result = s.wait_ready()
    assert result.status == "exited"
    assert result.exit_code == 3
    assert [x.text for x in result.lines] == ["starting", "last words"]
    assert [e.kind for e in events if e.kind != "line"] == ["exited"]


def test_argparse_error_is_a_crash_at_launch(host: LocalHost, tmp_path: Path) -> None:
    with _session(host, tmp_path, ["--no-such-flag"]) as s:
        result = s.wait_ready()
    assert result.status == "crashed"
    assert result.exit_code == 2
    assert "argparse_unrecognized_arguments" in {m.signature_id for m in result.matches}


def test_stall_is_detected_when_the_log_stops_growing(host: LocalHost, tmp_path: Path) -> None:
    events: list[WatchEvent] = []
    args = ["--line", "Init torch distributed begin.", "--then", "hang"]
    with _session(host, tmp_path, args, events=events, stall_timeout_s=0.6, ready_timeout_s=60.0) as s:
        start = time.monotonic()
        result = s.wait_ready()
        elapsed = time.monotonic() - start
        assert result.status == "stalled"
        assert 0.5 <= elapsed < 5.0
        assert result.lines[-1].text == "Init torch distributed begin."
        assert events[-1].kind == "stalled"
        assert s.handle is not None and host.is_alive(s.handle)
        pid = s.handle.pid
    assert not _alive(pid)


def test_ready_timeout_is_reported(host: LocalHost, tmp_path: Path) -> None:
    with _session(host, tmp_path, ["--then", "hang"], ready_timeout_s=0.7) as s:
        result = s.wait_ready()
    assert result.status == "timeout"
    assert result.t_end_s is not None and result.t_end_s >= 0.7


def test_launch_failure_when_the_command_does_not_exist(host: LocalHost, tmp_path: Path) -> None:
    s = ServerSession(
        host,
        ["/no/such/launcher", "--port", "1"],
        env={},
        log_path=str(tmp_path / "x.log"),
        port=1,
        matcher=SignatureMatcher(SIGS),
        options=SessionOptions(ready_timeout_s=5.0),
    )
    with s:
        result = s.wait_ready()
    assert result.status == "launch_failed"
    assert result.handle is None
    assert result.error is not None and "/no/such/launcher" in result.error
    assert s.stop() is True


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_context_manager_stops_the_group_on_errors(
    host: LocalHost, tmp_path: Path, exc: type[BaseException]
) -> None:
    pid_file = tmp_path / "child.pid"
    args = ["--child", "stubborn", "--child-pid-file", str(pid_file), "--ignore-sigterm", "--then", "serve"]
    s = _session(host, tmp_path, args, stop_grace_s=0.5)
    with pytest.raises(exc):
        with s:
            assert s.wait_ready().status == "ready"
            raise exc()
    assert s.handle is not None
    child = int(pid_file.read_text())
    assert not _alive(s.handle.pid) and not _alive(child)


def test_probe_that_crashes_the_server_is_seen_by_watch(host: LocalHost, tmp_path: Path) -> None:
    with _session(host, tmp_path, ["--then", "serve", "--on-request", "crash"]) as s:
        assert s.wait_ready().status == "ready"
        start = time.monotonic()
        results = [run_probe(s.base_url or "", DEFAULT_PROBES[0], model="fake-model", timeout_s=20.0)]
        lines = s.watch(2.0)  # as the execute node does after its probes
        assert time.monotonic() - start < 10.0
        assert results[0].status == "connection_error"
        texts = [x.text for x in lines]
        assert any("Scheduler hit an exception" in t for t in texts)
        assert any("Received sigquit" in t for t in texts)
        final = s.result()
        assert final.status == "crashed" and final.exit_code == 1
        assert final.t_end_s is not None and final.t_ready_s is not None and final.t_end_s > final.t_ready_s


def test_watch_keeps_tailing_and_returns_after_the_given_time(host: LocalHost, tmp_path: Path) -> None:
    with _session(host, tmp_path, ["--then", "serve"]) as s:
        assert s.wait_ready().status == "ready"
        probe = Probe(id="p", kind="generate", prompt="The capital of France is", expect="paris")
        results = [run_probe(s.base_url or "", probe, model="m")]
        lines = s.watch(0.5)
        assert results[0].ok
        assert any("POST /generate" in x.text for x in lines)
        start = time.monotonic()
        assert s.watch(0.3) == []
        assert 0.25 <= time.monotonic() - start < 5.0


LAB = ROOT / "lab" / "launch_server.py"
GLM5_WORLD = ROOT / "lab" / "worlds" / "glm5-nvfp4-sm120" / "world.toml"


@pytest.mark.skipif(
    not (LAB.exists() and GLM5_WORLD.exists()), reason="lab glm5-nvfp4-sm120 world not built yet"
)
def test_lab_glm5_world_reaches_ready_then_crashes_at_first_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "HYPOLOOP_LAB_TIME_SCALE" not in os.environ:
        monkeypatch.setenv("HYPOLOOP_LAB_TIME_SCALE", "0.001")
    h = LocalHost(env={"HYPOLOOP_LAB_WORLD": "glm5-nvfp4-sm120"})
    port = h.free_port()
    argv = render_command(
        ["{python}", "-m", "lab.launch_server"],
        "zai-org/GLM-5-NVFP4",
        {"--tp-size": 8, "--trust-remote-code": True, "--quantization": "modelopt_fp4"},
        host="127.0.0.1",
        port=port,
    )
    try:
        with ServerSession(
            h,
            argv,
            log_path=str(tmp_path / "lab.log"),
            port=port,
            matcher=SignatureMatcher(SIGS),
            options=SessionOptions(ready_timeout_s=120.0),
        ) as s:
            result = s.wait_ready()
            assert result.status == "ready", [x.text for x in result.lines[-20:]]
            assert result.facts.get("kv_cache_dtype") == "fp8_e4m3"
            probes = [
                run_probe(s.base_url or "", probe, model="zai-org/GLM-5-NVFP4", timeout_s=30.0)
                for probe in DEFAULT_PROBES
            ]
            s.watch(2.0)
            # greedy probes decode the NaN logits to garbage; the sampled one trips the sampler's assert
            assert [p.status for p in probes[:2]] == ["degenerate", "degenerate"]
            assert probes[2].status in ("connection_error", "http_error")
            assert s.fatal_seen
            assert s.stop() is True
    finally:
        h.close()
        assert terminate_all() == []


def test_no_fake_server_left_running() -> None:
    me = os.getpid()
    leftovers = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            stat = (p / "stat").read_text()
        except OSError:
            continue
        if any(b"fake_server.py" in c for c in cmd) and int(stat[stat.rfind(")") + 2 :].split()[1]) == me:
            leftovers.append(p.name)
    assert leftovers == []


#: What real SGLang 0.5.23 writes when it is stopped with SIGTERM while serving (seen on the real engine,
#: issue 22): its scheduler child dies of the signal and the parent reads that as a child failure.
SGLANG_0523_SHUTDOWN = [
    "[2026-12-01 10:00:00] Subprocess scheduler_0 (pid=4242) crashed with exit code -15. "
    "Triggering SIGQUIT for cleanup...",
    "[2026-12-01 10:00:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
]


def test_lines_written_after_the_stop_request_are_shutdown_not_evidence(
    host: LocalHost, tmp_path: Path
) -> None:
    args = ["--then", "serve"]
    for line in SGLANG_0523_SHUTDOWN:
        args += ["--on-sigterm-line", line]
    events: list[WatchEvent] = []
    with _session(host, tmp_path, args, events=events) as s:
        assert s.wait_ready().status == "ready"
        assert run_probe(s.base_url or "", DEFAULT_PROBES[1], model="fake-model").ok
        s.watch(0.2)
        before = len(s.lines)
        assert s.stop()
    final = s.result()
    log = (tmp_path / "server.log").read_text()
    assert "Triggering SIGQUIT" in log and "It usually means one child failed" in log  # it was written
    assert final.status == "ready"
    assert [m for m in final.matches if m.kind in ("fatal", "error")] == []
    assert final.stop_line == before and final.stop_offset is not None
    assert len(final.lines) == before  # nothing after the stop request joined the evidence
    assert [x.text for x in final.shutdown_lines][:2] == SGLANG_0523_SHUTDOWN
    assert not any(e.kind == "fatal" for e in events)
    assert log[final.stop_offset:].startswith(SGLANG_0523_SHUTDOWN[0])


def test_a_crash_before_the_stop_request_stays_evidence(host: LocalHost, tmp_path: Path) -> None:
    with _session(host, tmp_path, ["--then", "serve", "--on-request", "crash"]) as s:
        assert s.wait_ready().status == "ready"
        run_probe(s.base_url or "", DEFAULT_PROBES[1], model="fake-model", timeout_s=20.0)
        s.watch(2.0)
        s.stop()
    final = s.result()
    assert final.status == "crashed"
    assert any(m.kind == "fatal" for m in final.matches)
    assert final.shutdown_lines == []
