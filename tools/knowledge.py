"""Knowledge reader: an engineer's FINDINGS.md notes -> Findings, and how relevant each is to a case.

A findings file is Markdown written by people, so the reader is tolerant and every rule is a
heuristic documented where it is applied:

- **Sections.** A heading that carries a date starts a finding at any level (``#`` to ``######``).
  Without dates anywhere, each ``##`` heading starts one (or the shallowest heading level in use, if
  the file has no ``##``). Deeper undated headings stay inside their section. Text before the first
  section (and under shallower, grouping headings) is context: a section that names no GPU inherits the
  GPU the context names ("same box"); one without a model inherits it from a grouping heading
  ("## GLM-5" over "### 2026-02-01 ..."). A section with no date, command, model, GPU or fact
  (e.g. "## Misc") is not a finding.
- **Commands.** Fenced code blocks (``` or ~~~) and inline code spans holding
  ``python[3] -m sglang.launch_server`` (any ``*.launch_server`` module) or ``sglang serve``: ``\\``
  continuations, ``$`` prompts, ``VAR=value`` prefixes, ``env``/``docker run -e`` wrappers, ``export
  VAR=value`` lines earlier in the same block, ``# comments``, and trailing pipes/redirections.
- **Working command.** The last command whose preceding ``#`` comment reads as success; else the last
  command whose comment does not read as failure; else the last command. Its flags, env and model path
  become the finding's.
- **Outcome.** See ``_outcome``: a verdict in the heading ("works", "fixed", "fails (unresolved)") is the
  author's summary and wins; otherwise a resolution in the prose ("Fixed by", "finally serving") beats
  the failures described before it, so a failure that was then fixed counts as ``works``; otherwise
  the last verdict word in the prose decides; no verdict at all is ``unknown``.

Sources of facts: SGLang flag and config-key names from ``sglang/srt/server_args.py`` (0.5.x);
GPU names as ``nvidia-smi`` prints them; model-family features (MoE/MLA/DSA) from the public model
cards of the families listed in ``_FAMILY_FEATURES``.
"""

from __future__ import annotations

import datetime as _dt
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tools.flags import FlagCatalog, FlagError, FlagValue

__all__ = [
    "FACT_KEYS",
    "Finding",
    "FlagDifference",
    "KnowledgeError",
    "LaunchCommand",
    "flag_diff",
    "gpu_names",
    "infer_features",
    "parse_findings",
    "parse_launch_command",
    "read_findings",
    "relevance",
]

Outcome = Literal["works", "fails", "unknown"]

#: Effective-config keys read from findings text (same names as the signature facts).
FACT_KEYS = (
    "kv_cache_dtype",
    "attention_backend",
    "nsa_prefill_backend",
    "nsa_decode_backend",
    "fp8_gemm_backend",
    "moe_runner_backend",
    "mem_fraction_static",
)
# Other spellings of the same facts: SGLang's dest name for --fp8-gemm-backend, and the DSA names
# that replaced the NSA ones in SGLang 0.5.18.
_FACT_ALIASES = {
    "fp8_gemm_runner_backend": "fp8_gemm_backend",
    "dsa_prefill_backend": "nsa_prefill_backend",
    "dsa_decode_backend": "nsa_decode_backend",
}
# Flags that say where the server listens or what it loads, not how it runs: kept in argv only.
_NON_CONFIG_FLAGS = frozenset({"--model-path", "--model", "--host", "--port"})


class KnowledgeError(Exception):
    """A knowledge file cannot be read; the message is one line and names the file."""


class LaunchCommand(BaseModel):
    """One launch command found in notes.

    ``argv`` starts at the launcher (``python -m sglang.launch_server`` / ``sglang serve``) and stops
    before any pipe or redirection. ``flags`` maps each flag *as written* (may be an alias or
    abbreviation; resolve with ``FlagCatalog``) to its value, ``True`` for a bare flag; model path,
    host and port are left out of ``flags``. ``env`` holds ``VAR=value`` prefixes, preceding
    ``export`` lines of the same block and ``docker -e`` settings. ``comment`` is the ``#`` comment
    line right above the command, if any.
    """

    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    model_path: str | None = None
    flags: dict[str, str | bool] = Field(default_factory=dict)
    comment: str | None = None


