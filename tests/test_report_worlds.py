"""Every lab world, in both halves (lab/worlds and lab/worlds-sealed), is consistent with its own truth:
the case's baseline shows the failure (a fault or a memory failure) unless the truth says it does not
reproduce; each truth fix applied alone to the baseline serves; a chain needs every link and serves with
all of them. Pure checks (``plan_launch`` and the memory plan), so a world whose text promises a fix that
its rules do not honour fails here before any planner is measured on it. Faults that fire only under load
or on some launches are counted as present: ``plan_launch`` cannot see a batch size or a draw, so they are
checked by their conditions on the configuration, with a large batch, a request sent after the ready line
(``serving_s``, as every request after the server's warm-up is) and the request lengths and shared prefix
the case's ``[reproduce]`` reports (that prefix is cached on the requests after the first, as the lab's
radix cache counts it: ``_cached``). A fault on the memory model (``mem.*``) sees what the server's memory keys hold when
its phase fires, from the same memory plan (``_memory_seen``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.domain.case import load_case
from lab.memory import MemoryPlan, default_cuda_graph_max_bs, plan_memory
from lab.rules import applies, parse_command_line, resolve
from lab.world import WORLDS_DIR, Fault, World, load_world
from tools.ports import local_free_port

REPO = Path(__file__).resolve().parents[1]
SEALED_DIR = WORLDS_DIR.parent / "worlds-sealed"
FOLDERS = sorted(
    p.parent for d in (WORLDS_DIR, SEALED_DIR) for p in d.glob("*/world.toml") if (p.parent / "case.toml").is_file()
)


def _config(case_path: Path) -> tuple[list[str], dict[str, str]]:
    """The case's baseline as a launch: (flags after --model-path, env)."""
    case = load_case(str(case_path))
    flags: dict[str, Any] = {"--model-path": case.model.path, **case.baseline.flags}
    return _argv(flags), dict(case.baseline.env)


