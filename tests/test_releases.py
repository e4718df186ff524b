"""Several SGLang releases: 0.5.23 logs read by `hypoloop analyze`, flag roles resolved per host, the
lab imitating each release (version files from the real --help; texts from the release's sources)."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
from pathlib import Path

import pytest
from clirun import run_cli

from agent.planning.catalog import load_catalog, load_roles
from tools.flags import catalog_from_server_args, parse_help

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
LOGS = DATA / "logs_0.5.23"


def _analyze(tmp_path: Path, log: Path) -> dict:
    r = run_cli(tmp_path, "analyze", str(log), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_analyze_no_kv_room_in_0_5_23_words(tmp_path: Path) -> None:
    out = _analyze(tmp_path, LOGS / "no_kv_room.log")
    assert out["stage"] == "load_failed"  # a ValueError after loading began is no argument error
    ids = {s["id"] for s in out["signatures"]}
    assert {"not_enough_memory_kv", "server_args_mem_fraction_static", "kill_process_tree"} <= ids
    assert out["facts"]["mem_fraction_static"] == "0.45"  # from the dict-form server args
    top = out["hypotheses"][0]
    assert top["component"] == "memory.static_fraction"
    first = out["first_experiment"]
    assert first["name"] == "--mem-fraction-static" and float(first["after"]) > 0.48  # above SGLang's minimum


def test_analyze_capture_oom_in_0_5_23_words_names_the_decode_flag(tmp_path: Path) -> None:
    out = _analyze(tmp_path, LOGS / "capture_oom.log")
    assert out["stage"] == "load_failed"
    ids = {s["id"] for s in out["signatures"]}
    assert {"cuda_graph_capture_begin", "cuda_graph_capture_failed", "cuda_out_of_memory"} <= ids
    assert out["facts"]["capture_batches_done"] == "2"  # tqdm redraws split on \r
    assert out["hypotheses"][0]["component"] == "cuda_graph.capture_memory"
    assert out["first_experiment"]["name"] == "--cuda-graph-max-bs-decode"


def test_the_same_failure_in_a_0_5_9_log_names_the_0_5_9_flag(tmp_path: Path) -> None:
    text = (LOGS / "capture_oom.log").read_text().splitlines(keepends=True)
    text[0] = (
        "[2026-11-30 11:00:01] server_args=ServerArgs(model_path='meta-llama/Llama-3.3-70B-Instruct', "
        "tp_size=2, mem_fraction_static=0.93, kv_cache_dtype='auto', cuda_graph_max_bs=256, "
        "disable_cuda_graph=False, attention_backend=None)\n"
    )
    log = tmp_path / "capture_oom_0.5.9.log"
    log.write_text("".join(text))
    out = _analyze(tmp_path, log)
    assert out["facts"]["cuda_graph_max_bs"] == "256"
    # SGLang's own list puts the static fraction first; the batch-size change is there in 0.5.9's spelling
    changes = [out["first_experiment"]["name"], *(a["change"].split(":", 1)[0] for a in out["alternatives"])]
    assert changes[0] in ("--cuda-graph-max-bs", "--mem-fraction-static"), changes
    assert "--cuda-graph-max-bs" in changes and "--cuda-graph-max-bs-decode" not in changes, changes


def test_server_args_line_gives_a_partial_catalog_of_either_form() -> None:
    new = catalog_from_server_args((LOGS / "capture_oom.log").read_text())
    assert new is not None and new.has("--cuda-graph-max-bs-decode") and not new.lookup("--cuda-graph-max-bs")
    assert new.resolve("--disable-decode-cuda-graph").value_type == "bool"
    old = catalog_from_server_args("x server_args=ServerArgs(tp_size=8, cuda_graph_max_bs=None, model_path='m')")
    assert old is not None and old.resolve("--tp-size").value_type == "int" and old.lookup("--cuda-graph-max-bs")
    assert catalog_from_server_args("no such line") is None


@pytest.mark.parametrize(
    ("help_file", "expected"),
    [
        (
            "help_sglang_0.5.9_full.txt",
            {
                "cuda_graph.decode_max_bs": "--cuda-graph-max-bs",
                "cuda_graph.disable_decode": "--disable-cuda-graph",
                "attention.sparse_decode_backend": "--nsa-decode-backend",
            },
        ),
        (
            "help_sglang_0.5.23.txt",
            {
                "cuda_graph.decode_max_bs": "--cuda-graph-max-bs-decode",
                "cuda_graph.disable_decode": "--disable-decode-cuda-graph",  # --disable-cuda-graph is deprecated
                "attention.sparse_decode_backend": "--dsa-decode-backend",
            },
        ),
    ],
)
def test_flag_roles_resolve_to_each_hosts_spelling(help_file: str, expected: dict[str, str]) -> None:
    catalog = parse_help((DATA / help_file).read_text())
    roles = load_roles()
    for role, spelling in expected.items():
        spec = catalog.resolve_role(roles[role])
        assert spec is not None and spec.name == spelling, role


def test_catalog_interventions_name_roles_not_a_release_spelling() -> None:
    """A fix naming the old --cuda-graph-max-bs would be an ambiguous prefix on 0.5.23."""
    for entry in load_catalog():
        for iv in entry.intervention:
            assert "--cuda-graph-max-bs" not in iv.names or iv.role == "cuda_graph.decode_max_bs", entry.id
            assert "--nsa-decode-backend" not in iv.names or iv.role is not None, entry.id


# ------------------------------------------------------------------ the lab imitating each release

from test_lab import BASELINE, _env, start  # noqa: E402,F401 - the lab fixtures

R1 = "r1-distill-graph-oom"
R1_ARGS = ["--model-path", "RedHatAI/DeepSeek-R1-Distill-Qwen-32B-FP8-dynamic", "--tp-size", "2",
           "--mem-fraction-static", "0.9", "--reasoning-parser", "deepseek-r1"]  # fmt: skip

TINY_0523 = """
name = "tiny-0523"
[sglang]
version = "0.5.23"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 81559
[model]
path = "org/Tiny"
architecture = "LlamaForCausalLM"
checkpoint_shards = 4
[timing]
init_s = 1.0
load_s = 4.0
kv_pool_s = 1.0
capture_s = 2.0
warmup_s = 1.0
[memory]
weights_gb_total = 10.0
graph_gb = 0.5
"""


def _tiny(tmp_path: Path, faults: str = "") -> Path:
    path = tmp_path / "world.toml"
    path.write_text(TINY_0523 + faults)
    return path


def test_0_5_23_world_logs_in_0_5_23_words(start) -> None:  # noqa: F811
    server = start(*R1_ARGS, "--cuda-graph-max-bs-decode", "16", "--api-key", "k-123456789", env=_env(R1))
    server.wait_ready(30)
    log = server.text()
    assert "server_args={'model_path': 'RedHatAI/DeepSeek-R1-Distill-Qwen-32B-FP8-dynamic'" in log  # dict form
    assert "'cuda_graph_max_bs_decode': 16" in log
    assert "KV Cache is allocated. dtype: torch.bfloat16, #tokens: " in log
    assert "Capture target decode CUDA graph begin. backend=full" in log
    assert "Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 12, 16], elapsed=" in log
    assert "Load weight end. elapsed=" in log and "Init torch distributed" not in log
    # the warm-up sent the API key (its /generate returned 200 before the ready line)
    assert log.index('"POST /generate HTTP/1.1" 200') < log.index("The server is fired up and ready to roll!")
    with pytest.raises(urllib.error.HTTPError) as err:
        server.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert err.value.code == 401


def test_0_5_23_flags_renamed_split_deprecated_and_gone() -> None:
    from test_lab import _run

    env = _env(R1)
    res = _run("lab.launch_server", *R1_ARGS, "--cuda-graph-max-bs", "16", env=env)
    assert res.returncode == 2 and "ambiguous option: --cuda-graph-max-bs could match" in res.stderr
    res = _run("lab.launch_server", *R1_ARGS, "--enable-nan-detection", env=env)
    assert res.returncode == 2 and "unrecognized arguments: --enable-nan-detection" in res.stderr
    res = _run("lab.launch_server", *R1_ARGS, "--nsa-decode-backend", "tilelang", env=env)
    assert res.returncode == 2
    help_text = _run("lab.launch_server", "--help", env=env).stdout
    assert "--enable-tf32-matmul, --no-enable-tf32-matmul" in help_text


def test_deprecated_disable_cuda_graph_warns_and_still_skips_capture(start) -> None:  # noqa: F811
    server = start(*R1_ARGS, "--disable-cuda-graph", env=_env(R1))
    server.wait_ready(30)
    log = server.text()
    assert (
        "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead." in log
    )
    assert "CUDA graph begin" not in log and "'disable_decode_cuda_graph': True" in log


def test_warm_up_decodes_greedily_so_a_decode_crash_stops_the_start_up(tmp_path: Path, start) -> None:  # noqa: F811
    world = _tiny(tmp_path, """
