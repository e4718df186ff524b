"""A server's log on an SSH host, read by byte offset: streamed by ``tail -c +N --pid=P -f`` on a
channel of its own where the host has GNU tail, polled over SFTP with adaptive pacing elsewhere
(`SSHLogs`)."""

from __future__ import annotations

import time

import paramiko

from tools.ssh.servers import SSHServers
from tools.ssh.shell import quote
from tools.ssh.stream import LogStream, Pace, Spawned


class SSHLogs(SSHServers):
    """`read_from` and the log streams behind it (the log part of `SSHHost`)."""

    def _start_stream(self, sp: Spawned, offset: int) -> LogStream:
        path = sp.handle.log_path
        script = (
            "echo $$\n"
            f"exec tail -c +{offset + 1} --pid={sp.handle.pid} -s 0.1 -f -- {quote(path)} 2>/dev/null </dev/null\n"
        )

        def on_bytes(n: int) -> None:
            self.stats.log_bytes += n

        def op(transport: paramiko.Transport) -> LogStream:
            chan = transport.open_session(timeout=self.options.connect_timeout_s)
            self.stats.streams += 1
            self.stats.round_trips += 2
            chan.exec_command("exec /bin/sh -s")
            chan.sendall(script.encode())
            chan.shutdown_write()
            return LogStream(chan, offset, on_bytes)

        stream = self._call(op)
        with self._lock:
            self._streams[path] = stream
        return stream

    def read_from(self, path: str, offset: int, max_bytes: int = 1 << 20) -> bytes:
        """Up to `max_bytes` bytes of `path` on the host from byte `offset`; b"" if nothing new or missing.

        A server's log is streamed (see the `tools.ssh` docstring): reads are served from what arrived, at no
        round trip. Other files, and logs where streaming is unavailable, are read over SFTP from the
        offset, never from the start; while their server runs, those reads are paced (50 ms after
        growth, up to 0.5 s when idle). After `close()` nothing new is read (b""). Raises
        `HostUnreachable` if the host cannot be reached.
        """
        if self._closed:
            return b""
        self._deliver()
        path = self._abs(path)
        sp = self._by_log.get(path)
        stream = self._streams.get(path)
        if stream is not None:
            data = stream.take(offset, max_bytes)
            if data:
                return data
            if data is not None and stream.state == "running":
                return b""
            if stream.state == "lost":
                with self._lock:
                    self._streams.pop(path, None)
                    if stream.remote_pid is not None and sp is not None:
                        sp.stream_pids.append(stream.remote_pid)
                stream = None
            elif stream.state == "exited" and stream.exit_status not in (0, None) and stream.received == 0:
                self._stream_ok = False  # no GNU tail --pid on this host: poll instead
        if stream is None and sp is not None and not sp.dead and self._stream_ok:
            stream = self._start_stream(sp, offset)
            self._deliver()
            return stream.take(offset, max_bytes) or b""
        live = sp is not None and not sp.dead
        pace = self._paces.setdefault(path, Pace())
        now = time.monotonic()
        if live and offset >= pace.end and now < pace.next_due:
            return b""  # polling for growth too soon after the last look
        data = self._sftp_read(path, offset, max_bytes)
        if offset >= pace.end:
            pace.interval = 0.05 if data else min(pace.interval * 1.5, 0.5)
            pace.next_due = time.monotonic() + pace.interval
        pace.end = max(pace.end, offset + len(data))
        self._deliver()
        return data