class Finding(BaseModel):
    """One section of a findings file.

    ``date`` is ISO (``2026-01-12``, or ``2026-01`` when only a month is given). ``hardware`` is the
    GPUs named, e.g. ``8x RTX PRO 6000``; ``gpus`` the canonical GPU names (``gpu_names``), first the
    section's own, else inherited from the file's context. ``flags``/``env`` are those of the working
    command (see module docstring). ``facts`` are effective-config values quoted in the text
    (keys in FACT_KEYS). ``features`` come from ``infer_features`` over the title, text and model.
    ``text`` is the section body as written.
    """

    source: str
    title: str
    date: str | None = None
    model: str | None = None
    hardware: str | None = None
    outcome: Outcome = "unknown"
    commands: list[LaunchCommand] = Field(default_factory=list)
    flags: dict[str, str | bool] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    facts: dict[str, str] = Field(default_factory=dict)
    text: str = ""
    gpus: list[str] = Field(default_factory=list)
    features: list[str] = Field(default_factory=list)


class FlagDifference(BaseModel):
    """One flag that differs between a failing baseline and a known-good finding.

    ``before`` is the baseline's value, ``after`` the finding's; ``None`` means "not set".
    """

    name: str
    before: str | bool | None
    after: str | bool | None


# --- reading files -------------------------------------------------------------------------------------


#: The largest findings file read (bytes): an engineer's notes are kilobytes; a 16 MB file cost a run
#: 100 s and 700 MB of memory, so a file over this is refused in one line instead.
MAX_FINDINGS_BYTES = 1 << 20


def read_findings(path: Path) -> list[Finding]:
    """Read one findings Markdown file into Findings, in file order.

    Raises KnowledgeError (one line, names the file) when the file is missing, unreadable, a
    directory, not UTF-8 text, or larger than `MAX_FINDINGS_BYTES` (read no further than that). A
    readable file without findings gives ``[]``.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FINDINGS_BYTES + 1)  # never more than the limit in memory
        if len(raw) > MAX_FINDINGS_BYTES:
            raise KnowledgeError(
                f"{path}: findings file is over {MAX_FINDINGS_BYTES >> 20} MiB ({path.stat().st_size / (1 << 20):.1f} MiB), "
                "too large to read as notes; keep the entries about this deployment in a smaller file"
            )
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KnowledgeError(f"{path}: findings file is not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise KnowledgeError(f"{path}: cannot read findings file: {reason}") from exc
    return parse_findings(text, source=str(path))


def parse_findings(text: str, *, source: str = "") -> list[Finding]:
    """Split Markdown text into sections and build a Finding for each (rules in the module docstring)."""
    lines = text.replace("\r\n", "\n").split("\n")
    headings = _headings(lines)
    if not headings:
        finding = _build_finding(source, _first_line_title(lines, source), "\n".join(lines), "")
        return [finding] if finding is not None else []
    dated = [h for h in headings if _find_date(h[2]) is not None]
    levels = {h[1] for h in headings}
    if dated:
        base = min(h[1] for h in dated)
    elif 2 in levels:
        base = 2
    else:
        base = min(levels)
        if base == 1 and sum(1 for h in headings if h[1] == 1) == 1 and len(levels) > 1:
            base = min(lv for lv in levels if lv > 1)  # a single "# Title" over deeper sections

    findings: list[Finding] = []
    boundaries = [h for h in headings if h[1] <= base or _find_date(h[2]) is not None]
    preamble = "\n".join(lines[: boundaries[0][0]]) if boundaries else ""
    # level -> (title, prose) of the grouping headings above the current section ("# Notes", "## Kimi-K2")
    groups: dict[int, tuple[str, str]] = {}
    for n, (start, level, title) in enumerate(boundaries):
        end = boundaries[n + 1][0] if n + 1 < len(boundaries) else len(lines)
        body = "\n".join(lines[start + 1 : end])
        above = [groups[lv] for lv in sorted(groups) if lv < level]
        context = "\n".join([preamble, *(f"{t}\n{b}" for t, b in above)])
        parents = "\n".join(t for t, _ in reversed(above))  # nearest first
        if level < base and _find_date(title) is None:
            groups = {lv: g for lv, g in groups.items() if lv < level}
            groups[level] = (title, body)
            # A grouping heading is a finding only when it holds a launch command itself.
            finding = _build_finding(source, title, body, context, parents) if _commands_in(body) else None
        else:
            finding = _build_finding(source, title, body, context, parents)
        if finding is not None:
            findings.append(finding)
    return findings


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, text) of ATX headings outside fenced code blocks."""
    out: list[tuple[int, int, str]] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        m = re.match(r"^(`{3,}|~{3,})", stripped)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif stripped.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        h = re.match(r"^(#{1,6})\s+(.+?)\s*#*\s*$", line)
        if h:
            out.append((i, len(h.group(1)), h.group(2).strip()))
    return out


