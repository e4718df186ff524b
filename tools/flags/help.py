"""argparse ``--help`` text -> a ``FlagCatalog`` (layouts and facts in the package docstring, ``tools.flags``)."""

from __future__ import annotations

import re

from tools.flags.catalog import FlagCatalog
from tools.flags.spec import FlagSpec, ValueType
from tools.flags.values import is_int, is_number

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


_SECTION_RE = re.compile(r"^\S.*:\s*$")


_OPTION_LINE_RE = re.compile(r"^(?P<indent> {1,8})(?P<rest>-{1,2}[A-Za-z0-9?].*)$")


_DEFAULT_SUFFIX_RE = re.compile(r"\(default:\s*(?P<value>.*)\)\s*$", re.IGNORECASE)


_DEFAULT_INLINE_RE = re.compile(r"\(default:\s*(?P<value>[^()]*)\)", re.IGNORECASE)


_DEFAULT_PROSE_RE = re.compile(
    r"\bdefaults?(?:\s+value)?(?:\s+(?:is|to)\s+|\s*:\s*|\s+=\s*)(?P<q>['\"`]?)(?P<value>[^\s'\"`,;()]+)(?P=q)",
    re.IGNORECASE,
)


_DEFAULT_MARKED_RE = re.compile(r"['\"`](?P<value>[\w.\-]+)['\"`]\s*\(default\b", re.IGNORECASE)


_DEPRECATED_RE = re.compile(
    r"^\W*deprecated\b"  # "[Deprecated] Use ...", "Deprecated. Use ..."
    r"|\b(?:is|are|now|been|was)\s+deprecated\b"  # "Note: --x is deprecated now."
    r"|\(deprecated\b"
    r"|\bdeprecated\s+(?:alias|flag|option|argument|name|in\s+favou?r)\b"
    r"|\bwill\s+be\s+removed\b",
    re.IGNORECASE,
)


# Metavar words that say what a value is (metavars are argparse's upper-cased dest names).
_FLOAT_WORDS = frozenset("FRACTION RATIO FACTOR RATE TEMPERATURE TIMEOUT THRESHOLD".split())


_INT_WORDS = frozenset(
    "SIZE PORT NUM TOKENS BS LEN LENGTH STEPS COUNT SEED REQUESTS WORKERS INTERVAL NNODES RANK TOPK".split()
)


def parse_help(text: str, *, source: str = "", version: str | None = None) -> FlagCatalog:
    """Parse argparse ``--help`` output into a FlagCatalog.

    Tolerates ANSI colour (Python 3.14), noise before ``usage:``, option groups, help on the
    invocation line or the next, wrapped help and wrapped ``{a,b,...}`` choice lists, the 3.12 and
    3.13 alias renderings. Positional arguments are ignored. Never raises on odd input; an input
    without options gives an empty catalog.
    """
    lines = _ANSI_RE.sub("", text).replace("\r\n", "\n").replace("\t", "    ").split("\n")
    start = next((i for i, line in enumerate(lines) if line.lower().startswith("usage:")), None)
    if start is not None:
        # The usage block runs up to the first blank line; its bracketed synopsis is not parsed.
        i = start + 1
        while i < len(lines) and lines[i].strip():
            i += 1
        lines = lines[i:]
    return FlagCatalog(flags=_flags_of(_option_entries(lines)), source=source, version=version)


