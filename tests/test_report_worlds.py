"""Every lab world, in both halves (lab/worlds and lab/worlds-sealed), is consistent with its own truth:
the case's baseline shows the failure (a fault or a memory failure) unless the truth says it does not
reproduce; each truth fix applied alone to the baseline serves; a chain needs every link and serves with
all of them. Pure checks (``plan_launch`` and the memory plan), so a world whose text promises a fix that
its rules do not honour fails here before any planner is measured on it. Faults that fire only under load
or on some launches are counted as present: ``plan_launch`` cannot see a batch size or a draw, so they are
checked by their conditions on the configuration, with a large batch, a request sent after the ready line
(``serving_s``, as every request after the server's warm-up is) and the request lengths the case's
``[reproduce]`` reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.domain.case import load_case
from lab.memory import default_cuda_graph_max_bs, plan_memory
from lab.rules import matching_faults, parse_command_line, resolve
from lab.world import WORLDS_DIR, World, load_world

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
    prompt = shape.prompt_tokens or 32
    output = shape.output_tokens or 16
    return {"req.prompt_tokens": prompt, "req.output_tokens": output, "req.max_new_tokens": output, "req.cached_tokens": 0}
FATAL = (
    "launch_error", "load_error", "capture_error", "hang", "crash_at_first_decode", "wrong_output", "scheduler_dead",
    "signal_death", "degrade_accuracy",
)


def _fails(world: World, argv: list[str], env: dict[str, str], requests: dict[str, Any]) -> bool:
    """Whether a launch shows a failure: a fatal or wrong-output fault whose conditions hold on the
    effective configuration under a heavy load, whatever its chance (see the module docstring), that the
    launch can reach (no capture fault without graphs, no warm-up fault without the warm-up), a memory
    failure, or a command line the release's parser refuses."""
    try:
        args, user = parse_command_line(world.version, argv)
    except SystemExit:  # argparse refused the command line (exit 2): the launch fails at once
        return True
    res, ctx = resolve(world, args, user, env)
    ctx.extra.update(running_requests=LOAD, sampled=True, serving_s=SERVING_S, **requests)
    effective = dict(res.args)
    # SGLang 0.5.23 turns the decode graphs off with --disable-decode-cuda-graph or
    # --cuda-graph-backend-decode disabled as well as the deprecated --disable-cuda-graph; the lab's
    # server and memory plan read only the latter's dest, so the check folds the others into it.
    if effective.get("disable_decode_cuda_graph"):
        effective["disable_cuda_graph"] = True
    for fault in matching_faults(world, ctx):
        if fault.effect not in FATAL:
            continue
        if fault.at == "capture" and effective.get("disable_cuda_graph"):
            continue
        if fault.at == "warmup" and effective.get("skip_server_warmup"):
            continue
        return True
    plan = plan_memory(world, effective, default_cuda_graph_max_bs(world, args, user, env))
    return plan.failure is not None


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
