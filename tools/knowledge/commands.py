"""Launch commands in notes: ``python -m sglang.launch_server ...`` / ``sglang serve ...`` as people paste
them (continuations, prompts, env prefixes, ``export`` lines, ``docker run -e`` wrappers, pipes), and
which command of a section is the one that worked."""

from __future__ import annotations

import re
import shlex

from tools.engines import deployment_flags, model_flags
from tools.knowledge.models import LaunchCommand
from tools.knowledge.verdicts import verdict_of

_LAUNCHER_RE = re.compile(r"(?:-m\s+[\w.]*launch_server\b|(?:^|[\s/])sglang\s+serve\b)")


_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


_SHELL_OPERATORS = frozenset({"|", "||", "&&", ";", "&", "|&", ";;"})


def parse_launch_command(text: str) -> LaunchCommand | None:
    """Parse one launch command (possibly several lines) into a LaunchCommand; None if there is none.

    Handles ``\\`` line continuations, a leading ``$ `` prompt, ``export VAR=value`` lines before the
    command, ``VAR=value`` / ``env VAR=value`` prefixes, ``docker run -e VAR=value ... <image>``
    wrappers, ``# comments``, and stops at the first pipe, ``&&``/``;`` or redirection. Quoted values
    are unquoted the way a POSIX shell would. Only the first launch command in ``text`` is returned.
    """
    commands = _commands_in_block(text)
    return commands[0] if commands else None


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if line.endswith("\\") and not line.endswith("\\\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        stripped = buf.strip()
        if stripped.startswith("$ "):
            stripped = stripped[2:].strip()
        if stripped:
            out.append(stripped)
        buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def _split_shell(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True, posix=True)
    except ValueError:
        return line.split("#", 1)[0].split()  # unbalanced quotes in notes: best effort


def _exports(line: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for tok in _split_shell(line)[1:]:
        if _ASSIGN_RE.match(tok):
            key, _, value = tok.partition("=")
            env[key] = value
    return env


def _launcher_at(tokens: list[str], i: int) -> int:
    """Length of the launcher starting at tokens[i] (0 when none starts there)."""
    tok = tokens[i]
    base = tok.rsplit("/", 1)[-1]
    if re.fullmatch(r"python[\d.]*", base):
        j = i + 1
        while j < len(tokens) and tokens[j].startswith("-") and tokens[j] != "-m" and j - i <= 3:
            j += 1  # interpreter options such as -u or -X faulthandler are rare; -u is common
        if j + 1 < len(tokens) and tokens[j] == "-m" and tokens[j + 1].endswith("launch_server"):
            return j + 2 - i
        return 0
    if base == "sglang" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
        return 2
    return 0


def _parse_command_line(line: str) -> LaunchCommand | None:
    tokens = _split_shell(line)
    start = length = -1
    for i in range(len(tokens)):
        n = _launcher_at(tokens, i)
        if n:
            start, length = i, n
            break
    if start < 0:
        return None
    env: dict[str, str] = {}
    prefix = tokens[:start]
    for k, tok in enumerate(prefix):
        if _ASSIGN_RE.match(tok) and (
            k == 0 or _ASSIGN_RE.match(prefix[k - 1]) or prefix[k - 1] in ("env", "sudo")
        ):
            key, _, value = tok.partition("=")
            env[key] = value
        elif tok in ("-e", "--env") and k + 1 < len(prefix) and _ASSIGN_RE.match(prefix[k + 1]):
            key, _, value = prefix[k + 1].partition("=")
            env[key] = value
        elif tok.startswith("--env=") and _ASSIGN_RE.match(tok[6:]):
            key, _, value = tok[6:].partition("=")
            env[key] = value
    argv: list[str] = []
    for tok in tokens[start:]:
        if tok in _SHELL_OPERATORS or re.match(r"^\d*(?:>|<|&>)", tok):
            break
        argv.append(tok)
    model_path, flags = _parse_flags(argv[length:])
    return LaunchCommand(argv=argv, env=env, model_path=model_path, flags=flags)


def _parse_flags(args: list[str]) -> tuple[str | None, dict[str, str | bool]]:
    """(the model, the configuration flags): the flags that say where the server listens or what it
    loads (`tools.engines.deployment_flags`, ``knowledge/engines.toml``) are kept in argv only."""
    model_names, kept_out = model_flags(), deployment_flags()
    model_path: str | None = None
    flags: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            if model_path is None and not flags:
                model_path = tok  # `sglang serve MODEL` style positional
            continue
        name, eq, value = tok.partition("=")
        if not eq:
            values: list[str] = []
            while i < len(args) and (not args[i].startswith("-") or _is_negative_number(args[i])):
                values.append(args[i])
                i += 1
            value = " ".join(values)
        parsed: str | bool = value if (eq or value) else True
        if name in model_names:
            model_path = str(parsed) if parsed is not True else model_path
        if name in kept_out:
            continue
        flags[name] = parsed
    return model_path, flags


def _is_negative_number(tok: str) -> bool:
    return bool(re.fullmatch(r"-\d+(\.\d+)?", tok))


def commands_in(body: str) -> list[LaunchCommand]:
    """Every launch command of a section in order: fenced blocks, then inline spans, by position."""
    found: list[tuple[int, LaunchCommand]] = []
    offset = 0
    in_block: list[str] | None = None
    block_start = 0
    fence = ""
    prose_chunks: list[tuple[int, str]] = []
    for line in body.split("\n"):
        stripped = line.strip()
        m = re.match(r"^(`{3,}|~{3,})", stripped)
        if in_block is None and m:
            in_block, fence, block_start = [], m.group(1)[0] * 3, offset
        elif in_block is not None and m and stripped.startswith(fence):
            found.extend((block_start + k, c) for k, c in enumerate(_commands_in_block("\n".join(in_block))))
            in_block = None
        elif in_block is not None:
            in_block.append(line)
        else:
            prose_chunks.append((offset, line))
        offset += len(line) + 1
    if in_block is not None:
        found.extend((block_start + k, c) for k, c in enumerate(_commands_in_block("\n".join(in_block))))
    for pos, line in prose_chunks:
        for span in re.finditer(r"`([^`]+)`", line):
            if _LAUNCHER_RE.search(span.group(1)):
                cmd = parse_launch_command(span.group(1))
                if cmd is not None:
                    found.append((pos + span.start(), cmd))
    found.sort(key=lambda item: item[0])
    return [c for _, c in found]


def _commands_in_block(block: str) -> list[LaunchCommand]:
    commands: list[LaunchCommand] = []
    env: dict[str, str] = {}
    comment: str | None = None
    for line in _logical_lines(block):
        if line.startswith("#"):
            comment = line.lstrip("#").strip() or comment
            continue
        if re.match(r"^export\s+", line):
            env.update(_exports(line))
            continue
        if _LAUNCHER_RE.search(line):
            cmd = _parse_command_line(line)
            if cmd is not None:
                cmd.env = {**env, **cmd.env}
                cmd.comment = comment
                commands.append(cmd)
        comment = None
    return commands


def working_command(commands: list[LaunchCommand]) -> LaunchCommand | None:
    """The command that worked: the last whose comment reads as success, else the last whose comment does
    not read as failure, else the last; None without commands."""
    if not commands:
        return None
    verdicts = [verdict_of(c.comment or "") for c in commands]
    for cmd, verdict in zip(reversed(commands), reversed(verdicts), strict=True):
        if verdict == "works":
            return cmd
    for cmd, verdict in zip(reversed(commands), reversed(verdicts), strict=True):
        if verdict != "fails":
            return cmd
    return commands[-1]


def flags_text(cmd: LaunchCommand | None) -> str:
    """A command's flags as one line of text (``--x 1 --y``), ``""`` for no command."""
    if cmd is None:
        return ""
    return " ".join(f"{k} {v}" if v is not True else k for k, v in cmd.flags.items())
