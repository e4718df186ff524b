"""Commands on an SSH host: a POSIX sh script on the channel's stdin (``exec /bin/sh -s``), run to
completion under ``timeout`` (`SSHCommands`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import paramiko

from tools.host import CommandResult, CommandTimeout, HostError, expand_argv, merge_env
from tools.ssh.connection import SSHConnection
from tools.ssh.shell import NOT_FOUND_MARK, command_words, precheck


class SSHCommands(SSHConnection):
    """Running scripts and commands on the host (the command part of `SSHHost`)."""

    def check_connection(self) -> None:
        """Make sure the connection works (one round trip; reconnects if it dropped). Raises
        `HostUnreachable` if it cannot be re-established, `HostError` for a changed host key or refused
        authentication on reconnect."""
        self._deliver()
        self._exec("exit 0\n", timeout=self.options.connect_timeout_s + 15.0)
        self._deliver()

    def _exec(self, script: str, *, timeout: float) -> tuple[int, bytes, bytes]:
        """Run a POSIX sh `script` on the host; (exit status, stdout, stderr). Reconnects on a drop.

        `timeout` (seconds) bounds the wait for the result on this side; the script itself must make sure
        it ends (commands run under ``timeout``). Raises HostError when no result comes in time.
        """

        def op(transport: paramiko.Transport) -> tuple[int, bytes, bytes]:
            chan = transport.open_session(timeout=self.options.connect_timeout_s)
            self.stats.commands += 1
            self.stats.round_trips += 3
            try:
                chan.exec_command("exec /bin/sh -s")
                chan.sendall(script.encode())
                chan.shutdown_write()
                out, err = bytearray(), bytearray()
                deadline = time.monotonic() + timeout
                chan.settimeout(0.2)
                while True:
                    got = False
                    while chan.recv_stderr_ready():
                        err += chan.recv_stderr(1 << 16)
                        got = True
                    try:
                        data = chan.recv(1 << 16)
                    except TimeoutError:
                        data = None
                    if data:
                        out += data
                        got = True
                    elif data == b"":
                        while chan.recv_stderr_ready():
                            err += chan.recv_stderr(1 << 16)
                        status = chan.recv_exit_status()
                        if status == -1:
                            raise EOFError("the connection dropped during a command")
                        while chan.recv_stderr_ready():
                            err += chan.recv_stderr(1 << 16)
                        return status, bytes(out), bytes(err)
                    if not got and time.monotonic() > deadline:
                        raise HostError(f"{self.name}: no answer from the host within {timeout:g} s")
                    if not transport.is_active():
                        raise EOFError("the connection dropped during a command")
            finally:
                chan.close()

        return self._call(op)

    def run(
        self, argv: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """Run `argv` on the host to completion under ``timeout`` (its whole process group is killed at
        `timeout` seconds); stdout/stderr as text.

        Raises `HostError` if the command is not found, `CommandTimeout` on timeout, `HostUnreachable`
        if the host cannot be reached. A command cut off by a dropped connection is run again once after
        reconnecting: commands sent here must be safe to repeat (queries).
        """
        self._deliver()
        cmd = expand_argv(argv, self)
        if not cmd:
            raise HostError("empty command")
        script = (
            precheck(cmd[0])
            + f"exec timeout -k 5 {max(timeout, 0.001):.3f} "
            + command_words(cmd, merge_env(self._env, env))
            + " </dev/null\n"
        )
        start = time.monotonic()
        status, out, err = self._exec(script, timeout=timeout + 15.0)
        duration = time.monotonic() - start
        self._deliver()
        stderr = err.decode("utf-8", "replace")
        if status == 127 and NOT_FOUND_MARK in stderr:
            raise HostError(f"command not found: {cmd[0]} (on {self.name})")
        if status in (124, 137) and duration >= timeout * 0.98:
            result = CommandResult(
                argv=cmd,
                returncode=-9,
                stdout=out.decode("utf-8", "replace"),
                stderr=stderr,
                duration_s=duration,
            )
            raise CommandTimeout(f"command timed out after {timeout:g} s: {cmd[0]} (on {self.name})", result)
        return CommandResult(
            argv=cmd,
            returncode=status,
            stdout=out.decode("utf-8", "replace"),
            stderr=stderr,
            duration_s=duration,
        )
