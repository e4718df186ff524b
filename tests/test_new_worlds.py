"""The lab worlds modelled on public reports beyond the field cases (issue 10): each reproduces its
symptom at the case's baseline, each fix (each link of a chain, in order) moves the failure as [truth]
says, the no-fix worlds fail whatever one change is made, and the control serves. Most checks plan a
launch without starting anything; the shapes that need a running server (load, the warm-up request,
garbage text, per-rank lines) start the lab server and talk to it through ``tools``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.domain.case import load_case
from lab.chance import is_live
from lab.memory import default_cuda_graph_max_bs, plan_memory
from lab.rules import parse_command_line, plan_launch
from lab.world import World, WorldError, load_world
from tools.host import LocalHost
from tools.probes import Probe, run_probe

REPO = Path(__file__).resolve().parents[1]
NEW_WORLDS = [
    "coder-lite-h100x2",
    "gemma3-l4",
    "glm46-fp8-h200x8",
    "gpt-oss-h100x2",
    "llama8b-a100",
    "qwen3-14b-h100",
    "qwen3-30b-a3b-h100",
    "qwen3-next-b200x4",
    "qwen35-h200x8",
]
Config = tuple[dict[str, Any], dict[str, str]]


def _baseline(name: str) -> tuple[World, Config]:
    case = load_case(f"lab:{name}")
    return load_world(name), (dict(case.baseline.flags), dict(case.baseline.env))


def _apply(config: Config, fix: dict[str, Any]) -> Config:
    """A truth fix applied to (flags, env); ``value = false`` removes the flag or variable."""
    flags, env = dict(config[0]), dict(config[1])
    target = flags if fix["kind"] == "flag" else env
    if fix["value"] is False:
        target.pop(fix["name"], None)
    else:
        target[fix["name"]] = fix["value"] if fix["value"] is True else str(fix["value"])
    return flags, env


def _argv(world: World, flags: dict[str, Any]) -> list[str]:
    argv = ["--model-path", world.model.path]
    for name, value in flags.items():
        argv += [name] if value is True else [name, str(value)]
    return argv


def outcome(world: World, config: Config) -> str | None:
    """The first fatal fault's id (any probability), a memory failure, or None (it serves)."""
    argv = _argv(world, config[0])
    plan = plan_launch(world, argv, config[1])
    if plan.fatal is not None:
        return plan.fatal.id
    args, user = parse_command_line(world.version, argv)
    return plan_memory(world, plan.effective, default_cuda_graph_max_bs(world, args, user, config[1])).failure


def test_new_worlds_cite_a_public_report_and_load_with_their_cases() -> None:
    for name in NEW_WORLDS:
        world = load_world(name)
        case = load_case(f"lab:{name}")
        text = world.path.read_text()
        assert "https://github.com/sgl-project/sglang/" in text, name
        assert case.host.env["HYPOLOOP_LAB_WORLD"] == str(world.path)  # {case_dir} resolved
        assert world.truth is not None and world.truth.component


def test_world_shapes_the_issue_asks_for_are_all_present() -> None:
    truths = {name: load_world(name).truth for name in NEW_WORLDS}
    assert sorted(len(t.chain) for t in truths.values() if t and t.chain) == [2, 3]
    not_isolated = [t for t in truths.values() if t and t.expect == "not_isolated"]
    assert {t.package for t in not_isolated} == {"sgl_kernel", "transformers"}
    assert [n for n, t in truths.items() if t and t.expect == "not_reproduced"] == ["llama8b-a100"]
    assert any(f.probability < 1 for f in load_world("glm46-fp8-h200x8").faults)
    assert load_case("lab:glm46-fp8-h200x8").reproduce.intermittent
    assert load_case("lab:qwen3-14b-h100").reproduce.concurrency == 16
    assert any(f.text and not f.lines for f in load_world("gemma3-l4").faults)  # garbage, no NaN line


