"""The POSIX ``/bin/sh`` text `SSHHost` sends to the host: quoting, the ``env NAME=value ARGV`` line, the
check that a program exists, the detached-server starter and the ``/proc`` helpers of `terminate` and
`find_orphans` (see the package docstring for why each is done this way)."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import time
from collections.abc import Mapping, Sequence

from tools.host import MIN_FREE_BYTES, HostError
from tools.ssh.stream import Spawned

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: stderr marks of the scripts below: the program was not found / the log's disk is full
NOT_FOUND_MARK = "hypoloop: command not found: "
DISK_FULL_MARK = "hypoloop: disk full: "
#: Free KiB (POSIX ``df -Pk``: the "Available" column, for unprivileged writers) of the filesystem holding
#: "$d"; empty when df cannot tell.
SH_FREE_KB = """avail=$(df -Pk -- "$d" 2>/dev/null | awk 'NR==2 {print $4}')\n"""

# Process inspection in POSIX sh through /proc, with builtins only (no fork per process).
# Fields after "(comm) " in /proc/PID/stat: $1 state, $3 pgrp, ${20} starttime (proc(5) fields 3, 5, 22).
SH_PROC = r"""
_st() {
  s=; read -r s 2>/dev/null < "/proc/$1/stat" || return 1
  r=${s##*") "}; set -- $r
  S_STATE=$1 S_PGRP=$3 S_START=${20}
}
_group_alive() {
  if _st "$1"; then
    [ "$S_START" = "$2" ] || return 1
    [ "$S_STATE" != Z ] && [ "$S_STATE" != X ] && return 0
  fi
  for d in /proc/[0-9]*; do
    _st "${d#/proc/}" || continue
    [ "$S_PGRP" = "$1" ] && [ "$S_STATE" != Z ] && [ "$S_STATE" != X ] && return 0
  done
  return 1
}
_listening() {
  [ -n "$1" ] || return 1
  h=$(printf '%04X' "$1")
  grep -Eq "^ *[0-9]+: [0-9A-F]+:$h [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
"""


def quote(value: object) -> str:
    """`value` as one shell word (``shlex.quote``)."""
    return shlex.quote(str(value))


def env_words(env: Mapping[str, str]) -> list[str]:
    """``NAME=value`` words for ``env``, quoted; names must be identifiers (raises HostError)."""
    words = []
    for k, v in env.items():
        if not _ENV_NAME.match(str(k)):
            raise HostError(f"environment variable name {str(k)!r} is not a valid identifier")
        words.append(quote(f"{k}={v}"))
    return words


def spawn_script(cmd: list[str], env: dict[str, str], path: str, *, nonce: str, port: int | None) -> str:
    """The script ``SSHHost.spawn`` runs: start ``cmd`` detached, logged to ``path``; print its PID file's line."""
    pid_file, rc_file, meta_file = f"{path}.pid", f"{path}.rc", f"{path}.json"
    meta = json.dumps(
        {
            "argv": cmd,
            "log": path,
            "port": port,
            "client": socket.gethostname(),
            "client_pid": os.getpid(),
            "started": time.time(),
        }
    )
    child = (
        f"echo $$ >> {quote(pid_file + '.tmp')} && mv {quote(pid_file + '.tmp')} {quote(pid_file)} && exec "
        + command_words(cmd, env)
    )
    leader = (
        "trap : TERM INT HUP\n"
        'read -r s < /proc/$$/stat; r=${s##*") "}; set -- $r\n'
        f'echo "$$ ${{20}} {nonce}" > {quote(pid_file + ".tmp")}\n'
        f"/bin/sh -c {quote(child)}\n"
        f"echo $? > {quote(rc_file)}\n"
    )
    directory = path.rsplit("/", 1)[0] or "/"
    return (
        # A retry after a dropped connection finds the server this very call started.
        f"if [ -s {quote(pid_file)} ] && grep -q {quote(nonce)} {quote(pid_file)}; then cat {quote(pid_file)}; exit 0; fi\n"
        + precheck(cmd[0])
        # hypoloop's run folder and the log are private (0700/0600); the server keeps the login's umask
        + f"(umask 077 && mkdir -p -- {quote(directory)}) || exit 1\n"
        # A full disk: the server's log could not be written, so the launch would say nothing.
        + f"d={quote(directory)}\n"
        + SH_FREE_KB
        + f'case "$avail" in ""|*[!0-9]*) ;; *) if [ "$avail" -lt {MIN_FREE_BYTES // 1024} ]; then '
        + f'echo "{DISK_FULL_MARK}$((avail * 1024))" >&2; exit 28; fi ;; esac\n'
        + f"rm -f -- {quote(pid_file)} {quote(pid_file + '.tmp')} {quote(rc_file)}\n"
        + f"(umask 077 && : > {quote(path)}) || exit 1\n"
        + f"printf '%s\\n' {quote(meta)} > {quote(meta_file)}\n"
        + f"setsid -f /bin/sh -c {quote(leader)} </dev/null >> {quote(path)} 2>&1 || exit 1\n"
        + "i=0\n"
        + f"while [ ! -s {quote(pid_file)} ]; do\n"
        + "  i=$((i+1)); if [ $i -gt 1000 ]; then echo 'hypoloop: no PID file after 20 s' >&2; exit 1; fi\n"
        + "  sleep 0.02\n"
        + "done\n"
        + f"cat {quote(pid_file)}\n"
    )


def command_words(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """``env NAME=value ... ARGV`` as one quoted shell command line (``env`` so no shell syntax remains)."""
    return " ".join(["env", *env_words(env), *(quote(a) for a in argv)])


def precheck(argv0: str) -> str:
    """A script line that fails with a recognisable message when `argv0` cannot be run.

    Raises HostError for a program name ``env`` would misread (an option or a NAME=VALUE word).
    """
    if not argv0 or argv0.startswith("-") or "=" in argv0:
        raise HostError(f"{argv0!r}: not a program name (it must not start with '-' or contain '=')")
    msg = quote(NOT_FOUND_MARK + argv0)
    return f"command -v {quote(argv0)} >/dev/null 2>&1 || {{ echo {msg} >&2; exit 127; }}\n"


def stop_group_script(sp: Spawned, stream_pids: Sequence[int], grace_s: float) -> str:
    """The script ``SSHHost.terminate`` runs: TERM the server's process group, wait up to `grace_s`
    seconds, KILL, wait up to 5 s; end the log streams `stream_pids` (only if their command line names
    the log); wait up to 5 s for the ``--port`` to be free; print ``gone=0|1 free=0|1``."""
    ticks = max(0, int(grace_s / 0.05))
    return (
        SH_PROC
        + f"lead={sp.handle.pgid}; st={quote(sp.starttime or 'unknown')}; port={sp.port or ''}; log={quote(sp.handle.log_path)}\n"
        + 'if [ "$st" = unknown ]; then _st $lead && st=$S_START; fi\n'
        + "if _group_alive $lead $st; then\n"
        + "  kill -s TERM -- -$lead 2>/dev/null\n"
        + f"  i=0; while _group_alive $lead $st && [ $i -lt {ticks} ]; do sleep 0.05; i=$((i+1)); done\n"
        + "  if _group_alive $lead $st; then\n"
        + "    kill -s KILL -- -$lead 2>/dev/null\n"
        + "    i=0; while _group_alive $lead $st && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
        + "  fi\n"
        + "fi\n"
        + f"for f in {' '.join(str(p) for p in stream_pids)}; do\n"
        + '  if tr "\\000" " " < /proc/$f/cmdline 2>/dev/null | grep -qF -- "$log"; then kill $f 2>/dev/null; fi\n'
        + "done\n"
        + "gone=1; _group_alive $lead $st && gone=0\n"
        + 'free=1; i=0; while _listening "$port"; do\n'
        + "  if [ $i -ge 100 ]; then free=0; break; fi; sleep 0.05; i=$((i+1))\n"
        + "done\n"
        + 'echo "gone=$gone free=$free"\n'
    )


def orphan_scan_script(root: str) -> str:
    """The script ``SSHHost.find_orphans`` runs: for every ``ROOT/*/*.pid`` whose process group still
    runs, one tab-separated line: PID file, leader pid, leader start time, server pid, seconds since the
    PID file was touched, and the launch's JSON description (tabs and newlines blanked)."""
    return (
        SH_PROC
        + "now=$(date +%s)\n"
        + f"for p in {quote(root)}/*/*.pid; do\n"
        + '  [ -f "$p" ] || continue\n'
        + '  { read -r lead st nonce; read -r child; } < "$p" 2>/dev/null || continue\n'
        + '  _group_alive "$lead" "$st" || continue\n'
        + '  m=$(stat -c %Y "$p" 2>/dev/null || echo 0)\n'
        + '  meta=$(head -c 8000 "${p%.pid}.json" 2>/dev/null | tr "\\t\\n" "  ")\n'
        + '  printf \'%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n\' "$p" "$lead" "$st" "$child" "$((now - m))" "$meta"\n'
        + "done\n"
    )