[[fault]]
id = "decode-crash"
effect = "crash_at_first_decode"
lines = ['''Scheduler hit an exception: Traceback (most recent call last):
RuntimeError: CUDA error: an illegal memory access was encountered''']
""")
    server = start("--model-path", "org/Tiny", env=_env(world))
    assert server.proc.wait(timeout=30) == -signal.SIGKILL  # the process tree kill
    log = server.text()
    assert '"GET /model_info HTTP/1.1" 200' in log  # the warm-up polls /model_info first
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log
    assert "kill_process_tree called: parent_pid=" in log  # 0.5.23 logs it
    assert "fired up and ready" not in log


def test_nan_logits_garbage_when_greedy_assert_when_sampled(start) -> None:  # noqa: F811
    server = start(*BASELINE, env=_env())  # GLM-5 world: FP8 KV cache on SM120 gives NaN logits
    server.wait_ready(30)  # the warm-up's 8 greedy tokens decoded garbage, but it returned 200
    status, body = server.post("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    assert status == 200 and body["text"] == "!" * 8
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        server.post("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 8, "temperature": 0.7}})
    assert server.proc.wait(timeout=10) == -signal.SIGKILL
    log = server.text()
    assert "probability tensor contains either `inf`, `nan` or element < 0" in log
    assert "SIGQUIT received. signum=None, frame=None." in log


def test_scheduler_dead_keeps_http_up_with_health_503_and_requests_hanging(tmp_path: Path, start) -> None:  # noqa: F811
    world = _tiny(tmp_path, """
