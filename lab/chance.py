"""The lab's randomness: which flaky faults are live on a launch, which requests a per-request fault
hits, when a per-minute fault starts under traffic, and which graded questions a launch gets right.

A fault with `probability = p` is live on a launch with chance p, drawn once when the server starts.
Without HYPOLOOP_LAB_SEED every launch draws fresh randomness. With it, launch n under seed S (n = 0,
1, 2, ... counted per seed in a small file under HYPOLOOP_LAB_STATE, default a per-user folder in the
system temp directory) uses the seed "S:n", and each fault draws from `random.Random("S:n:<fault id>")`.
So a sequence of launches under one seed replays exactly when the counter starts from the same place
(point HYPOLOOP_LAB_STATE at a fresh folder, or use a fresh seed), while two launches of the same
command line under one seed still draw independently, as a flaky failure should.

Standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import random
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path

from lab.world import ENV_SEED, ENV_STATE, Fault


def state_dir(environ: Mapping[str, str]) -> Path:
    """Where launch counters live: HYPOLOOP_LAB_STATE, else `<tmp>/hypoloop-lab-<uid>`."""
    explicit = environ.get(ENV_STATE, "").strip()
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"hypoloop-lab-{os.getuid()}"


def launch_seed(environ: Mapping[str, str]) -> str:
    """The seed of this launch: "S:n" under HYPOLOOP_LAB_SEED=S (n counts launches), else random.

    The counter is read and incremented under an exclusive file lock, so concurrent launches under one
    seed get distinct numbers. A counter that cannot be written falls back to fresh randomness.
    """
    seed = environ.get(ENV_SEED, "").strip()
    if not seed:
        return "random:" + secrets.token_hex(8)
    folder = state_dir(environ)
    path = folder / ("seed-" + hashlib.sha256(seed.encode()).hexdigest()[:16] + ".count")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(path, "a+", encoding="ascii") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            fh.seek(0)
            raw = fh.read().strip()
            n = int(raw) if raw.isdigit() else 0
            fh.seek(0)
            fh.truncate()
            fh.write(str(n + 1))
            fh.flush()
    except OSError:
        return "random:" + secrets.token_hex(8)
    return f"{seed}:{n}"


def is_live(fault: Fault, seed: str) -> bool:
    """Whether a fault takes part in the launch with this seed (always, when its probability is 1)."""
    if fault.probability >= 1.0:
        return True
    return random.Random(f"{seed}:{fault.id}").random() < fault.probability


def hits_request(fault: Fault, seed: str, request: int) -> bool:
    """Whether request number `request` (0, 1, ... in the order the server took them) is hit by a fault
    with `per_request = p`: its own draw from `random.Random("<seed>:<fault id>:request:<n>")`, so a
    replayed launch hits the same requests and a lucky request says nothing about the next one."""
    if fault.per_request >= 1.0:
        return True
    return random.Random(f"{seed}:{fault.id}:request:{request}").random() < fault.per_request


def onset_s(fault: Fault, seed: str) -> float:
    """Simulated seconds of serving before a fault with `per_minute = r` starts to act: the first event
    of a Poisson process of rate r per minute (exponential waiting time, mean 60 / r s), drawn once per
    launch from `random.Random("<seed>:<fault id>:onset")`. 0 for faults without a rate."""
    if fault.per_minute <= 0:
        return 0.0
    return random.Random(f"{seed}:{fault.id}:onset").expovariate(fault.per_minute / 60.0)


def answers_right(seed: str, prompt: str, model: str, healthy: float, accuracy: float) -> bool:
    """Whether the launch with this seed answers the graded question `prompt` right, for a model (its
    path) whose healthy share of right answers is `healthy`, when the accuracy in force is `accuracy`.

    What the healthy model knows does not change between launches (greedy decoding of the same weights
    misses the same questions): it answers `prompt` right when `random.Random("<model>:knows:<prompt>")`
    draws below `healthy`. Below the healthy level (a `degrade_accuracy` fault) it also loses each of the
    questions it knows with a chance drawn per launch, from `random.Random("<seed>:accuracy:<prompt>")`:
    right when that draw is below `accuracy / healthy`, so the expected share right is `accuracy`.
    """
    if random.Random(f"{model}:knows:{prompt}").random() >= healthy:
        return False
    if accuracy >= healthy:
        return True
    return random.Random(f"{seed}:accuracy:{prompt}").random() < accuracy / healthy


def wrong_offset(seed: str, prompt: str) -> int:
    """How far off a wrong answer to `prompt` is on this launch (never 0): from
    `random.Random("<seed>:accuracy:<prompt>:offset")`, a small slip most of the time."""
    return random.Random(f"{seed}:accuracy:{prompt}:offset").choice((-10, -2, -1, 1, 1, 2, 3, 10))