@pytest.mark.parametrize("name", ["gpt-oss-h100x2", "gemma3-l4", "glm46-fp8-h200x8"])  # load: below
def test_each_single_fix_alone_removes_the_fault(name: str) -> None:
    world, base = _baseline(name)
    assert world.truth is not None and world.truth.fixes
    fault_ids = {f.id for f in world.faults}
    plan = plan_launch(world, _argv(world, base[0]), base[1])
    assert {f.id for f in plan.faults} & fault_ids  # the baseline's configuration triggers a fault
    for fix in world.truth.fixes:
        fixed = _apply(base, fix)
        plan = plan_launch(world, _argv(world, fixed[0]), fixed[1])
        assert not plan.faults and outcome(world, fixed) is None, fix


def test_an_explicit_backend_flag_is_the_cause_and_other_choices_work() -> None:
    world, base = _baseline("gpt-oss-h100x2")
    assert outcome(world, base) == "attention-backend-without-sinks"
    fault = world.faults[0]
    assert "but got the following backends" in fault.lines[0].text
    for choice in ("fa3", "triton", "fa4"):
        assert outcome(world, _apply(base, {"kind": "flag", "name": "--attention-backend", "value": choice})) is None
    trtllm = _apply(base, {"kind": "flag", "name": "--attention-backend", "value": "trtllm_mha"})
    assert outcome(world, trtllm) == "trtllm-mha-needs-sm100"  # a Blackwell-only choice fails differently
    for choice in ("flashinfer", "torch_native", "flex_attention"):
        got = outcome(world, _apply(base, {"kind": "flag", "name": "--attention-backend", "value": choice}))
        assert got == "attention-backend-without-sinks"


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-h100", "qwen3-next-b200x4"])
def test_a_chain_moves_one_blocker_at_a_time_and_needs_every_link(name: str) -> None:
    world, base = _baseline(name)
    assert world.truth is not None
    chain = world.truth.chain
    expected = [f.id for f in world.faults if f.effect != "load_error" or f.at != "weights"][: len(chain)]
    assert outcome(world, base) == expected[0]
    for alternative in (0, -1):  # the first and the last way of passing each link
        config = base
        for i, link in enumerate(chain):
            config = _apply(config, link[alternative])
            assert outcome(world, config) == (expected[i + 1] if i + 1 < len(chain) else None), link
    for skipped in range(len(chain)):  # leaving out any one link leaves a failure
        config = base
        for i, link in enumerate(chain):
            if i != skipped:
                config = _apply(config, link[0])
        assert outcome(world, config) is not None, skipped


def test_no_flag_change_fixes_the_not_isolated_worlds() -> None:
    for name in ("coder-lite-h100x2", "qwen35-h200x8"):
        world, base = _baseline(name)
        assert world.truth is not None and world.truth.expect == "not_isolated" and not world.truth.fixes
        fault = world.faults[0].id
        assert outcome(world, base) == fault
        changes = [
            {"kind": "flag", "name": "--attention-backend", "value": "triton"},
            {"kind": "flag", "name": "--trust-remote-code", "value": False},
            {"kind": "flag", "name": "--disable-cuda-graph", "value": True},
            {"kind": "flag", "name": "--tp-size", "value": False},
            {"kind": "flag", "name": "--moe-runner-backend", "value": "triton"},
            {"kind": "env", "name": "SGL_ENABLE_JIT_DEEPGEMM", "value": "0"},
        ]
        for change in changes:
            assert outcome(world, _apply(base, change)) == fault, (name, change)
        assert world.truth.package and world.truth.package in world.faults[0].lines[0].text


def test_the_control_serves_its_reported_command() -> None:
    world, base = _baseline("llama8b-a100")
    assert not world.faults and outcome(world, base) is None
    assert world.truth is not None and world.truth.expect == "not_reproduced" and not world.truth.fixes


