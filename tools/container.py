"""Servers launched through a container engine (`docker exec` / `docker run` in the case's launcher).

Stopping the engine's client does not stop the server: `docker exec` starts the command inside the
container, outside the client's process group, and SIGTERM to the client leaves it running (and holding
its GPUs); `docker run` without `--rm`/`docker stop` leaves the container running. So a container launch
is rewritten before it starts and stopped inside the container:

- `docker exec [OPTIONS] CONTAINER CMD...` runs `sh -c 'echo $$ > PIDFILE; exec "$@"' PIDFILE CMD...`,
  so the server's PID inside the container is known; stopping runs a second `docker exec` that sends
  SIGTERM to that process and every descendant (found through /proc), waits the grace period, sends
  SIGKILL to what is left and exits 0 only when none of them remains.
- `docker run [OPTIONS] IMAGE CMD...` gets `--name hypoloop-TAG` (unless it has a name); stopping is
  `docker stop -t GRACE NAME`, then `docker rm -f NAME`, then `docker inspect` must not find it running.

`podman` and `nerdctl` take the same commands. Facts: docker CLI reference (`docker exec`, `docker run`,
`docker stop`: SIGTERM, then SIGKILL after `--time`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

ENGINES = ("docker", "podman", "nerdctl")
#: `docker exec` / `docker run` options that take a value as the next argument (docker CLI reference).
_VALUE_OPTS = frozenset(
    "-e --env --env-file -u --user -w --workdir --detach-keys --name -v --volume -p --publish --network "
    "--gpus --device --ipc --shm-size --entrypoint --runtime -m --memory --cpus --ulimit --label -l "
    "--mount --hostname -h --platform --pull --security-opt --cap-add --cap-drop --group-add "
    "--add-host --restart --pid --userns --uts --cgroupns --tmpfs --log-driver --log-opt".split()
)

_PID_WRAPPER = 'echo $$ > "$0"; exec "$@"'

#: Stops a process tree inside the container: $0 = pid file, $1 = grace seconds. Exit 0 = all gone.
_STOP_TREE = r"""
f="$0"; g="$1"
[ -f "$f" ] || exit 0
p=$(cat "$f")
tree() { echo "$1"; for s in $(grep -l "^PPid:[[:space:]]*$1\$" /proc/[0-9]*/status 2>/dev/null); do
  c=${s#/proc/}; tree "${c%/status}"; done; }
all=$(tree "$p")
kill -TERM $all 2>/dev/null
i=0
while [ "$i" -lt $((g * 10)) ]; do
  alive=""; for q in $all; do kill -0 "$q" 2>/dev/null && alive=1; done
  [ -z "$alive" ] && break
  sleep 0.1; i=$((i + 1))
done
all="$all $(tree "$p")"
kill -KILL $all 2>/dev/null
n=0
while [ "$n" -lt 20 ]; do
  alive=""; for q in $all; do kill -0 "$q" 2>/dev/null && alive=1; done
  [ -z "$alive" ] && { rm -f "$f"; exit 0; }
  sleep 0.1; n=$((n + 1))
done
exit 1
"""


@dataclass(frozen=True)
class ContainerLaunch:
    """How a server started through a container engine is found again to be stopped."""

    engine: list[str]  # the engine's argv prefix up to the subcommand (e.g. ["sudo", "docker"])
    mode: str  # "exec" or "run"
    target: str  # exec: the container; run: the container's name
    pid_file: str = ""  # exec: the server's PID file inside the container

    def stop_commands(self, grace_s: float) -> list[list[str]]:
        """The commands that stop the server inside the container, in order; the last one's exit
        status says whether it is gone (0) or not."""
        grace = str(max(1, int(round(grace_s))))
        if self.mode == "exec":
            return [[*self.engine, "exec", self.target, "sh", "-c", _STOP_TREE, self.pid_file, grace]]
        return [
            [*self.engine, "stop", "-t", grace, self.target],
            [*self.engine, "rm", "-f", self.target],
            [*self.engine, "inspect", "-f", "{{.State.Running}}", self.target],
        ]


def _engine_index(argv: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv[:3]):
        if os.path.basename(arg) in ENGINES:
            return i
    return None


def prepare(argv: Sequence[str], tag: str) -> tuple[list[str], ContainerLaunch | None]:
    """`argv` rewritten so the server can be stopped inside its container, and how to stop it; a launch
    that is not `<engine> exec|run ...` comes back unchanged with None. `tag` names the PID file or the
    container (letters, digits, '-' and '_')."""
    argv = list(argv)
    e = _engine_index(argv)
    if e is None or len(argv) <= e + 1 or argv[e + 1] not in ("exec", "run"):
        return argv, None
    tag = re.sub(r"[^A-Za-z0-9_-]", "-", tag)
    engine, mode = argv[: e + 1], argv[e + 1]
    i = e + 2
    opts: list[str] = []
    name: str | None = None
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i]
        opts.append(opt)
        if opt in _VALUE_OPTS and i + 1 < len(argv):
            opts.append(argv[i + 1])
            if opt == "--name":
                name = argv[i + 1]
            i += 1
        elif opt.startswith("--name="):
            name = opt.split("=", 1)[1]
        i += 1
    if i >= len(argv):
        return argv, None
    target, command = argv[i], argv[i + 1 :]
    if mode == "exec":
        pid_file = f"/tmp/hypoloop-{tag}.pid"
        wrapped = [*engine, "exec", *opts, target, "sh", "-c", _PID_WRAPPER, pid_file, *command]
        return wrapped, ContainerLaunch(engine=engine, mode="exec", target=target, pid_file=pid_file)
    if name is None:
        name = f"hypoloop-{tag}"
        opts = ["--name", name, *opts]
    return [*engine, "run", *opts, target, *command], ContainerLaunch(engine=engine, mode="run", target=name)


def recover(argv: Sequence[str]) -> ContainerLaunch | None:
    """The `ContainerLaunch` of an argv that `prepare` already rewrote (a server adopted after a restart
    of the orchestrator), else None."""
    argv = list(argv)
    e = _engine_index(argv)
    if e is None or len(argv) <= e + 1 or argv[e + 1] not in ("exec", "run"):
        return None
    engine = argv[: e + 1]
    if argv[e + 1] == "exec":
        for i in range(e + 2, len(argv) - 3):
            if argv[i : i + 3] == ["sh", "-c", _PID_WRAPPER]:
                return ContainerLaunch(engine=engine, mode="exec", target=argv[i - 1], pid_file=argv[i + 3])
        return None
    for i, arg in enumerate(argv[e + 2 :], e + 2):
        if arg == "--name" and i + 1 < len(argv):
            return ContainerLaunch(engine=engine, mode="run", target=argv[i + 1])
        if arg.startswith("--name="):
            return ContainerLaunch(engine=engine, mode="run", target=arg.split("=", 1)[1])
    return None