def _first_line_title(lines: list[str], source: str) -> str:
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    return first[:120] or Path(source).name or "findings"


def _build_finding(source: str, title: str, body: str, context: str, parents: str = "") -> Finding | None:
    """One Finding from a section; None when the section relates to nothing ("## Misc", "## TODO").

    ``context`` is the text above the section (preamble, grouping headings) that may name the host's
    GPUs; ``parents`` the grouping headings' titles, which may name the model.
    """
    prose, blocks = _split_prose_and_code(body)
    commands = _commands_in(body)
    working = _working_command(commands)
    date = _find_date(title) or _date_in_body(prose)
    model = (
        working.model_path
        if working and working.model_path
        else _model_from_text(title) or _model_from_text(prose) or _model_from_text(parents)
    )
    own_gpus = _gpu_mentions(title + "\n" + prose + "\n" + "\n".join(blocks))
    facts = _facts(body)
    if not (commands or date or model or own_gpus or facts):
        return None
    # A section that counts its GPUs ("8x H200") or names one in its title says what it ran on. Otherwise the preamble names the
    # box it ran on, and GPUs the section merely mentions ("kernels built for Hopper/B200, not for this
    # card") come after it.
    title_gpus = {g for g, _ in _gpu_mentions(title)}
    if any(c or g in title_gpus for g, c in own_gpus):
        explicit = [gc for gc in own_gpus if gc[1] or gc[0] in title_gpus]
        gpus_with_counts = explicit + [gc for gc in own_gpus if gc not in explicit]
    else:
        box_gpus = _gpu_mentions(context)
        box_names = {g for g, _ in box_gpus}
        gpus_with_counts = box_gpus + [(g, c) for g, c in own_gpus if g not in box_names]
    feature_text = "\n".join([title, prose, model or "", _flags_text(working)])
    return Finding(
        source=source,
        title=title,
        date=date,
        model=model,
        hardware=", ".join(f"{c}x {g}" if c else g for g, c in gpus_with_counts) or None,
        outcome=_outcome(title, prose),
        commands=commands,
        flags=dict(working.flags) if working else {},
        env=dict(working.env) if working else {},
        facts=facts,
        text=body.strip("\n"),
        gpus=[g for g, _ in gpus_with_counts],
        features=sorted(infer_features(feature_text)),
    )


def _split_prose_and_code(body: str) -> tuple[str, list[str]]:
    """Return (prose with fenced blocks removed, list of fenced block contents)."""
    prose: list[str] = []
    blocks: list[str] = []
    current: list[str] | None = None
    fence = ""
    for line in body.split("\n"):
        stripped = line.strip()
        m = re.match(r"^(`{3,}|~{3,})", stripped)
        if current is None and m:
            fence = m.group(1)[0] * 3
            current = []
            continue
        if current is not None and stripped.startswith(fence) and m:
            blocks.append("\n".join(current))
            current = None
            continue
        if current is not None:
            current.append(line)
        else:
            prose.append(line)
    if current is not None:
        blocks.append("\n".join(current))  # unterminated fence: still code
    return "\n".join(prose), blocks


# --- launch commands -----------------------------------------------------------------------------------

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
        if name in ("--model-path", "--model"):
            model_path = str(parsed) if parsed is not True else model_path
        if name in _NON_CONFIG_FLAGS:
            continue
        flags[name] = parsed
    return model_path, flags


def _is_negative_number(tok: str) -> bool:
    return bool(re.fullmatch(r"-\d+(\.\d+)?", tok))


def _commands_in(body: str) -> list[LaunchCommand]:
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


