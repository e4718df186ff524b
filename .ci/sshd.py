"""A throwaway OpenSSH server on 127.0.0.1 for the SSH tests and the SSH benchmark.

`start_sshd(workdir)` makes a host key, a client key (and a second key the server does not know), an
authorized_keys file and a known_hosts file in `workdir`, writes an sshd_config that points at them, and
runs `/usr/sbin/sshd -D -f CONFIG -e` as a child listening on a free port of 127.0.0.1. `stop()` ends
the server and every per-connection sshd process it forked. Nothing outside `workdir` is touched except
sshd's privilege-separation directory (/run/sshd), which sshd insists on.

Standalone use (prints the target and the options for hypoloop, stops on Enter):

    python .ci/sshd.py DIR
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "ssh-keygen"


def sshd_available() -> bool:
    """True when an OpenSSH server binary and ssh-keygen exist on this machine."""
    return os.access(SSHD, os.X_OK) and any(
        os.access(os.path.join(d, SSH_KEYGEN), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path, comment: str) -> None:
    if not path.exists():
        subprocess.run(
            [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            check=True,
            stdin=subprocess.DEVNULL,
        )


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class ThrowawaySSHD:
    """A running test sshd. `target` is `ssh://root@127.0.0.1:PORT` (the current user, in fact)."""

    workdir: Path
    port: int
    user: str
    key: Path
    wrong_key: Path
    known_hosts: Path
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start (or restart) the server on `port`; waits until it accepts connections (10 s)."""
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
        logf = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        with logf:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-f", str(self.config), "-e"],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
            time.sleep(0.05)
        raise RuntimeError(
            f"sshd did not accept connections on port {self.port}: {self.log.read_text()[-2000:]}"
        )

    def session_processes(self) -> list[int]:
        """The sshd processes serving connections (every sshd descendant of the listener)."""
        if self.proc is None:
            return []
        out: list[int] = []
        stack = [self.proc.pid]
        while stack:
            for child in _children(stack.pop()):
                if _comm(child) in ("sshd", "sshd-session"):
                    out.append(child)
                    stack.append(child)
        return out

    def cut_connections(self) -> int:
        """SIGKILL every sshd process serving a connection (the listener stays). Returns how many."""
        pids = self.session_processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def stop(self) -> None:
        """Stop the listener and cut every connection."""
        if self.proc is None:
            return
        sessions = self.session_processes()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc = None


def start_sshd(workdir: Path, *, port: int | None = None) -> ThrowawaySSHD:
    """Make keys and config in `workdir` and start sshd on 127.0.0.1 (a free port unless given)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    host_key = workdir / "ssh_host_ed25519_key"
    key = workdir / "client_key"
    wrong_key = workdir / "wrong_key"
    for path, comment in ((host_key, "hypoloop-test-host"), (key, "hypoloop-test"), (wrong_key, "nobody")):
        _keygen(path, comment)
    authorized = workdir / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    host_pub = Path(f"{host_key}.pub").read_text().split()
    known_hosts = workdir / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {workdir / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                "StrictModes no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "AllowTcpForwarding yes",
                "Subsystem sftp internal-sftp",
                "LogLevel INFO",
                "",
            ]
        )
    )
    import getpass

    server = ThrowawaySSHD(
        workdir=workdir,
        port=port,
        user=getpass.getuser(),
        key=key,
        wrong_key=wrong_key,
        known_hosts=known_hosts,
        config=config,
        log=workdir / "sshd.log",
    )
    server.start()
    return server


if __name__ == "__main__":
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/hypoloop-sshd")
    s = start_sshd(d)
    print(f"--host {s.target} --ssh-key {s.key} --known-hosts {s.known_hosts}", flush=True)
    try:
        sys.stdin.readline()
    finally:
        s.stop()