def test_truth_and_fault_fields_are_validated(tmp_path: Path) -> None:
    src = (REPO / "lab" / "worlds" / "gemma3-l4" / "world.toml").read_text()
    cases = [
        (src.replace('effect = "wrong_output"', 'effect = "load_error"'), r"fault #1\.text"),
        (src + "\n", None),
        (src.replace("\n[truth]\n", '\n[truth]\nexpect = "maybe"\n'), "truth.expect"),
        (src.replace("\n[truth]\n", "\n[truth]\nchain = [[]]\n"), r"truth\.chain #1"),
    ]
    for i, (text, error) in enumerate(cases):
        path = tmp_path / f"w{i}" / "world.toml"
        path.parent.mkdir()
        path.write_text(text)
        if error is None:
            load_world(str(path))
        else:
            with pytest.raises(WorldError, match=error):
                load_world(str(path))


# ----------------------------------------------------------------------------- real lab launches


def _start(world: str, flags: dict[str, Any], env: dict[str, str], log: Path) -> tuple[LocalHost, Any, int]:
    host = LocalHost(
        env={"HYPOLOOP_LAB_WORLD": str(load_world(world).path), "HYPOLOOP_LAB_TIME_SCALE": "0.001"}
    )
    port = host.free_port()
    argv = _argv(load_world(world), flags) + ["--port", str(port)]
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    handle = host.spawn(
        [sys.executable, "-m", "lab.launch_server", *argv],
        log_path=str(log),
        env={**base, "PYTHONPATH": str(REPO), **env},
    )
    return host, handle, port


