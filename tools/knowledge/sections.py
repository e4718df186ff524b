"""Findings files: Markdown split into sections (rules in ``tools.knowledge``), each built into a Finding."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from tools.knowledge.commands import commands_in, flags_text, working_command
from tools.knowledge.facts import quoted_facts
from tools.knowledge.features import infer_features, model_from_text
from tools.knowledge.hardware import gpu_mentions
from tools.knowledge.models import Finding, KnowledgeError
from tools.knowledge.packages import packages_in
from tools.knowledge.verdicts import section_outcome

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
            finding = _build_finding(source, title, body, context, parents) if commands_in(body) else None
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
    commands = commands_in(body)
    working = working_command(commands)
    date = _find_date(title) or _date_in_body(prose)
    model = (
        working.model_path
        if working and working.model_path
        else model_from_text(title) or model_from_text(prose) or model_from_text(parents)
    )
    own_gpus = gpu_mentions(title + "\n" + prose + "\n" + "\n".join(blocks))
    facts = quoted_facts(body)
    packages = packages_in(prose)
    if not (commands or date or model or own_gpus or facts or packages):
        return None
    # A section that counts its GPUs ("8x H200") or names one in its title says what it ran on. Otherwise the preamble names the
    # box it ran on, and GPUs the section merely mentions ("kernels built for Hopper/B200, not for this
    # card") come after it.
    title_gpus = {g for g, _ in gpu_mentions(title)}
    if any(c or g in title_gpus for g, c in own_gpus):
        explicit = [gc for gc in own_gpus if gc[1] or gc[0] in title_gpus]
        gpus_with_counts = explicit + [gc for gc in own_gpus if gc not in explicit]
    else:
        box_gpus = gpu_mentions(context)
        box_names = {g for g, _ in box_gpus}
        gpus_with_counts = box_gpus + [(g, c) for g, c in own_gpus if g not in box_names]
    feature_text = "\n".join([title, prose, model or "", flags_text(working)])
    return Finding(
        source=source,
        title=title,
        date=date,
        model=model,
        hardware=", ".join(f"{c}x {g}" if c else g for g, c in gpus_with_counts) or None,
        outcome=section_outcome(title, prose),
        commands=commands,
        flags=dict(working.flags) if working else {},
        env=dict(working.env) if working else {},
        facts=facts,
        text=body.strip("\n"),
        gpus=[g for g, _ in gpus_with_counts],
        features=sorted(infer_features(feature_text)),
        packages=packages,
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