def _working_command(commands: list[LaunchCommand]) -> LaunchCommand | None:
    if not commands:
        return None
    verdicts = [_verdict_of(c.comment or "") for c in commands]
    for cmd, verdict in zip(reversed(commands), reversed(verdicts), strict=True):
        if verdict == "works":
            return cmd
    for cmd, verdict in zip(reversed(commands), reversed(verdicts), strict=True):
        if verdict != "fails":
            return cmd
    return commands[-1]


def _flags_text(cmd: LaunchCommand | None) -> str:
    if cmd is None:
        return ""
    return " ".join(f"{k} {v}" if v is not True else k for k, v in cmd.flags.items())


# --- dates, models, GPUs -------------------------------------------------------------------------------

_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    )
}
_MONTH_RE = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"


def _find_date(text: str) -> str | None:
    """First date in ``text`` as ISO ``YYYY-MM-DD`` (or ``YYYY-MM``); None when there is none."""
    candidates: list[tuple[int, str]] = []
    for m in re.finditer(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)", text):
        candidates.append((m.start(), _iso(m.group(1), m.group(2), m.group(3))))
    for m in re.finditer(_MONTH_RE + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b", text, re.IGNORECASE):
        candidates.append((m.start(), _iso(m.group(3), str(_MONTHS[m.group(1)[:3].lower()]), m.group(2))))
    for m in re.finditer(
        r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH_RE + r",?\s+(\d{4})\b", text, re.IGNORECASE
    ):
        candidates.append((m.start(), _iso(m.group(3), str(_MONTHS[m.group(2)[:3].lower()]), m.group(1))))
    good = sorted((pos, d) for pos, d in candidates if d)
    if good:
        return good[0][1]
    m2 = re.search(r"(?<![\d.])(20\d{2})-(0[1-9]|1[0-2])(?![\d-])", text)
    return f"{m2.group(1)}-{m2.group(2)}" if m2 else None


def _iso(year: str, month: str, day: str) -> str:
    try:
        return _dt.date(int(year), int(month), int(day)).isoformat()
    except ValueError:
        return ""


def _date_in_body(prose: str) -> str | None:
    m = re.search(r"^\s*(?:\*\*)?date(?:\*\*)?\s*:\s*(.+)$", prose, re.IGNORECASE | re.MULTILINE)
    if m:
        found = _find_date(m.group(1))
        if found:
            return found
    head = "\n".join(prose.strip().split("\n")[:3])
    return _find_date(head)


_MODEL_RE = re.compile(
    r"\b((?:[\w.-]+/)?(?:Kimi|GLM|DeepSeek|Qwen|Meta-Llama|Llama|Mistral|Mixtral|Magistral|gpt-oss|MiniMax|"
    r"Gemma|Phi|Grok|Nemotron|Hunyuan|ERNIE|Step|Ling|Ring|MiMo|LongCat)[\w.\-]*)",
    re.IGNORECASE,
)


def _model_from_text(text: str) -> str | None:
    m = _MODEL_RE.search(text)
    return m.group(1).rstrip(".-") if m else None


# (canonical name, regex, architecture); longest names first so "GB200" is not read as "B200".
_GPUS: list[tuple[str, str, str]] = [
    ("RTX PRO 6000", r"RTX\s*PRO\s*6000(?:\s+Blackwell)?", "sm120"),
    ("RTX 6000 Ada", r"RTX\s*6000\s*Ada", "sm89"),
    ("GB300", r"GB300", "sm100"),
    ("GB200", r"GB200", "sm100"),
    ("GH200", r"GH200", "sm90"),
    ("B300", r"B300", "sm100"),
    ("B200", r"B200", "sm100"),
    ("B100", r"B100", "sm100"),
    ("H200", r"H200", "sm90"),
    ("H100", r"H100", "sm90"),
    ("H800", r"H800", "sm90"),
    ("H20", r"H20", "sm90"),
    ("A100", r"A100", "sm80"),
    ("A800", r"A800", "sm80"),
    ("A10G", r"A10G", "sm86"),
    ("L40S", r"L40S", "sm89"),
    ("L40", r"L40", "sm89"),
    ("L4", r"L4", "sm89"),
    ("MI355X", r"MI355X", "gfx950"),
    ("MI325X", r"MI325X", "gfx942"),
    ("MI300X", r"MI300X", "gfx942"),
]
_RTX_RE = re.compile(r"\bRTX\s*(50[6-9]0|40[6-9]0|30[6-9]0)(\s*Ti)?\b", re.IGNORECASE)
_RTX_ARCH = {"5": "sm120", "4": "sm89", "3": "sm86"}
_GPU_RE = re.compile(
    r"(?:(?<![\w.])(\d{1,3})\s*(?:x|×|\*)\s*)?(?:NVIDIA\s+)?\b("
    + "|".join(f"(?:{rx})" for _, rx, _ in _GPUS)
    + r")\b",
    re.IGNORECASE,
)


def _canonical_gpu(raw: str) -> str | None:
    for name, rx, _ in _GPUS:
        if re.fullmatch(rx, raw, re.IGNORECASE):
            return name
    return None


def _gpu_mentions(text: str) -> list[tuple[str, int | None]]:
    """Canonical GPU names in order of first mention, each with a count if one was written next to it."""
    hits: list[tuple[int, str, int | None]] = []
    for m in _GPU_RE.finditer(text):
        name = _canonical_gpu(m.group(2))
        if name:
            hits.append((m.start(2), name, int(m.group(1)) if m.group(1) else None))
    for m in _RTX_RE.finditer(text):
        before = re.search(
            r"(?<![\w.])(\d{1,3})\s*(?:x|×|\*)\s*(?:NVIDIA\s+)?(?:GeForce\s+)?$", text[: m.start()]
        )
        name = f"RTX {m.group(1)}" + (" Ti" if m.group(2) else "")
        hits.append((m.start(), name, int(before.group(1)) if before else None))
    hits.sort(key=lambda h: h[0])
    out: dict[str, int | None] = {}
    for _, name, count in hits:
        if name not in out or (out[name] is None and count):
            out[name] = count
    return list(out.items())


def gpu_names(text: str) -> list[str]:
    """Canonical GPU names mentioned in ``text`` (e.g. ``"NVIDIA RTX PRO 6000 Blackwell Server Edition"``
    -> ``["RTX PRO 6000"]``, ``"NVIDIA GeForce RTX 5090"`` -> ``["RTX 5090"]``), in order of mention.
    Names follow ``nvidia-smi --query-gpu=name`` output and common shorthand in notes.
    """
    return [name for name, _ in _gpu_mentions(text)]


def _gpu_arch(name: str) -> str | None:
    for canonical, _, arch in _GPUS:
        if canonical == name:
            return arch
    m = re.match(r"RTX (\d)0\d0", name)
    return _RTX_ARCH.get(m.group(1)) if m else None


# --- features ------------------------------------------------------------------------------------------

# Model families -> architecture features, from the families' public model cards.
_FAMILY_FEATURES: list[tuple[str, frozenset[str]]] = [
    (r"deepseek[-_ ]?v3\.2", frozenset({"moe", "mla", "dsa"})),
    (r"deepseek[-_ ]?(?:v3|r1|v2)", frozenset({"moe", "mla"})),
    (r"kimi[-_ ]?k2", frozenset({"moe", "mla"})),
    (r"glm[-_ ]?5", frozenset({"moe", "dsa"})),
    (r"glm[-_ ]?4\.[5-7]", frozenset({"moe"})),
    (
        r"mixtral|gpt-oss|minimax[-_ ]?m\d|llama[-_ ]?4|qwen\d?(?:\.\d)?[-_ ]?(?:\d+b[-_])?a\d+(?:\.\d+)?b",
        frozenset({"moe"}),
    ),
    (r"-a\d+(?:\.\d+)?b\b", frozenset({"moe"})),
    (r"llama[-_ ]?(?:2|3)|mistral[-_ ]?(?:7b|small|nemo)|gemma|phi[-_ ]?\d", frozenset({"dense"})),
]
# (feature, pattern, flags). Matches preceded by a negation ("no DSA", "without MoE") are skipped.
_FEATURE_PATTERNS: list[tuple[str, str, int]] = [
    (
        "moe",
        r"\bMoE\b|mixture[- ]of[- ]experts|\bexperts?\b|--moe-|--ep(?:-size)?\b|--expert-parallel",
        re.IGNORECASE,
    ),
    ("mla", r"\bMLA\b", 0),
    ("mla", r"multi-head latent attention", re.IGNORECASE),
    ("dsa", r"\bDSA\b|\bNSA\b", 0),
    ("dsa", r"sparse[- ]attention|--(?:nsa|dsa)-|\b(?:nsa|dsa)_(?:prefill|decode)_backend\b", re.IGNORECASE),
    ("nvfp4", r"nvfp4|modelopt_fp4|(?<=-)FP4\b", re.IGNORECASE),
    ("mxfp4", r"mxfp4", re.IGNORECASE),
    # "fp8" as a weight format: model names (-FP8), --quantization fp8 / w8a8_fp8 / modelopt_fp8, "FP8
    # checkpoint". Not the KV-cache dtypes (fp8_e4m3) or GEMM backend flags (--fp8-gemm-backend).
    ("fp8", r"(?<![a-z0-9])fp8(?![a-z0-9_-])(?!\s*(?:kv|gemm|scale|cache|attention))", re.IGNORECASE),
    ("dense", r"\bdense (?:model|transformer|\d+b)\b", re.IGNORECASE),
]
_NEGATION_RE = re.compile(
    r"\b(?:no|not|without|non|none of the|isn't|is not)[\s-]*(?:\w+[\s-]+)?$", re.IGNORECASE
)


def infer_features(text: str) -> set[str]:
    """Model features named or implied in ``text``: subset of moe, mla, dsa, nvfp4, mxfp4, fp8, dense.

    From explicit words (``MoE``, ``MLA``, ``DSA``/``NSA``/"sparse attention", ``NVFP4``), flags that
    only exist for such models (``--moe-runner-backend``, ``--nsa-decode-backend``), quantization names
    (``modelopt_fp4`` -> nvfp4, ``--quantization fp8`` -> fp8) and known model families
    (``Kimi-K2`` -> moe+mla, ``DeepSeek-V3.2`` -> moe+mla+dsa, ``...-A22B`` -> moe). A mention right
    after a negation ("no DSA", "without MoE") does not count. ``dense`` is dropped when moe is found.
    """
    found: set[str] = set()
    for feature, pattern, flags in _FEATURE_PATTERNS:
        for m in re.finditer(pattern, text, flags):
            if not _NEGATION_RE.search(text[max(0, m.start() - 24) : m.start()]):
                found.add(feature)
                break
    lowered = text.lower()
    for pattern, features in _FAMILY_FEATURES:
        if re.search(pattern, lowered):
            found |= features
    if "moe" in found:
        found.discard("dense")
    return found


# --- facts ---------------------------------------------------------------------------------------------

_FACT_KEY_ALT = "|".join(re.escape(k) for k in (*FACT_KEYS, *_FACT_ALIASES))
_FACT_KV_RE = re.compile(
    r"[\"']?\b(?P<key>" + _FACT_KEY_ALT + r")\b[\"']?\s*(?:=|:)\s*[\"']?(?P<value>[A-Za-z0-9_.\-]+)"
)
_FACT_PROSE_RE = re.compile(
    r"\b(?P<key>" + _FACT_KEY_ALT + r")`?\s+(?:resolved|was set|is set|defaulted|fell back|was|is|=)\s+to\s+"
    r"`?(?P<value>[A-Za-z0-9_.\-]+)"
)
_KV_PROSE_RE = re.compile(
    r"KV[- ]cache(?:\s+dtype)?\s+(?:resolved|was set|is set|defaulted|fell back|was auto-set|auto-resolved)\s+to\s+"
    r"`?(?P<value>auto|bf16|bfloat16|fp8_e4m3|fp8_e5m2|fp4_e2m1|mxfp8|nvfp4)\b",
    re.IGNORECASE,
)
# SGLang's own log wording (0.5.x): "Setting KV cache dtype to fp8_e4m3 for DeepSeek NSA." and
# "Setting NSA backend to flashmla_auto for prefill and flashmla_kv for decode ...".
_KV_LOG_RE = re.compile(r"Setting KV cache dtype to (?P<value>[A-Za-z0-9_]+)")
_NSA_LOG_RE = re.compile(
    r"Setting (?:NSA|DSA) backends? to (?P<prefill>[A-Za-z0-9_]+) for prefill and (?P<decode>[A-Za-z0-9_]+) for decode"
)


def _facts(text: str) -> dict[str, str]:
    """Effective-config facts quoted in ``text``; a later mention of a key wins."""
    hits: list[tuple[int, str, str]] = []
    for m in _FACT_KV_RE.finditer(text):
        hits.append((m.start(), m.group("key"), m.group("value")))
    for m in _FACT_PROSE_RE.finditer(text):
        hits.append((m.start(), m.group("key"), m.group("value")))
    for m in _KV_PROSE_RE.finditer(text):
        hits.append((m.start(), "kv_cache_dtype", m.group("value")))
    for m in _KV_LOG_RE.finditer(text):
        hits.append((m.start(), "kv_cache_dtype", m.group("value")))
    for m in _NSA_LOG_RE.finditer(text):
        hits.append((m.start(), "nsa_prefill_backend", m.group("prefill")))
        hits.append((m.start(), "nsa_decode_backend", m.group("decode")))
    facts: dict[str, str] = {}
    for _, key, value in sorted(hits, key=lambda h: h[0]):
        value = value.rstrip(".-")
        if value.lower() in ("none", "null", ""):
            continue
        facts[_FACT_ALIASES.get(key, key)] = value
    return facts


# --- outcome -------------------------------------------------------------------------------------------

_STRONG_POS = r"fixed|resolved|solved|workaround|finally (?:works|working|serving|runs|running|loads)|works now|now works|now serving"
_WEAK_POS = (
    r"works|worked|working|serving correctly|serves correctly|served correctly|runs fine|running fine|ran fine|"
    r"out of the box|no issues|success(?:ful(?:ly)?)?|passes|passed"
)
_STRONG_NEG = r"unresolved|not (?:yet )?(?:fixed|resolved|solved)|gave up|giving up|still (?:fails|failing|broken|crashes|crashing|hangs|hanging|nan|oom)"
_WEAK_NEG = (
    r"fails?|failed|failing|failure|crash(?:es|ed|ing)?|nans?|hangs?|hung|oom|out of memory|errors?|broken|"
    r"assert(?:ion)?(?:error)?|garbage|segfault(?:s|ed)?|exception|doesn't work|does not work|didn't work|"
    r"did not work|not working|no luck"
)
_VERDICT_RE = re.compile(
    rf"\b(?:(?P<sneg>{_STRONG_NEG})|(?P<spos>{_STRONG_POS})|(?P<wneg>{_WEAK_NEG})|(?P<wpos>{_WEAK_POS}))\b",
    re.IGNORECASE,
)
_VERDICT_NEGATION_RE = re.compile(
    r"(?:\b(?:no|not|never|none of (?:which|them|these|those|it)|nothing|without|neither|nor)|n't)\s+(?:\w+\s+)?$",
    re.IGNORECASE,
)


def _verdicts(text: str) -> list[str]:
    """Verdict tokens in order: 'spos', 'wpos', 'sneg', 'wneg' (negated positives become 'sneg')."""
    out: list[str] = []
    for m in _VERDICT_RE.finditer(text):
        kind = m.lastgroup or ""
        negated = bool(_VERDICT_NEGATION_RE.search(text[max(0, m.start() - 30) : m.start()]))
        if negated:
            if kind in ("spos", "wpos"):
                out.append("sneg")  # "none of which fixed it", "doesn't work"
            continue  # "no NaNs", "without errors": not a failure, not a verdict either
        out.append(kind)
    return out


def _verdict_of(text: str) -> Outcome:
    kinds = _verdicts(text)
    if not kinds:
        return "unknown"
    return "works" if kinds[-1] in ("spos", "wpos") else "fails"


def _outcome(title: str, prose: str) -> Outcome:
    """works / fails / unknown for a section (rule in the module docstring).

    1. The heading: a strong failure ("unresolved", "gave up") -> fails; any success word -> works;
       a symptom word ("NaN", "crash") -> tentatively fails.
    2. The prose (code blocks excluded): a strong failure after the last resolution -> fails; a
       resolution ("fixed", "resolved", "finally serving") -> works; else the last verdict word decides.
    3. Else the heading's tentative verdict, else unknown.
    """
    heading = _verdicts(title)
    if "sneg" in heading:
        return "fails"
    if "spos" in heading or "wpos" in heading:
        return "works"
    body = _verdicts(re.sub(r"`([^`]*)`", r"\1", prose))
    last_spos = max((i for i, k in enumerate(body) if k == "spos"), default=-1)
    last_sneg = max((i for i, k in enumerate(body) if k == "sneg"), default=-1)
    if last_sneg > last_spos:
        return "fails"
    if last_spos >= 0:
        return "works"
    if body:
        return "works" if body[-1] == "wpos" else "fails"
    if heading:
        return "fails"
    return "unknown"


# --- relevance -----------------------------------------------------------------------------------------

_W_HARDWARE = 0.55
_W_FEATURES = 0.30
_W_MODEL = 0.15


def relevance(finding: Finding, *, model: str, features: set[str], gpu_name: str | None) -> float:
    """How much ``finding`` bears on a case, in 0..1 (unitless score for ordering).

    ``0.55 * hardware + 0.30 * features + 0.15 * model`` where
    hardware = 1.0 when the finding's first GPU is ``gpu_name`` (nvidia-smi name or shorthand),
    0.7 when another GPU it names is, 0.5 when only the architecture matches (e.g. RTX 5090 vs RTX PRO
    6000: both SM120), else 0 (also when ``gpu_name`` is None or unrecognised);
    features = Dice overlap of ``features`` (the case's, e.g. {"moe","dsa","nvfp4"}) and the finding's
    features (``Finding.features`` or inferred from its text);
    model = 1.0 for the same model (name after the last ``/``, case-insensitive), 0.5 for the same family
    (leading name, e.g. "glm"), else 0. The outcome is not part of the score: filter on it.
    """
    hardware = 0.0
    wanted = gpu_names(gpu_name) if gpu_name else []
    if wanted and finding.gpus:
        target = wanted[0]
        if finding.gpus[0] == target:
            hardware = 1.0
        elif target in finding.gpus:
            hardware = 0.7
        else:
            arch = _gpu_arch(target)
            if arch and arch == _gpu_arch(finding.gpus[0]):
                hardware = 0.5
    theirs = set(finding.features) or infer_features(finding.title + "\n" + finding.text)
    ours = {f.lower() for f in features}
    feature_score = 2 * len(ours & theirs) / (len(ours) + len(theirs)) if ours and theirs else 0.0
    model_score = _model_similarity(model, finding.model)
    score = _W_HARDWARE * hardware + _W_FEATURES * feature_score + _W_MODEL * model_score
    return max(0.0, min(1.0, score))


def _model_similarity(a: str | None, b: str | None) -> float:
    if not a or not b:
        return 0.0
    base_a = a.rstrip("/").rsplit("/", 1)[-1].lower()
    base_b = b.rstrip("/").rsplit("/", 1)[-1].lower()
    if base_a == base_b:
        return 1.0
    fam_a = re.match(r"[a-z]+", base_a.replace("meta-", ""))
    fam_b = re.match(r"[a-z]+", base_b.replace("meta-", ""))
    if fam_a and fam_b and fam_a.group(0) == fam_b.group(0):
        return 0.5
    return 0.0


def flag_diff(
    known_good: Mapping[str, FlagValue],
    baseline: Mapping[str, FlagValue],
    *,
    catalog: FlagCatalog | None = None,
) -> list[FlagDifference]:
    """Flags whose values differ between a failing baseline and a known-good finding, sorted by name.

    With a FlagCatalog both sides are first normalised to canonical names (unknown
    names are kept as written), so ``--tp 8`` and ``--tp-size 8`` compare equal. Flags that only
    identify the deployment (model path, host, port) are ignored. Values compare as strings, switches
    as ``True``.
    """

    def canon(name: str) -> str:
        if catalog is None:
            return name
        try:
            return catalog.resolve(name).name
        except FlagError:
            return name

    def normalised(flags: Mapping[str, FlagValue]) -> dict[str, str | bool]:
        out: dict[str, str | bool] = {}
        for key, value in flags.items():
            name = canon(key)
            if name in _NON_CONFIG_FLAGS or value is False or value is None:
                continue
            out[name] = value if value is True else str(value)
        return out

    good, base = normalised(known_good), normalised(baseline)
    diffs = [
        FlagDifference(name=name, before=base.get(name), after=good.get(name))
        for name in sorted(set(good) | set(base))
        if good.get(name) != base.get(name)
    ]
    return diffs
