"""Reaching a job's server on its compute node: the same port when the node is this machine, a local
TCP relay (``slurm://``), or SSH forwarding through the login node (``slurm+ssh://``); and a port
for the next server (`SlurmNetwork`)."""

from __future__ import annotations

import contextlib
import random
import socket

from tools.host import HostError, ProcessHandle
from tools.relay import Relay
from tools.slurm.jobs import SlurmJobs
from tools.slurm.states import scontrol_fields
from tools.ssh import SSHHost


class SlurmNetwork(SlurmJobs):
    """`forward_port`, `forward_job_port` and `free_port` (the network part of `SlurmHost`)."""

    def _node_address(self, node: str) -> str:
        """The address of compute node `node` (``NodeAddr`` of ``scontrol show node``; asked once)."""
        addr = self._node_addr.get(node)
        if addr is None:
            r = self._slurm(["scontrol", "show", "node", "-o", node], check=False)
            addr = scontrol_fields(r.stdout).get("NodeAddr") or node
            self._node_addr[node] = addr
        return addr

    def forward_port(self, port: int) -> int:
        """A port on 127.0.0.1 here that reaches `port` on the compute node of the job whose launch
        command listens on it (see `forward_job_port`). Raises `HostError` if no job of this host
        uses that port."""
        with self._lock:
            jobs = [j for j in self._jobs.values() if j.port == port]
        if not jobs:
            raise HostError(f"{self.name}: no job listens on port {port}")
        return self.forward_job_port(jobs[-1].handle, port)

    def forward_job_port(self, handle: ProcessHandle, port: int) -> int:
        """A port on 127.0.0.1 here that reaches `port` on the (first) node of the job `handle`:
        the same port when the node is this machine, a local TCP relay to the node (``slurm://``), or
        SSH forwarding through the login node (``slurm+ssh://``). Raises `HostError` if the job has no
        node yet."""
        job = self._job(handle)
        job.port = port
        if job.node is None:
            self._refresh(job, force=True)
        node = (job.node or "").split(",")[0]
        if not node:
            raise HostError(f"{self.name}: job {handle.pid} has no node yet")
        addr = self._node_address(node)
        if self.target.login is not None:
            assert isinstance(self.shell, SSHHost)
            return self.shell.forward_port(port, to_host=addr)
        if _is_this_machine(addr):
            return port
        with self._lock:
            relay = self._relays.get((addr, port))
            if relay is None:
                relay = self._relays[(addr, port)] = Relay(
                    f"slurm-relay-{port}", lambda _peer: socket.create_connection((addr, port), timeout=10.0)
                )
            return relay.local_port

    def free_port(self) -> int:
        """A TCP port for the next server (20000-32767, random, never handed out twice by this host).

        The node is not known before the job starts, so the port cannot be checked there; a collision
        shows as a server that cannot bind (its log says so).
        """
        with self._lock:
            while True:
                port = random.randint(20000, 32767)
                if port not in self._ports_handed_out:
                    self._ports_handed_out.add(port)
                    return port


def _is_this_machine(addr: str) -> bool:
    """True for a loopback address or one of this machine's own names/addresses."""
    if addr in ("localhost", socket.gethostname()) or addr.startswith("127."):
        return True
    try:
        target = socket.gethostbyname(addr)
    except OSError:
        return False
    if target.startswith("127."):
        return True
    with contextlib.suppress(OSError):
        return target in socket.gethostbyname_ex(socket.gethostname())[2]
    return False