[[fault]]
id = "oom-killed"
effect = "scheduler_dead"
at = "first_decode"
""")
    server = start("--model-path", "org/Tiny", "--skip-server-warmup", env=_env(world))
    server.wait_ready(30)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        server.post("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 8}}, timeout=1.5)
    assert server.health() == 503 and server.proc.poll() is None  # HTTP is up, the scheduler is not


def test_tqdm_bars_share_one_physical_line_and_log_level_warning_hides_info(tmp_path: Path, start) -> None:  # noqa: F811
    world = _tiny(tmp_path)
    server = start("--model-path", "org/Tiny", "--log-level", "warning", env=_env(world))
    server.wait_ready(30)
    raw = server.log.read_bytes()
    bar_lines = [ln for ln in raw.split(b"\n") if b"Loading safetensors checkpoint shards" in ln]
    assert len(bar_lines) == 1 and bar_lines[0].count(b"\r") == 5  # 0/4 .. 4/4 redrawn in place
    text = raw.decode()
    assert "Load weight begin" not in text and "fired up and ready" not in text  # INFO is hidden


def test_readiness_without_the_ready_line_comes_from_health(tmp_path: Path) -> None:
    from tools.host import LocalHost
    from tools.server import ServerSession, SessionOptions
    from tools.signatures import SignatureMatcher, load_signatures

    host = LocalHost()
    port = host.free_port()
    world = _tiny(tmp_path)
    argv = [sys.executable, "-m", "lab.launch_server", "--model-path", "org/Tiny", "--log-level", "warning",
            "--port", str(port)]  # fmt: skip
    env = {"HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": "0.002", "PYTHONPATH": str(REPO)}
    with ServerSession(host, argv, env=env, log_path=str(tmp_path / "s.log"), port=port,
                       matcher=SignatureMatcher(load_signatures()),
                       options=SessionOptions(ready_timeout_s=30, health_poll_s=0.2)) as s:
        result = s.wait_ready()
        assert result.status == "ready" and s.ready_source == "health" and result.health_status == 200


def test_fingerprint_of_an_amd_host_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case asks nvidia-smi; the host has none, but an amd-smi on its PATH answers."""
    from tools.fingerprint import fingerprint
    from tools.host import LocalHost

    bindir = tmp_path / "bin"
    bindir.mkdir()
    amd = bindir / "amd-smi"
    amd.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m lab.amd_smi "$@"\n')
    amd.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("HYPOLOOP_LAB_WORLD", "mi300x-no-kv-room")
    fp = fingerprint(LocalHost(), gpu_query_argv=["nvidia-smi"], version_argv=None,
                     check_env_argv=[sys.executable, "-m", "lab.check_env"])
    assert (fp.gpu_vendor, fp.gpu_name, fp.gpu_count, fp.gpu_arch, fp.memory_total_mib) == (
        "amd", "AMD Instinct MI300X", 8, "gfx942", 196592)
    assert any("command not found: nvidia-smi" in n for n in fp.notes)
    assert fp.check_env["ROCM available"] == "True" and fp.compute_capability == "9.4"  # torch on ROCm
    assert fp.sglang_version == "0.5.23"