def _argv(flags: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        out += [name] if value is True else [name, str(value)]
    return out


#: A heavy load: load-only faults (``running_requests``) hold when their configuration does.
LOAD = 64
#: Simulated seconds since the ready line: faults on requests after the warm-up (``serving_s > 0``) hold.
SERVING_S = 60.0


def _requests(case_path: Path) -> dict[str, Any]:
    """The request shape the case's ``[reproduce]`` reports (prompt and output lengths in the lab's tokens,
    no radix hit), or a short question: faults on long prompts or outputs are present when the case's
    traffic has them."""
    shape = load_case(str(case_path)).reproduce
    shared = shape.shared_prefix_tokens or 0
    prompt = shape.prompt_tokens or shared + 32
    output = shape.output_tokens or 16
    return {
        "req.prompt_tokens": prompt, "req.output_tokens": output, "req.max_new_tokens": output,
        "req.cached_tokens": shared,
    }


def _cached(requests: dict[str, Any], args: dict[str, Any]) -> int:
    """The cached tokens a request after the first sees, as lab/generation.py counts them: the shared
    prefix, none with the radix cache off, below the prompt's length, in whole pages (``--page-size``)."""
    if args.get("disable_radix_cache"):
        return 0
    cached = min(int(requests.get("req.cached_tokens", 0)), int(requests.get("req.prompt_tokens", 1)) - 1)
    page = max(1, int(args.get("page_size") or 1))
    return max(0, cached - cached % page)
FATAL = (
    "launch_error", "load_error", "capture_error", "hang", "crash_at_first_decode", "wrong_output", "scheduler_dead",
    "signal_death", "degrade_accuracy",
)


def _fails(world: World, argv: list[str], env: dict[str, str], requests: dict[str, Any]) -> bool:
    """Whether a launch shows a failure: a fatal or wrong-output fault whose conditions hold on the
    effective configuration under a heavy load, whatever its chance (see the module docstring), that the
    launch can reach (no capture fault without graphs, no prefill-graph fault without those, no warm-up fault without the warm-up), a memory
    failure, or a command line the release's parser refuses."""
    try:
        args, user = parse_command_line(world.version, argv)
    except SystemExit:  # argparse refused the command line (exit 2): the launch fails at once
        return True
    res, ctx = resolve(world, args, user, env)
    effective = dict(res.args)
    ctx.extra.update(running_requests=LOAD, sampled=True, serving_s=SERVING_S, **requests)
    if requests:
        ctx.extra["req.cached_tokens"] = _cached(requests, effective)
    # SGLang 0.5.23 turns the decode graphs off with --disable-decode-cuda-graph or
    # --cuda-graph-backend-decode disabled as well as the deprecated --disable-cuda-graph; the lab's
    # server and memory plan read only the latter's dest, so the check folds the others into it.
    if effective.get("disable_decode_cuda_graph"):
        effective["disable_cuda_graph"] = True
    plan = plan_memory(world, effective, default_cuda_graph_max_bs(world, args, user, env))
    # The server captures prefill graphs when its release's setting for them is on and graphs are not all off.
    release = world.version.release
    prefill_graphs = release.role(res.args, "prefill_cuda_graph") not in (None, False, "disabled")
    prefill_graphs = prefill_graphs and not res.args.get("disable_cuda_graph")
    for fault in world.faults:
        if fault.effect not in FATAL:
            continue
        ctx.mem = _memory_seen(plan, fault, prefill_graph_first=release.prefill_graph_first)
        if not applies(fault.when, fault.unless, ctx):
            continue
        if fault.at == "capture" and effective.get("disable_cuda_graph"):
            continue
        if fault.at == "piecewise_capture" and not prefill_graphs:
            continue
        if fault.at == "warmup" and effective.get("skip_server_warmup"):
            continue
        return True
    return plan.failure is not None


def _memory_seen(plan: MemoryPlan, fault: Fault, *, prefill_graph_first: bool) -> dict[str, Any]:
    """The server's memory keys (``mem.*``, GB rounded to 0.01 as it stores them) when ``fault`` fires, in
    lab/startup.py's order: none before the weights; free memory before them while they load, after them
    at the KV pool's start, after the pool from its end; the decode graphs' share once they are captured
    (after the prefill graphs when the release captures those first, as 0.5.17+ does)."""
    if fault.at in ("args", "init"):
        return {}
    mem: dict[str, Any] = {
        "total_gb": round(plan.total_gb, 2), "avail_gb": round(plan.avail_begin_gb, 2),
        "weights_gb": round(plan.weights_gb, 2),
    }
    if fault.at == "weights":
        return mem
    if fault.at == "kv_pool" and round(fault.progress) == 0:
        return {**mem, "avail_gb": round(plan.avail_after_load_gb, 2)}
    mem.update(
        avail_gb=round(plan.avail_after_kv_gb, 2), kv_gb=round(plan.kv_gb, 2), max_total_num_tokens=plan.kv_tokens
    )
    if fault.at in ("kv_pool", "capture") or (fault.at == "piecewise_capture" and prefill_graph_first):
        return mem
    if plan.graphs_on:
        mem.update(avail_gb=round(plan.avail_after_kv_gb - plan.graph_gb, 2), graph_gb=round(plan.graph_gb, 2))
    return mem


def _apply(case_path: Path, fixes: list[dict[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """The baseline with the given truth fixes applied (``value = false`` removes the flag or variable)."""
    case = load_case(str(case_path))
    flags: dict[str, Any] = {"--model-path": case.model.path, **case.baseline.flags}
    env = dict(case.baseline.env)
    for fix in fixes:
        target = flags if fix["kind"] == "flag" else env
        if fix.get("value", True) is False:
            target.pop(fix["name"], None)
        else:
            target[fix["name"]] = fix.get("value", True) if fix["kind"] == "flag" else str(fix["value"])
    return _argv(flags), env


@pytest.mark.parametrize("folder", FOLDERS, ids=[f"{p.parent.name}/{p.name}" for p in FOLDERS])
def test_world_is_consistent_with_its_truth(folder: Path) -> None:
    world = load_world(str(folder / "world.toml"))
    truth = world.truth
    assert truth is not None, f"{folder}: no [truth]"
    case_path = folder / "case.toml"
    argv, env = _config(case_path)
    requests = _requests(case_path)
    if truth.expect == "not_reproduced":
        assert not _fails(world, argv, env, requests), f"{folder.name}: the control's baseline fails"
        return
    assert _fails(world, argv, env, requests), f"{folder.name}: the baseline shows no failure"
    for fix in truth.fixes:
        assert not _fails(world, *_apply(case_path, [fix]), requests), f"{folder.name}: fix {fix} alone does not serve"
    if truth.chain:
        firsts = [next(f for f in link if f.get("root", True)) for link in truth.chain]
        assert not _fails(world, *_apply(case_path, firsts), requests), f"{folder.name}: the whole chain does not serve"
        for i in range(len(firsts)):
            partial = firsts[:i] + firsts[i + 1 :]
            assert _fails(world, *_apply(case_path, partial), requests), f"{folder.name}: link {i} is not needed"


#: A world whose one fault reads the memory model: it fires when less than 8 GB is free at its phase.
SLACK_WORLD = """
name = "slack"
[sglang]
version = "0.5.23"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 32768
[model]
path = "Qwen/Qwen3-8B"
architecture = "Qwen3ForCausalLM"
checkpoint_shards = 1
[timing]
init_s = 1.0
load_s = 1.0
kv_pool_s = 1.0
capture_s = 1.0
piecewise_s = 1.0
warmup_s = 1.0
[memory]
weights_gb_total = 4.0
[[fault]]
id = "short-of-slack"
effect = "{effect}"
at = "{at}"
progress = {progress}
when = {{ expr = "mem.avail_gb < 8" }}
lines = ["CUDA error: out of memory"]
"""


#: The prefill graphs are off unless a world's rule or the command line turns them on.
PREFILL_GRAPHS = ["--cuda-graph-backend-prefill", "full"]


def _free_port() -> int:
    """A port for a lab server, below the kernel's ephemeral range (tools/ports.py: a port bind(0) picks may
    be taken as a client's source port before the server binds it)."""
    return local_free_port(_HANDED_OUT)


_HANDED_OUT: set[int] = set()


def _server_fails(world: Path, argv: list[str], tmp_path: Path) -> bool:
    """Whether the lab's server, started for real on `world`, dies before its ready line."""
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_LAB_")}
    env.update(HYPOLOOP_LAB_WORLD=str(world), HYPOLOOP_LAB_TIME_SCALE="0.01", PYTHONPATH=str(REPO))
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.launch_server", *argv, "--port", str(_free_port())],
            stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and "fired up and ready" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.02)
        return proc.poll() is not None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    ("effect", "at", "progress", "flags", "fails"),
    [
        ("signal_death", "kv_pool", 1.0, ["--mem-fraction-static", "0.9"], True),
        ("signal_death", "kv_pool", 1.0, ["--mem-fraction-static", "0.5"], False),
        ("signal_death", "kv_pool", 0.0, ["--mem-fraction-static", "0.9"], False),  # the pool is not allocated yet
        ("signal_death", "capture", 0.0, ["--mem-fraction-static", "0.9"], True),
        ("signal_death", "piecewise_capture", 0.0, ["--mem-fraction-static", "0.9", *PREFILL_GRAPHS], True),
        ("signal_death", "piecewise_capture", 0.0, ["--mem-fraction-static", "0.5", *PREFILL_GRAPHS], False),
        ("signal_death", "piecewise_capture", 0.0, ["--mem-fraction-static", "0.9"], False),  # no prefill graphs
        (
            "signal_death", "piecewise_capture", 0.0,
            ["--mem-fraction-static", "0.9", *PREFILL_GRAPHS, "--disable-cuda-graph"], False,
        ),
        ("crash_at_first_decode", "warmup", 0.0, ["--mem-fraction-static", "0.5"], False),
        ("crash_at_first_decode", "warmup", 0.0, ["--mem-fraction-static", "0.9"], True),
        ("signal_death", "init", 0.0, ["--mem-fraction-static", "0.9"], False),  # nothing is measured yet
    ],
)
def test_check_sees_the_memory_the_server_sees(
    effect: str, at: str, progress: float, flags: list[str], fails: bool, tmp_path: Path
) -> None:
    path = tmp_path / "slack" / "world.toml"
    path.parent.mkdir()
    path.write_text(SLACK_WORLD.format(effect=effect, at=at, progress=progress))
    argv = ["--model-path", "Qwen/Qwen3-8B", *flags]
    assert _server_fails(path, argv, tmp_path) is fails
    assert _fails(load_world(str(path)), argv, {}, {}) is fails


#: A world whose one fault fires on a request that reuses a cached prefix (the radix cache's hit).
PREFIX_WORLD = SLACK_WORLD.replace('at = "{at}"\nprogress = {progress}\nwhen = {{ expr = "mem.avail_gb < 8" }}', (
    'at = "first_decode"\nwhen = {{ "req.cached_tokens" = {{ ge = 1 }} }}'
)).replace("short-of-slack", "prefix-hit")


@pytest.mark.parametrize(
    ("reproduce", "flags", "fails"),
    [
        ("shared_prefix_tokens = 400", [], True),
        ("shared_prefix_tokens = 400", ["--disable-radix-cache"], False),  # nothing is cached
        ("prompt_tokens = 100", [], False),  # no shared prefix: every prompt is new
    ],
)
def test_check_sees_the_prefix_the_case_shares(reproduce: str, flags: list[str], fails: bool, tmp_path: Path) -> None:
    world = tmp_path / "world.toml"
    world.write_text(PREFIX_WORLD.format(effect="wrong_output"))
    case = tmp_path / "case.toml"
    case.write_text(
        f'name = "prefix"\n[model]\npath = "Qwen/Qwen3-8B"\n[baseline]\nflags = {{}}\n[reproduce]\n{reproduce}\n'
    )
    argv = ["--model-path", "Qwen/Qwen3-8B", *flags]
    assert _fails(load_world(str(world)), argv, {}, _requests(case)) is fails
