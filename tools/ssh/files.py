"""Files on an SSH host over SFTP: the home folder, small files, ``mkdir -p``, the per-run work dir, free
space and reads from a byte offset (`SSHFiles`)."""

from __future__ import annotations

import paramiko

from tools.host import HostError, HostUnreachable, one_line
from tools.ssh.commands import SSHCommands
from tools.ssh.shell import SH_FREE_KB, quote


class SSHFiles(SSHCommands):
    """SFTP and paths on the host (the file part of `SSHHost`)."""

    def _sftp(self) -> paramiko.SFTPClient:
        """The SFTP session of the current connection (caller holds `_sftp_lock`; may raise on a drop)."""
        if self._sftp_client is None:
            client = self._client
            if client is None:
                raise EOFError("not connected")
            try:
                self._sftp_client = client.open_sftp()
            except paramiko.SSHException as exc:
                transport = client.get_transport()
                if transport is not None and transport.is_active():
                    # The connection is fine but the server refused the subsystem ("Channel closed.").
                    raise HostError(
                        f"{self.name}: the host offers no SFTP subsystem ({one_line(str(exc))}); hypoloop "
                        "needs it to read logs and PID files: enable it in the host's sshd_config "
                        "(Subsystem sftp internal-sftp)"
                    ) from None
                raise
            channel = self._sftp_client.get_channel()
            if channel is not None:
                channel.settimeout(max(self.options.connect_timeout_s, 30.0))
            self.stats.round_trips += 3
        return self._sftp_client

    @property
    def home(self) -> str:
        """The remote user's home directory (asked once)."""
        if self._home is None:

            def op(transport: paramiko.Transport) -> str:
                with self._sftp_lock:
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                    return str(self._sftp().normalize("."))

            self._home = self._call(op)
        return self._home

    def _abs(self, path: str) -> str:
        if path == "~":
            return self.home
        if path.startswith("~/"):
            return f"{self.home}/{path[2:]}"
        if not path.startswith("/"):
            return f"{self.home}/{path}"
        return path

    def _sftp_small(self, path: str, limit: int = 1 << 20) -> bytes | None:
        """A small file's content over SFTP (also /proc files, whose size reads as 0); None if missing."""

        def op(transport: paramiko.Transport) -> bytes | None:
            with self._sftp_lock:
                sftp = self._sftp()
                self.stats.sftp_requests += 1
                self.stats.round_trips += 1
                try:
                    with sftp.open(path, "rb") as f:
                        data = f.read(limit)
                        self.stats.sftp_requests += 3  # read, read to EOF, close
                        self.stats.round_trips += 3
                except (FileNotFoundError, PermissionError):
                    return None
                except OSError:
                    # A process that exits between the open and the read takes its /proc entry with it;
                    # the SFTP server then answers a bare "Failure" (SSH_FX_FAILURE). That is "gone", not a
                    # host error, as long as the connection itself is fine.
                    if path.startswith("/proc/") and transport.is_active():
                        return None
                    raise
                return bytes(data)

        return self._call(op)

    def _sftp_makedirs(self, path: str) -> None:
        """``mkdir -p`` over SFTP. Raises HostError."""

        def op(transport: paramiko.Transport) -> None:
            with self._sftp_lock:
                sftp = self._sftp()
                missing: list[str] = []
                current = path.rstrip("/")
                while current:
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                    try:
                        sftp.stat(current)
                        break
                    except FileNotFoundError:
                        missing.append(current)
                        current = current.rsplit("/", 1)[0]
                for d in reversed(missing):
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                    try:
                        sftp.mkdir(d)
                    except OSError as exc:
                        try:
                            sftp.stat(d)  # made by someone else in the meantime
                        except OSError:
                            raise HostError(
                                f"cannot create work dir {path} on {self.name}: {one_line(str(exc))}"
                            ) from None

        self._call(op)

    def workdir(self, run_id: str) -> str:
        """A per-run directory on the host (created): `workdir_root`/`run_id` (~/.hypoloop/runs/RUN_ID).

        Raises `HostError` if `run_id` is not a plain name or the directory cannot be created.
        """
        self._deliver()
        if not run_id or "/" in run_id or run_id in (".", "..") or "\x00" in run_id:
            raise HostError(f"invalid run id {run_id!r}: expected a plain name")
        path = f"{self._abs(self.options.workdir_root).rstrip('/')}/{run_id}"
        self._sftp_makedirs(path)
        return path

    def free_bytes(self, path: str) -> int | None:
        """Bytes an unprivileged writer may still use on the host's filesystem holding `path` (POSIX
        ``df -Pk``, "Available"); None when it cannot be told (no df, `path` missing). One command."""
        self._deliver()
        script = f"d={quote(self._abs(path))}\n" + SH_FREE_KB + 'echo "$avail"\n'
        _, out, _ = self._exec(script, timeout=30.0)
        self._deliver()
        text = out.decode(errors="replace").strip()
        return int(text) * 1024 if text.isdigit() else None

    def _sftp_read(self, path: str, offset: int, max_bytes: int) -> bytes:
        def op(transport: paramiko.Transport) -> bytes:
            with self._sftp_lock:
                sftp = self._sftp()
                f = self._sftp_files.get(path)
                if f is None:
                    try:
                        f = sftp.open(path, "rb")
                    except FileNotFoundError:
                        return b""
                    self._sftp_files[path] = f
                    self.stats.sftp_requests += 1
                    self.stats.round_trips += 1
                size = f.stat().st_size
                self.stats.sftp_requests += 1
                self.stats.round_trips += 1
                if size is None or offset >= size:
                    return b""
                n = min(max_bytes, size - offset)
                f.seek(offset)
                data = f.read(n)
                calls = max(1, -(-n // 32768))
                self.stats.sftp_requests += calls
                self.stats.round_trips += calls
                self.stats.log_bytes += len(data)
                return bytes(data)

        try:
            return self._call(op)
        except HostError as exc:
            if isinstance(exc, HostUnreachable):
                raise
            raise HostError(f"cannot read {path} on {self.name}: {exc}") from None

    def read_text(self, path: str, max_bytes: int = 4 << 20) -> str | None:
        """The first `max_bytes` bytes of the file at `path` on the host as text (UTF-8, undecodable
        bytes replaced), read over SFTP in one open; None when it is missing or unreadable (a
        directory too). Raises `HostUnreachable` if the host cannot be reached."""
        self._deliver()
        try:
            data = self._sftp_small(self._abs(path), limit=max_bytes)
        except HostUnreachable:
            raise
        except (HostError, OSError):
            return None
        return None if data is None else data.decode("utf-8", "replace")