def _option_entries(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(invocation, help lines) of each option listed in help ``lines`` (after the usage block)."""
    entries: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    option_indent = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        if _SECTION_RE.match(line) or not line[0].isspace():
            current = None  # section header or description prose
            continue
        m = _OPTION_LINE_RE.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if m and (current is None or indent <= option_indent + 2):
            option_indent = len(m.group("indent"))
            invocation, help_part = _split_invocation(m.group("rest"))
            # A wrapped choice list continues on following lines until its brace closes.
            while invocation.count("{") > invocation.count("}") and i < len(lines) and lines[i].strip():
                more, help_more = _split_invocation(lines[i].strip())
                invocation += more
                help_part = help_part or help_more
                i += 1
            current = (invocation, [help_part] if help_part else [])
            entries.append(current)
            continue
        if current is not None and indent > option_indent:
            current[1].append(line.strip())
    return entries


def _flags_of(entries: list[tuple[str, list[str]]]) -> dict[str, FlagSpec]:
    """Each option entry as a FlagSpec by canonical name (the first entry of a name wins); a
    ``--x, --no-x`` pair becomes two switches that point at each other."""
    flags: dict[str, FlagSpec] = {}
    for invocation, help_lines in entries:
        spec = _spec_from_entry(invocation, _join_help(help_lines))
        if spec is None or spec.name in flags:
            continue
        flags[spec.name] = spec
        negative = "--no-" + spec.name[2:]
        if not spec.takes_value and negative in spec.aliases:
            spec.aliases.remove(negative)
            spec.negation = negative
            flags[negative] = FlagSpec(
                name=negative,
                takes_value=False,
                value_type="bool",
                help=f"Turns {spec.name} off. {spec.help}".strip(),
                deprecated=spec.deprecated,
                negates=spec.name,
            )
    return flags


def _split_invocation(rest: str) -> tuple[str, str]:
    """Split an option line into invocation and same-line help (separated by 2+ spaces)."""
    rest = rest.rstrip()
    # Inside an open brace a run of spaces is wrapping, not the help gap; argparse choices have no spaces.
    depth = 0
    for j, ch in enumerate(rest):
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth = max(0, depth - 1)
        elif depth == 0 and rest.startswith("  ", j):
            return rest[:j], rest[j:].strip()
    return rest, ""


def _join_help(lines: list[str]) -> str:
    out = ""
    for line in lines:
        if not out:
            out = line
        elif re.search(r"[A-Za-z]-$", out) and line[:1].isalpha():
            out += line  # textwrap broke a hyphenated word ("low-" + "latency")
        else:
            out += " " + line
    return out.strip()


def _split_top_level(invocation: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    buf = ""
    j = 0
    while j < len(invocation):
        ch = invocation[j]
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth = max(0, depth - 1)
        if depth == 0 and invocation.startswith(", ", j):
            parts.append(buf)
            buf = ""
            j += 2
            continue
        buf += ch
        j += 1
    parts.append(buf)
    return [p.strip() for p in parts if p.strip()]


def _spec_from_entry(invocation: str, help_text: str) -> FlagSpec | None:
    options: list[str] = []
    metavar: str | None = None
    for part in _split_top_level(invocation):
        opt, _, mv = part.partition(" ")
        if not opt.startswith("-"):
            continue
        options.append(opt)
        mv = re.sub(r"\{[^}]*\}", lambda mm: re.sub(r"\s+", "", mm.group(0)), mv.strip())
        if mv and metavar is None:
            metavar = mv
    if not options:
        return None
    name = next((o for o in options if o.startswith("--")), options[0])
    aliases = [o for o in options if o != name]
    choices = None
    nargs = None
    if metavar:
        if metavar.startswith("[") and metavar.endswith("...]"):
            nargs = "*"
        elif metavar.startswith("["):
            nargs = "?"
        elif metavar.endswith("...]"):
            nargs = "+"
        first = metavar.lstrip("[").split(" ")[0]
        brace = re.match(r"\{([^}]*)\}", first)
        if brace:
            choices = [c.strip() for c in brace.group(1).split(",") if c.strip()]
    default = _find_default(help_text, choices)
    takes_value = metavar is not None
    if default is not None and _names_text(metavar) and not choices and is_number(default):
        default = None  # a path or a name has no numeric default: the number was about something else
    return FlagSpec(
        name=name,
        aliases=aliases,
        takes_value=takes_value,
        value_type=_infer_type(takes_value, metavar, choices, default, help_text),
        choices=choices,
        default=default,
        help=help_text,
        deprecated=bool(_DEPRECATED_RE.search(help_text)),
        metavar=metavar,
        nargs=nargs,
    )


def _find_default(help_text: str, choices: list[str] | None) -> str | None:
    m = _DEFAULT_SUFFIX_RE.search(help_text) or _DEFAULT_INLINE_RE.search(help_text)
    if m:
        return _clean_default(m.group("value"))
    m2 = _DEFAULT_MARKED_RE.search(help_text)
    if m2 and (choices is None or m2.group("value") in choices):
        return m2.group("value")
    for m3 in _DEFAULT_PROSE_RE.finditer(help_text):
        before = help_text[: m3.start()].rstrip()
        last_word = before.rsplit(None, 1)[-1] if before else ""
        if before and before[-1] not in ".,:;(" and last_word.lower() not in ("the", "a", "its", "is"):
            # "... scaling factors default to 1.0": the sentence's subject is something else, not the flag
            continue
        value = m3.group("value").rstrip(".")
        # Prose like "Defaults to a random port" is not a value: accept only quoted words,
        # numbers, choices and None/True/False.
        if (
            m3.group("q")
            or is_number(value)
            or value in ("None", "True", "False")
            or (choices and value in choices)
        ):
            return _clean_default(value)
    return None


def _clean_default(value: str) -> str | None:
    value = value.strip()
    if value in ("", "None", "none", "null"):
        return None
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value


#: Metavar words that name a place or a name: the value is text whatever the help prose says.
_TEXT_WORDS = frozenset("PATH FILE DIR DIRECTORY NAME URL HOST ADDR ADDRESS".split())


def _names_text(metavar: str | None) -> bool:
    """Whether a metavar ends in a word that names a place or a name (``QUANTIZATION_PARAM_PATH``)."""
    words = [w for w in re.split(r"[^A-Z0-9]+", (metavar or "").upper()) if w]
    return bool(words) and words[-1] in _TEXT_WORDS


def _infer_type(
    takes_value: bool, metavar: str | None, choices: list[str] | None, default: str | None, help_text: str
) -> ValueType:
    if not takes_value:
        return "bool"
    if not choices and _names_text(metavar):
        return "str"
    if choices:
        if all(is_int(c) for c in choices):
            return "int"
        if all(is_number(c) for c in choices):
            return "float"
        return "str"
    words = set(re.split(r"[^A-Z0-9]+", (metavar or "").upper()))
    floaty = bool(words & _FLOAT_WORDS) or bool(
        re.search(r"\b(fraction|ratio)\b", help_text[:120], re.IGNORECASE)
    )
    if default is not None:
        if is_int(default):
            return "float" if floaty else "int"
        if is_number(default):
            return "float"
        return "str"
    if floaty:
        return "float"
    if words & _INT_WORDS:
        return "int"
    return "str"
