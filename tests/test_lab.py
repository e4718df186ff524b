"""Tests of the lab: the stand-in launch_server and nvidia-smi, world loading and the GLM-5 world.

Server tests start real processes (own process group, log file, free port) and speak real HTTP;
every process is killed at teardown, also when a test fails. HYPOLOOP_LAB_TIME_SCALE is small so
a 400 s simulated start-up takes under a second.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clirun import lab_case, run_cli

from lab.rules import plan_launch
from lab.world import WorldError, load_world
from tools.ports import local_free_port

REPO = Path(__file__).resolve().parents[1]
GLM = "glm5-nvfp4-sm120"
SCALE = "0.002"
BASELINE = [
    "--model-path",
    "zai-org/GLM-5-NVFP4",
    "--tp-size",
    "8",
    "--trust-remote-code",
    "--quantization",
    "modelopt_fp4",
]


def _env(world: str | Path = GLM, scale: str = SCALE, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_LAB_")}
    env.update(HYPOLOOP_LAB_WORLD=str(world), HYPOLOOP_LAB_TIME_SCALE=scale, PYTHONPATH=str(REPO), **extra)
    return env


def _free_port() -> int:
    """A port for a lab server, below the kernel's ephemeral range (tools/ports.py: a port bind(0) picks may
    be taken as a client's source port before the server binds it)."""
    return local_free_port(_HANDED_OUT)


_HANDED_OUT: set[int] = set()


def _run(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env if env is not None else _env(),
        cwd=REPO,
    )