@pytest.mark.parametrize(
    ("world", "fix"),
    [("mi300x-no-kv-room", "--mem-fraction-static"), ("r1-distill-graph-oom", "--cuda-graph-max-bs-decode")],
)
def test_agent_isolates_the_0_5_23_worlds_in_three_launches(tmp_path: Path, world: str, fix: str) -> None:
    r = run_cli(tmp_path, "run", f"lab:{world}", "--auto", "--json", "--transcript-dir", str(tmp_path / "tr"))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "isolated" and result["launches"] == 3
    assert result["root_cause"]["fix"]["name"] == fix
    written = [*Path(tmp_path / "tr").glob("*.jsonl"), *(tmp_path / "home" / "runs").glob("*/*.json")]
    assert written and not any("lab-only-key-7f3a9c51" in p.read_text() for p in written)  # the --api-key
    events = [json.loads(line) for line in Path(result["transcript"]).read_text().splitlines()]
    fp = next(e["data"] for e in events if e["type"] == "host.fingerprint")
    assert fp["gpu_vendor"] == ("amd" if world.startswith("mi300x") else "nvidia") and fp["check_env"]


# ------------------------------------------------------------------ launchers through containers


def _fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine can run on this machine (docker is a client only), so `docker` on PATH is
    tests/fakes/fake_docker.py: it runs the command as a real process in its own session, outside the
    client's process group, which is the property the stop mechanism has to cope with."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    docker = bindir / "docker"
    docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests" / "fakes" / "fake_docker.py"}" "$@"\n')
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(tmp_path / "docker-state"))


