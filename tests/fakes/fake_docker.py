"""A stand-in `docker` CLI for tests on machines where no Docker engine can run.

It keeps the property that matters: a "container" process lives outside the client's process group.
`exec [opts] CONTAINER CMD...` and `run [opts] IMAGE CMD...` start CMD in a new session (as the
container runtime would) and wait for it; the client ignores nothing and forwards nothing: SIGTERM ends
the client alone, exactly like the real `docker exec` client, and the command keeps running. `stop -t N
NAME`, `rm -f NAME` and `inspect -f ... NAME` act on `run` containers recorded in $FAKE_DOCKER_STATE.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

VALUE_OPTS = {"-e", "--env", "-u", "--user", "-w", "--workdir", "--name", "--gpus", "-v", "--volume", "--network"}
STATE = Path(os.environ.get("FAKE_DOCKER_STATE", "/tmp/fake-docker"))


def _split(args: list[str]) -> tuple[dict[str, str], str, list[str]]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in VALUE_OPTS:
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            opts[args[i]] = ""
            i += 1
    return opts, args[i], args[i + 1 :]


def _in_container(command: list[str], record: Path | None) -> int:
    """Run `command` the way a container runtime does: in a new session and *not* a descendant of this
    client (double fork: it is reparented away, like a process under containerd-shim), then wait until
    it ends (it holds the write end of a pipe)."""
    r, w = os.pipe()
    os.set_inheritable(w, True)
    child = os.fork()
    if child == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            os.close(r)
            try:
                os.execvp(command[0], command)
            finally:
                os._exit(127)
        if record is not None:
            record.write_text(str(grandchild))
        os._exit(0)
    os.waitpid(child, 0)
    os.close(w)
    while os.read(r, 4096):
        pass
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> int:
    cmd, args = sys.argv[1], sys.argv[2:]
    STATE.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))  # the client dies; the container does not
    if cmd in ("exec", "run"):
        opts, target, command = _split(args)
        record = STATE / f"{opts.get('--name', target)}.pid" if cmd == "run" else None
        return _in_container(command, record)
    name = args[-1]
    pid_file = STATE / f"{name}.pid"
    if cmd == "inspect":
        if not pid_file.exists():
            print(f"Error: No such object: {name}", file=sys.stderr)
            return 1
        print("true" if _alive(int(pid_file.read_text())) else "false")
        return 0
    if not pid_file.exists():
        return 1
    pid = int(pid_file.read_text())
    if cmd == "stop":
        grace = float(args[args.index("-t") + 1]) if "-t" in args else 10.0
        os.killpg(os.getpgid(pid), signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        return 0
    if cmd == "rm":
        if _alive(pid):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        pid_file.unlink()
        return 0
    print(f"fake docker: unsupported command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