class Server:
    """A stand-in server process with its log file and port."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: dict[str, Any], timeout: float = 10.0) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.url(path),
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())

    def health(self) -> int | None:
        """HTTP status of /health, or None if the connection is refused."""
        try:
            return self.get("/health", timeout=2.0)[0]
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError):
                return None
            raise
        except ConnectionRefusedError:
            return None

    def wait_ready(self, timeout: float = 15.0) -> None:
        _wait(lambda: self.health() == 200 or self.proc.poll() is not None, timeout)
        assert self.proc.poll() is None, f"server exited early:\n{self.text()[-3000:]}"


def _wait(pred: Callable[[], bool], timeout: float, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start stand-in servers; all of them are killed (whole process group) at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def _start(*args: str, env: dict[str, str] | None = None, port: int | None = None) -> Server:
        port = port or _free_port()
        log = tmp_path / f"server-{len(procs)}.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lab.launch_server", *args, "--port", str(port)],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env if env is not None else _env(),
                cwd=REPO,
                start_new_session=True,
            )
        procs.append(proc)
        return Server(proc, port, log)

    try:
        yield _start
    finally:
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait(timeout=10)


# ------------------------------------------------------------------------------ command line


def test_unknown_flag_exits_2_with_argparse_error() -> None:
    res = _run("lab.launch_server", *BASELINE, "--no-such-flag", "1")
    assert res.returncode == 2
    assert "error: unrecognized arguments: --no-such-flag 1" in res.stderr
    assert res.stderr.startswith("usage: launch_server.py")


def test_invalid_choice_exits_2() -> None:
    res = _run("lab.launch_server", *BASELINE, "--kv-cache-dtype", "fp16")
    assert res.returncode == 2
    assert "argument --kv-cache-dtype: invalid choice: 'fp16'" in res.stderr


def test_ambiguous_prefix_exits_2() -> None:
    res = _run("lab.launch_server", *BASELINE, "--disable-cuda")
    assert res.returncode == 2
    assert "ambiguous option: --disable-cuda could match" in res.stderr


def test_help_lists_sparse_attention_flags_and_hides_truth() -> None:
    res = _run("lab.launch_server", "--help")
    assert res.returncode == 0
    out = res.stdout
    for flag in (
        "--nsa-prefill-backend",
        "--nsa-decode-backend",
        "--fp8-gemm-backend",
        "--kv-cache-dtype",
        "--tp-size",
        "--disable-shared-experts-fusion",
        "--json-model-override-args",
    ):
        assert flag in out
    assert "{flashmla_sparse,flashmla_kv,flashmla_auto,fa3,tilelang,aiter,trtllm}" in out
    assert "{auto,fp8_e5m2,fp8_e4m3,bf16,bfloat16,fp4_e2m1}" in out
    truth = load_world(GLM).truth
    assert truth is not None and truth.root_cause not in out and truth.component not in out


def test_version_prints_imitated_release() -> None:
    res = _run("lab.launch_server", "--version")
    assert res.returncode == 0
    assert res.stdout.strip() == "0.5.9"


def test_missing_or_unknown_world_is_one_line_error() -> None:
    env = _env()
    del env["HYPOLOOP_LAB_WORLD"]
    res = _run("lab.launch_server", "--version", env=env)
    assert res.returncode == 1
    assert len(res.stderr.strip().splitlines()) == 1 and "HYPOLOOP_LAB_WORLD" in res.stderr
    res = _run("lab.launch_server", "--version", env=_env(world="no-such-world"))
    assert res.returncode == 1
    assert len(res.stderr.strip().splitlines()) == 1 and "no-such-world" in res.stderr


# ------------------------------------------------------------------------------ the GLM-5 world


def test_baseline_reports_fp8_kv_then_crashes_on_first_chat_request(start: Callable[..., Server]) -> None:
    server = start(*BASELINE)
    assert server.health() is None  # nothing listens while loading
    server.wait_ready()
    info = json.loads(server.get("/get_server_info")[1])
    assert info["kv_cache_dtype"] == "fp8_e4m3"
    assert info["attention_backend"] == "nsa"
    assert (info["nsa_prefill_backend"], info["nsa_decode_backend"]) == ("flashmla_auto", "flashmla_kv")
    assert info["fp8_gemm_runner_backend"] == "deep_gemm"
    assert info["version"] == "0.5.9" and info["max_total_num_tokens"] > 0
    assert server.get("/health_generate")[0] == 200  # prefill-only: stays green
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        server.post(
            "/v1/chat/completions",
            {
                "model": "zai-org/GLM-5-NVFP4",
                "max_tokens": 32,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
            },
        )
    assert server.proc.wait(timeout=5) != 0
    log = server.text()
    assert "Setting KV cache dtype to fp8_e4m3" in log
    assert "Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, decode=flashmla_kv." in log
    assert "DeepGemm is enabled but the scale_fmt of checkpoint is not ue8m0" in log
    assert "The server is fired up and ready to roll!" in log
    assert "probability tensor contains either `inf`, `nan` or element < 0" in log
    assert "RuntimeError: CUDA error: device-side assert triggered" in log
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    # a crash after the first request: the running-phase SIGQUIT handler (tokenizer_manager.py) speaks
    assert log.rstrip().endswith("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    world = load_world(GLM)
    assert world.truth is not None
    for secret in (world.truth.root_cause, world.truth.component, *(f.id for f in world.faults)):
        assert secret not in log and secret not in json.dumps(info)


def test_bf16_kv_cache_serves_paris_and_stops_on_sigterm(start: Callable[..., Server]) -> None:
    # prefix spellings as a user would type them: --model, --tp, --trust-remote, --kv-cache
    server = start(
        "--model",
        "zai-org/GLM-5-NVFP4",
        "--tp",
        "8",
        "--trust-remote",
        "--quantization",
        "modelopt_fp4",
        "--kv-cache",
        "bf16",
    )
    server.wait_ready()
    info = json.loads(server.get("/get_server_info")[1])
    assert info["tp_size"] == 8 and info["quantization"] == "modelopt_fp4"
    assert info["kv_cache_dtype"] == "bf16"
    assert (info["nsa_prefill_backend"], info["nsa_decode_backend"]) == ("tilelang", "tilelang")
    status, chat = server.post(
        "/v1/chat/completions",
        {
            "model": "zai-org/GLM-5-NVFP4",
            "max_tokens": 32,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
        },
    )
    assert status == 200
    assert "Paris" in chat["choices"][0]["message"]["content"]
    assert chat["choices"][0]["finish_reason"] == "stop"
    assert chat["object"] == "chat.completion" and chat["id"]
    assert chat["usage"]["completion_tokens"] > 0
    status, gen = server.post(
        "/generate", {"text": "What is 17 + 25?", "sampling_params": {"max_new_tokens": 64, "temperature": 0}}
    )
    assert status == 200 and "42" in gen["text"]
    assert gen["meta_info"]["completion_tokens"] > 0 and "e2e_latency" in gen["meta_info"]
    models = json.loads(server.get("/v1/models")[1])
    assert models["data"][0]["id"] == "zai-org/GLM-5-NVFP4"
    model_info = json.loads(server.get("/get_model_info")[1])
    assert model_info["architectures"] == ["GlmMoeDsaForCausalLM"]
    assert server.proc.poll() is None
    log = server.text()
    assert "Set NSA backends for bf16 KV Cache: prefill=tilelang, decode=tilelang." in log
    assert "DeepGemm is enabled but the scale_fmt of checkpoint is not ue8m0" in log  # still deep_gemm
    assert "probability tensor" not in log and "Scheduler hit an exception" not in log
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 3.0  # promptly: well inside the 5 s wait
    assert "Finished server process" in server.text()


def test_triton_attention_fails_at_load_with_bare_assertion(start: Callable[..., Server]) -> None:
    server = start(*BASELINE, "--attention-backend", "triton")
    # the scheduler died: the launcher's SIGQUIT handler kills its own process tree (SIGKILL, 137)
    assert server.proc.wait(timeout=15) == -signal.SIGKILL
    log = server.text()
    lines = log.splitlines()
    assert "AssertionError" in lines  # bare, no message
    assert "memory_pool.py" in log and "Received sigquit from a child process" in log
    assert "Uvicorn running" not in log and "Load weight end." in log


def test_sigterm_during_load_exits_promptly(start: Callable[..., Server]) -> None:
    server = start(*BASELINE, env=_env(scale="1.0"))
    _wait(lambda: "Init torch distributed begin." in server.text(), 10)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout=5)
    assert time.monotonic() - t0 < 3.0  # promptly: well inside the 5 s wait
    assert code == -signal.SIGTERM
    assert server.health() is None


@pytest.mark.parametrize(
    ("extra", "fatal"),
    [
        ([], "crash_at_first_decode"),
        (["--attention-backend", "flashinfer"], "crash_at_first_decode"),
        (["--nsa-decode-backend", "flashmla_sparse"], "crash_at_first_decode"),
        (["--fp8-gemm-backend", "cutlass"], "crash_at_first_decode"),
        (["--disable-cuda-graph"], "crash_at_first_decode"),
        (["--attention-backend", "triton"], "load_error"),
        (["--kv-cache-dtype", "fp8_e5m2"], "launch_error"),
        (["--enable-nan-detection"], "wrong_output"),
        (["--kv-cache-dtype", "bf16"], None),
        (["--kv-cache-dtype", "bfloat16"], None),
    ],
)
def test_glm_world_red_herrings_and_fix(extra: list[str], fatal: str | None) -> None:
    plan = plan_launch(load_world(GLM), [*BASELINE, *extra])
    assert (plan.fatal.effect if plan.fatal else None) == fatal
    warned = any(f.id == "deepgemm-scale-fmt" for f in plan.faults)
    assert warned == ("cutlass" not in extra)


def test_truth_fixes_of_glm_world_serve_correctly() -> None:
    world = load_world(GLM)
    assert world.truth is not None and world.truth.component == "attention.dsa_decode"
    for fix in world.truth.fixes:
        assert fix["kind"] == "flag"
        assert plan_launch(world, [*BASELINE, fix["name"], fix["value"]]).fatal is None


def test_glm_case_file_follows_the_case_format() -> None:
    import tomllib

    case = tomllib.loads((REPO / "lab/worlds" / GLM / "case.toml").read_text())
    assert case["host"]["env"]["HYPOLOOP_LAB_WORLD"] == GLM
    assert case["launcher"]["argv"] == ["{python}", "-m", "lab.launch_server"]
    assert case["baseline"]["flags"] == {
        "--tp-size": 8,
        "--trust-remote-code": True,
        "--quantization": "modelopt_fp4",
    }
    findings = (REPO / "lab/worlds" / GLM / case["knowledge"][0]).read_text()
    assert "Kimi-K2-Thinking-NVFP4" in findings and '"kv_cache_dtype": "bf16"' in findings
    assert "--kv-cache-dtype bf16" not in findings


# ------------------------------------------------------------------------------ nvidia-smi


def test_nvidia_smi_csv_matches_world_hardware() -> None:
    res = _run("lab.nvidia_smi", "--query-gpu=name,compute_cap,memory.total,driver_version", "--format=csv")
    assert res.returncode == 0
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "name, compute_cap, memory.total [MiB], driver_version"
    assert len(lines) == 9
    assert lines[1] == "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887 MiB, 580.95.05"
    res = _run("lab.nvidia_smi", "--query-gpu=memory.total,compute_cap", "--format=csv,noheader,nounits")
    assert res.stdout.strip().splitlines() == ["97887, 12.0"] * 8
    res = _run("lab.nvidia_smi", "--query-gpu=bogus", "--format=csv")
    assert res.returncode == 2 and 'Field "bogus" is not a valid field to query.' in res.stdout
    res = _run("lab.nvidia_smi")
    assert res.returncode == 0 and "RTX PRO 6000" in res.stdout and "CUDA Version: 13.0" in res.stdout
    res = _run("lab.nvidia_smi", "-L")
    assert res.stdout.startswith("GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-")


# ------------------------------------------------------------------------------ other worlds


TINY_WORLD = """
name = "tiny"
[sglang]
version = "0.5.9"
[hardware]
gpu_name = "NVIDIA GeForce RTX 5090"
gpu_count = 1
compute_capability = "12.0"
memory_mib = 32607
[model]
path = "Qwen/Qwen3-8B"
architecture = "Qwen3ForCausalLM"
checkpoint_shards = 5
[timing]
init_s = 5.0
load_s = 20.0
capture_s = 10.0
warmup_s = 300.0
[memory]
weights_gb_total = 15.3
[[fault]]
id = "broken-kernel"
effect = "wrong_output"
when = { "env.TINY_BROKEN" = "1", mem_fraction_static = { gt = 0.8 } }
lines = ["Detected errors during sampling! NaN in the logits."]
[[fault]]
id = "note"
effect = "warning"
at = "ready"
when = { "hw.cc_major" = { ge = 12 }, tp_size = [1, 2] }
lines = [{ text = "Hello from {hw.gpu_name}, kv={kv_cache_dtype}, mem={mem.kv_gb:.1f} GB.", source = "server" }]
"""


def test_a_new_world_needs_no_code_and_conditions_see_env(
    tmp_path: Path, start: Callable[..., Server]
) -> None:
    world = tmp_path / "tiny" / "world.toml"
    world.parent.mkdir()
    world.write_text(TINY_WORLD)
    server = start("--model-path", "Qwen/Qwen3-8B", env=_env(world=world, TINY_BROKEN="1"))
    _wait(lambda: server.health() is not None or server.proc.poll() is not None, 10)
    assert server.health() == 503  # warming up (300 s simulated)
    server.wait_ready()
    status, chat = server.post(
        "/v1/chat/completions",
        {
            "model": "m",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
        },
    )
    assert status == 200 and chat["choices"][0]["message"]["content"] == "!" * 8
    assert chat["choices"][0]["finish_reason"] == "length"
    log = server.text()
    assert "Hello from NVIDIA GeForce RTX 5090, kv=auto, mem=" in log
    assert "Detected errors during sampling! NaN in the logits." in log


def test_too_many_gpus_fails_like_sglang(tmp_path: Path, start: Callable[..., Server]) -> None:
    world = tmp_path / "world.toml"
    world.write_text(TINY_WORLD)
    server = start("--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", env=_env(world=world))
    assert server.proc.wait(timeout=10) == -signal.SIGKILL
    assert "CUDA error: invalid device ordinal" in server.text()


def test_world_errors_name_file_and_field(tmp_path: Path) -> None:
    """A world file's mistake is one line naming the file and the field, array items counted from 1 as in
    every other error hypoloop prints (``probes #2.kind``): the first [[fault]] is ``fault #1``."""
    bad = tmp_path / "world.toml"
    bad.write_text(
        TINY_WORLD.replace("mem_fraction_static = { gt = 0.8 }", "mem_fraction_static = { above = 0.8 }")
    )
    with pytest.raises(
        WorldError, match=r"world\.toml: fault #1\.when\.mem_fraction_static: unknown operator 'above'"
    ):
        load_world(str(bad))
    bad.write_text(TINY_WORLD.replace("{kv_cache_dtype}", "{kv_cache_dtyp}"))
    with pytest.raises(WorldError, match=r"fault #2\.lines #1: template: unknown key 'kv_cache_dtyp'"):
        load_world(str(bad))
    res = _run("lab.launch_server", "--version", env=_env(world=bad))  # the lab's own command, as a host runs it
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "fault #2.lines #1: template: unknown key 'kv_cache_dtyp'" in res.stderr and "Traceback" not in res.stderr
    case = lab_case(tmp_path / "case.toml", bad, model="Qwen/Qwen3-8B", baseline="flags = {}", budget="experiments = 2")
    ran = run_cli(tmp_path, "run", str(case), "--auto")  # hypoloop passes the lab's line on, as one line
    assert ran.returncode == 2 and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert "fault #2.lines #1" in ran.stderr, ran.stderr


FAULTS_WORLD = """
name = "faults"
[sglang]
version = "0.5.9"
[hardware]
gpu_name = "NVIDIA H200"
gpu_count = 8
compute_capability = "9.0"
memory_mib = 143771
[model]
path = "org/Big-FP8"
architecture = "DeepseekV3ForCausalLM"
checkpoint_shards = 10
[timing]
init_s = 5.0
load_s = 20.0
capture_s = 10.0
warmup_s = 2.0
[memory]
weights_gb_total = 980.0
weights_gb_replicated = 0.3
[[fault]]
id = "p2p-hang"
effect = "hang"
at = "init"
when = { "env.LAB_TEST" = "hang", "env.NCCL_P2P_DISABLE" = { ne = "1" } }
lines = ["NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"]
[[fault]]
id = "ptxas"
effect = "capture_error"
progress = 0.0
when = { "env.LAB_TEST" = "capture", "env.TRITON_PTXAS_PATH" = { is_set = false } }
lines = ["Capture cuda graph failed: ptxas fatal   : Value 'sm_120' is not defined for option 'gpu-name'"]
"""


@pytest.mark.parametrize(
    ("args", "env", "outcome", "needle"),
    [
        (
            ["--mem-fraction-static", "0.88"],
            {},
            -signal.SIGKILL,  # the scheduler died: the launcher kills its process tree
            "Not enough memory. Please try to increase --mem-fraction-static",
        ),
        (["--mem-fraction-static", "0.92"], {}, "ready", "KV Cache is allocated. #tokens: "),
        ([], {"LAB_TEST": "capture"}, -signal.SIGKILL, "Capture cuda graph failed: ptxas fatal"),
        (["--disable-cuda-graph"], {"LAB_TEST": "capture"}, "ready", "max_total_num_tokens="),
        (
            [],
            {"LAB_TEST": "capture", "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"},
            "ready",
            "Capture cuda graph end.",
        ),
        ([], {"LAB_TEST": "hang"}, "hang", "via P2P/CUMEM"),
        ([], {"LAB_TEST": "hang", "NCCL_P2P_DISABLE": "1"}, "ready", "fired up"),
    ],
)
def test_field_case_shapes_are_expressible_as_data(
    tmp_path: Path,
    start: Callable[..., Server],
    args: list[str],
    env: dict[str, str],
    outcome: Any,
    needle: str,
) -> None:
    world = tmp_path / "world.toml"
    world.write_text(FAULTS_WORLD)
    server = start("--model-path", "org/Big-FP8", "--tp-size", "8", *args, env=_env(world=world, **env))
    if outcome == "ready":
        server.wait_ready()
    elif outcome == "hang":
        _wait(lambda: needle in server.text(), 10)
        size = len(server.text())
        time.sleep(0.3)  # 150 s simulated: nothing more is written and the process stays up
        assert len(server.text()) == size and server.proc.poll() is None
        assert server.health() is None
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=5)
        assert time.monotonic() - t0 < 3.0  # promptly: well inside the 5 s wait
    else:
        assert server.proc.wait(timeout=10) == outcome
        assert "Uvicorn running" not in server.text()
    assert needle in server.text()