def _lab_pids(world: Path) -> list[int]:
    """Live lab servers of this test's world (their environment names it)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
            cmd = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        args = cmd.split(b"\0")
        is_server = b"-m" in args[:3] and args[args.index(b"-m") + 1] == b"lab.launch_server"
        if is_server and str(world).encode() in env and state != "Z":
            pids.append(int(proc.name))
    return pids


@pytest.mark.parametrize("mode", ["exec", "run"])
def test_a_server_started_through_docker_is_stopped_inside_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    from tools.host import LocalHost, expand_argv
    from tools.server import ServerSession, SessionOptions
    from tools.signatures import SignatureMatcher, load_signatures

    _fake_docker(tmp_path, monkeypatch)
    world = _tiny(tmp_path)
    monkeypatch.setenv("HYPOLOOP_LAB_WORLD", str(world))
    monkeypatch.setenv("HYPOLOOP_LAB_TIME_SCALE", "0.002")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    host = LocalHost()
    port = host.free_port()
    launcher = ["docker", "exec", "-i", "gpu-box"] if mode == "exec" else ["docker", "run", "--gpus", "all", "img"]
    server = [sys.executable, "-m", "lab.launch_server", "--model-path", "org/Tiny", "--port", str(port)]

    try:
        # Without the container mechanism, stopping the client leaves the server running (the bug).
        naive = host.spawn(expand_argv([*launcher, *server], host), log_path=str(tmp_path / "naive.log"), env={})
        _wait_for(lambda: bool(_lab_pids(world)), 20)
        assert host.terminate(naive, grace_s=1.0)  # the client's process group is gone...
        leftover = _lab_pids(world)
        assert leftover  # ...but the server in the "container" is not
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
        _wait_for(lambda: not _lab_pids(world), 10)

        with ServerSession(host, [*launcher, *server], log_path=str(tmp_path / "s.log"), port=port,
                           matcher=SignatureMatcher(load_signatures()),
                           options=SessionOptions(ready_timeout_s=30, stop_grace_s=2.0)) as s:
            assert s.container is not None and s.container.mode == mode
            assert s.wait_ready().status == "ready"
            assert _lab_pids(world)
            assert s.stop() is True
        assert not _lab_pids(world)  # nothing of the server is left to hold the GPUs
    finally:
        for pid in _lab_pids(world):  # whatever a failed assertion left behind
            os.kill(pid, signal.SIGKILL)


def _wait_for(pred, timeout: float) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_warm_up_request_that_never_returns_is_a_warmup_error(tmp_path: Path, start) -> None:  # noqa: F811
    """SGLang gives the warm-up request 600 s (SGLANG_WARMUP_TIMEOUT unset), then logs the error and
    kills its tree (entrypoints/http_server.py _execute_server_warmup)."""
    world = _tiny(tmp_path, """
[[fault]]
id = "decode-stuck"
effect = "hang"
at = "first_decode"
""")
    server = start("--model-path", "org/Tiny", env=_env(world))  # 600 s x 0.002 = 1.2 s of wall time
    assert server.proc.wait(timeout=30) == -signal.SIGKILL
    log = server.text()
    assert "Initialization failed. warmup error: Traceback (most recent call last):" in log
    assert "Read timed out. (read timeout=600)" in log and "fired up and ready" not in log
    from tools.signatures import load_signatures, scan_text

    matches, _ = scan_text(log, load_signatures())
    assert "warmup_failed" in {m.signature_id for m in matches}


def test_a_world_can_name_its_version_file_by_path(tmp_path: Path) -> None:
    from lab.world import WorldError, load_world

    (tmp_path / "releases").mkdir()
    (tmp_path / "releases" / "mine.toml").write_text((REPO / "lab" / "versions" / "0.5.23.toml").read_text())
    world = tmp_path / "world.toml"
    world.write_text(TINY_0523.replace('version = "0.5.23"', 'version = "releases/mine.toml"'))
    loaded = load_world(str(world))
    assert loaded.version.version == "0.5.23" and loaded.version.release.server_args_format == "dict"
    world.write_text(TINY_0523.replace('version = "0.5.23"', 'version = "0.5.99"'))
    with pytest.raises(WorldError, match=r"SGLang 0\.5\.99 not found.*known: 0\.5\.9, 0\.5\.17, 0\.5\.23"):
        load_world(str(world))