def _wait_for(host: LocalHost, handle: Any, log: Path, needles: tuple[str, ...], timeout: float = 30) -> str:
    """The log once one of `needles` is in it, or once the process has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if any(n in text for n in needles) or not host.is_alive(handle):
            return log.read_text(errors="replace") if log.exists() else ""
        time.sleep(0.05)
    raise AssertionError(f"none of {needles} in the log after {timeout} s:\n{log.read_text()[-2000:]}")


READY = ("fired up and ready to roll",)
CAPITAL = Probe(id="capital", kind="generate", prompt="The capital of France is", expect="Paris")


@pytest.mark.parametrize(
    ("flags", "single_ok", "burst_ok"),
    [
        ({}, True, False),
        ({"--hicache-io-backend": "direct"}, True, True),
        ({"--decode-attention-backend": "flashinfer"}, True, True),
    ],
)
def test_hicache_world_fails_only_under_concurrent_load(
    tmp_path: Path, flags: dict[str, str], single_ok: bool, burst_ok: bool
) -> None:
    _, (base, env) = _baseline("qwen3-14b-h100")
    host, handle, port = _start("qwen3-14b-h100", {**base, **flags}, env, tmp_path / "server.log")
    try:
        text = _wait_for(host, handle, tmp_path / "server.log", READY)
        assert "hicache_io_backend=" in text and "attention_backend='fa3'" in text
        url = f"http://127.0.0.1:{port}"
        assert run_probe(url, CAPITAL, model="m").ok is single_ok
        burst = run_probe(url, CAPITAL.model_copy(update={"concurrency": 8}), model="m", timeout_s=20)
        assert burst.ok is burst_ok
        if not burst_ok:
            log = _wait_for(host, handle, tmp_path / "server.log", ("Received sigquit",))
            assert "hiradix_cache.py" in log and "illegal memory access" in log
    finally:
        host.terminate(handle, grace_s=1)


def test_warmup_request_fault_kills_the_server_before_it_is_ready(tmp_path: Path) -> None:
    world, base = _baseline("qwen3-next-b200x4")
    assert world.truth is not None
    flags, env = base
    for link in world.truth.chain[:2]:
        flags, env = _apply((flags, env), link[0])
    host, handle, port = _start("qwen3-next-b200x4", flags, env, tmp_path / "proxy.log")
    try:
        text = _wait_for(host, handle, tmp_path / "proxy.log", ("Initialization failed",))
        deadline = time.monotonic() + 10
        while host.is_alive(handle) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not host.is_alive(handle)
    finally:
        host.terminate(handle, grace_s=1)
    text = (tmp_path / "proxy.log").read_text()
    assert "Uvicorn running on" in text and "ready to roll" not in text
    assert "AssertionError: res=<Response [502]>, res.text=''" in text
    assert '"{res=}, {res.text=}"' in text  # literal braces of SGLang's f-string survive the template
    # the same configuration with no_proxy for the loopback serves
    flags, env = _apply((flags, env), world.truth.chain[2][1])
    host, handle, port = _start("qwen3-next-b200x4", flags, env, tmp_path / "ok.log")
    try:
        _wait_for(host, handle, tmp_path / "ok.log", READY)
        assert run_probe(f"http://127.0.0.1:{port}", CAPITAL, model="m").ok
    finally:
        host.terminate(handle, grace_s=1)


def test_garbage_world_answers_with_arbitrary_text_and_logs_no_nan(tmp_path: Path) -> None:
    _, (base, env) = _baseline("gemma3-l4")
    host, handle, port = _start("gemma3-l4", base, env, tmp_path / "server.log")
    try:
        _wait_for(host, handle, tmp_path / "server.log", READY)
        result = run_probe(f"http://127.0.0.1:{port}", CAPITAL, model="m")
        assert not result.ok and "<pad>" in (result.text or "") and "Paris" not in (result.text or "")
        assert len(set((result.text or "").split())) > 1  # not a single repeated token
    finally:
        host.terminate(handle, grace_s=1)
    text = (tmp_path / "server.log").read_text()
    assert "Casting torch.bfloat16 to torch.float16." in text and "dtype=torch.float16" in text
    assert "probability tensor contains" not in text and "NaN" not in text and "nan_in" not in text


def test_per_rank_lines_differ_one_rank_raises(tmp_path: Path) -> None:
    world, (base, env) = _baseline("glm46-fp8-h200x8")
    fault = world.faults[0]
    seed = next(s for s in (f"s{i}" for i in range(100)) if is_live(fault, f"{s}:0"))
    lab = {"HYPOLOOP_LAB_SEED": seed, "HYPOLOOP_LAB_STATE": str(tmp_path / "state")}
    host, handle, port = _start("glm46-fp8-h200x8", base, {**env, **lab}, tmp_path / "server.log")
    try:
        _wait_for(host, handle, tmp_path / "server.log", READY)
        assert not run_probe(f"http://127.0.0.1:{port}", CAPITAL, model="m", timeout_s=20).ok
        text = _wait_for(host, handle, tmp_path / "server.log", ("Received sigquit",))
    finally:
        host.terminate(handle, grace_s=1)
    raising = {line.split("]")[0].split()[-1] for line in text.splitlines() if "Scheduler hit an exception" in line}
    assert raising == {"TP6"}
    assert "eagle_worker.py" in text and "TP7] Init torch distributed ends" in text


def test_a_world_directory_moved_anywhere_still_finds_its_world(tmp_path: Path) -> None:
    """{case_dir} in the case's HYPOLOOP_LAB_WORLD: a copied world directory names its own world.toml,
    so the bench can run a world that is not under lab/worlds (python -m bench --worlds DIR)."""
    import shutil

    from bench.worlds import discover

    folder = tmp_path / "elsewhere" / "gemma3-l4"
    shutil.copytree(REPO / "lab" / "worlds" / "gemma3-l4", folder)
    case = load_case(str(folder / "case.toml"))
    assert case.host.env["HYPOLOOP_LAB_WORLD"] == str(folder / "world.toml")
    (bench_world,) = discover([str(folder)])
    assert bench_world.world.path == folder / "world.toml" and bench_world.case_path == folder / "case.toml"
