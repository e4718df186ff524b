"""tools.ssh: a remote host reached over SSH with paramiko, behind the same `Host` protocol as `LocalHost`.

What it does on the remote side, and why:

- Every command is a POSIX ``/bin/sh`` script sent on the channel's stdin (``exec /bin/sh -s``), so the
  login shell (bash, zsh, fish) never parses anything but that fixed line; every argv item and every
  environment value inside the script is ``shlex.quote``-d, and environment names must be identifiers.
- A server is started detached from the SSH session: ``setsid -f /bin/sh -c LEADER`` makes a new session
  whose leader (a small ``sh``) writes a PID file, runs the server as its only child, and writes the
  child's exit status when it ends. Output goes to the log file, so a dropped connection neither kills the
  server nor blocks it, and a reconnect finds it again by its PID file. The PID file holds the leader's
  pid (= process group id), its start time in clock ticks (so a recycled pid is never mistaken for it) and
  the server's pid; a JSON file beside it records the argv and which orchestrator started it, and the
  orchestrator touches the PID file every `heartbeat_s` seconds while it owns the server. That is how
  the next start finds orphans (`find_orphans`).
- The log is streamed, not polled: one channel per log runs ``tail -c +OFFSET --pid=SERVER -f LOG``; the
  bytes land in a local buffer that `read_from` serves by byte offset without a round trip, and ``tail``
  exits by itself shortly after the server does. Liveness is therefore known without asking, and
  re-checked with one command every `liveness_check_s` seconds (a zombie counts as exited, like
  locally). Where ``tail`` has no ``--pid`` (BusyBox) or `follow` is off, reads fall back to SFTP
  (seek + read from the offset) with adaptive pacing: 50 ms after growth, backing off to 0.5 s when idle.
- Requests reach a server that listens on the host's loopback through ``direct-tcpip`` channels:
  `forward_port` opens a local listening port whose connections are tunnelled to ``127.0.0.1:PORT`` there.
- A dropped connection is re-established transparently (keep-alive every `keepalive_s` s detects a dead
  peer): every operation that fails because the transport died reconnects with exponential backoff for
  at most `reconnect_timeout_s` seconds, then retries once; after that it raises `HostUnreachable`.

Remote requirements: Linux (/proc), a POSIX ``/bin/sh``, ``setsid`` (util-linux), ``timeout`` and
``tail`` (GNU coreutils for streaming; anything else falls back to SFTP), an SFTP subsystem.

Host keys are checked against ``known_hosts`` (`known_hosts`, else the ssh config's
``UserKnownHostsFile``, else ``~/.ssh/known_hosts`` plus ``/etc/ssh/ssh_known_hosts``); an unknown key is
refused with the ``ssh-keyscan`` line that would trust it. `insecure_accept_host_key` accepts any key
(nothing is written to known_hosts) and says so in `connect_info`.

Where each part lives: `config` (options, target, stats), `connection` (ssh config, host keys,
authentication, reconnecting), `shell` (the scripts sent to the host), `commands` (`run`), `files`
(SFTP: home, work dir, reads), `servers` (spawn, liveness, terminate), `stream` and `logs` (log
streaming and polling), `forwarding` (ports), `orphans` (heartbeat, leftovers), `ssh_host` (`SSHHost`).
"""

from __future__ import annotations

from tools.leftovers import Orphan
from tools.ssh.config import SSHOptions, SSHStats, SSHTarget, parse_target
from tools.ssh.ssh_host import SSHHost

__all__ = ["Orphan", "SSHHost", "SSHOptions", "SSHStats", "SSHTarget", "parse_target"]
