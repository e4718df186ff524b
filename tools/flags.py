"""Flag catalog: what a launcher's ``--help`` says it accepts, and checks of proposed flag values.

The catalog is read from argparse help text (``python -m sglang.launch_server --help``), never by
importing SGLang: importing ``sglang.srt.server_args`` pulls in torch and triton, and the host that
runs the server is usually not the host that runs the agent.

Facts about the help format (argparse in CPython 3.8-3.14, SGLang 0.5.x ``ServerArgs.add_cli_args``):

- SGLang builds a plain ``argparse.ArgumentParser`` without option groups or
  ``ArgumentDefaultsHelpFormatter``, so most defaults are not printed; where the help prose says
  ``Defaults to X`` / ``Default is 'X'`` / ``'X' (default)`` we take it. Other launchers (the lab, newer
  releases) may use option groups and ``(default: X)`` suffixes; both layouts parse.
- An option with aliases renders as ``--tp-size TP_SIZE, --tp TP_SIZE`` up to Python 3.12 and as
  ``--tp-size, --tp TP_SIZE`` from 3.13.
- Help starts on the invocation line when the invocation fits before the help column, else on the
  next line. Some formatters wrap long ``{a,b,...}`` choice lists onto following lines.
- Deprecated flags say so in their help (``[Deprecated] Use --dsa-decode-backend instead.``,
  ``Note: --x is deprecated now.``).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

__all__ = [
    "AmbiguousFlagError",
    "CatalogLoadError",
    "FlagCatalog",
    "FlagError",
    "FlagSpec",
    "FlagValue",
    "InvalidFlagValueError",
    "UnknownFlagError",
    "load_catalog",
    "parse_help",
    "value_words",
]


def value_words(value: str) -> list[str]:
    """The command-line words of one flag value: a list-valued flag's value (argparse ``nargs='+'``/``'*'``,
    ``--cuda-graph-bs 1 2 4 8``) is kept as one string of space-separated words and becomes one argv
    item per word; a JSON document (``--json-model-override-args '{"a": 1}'``) and any value without
    whitespace stay one item. Values with whitespace are refused by ``FlagCatalog.validate`` for every
    flag that is neither list-valued nor JSON-taking."""
    text = str(value)
    if not any(ch.isspace() for ch in text) or _is_json_document(text):
        return [text]
    return text.split()

ValueType = Literal["str", "int", "float", "bool"]
FlagValue = str | bool | int | float | list[str] | list[int] | list[float] | tuple[str, ...] | None

# Characters refused in any flag value. Values become argv elements, but on an SSH host the argv is
# joined into a shell command line, so a value must not be able to change that command's meaning
# even if some layer forgets to quote it. Glob and brace characters are refused for the same reason.
_SHELL_METACHARS = frozenset(";|&$`<>()'\"\\*?[]{}")

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SECTION_RE = re.compile(r"^\S.*:\s*$")
_OPTION_LINE_RE = re.compile(r"^(?P<indent> {1,8})(?P<rest>-{1,2}[A-Za-z0-9?].*)$")
_SPLIT_HELP_RE = re.compile(r"\s{2,}")
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


class FlagError(ValueError):
    """A flag name or value the catalog cannot accept; the message is one line and names the flag."""

    def __init__(self, message: str, *, flag: str | None = None) -> None:
        super().__init__(_one_line(message))
        self.flag = flag


class UnknownFlagError(FlagError):
    """The name is neither a flag, an alias, nor a prefix of one."""


class AmbiguousFlagError(FlagError):
    """The name is a prefix of several different flags (argparse would refuse it too)."""


class InvalidFlagValueError(FlagError):
    """The value is not a legal value of the flag (choice, type, switch, or unsafe characters)."""


class CatalogLoadError(FlagError):
    """Running ``<launcher> --help`` on the host failed or printed no usable argparse help."""


class FlagSpec(BaseModel):
    """One option from argparse help.

    ``name`` is the canonical spelling: the first ``--long`` option string argparse prints (for real
    SGLang 0.5.9 that is ``--tensor-parallel-size``, with ``--tp-size`` an alias). ``default`` is the
    text the help shows (``None`` when it shows none or says None). ``metavar`` is as printed;
    ``nargs`` is argparse's ``"?"``, ``"+"``, ``"*"`` read from the metavar shape, else ``None``.
    An ``argparse.BooleanOptionalAction`` pair (``--x, --no-x``, SGLang 0.5.23) becomes two switches
    that point at each other: ``--x`` with ``negation="--no-x"`` and ``--no-x`` with ``negates="--x"``;
    the negative spelling is never an alias, since it means the opposite.
    """

    name: str
    aliases: list[str] = Field(default_factory=list)
    takes_value: bool
    value_type: ValueType = "str"
    choices: list[str] | None = None
    default: str | None = None
    help: str = ""
    deprecated: bool = False
    metavar: str | None = None
    nargs: str | None = None
    negation: str | None = None
    negates: str | None = None

    @property
    def option_strings(self) -> list[str]:
        """The canonical name followed by every alias."""
        return [self.name, *self.aliases]


#: Defaults that mean a ``--X-mode`` feature is off (``--disaggregation-mode null``).
_OFF_VALUES = frozenset({"null", "none", "off", "disabled", "false"})


class FlagCatalog(BaseModel):
    """Every flag a launcher accepts, keyed by canonical name; JSON round-trippable.

    ``source`` says where the help text came from (host and command); ``version`` is the launcher's
    version when known (e.g. SGLang ``0.5.9``).
    """

    flags: dict[str, FlagSpec] = Field(default_factory=dict)
    source: str = ""
    version: str | None = None

    def _option_index(self) -> dict[str, str]:
        # Rebuilt per call (a few hundred entries): a cached private attribute would make two equal
        # catalogs compare unequal once one of them had been used.
        index: dict[str, str] = {}
        for spec in self.flags.values():
            for opt in spec.option_strings:
                index.setdefault(opt, spec.name)
        return index

    def has(self, name: str) -> bool:
        """True when ``name`` resolves to exactly one flag (exact, alias or unique prefix)."""
        try:
            self.resolve(name)
        except FlagError:
            return False
        return True

    def lookup(self, name: str) -> FlagSpec | None:
        """The flag whose name or alias is exactly ``name`` (no prefix matching), else None."""
        index = self._option_index()
        return self.flags[index[name]] if name in index else None

    def resolve_role(self, spellings: Sequence[str]) -> FlagSpec | None:
        """The host's spelling of a flag role: the first of ``spellings`` this catalog knows exactly and
        that is not deprecated, else the first it knows at all, else None (knowledge/flag_roles.toml)."""
        known = [spec for name in spellings if (spec := self.lookup(name)) is not None]
        return next((spec for spec in known if not spec.deprecated), known[0] if known else None)

    def feature_switch(self, name: str) -> FlagSpec | None:
        """The switch of the feature the flag ``name`` configures, read off the names: a boolean
        ``--enable-X`` (``--hicache-io-backend`` is a setting of ``--enable-hierarchical-cache``, whose
        alias is ``--enable-hicache``) or an ``--X-mode`` that is off by default
        (``--disaggregation-decode-allocation-policy`` of ``--disaggregation-mode null``); SGLang's
        ``server_args.py``. None when no switch's X (three letters or more) prefixes the flag's name, or
        when the flag is itself a switch."""
        spec = self.lookup(name)
        if spec is None or any(o.startswith(("--enable-", "--disable-")) for o in spec.option_strings):
            return None
        opts = spec.option_strings
        for switch in self.flags.values():
            if switch is spec:
                continue
            for opt in switch.option_strings:
                if not switch.takes_value and opt.startswith("--enable-"):
                    feature = opt.removeprefix("--enable-")
                elif switch.takes_value and opt.endswith("-mode") and str(switch.default).lower() in _OFF_VALUES:
                    feature = opt.removeprefix("--").removesuffix("-mode")  # --disaggregation-mode null
                else:
                    continue
                if len(feature) >= 3 and any(o.startswith(f"--{feature}-") for o in opts):
                    return switch
        return None

    def resolve(self, name: str) -> FlagSpec:
        """Find the flag argparse would pick for ``name``: exact option string, alias, or unique prefix.

        A bare name such as ``kv_cache_dtype`` or ``tp-size`` is read as ``--kv-cache-dtype`` /
        ``--tp-size`` (a convenience for names taken from config facts). A prefix that matches several
        option strings of the *same* flag (``--t`` for ``--tp-size``/``--tp`` only) resolves to it;
        argparse before 3.12.7 would call that ambiguous, but callers always render the canonical name,
        so the launched command never contains the prefix.

        Raises UnknownFlagError (no match, or a ``--name=value`` string) or AmbiguousFlagError.
        """
        raw = name.strip() if isinstance(name, str) else ""
        if not raw:
            raise UnknownFlagError(f"{name!r}: empty flag name", flag=str(name))
        if "=" in raw:
            raise UnknownFlagError(
                f"{raw}: pass the flag name and its value separately, not as name=value", flag=raw
            )
        query = raw if raw.startswith("-") else "--" + raw.replace("_", "-")
        index = self._option_index()
        if query in index:
            return self.flags[index[query]]
        matches = (
            [opt for opt in index if opt.startswith(query)]
            if query.startswith("--") and len(query) > 2
            else []
        )
        targets = {index[opt] for opt in matches}
        if len(targets) == 1:
            return self.flags[targets.pop()]
        if len(targets) > 1:
            listed = ", ".join(sorted(matches))
            raise AmbiguousFlagError(f"{query}: ambiguous option; could match {listed}", flag=query)
        hint = difflib.get_close_matches(query, list(index), n=1, cutoff=0.75)
        where = f" from {self.source}" if self.source else ""
        suggestion = f"; did you mean {hint[0]}?" if hint else ""
        raise UnknownFlagError(
            f"{query}: unknown flag (not in the flag catalog{where}){suggestion}", flag=query
        )

    def validate(self, name: str, value: FlagValue) -> tuple[str, str | bool]:  # type: ignore[override]
        """Check one proposed flag setting; return ``(canonical name, normalised value)``.

        Switches (store_true) accept only ``True`` (or the string ``"true"``) and return ``True``;
        leaving a switch off means omitting it. Value flags take str/int/float: ints are normalised
        (``"08"`` -> ``"8"``), floats must be finite (a string keeps its spelling, a Python float becomes
        ``repr``), choices are matched exactly like argparse. A flag whose value is optional (nargs
        ``?``) also accepts ``True`` (bare flag). A list-valued flag (nargs ``+``/``*``: ``--cuda-graph-bs
        1 2 4 8``) takes a list or a space-separated string; each item is checked like a single value
        and the result is one space-separated string (``value_words`` splits it for the command line).
        Values with whitespace, control characters or shell
        metacharacters (``;|&$`<>()``, quotes, backslash, glob/brace characters), empty values, and values
        starting with ``-`` that are not numbers are refused, with one exception: a flag whose name or
        help says it takes JSON (SGLang's ``--json-model-override-args``, "A dictionary in JSON string
        format ...") takes only a one-line JSON object or array, returned in ``json.dumps`` spelling. Such
        a value is one argv element locally and shell-quoted as one word over SSH (``tools/server.py``,
        ``tools/ssh.py``).

        Raises UnknownFlagError / AmbiguousFlagError (from ``resolve``) or InvalidFlagValueError.
        """
        spec = self.resolve(name)
        flag = spec.name
        if not spec.takes_value:
            if value is True or (isinstance(value, str) and value.strip().lower() == "true"):
                return flag, True
            raise InvalidFlagValueError(
                f"{flag}: is a switch that takes no value; the only accepted value is true, got {_show(value)} "
                "(omit the flag to leave it off)",
                flag=flag,
            )
        if value is True and spec.nargs == "?":
            return flag, True
        if spec.nargs in ("+", "*") and (
            isinstance(value, list | tuple) or (isinstance(value, str) and len(value.split()) > 1)
        ):
            words = [_value_text(spec, w) for w in value] if isinstance(value, list | tuple) else value.split()
            if not words:
                raise InvalidFlagValueError(f"{flag}: empty list (expected {_expected(spec)})", flag=flag)
            return flag, " ".join(str(self.validate(flag, w)[1]) for w in words)
        if isinstance(value, list | tuple):
            raise InvalidFlagValueError(
                f"{flag}: takes one value ({_expected(spec)}), got a list of {len(value)}", flag=flag
            )
        if value is None or isinstance(value, bool):
            got = "no value" if value in (None, True) else _show(value)
            raise InvalidFlagValueError(f"{flag}: expects a value ({_expected(spec)}), got {got}", flag=flag)
        text = _value_text(spec, value)
        if _takes_json(spec) and _is_json_document(text):
            return flag, json.dumps(json.loads(text))  # one spelling: {"a":1} and {"a": 1} are one value
        bad = _first_unsafe_char(text)
        if _takes_json(spec):
            raise InvalidFlagValueError(
                f"{flag}: {_show(text)} is not a one-line JSON object or array (this flag takes JSON, "
                'e.g. \'{"key": "value"}\')',
                flag=flag,
            )
        if bad is not None:
            raise InvalidFlagValueError(
                f"{flag}: {_show(text)} contains {bad!r}; shell metacharacters, quotes, whitespace and "
                f"control characters are refused (expected {_expected(spec)})",
                flag=flag,
            )
        if not text:
            raise InvalidFlagValueError(f"{flag}: empty value (expected {_expected(spec)})", flag=flag)
        if text.startswith("-") and not _is_number(text):
            raise InvalidFlagValueError(
                f"{flag}: {_show(text)} starts with '-' and would be read as another option (expected {_expected(spec)})",
                flag=flag,
            )
        text = _coerce(spec, text)
        if spec.choices is not None and not _in_choices(spec, text):
            raise InvalidFlagValueError(
                f"{flag}: {_show(text)} is not one of {', '.join(spec.choices)}", flag=flag
            )
        return flag, text

    def normalize(self, flags: Mapping[str, FlagValue]) -> dict[str, str | bool]:
        """Validate a whole ``{name: value}`` mapping; keys become canonical names.

        ``False``/``None`` for a switch means "off" and drops it (the way ``render_command`` treats them).
        Raises FlagError subclasses as ``validate`` does, or InvalidFlagValueError when two keys are
        spellings of the same flag.
        """
        out: dict[str, str | bool] = {}
        for key, value in flags.items():
            spec = self.resolve(key)
            if not spec.takes_value and (value is False or value is None):
                continue
            canonical, normalised = self.validate(key, value)
            if canonical in out:
                raise InvalidFlagValueError(
                    f"{canonical}: given twice (as {key} and another spelling)", flag=canonical
                )
            out[canonical] = normalised
        return out


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

    entries: list[tuple[str, list[str]]] = []  # (invocation, help lines)
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
    return FlagCatalog(flags=flags, source=source, version=version)


class _CommandResultLike(Protocol):
    returncode: int
    stdout: str
    stderr: str


class _RunsCommands(Protocol):
    """The part of ``tools.host.Host`` that ``load_catalog`` uses."""

    @property
    def name(self) -> str: ...

    def run(self, argv: Sequence[str], *, timeout: float = ...) -> _CommandResultLike: ...


def load_catalog(
    host: _RunsCommands,
    launcher_argv: list[str],
    *,
    cache_dir: Path,
    version: str | None,
    timeout: float = 180.0,
    help_args: Sequence[str] = ("--help",),
) -> FlagCatalog:
    """Run ``[*launcher_argv, *help_args]`` on ``host`` and parse it; cache the result as JSON.

    ``help_args`` is how the engine prints every flag: ``--help`` for SGLang, ``--help=all`` for vLLM,
    whose plain ``--help`` lists only its argument groups (``knowledge/engines.toml``).

    The cache file in ``cache_dir`` is keyed by host name, launcher version and launcher argv, so a
    second call for the same host and version does not run anything. Without a version (unknown)
    nothing is cached: the help could change under the same key. A corrupt cache file is ignored
    and rewritten. ``timeout`` is in seconds (SGLang imports torch before printing help: tens of
    seconds on a cold host).

    Errors raised by ``host.run`` (HostError: host unreachable, command not found, timeout) propagate
    unchanged. Raises CatalogLoadError (one line, names host and command) when the command exits
    non-zero or prints no argparse options.
    """
    argv = [*launcher_argv, *help_args]
    command = " ".join(argv)
    cache_path = _cache_path(Path(cache_dir), host.name, version, argv) if version else None
    if cache_path is not None and cache_path.is_file():
        cached = _read_cache(cache_path, host.name, argv)
        if cached is not None:
            return cached
    result = host.run(argv, timeout=timeout)
    if result.returncode != 0:
        detail = _last_line(result.stderr) or _last_line(result.stdout) or "no output"
        raise CatalogLoadError(
            f"flag catalog: `{command}` on {host.name} exited with {result.returncode}: {detail}"
        )
    help_text = result.stdout if "usage:" in result.stdout.lower() or not result.stderr else result.stderr
    catalog = parse_help(help_text, source=f"{host.name}: {command}", version=version)
    if not catalog.flags:
        raise CatalogLoadError(
            f"flag catalog: `{command}` on {host.name} printed no argparse options "
            f"(first line: {_first_line(result.stdout) or _first_line(result.stderr) or 'empty'})"
        )
    if cache_path is not None:
        _write_cache(cache_path, host.name, argv, catalog)
    return catalog


# --- help parsing helpers -------------------------------------------------------------------------


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
    if default is not None and _names_text(metavar) and not choices and _is_number(default):
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
            or _is_number(value)
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
        if all(_is_int(c) for c in choices):
            return "int"
        if all(_is_number(c) for c in choices):
            return "float"
        return "str"
    words = set(re.split(r"[^A-Z0-9]+", (metavar or "").upper()))
    floaty = bool(words & _FLOAT_WORDS) or bool(
        re.search(r"\b(fraction|ratio)\b", help_text[:120], re.IGNORECASE)
    )
    if default is not None:
        if _is_int(default):
            return "float" if floaty else "int"
        if _is_number(default):
            return "float"
        return "str"
    if floaty:
        return "float"
    if words & _INT_WORDS:
        return "int"
    return "str"


# --- value checks ------------------------------------------------------------------------------------


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _value_text(spec: FlagSpec, value: str | int | float) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidFlagValueError(f"{spec.name}: {value!r} is not a finite number", flag=spec.name)
        if spec.value_type == "int" and value.is_integer():
            return str(int(value))
        return repr(value)
    return str(value)


# "JSON" in a name or help, but not "Path to the JSON file ..." (--quantization-param-path).
_JSON_WORD_RE = re.compile(r"\bjson\b(?![\s-]+files?\b)", re.IGNORECASE)


def _takes_json(spec: FlagSpec) -> bool:
    """Whether a value flag takes JSON: its name or help says so (SGLang's ``--json-model-override-args``:
    "A dictionary in JSON string format ..."), or its default is an empty JSON object or array
    (``--model-loader-extra-config``, default ``{}``)."""
    if spec.value_type != "str":
        return False
    return spec.default in ("{}", "[]") or bool(
        _JSON_WORD_RE.search(f"{spec.name.replace('-', ' ')} {spec.help}")
    )


def _is_json_document(text: str) -> bool:
    """A one-line, printable JSON object or array (what JSON-taking SGLang flags expect)."""
    if not text.lstrip().startswith(("{", "[")) or not all(ch.isprintable() for ch in text):
        return False
    try:
        return isinstance(json.loads(text), dict | list)
    except ValueError:
        return False


def _first_unsafe_char(text: str) -> str | None:
    for ch in text:
        if ch in _SHELL_METACHARS or ch.isspace() or not ch.isprintable():
            return ch
    return None


def _coerce(spec: FlagSpec, text: str) -> str:
    if spec.value_type == "int":
        try:
            return str(int(text))
        except ValueError:
            raise InvalidFlagValueError(
                f"{spec.name}: {_show(text)} is not an integer", flag=spec.name
            ) from None
    if spec.value_type == "float":
        try:
            number = float(text)
        except ValueError:
            raise InvalidFlagValueError(
                f"{spec.name}: {_show(text)} is not a number", flag=spec.name
            ) from None
        if not math.isfinite(number):
            raise InvalidFlagValueError(f"{spec.name}: {_show(text)} is not a finite number", flag=spec.name)
    return text


def _in_choices(spec: FlagSpec, text: str) -> bool:
    assert spec.choices is not None
    if text in spec.choices:
        return True
    if spec.value_type == "int":
        return any(_is_int(c) and int(c) == int(text) for c in spec.choices)
    return False


def _expected(spec: FlagSpec) -> str:
    if spec.choices:
        return "one of " + ", ".join(spec.choices)
    return {"int": "an integer", "float": "a number", "str": "a plain string", "bool": "no value"}[
        spec.value_type
    ]


def _show(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:200]


def _last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")[:200]


# --- cache ---------------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "x"


def _cache_path(cache_dir: Path, host_name: str, version: str, launcher_argv: list[str]) -> Path:
    digest = hashlib.sha256(json.dumps([host_name, launcher_argv]).encode()).hexdigest()[:10]
    return cache_dir / f"flags-{_slug(host_name)}-{_slug(version)}-{digest}.json"


def _read_cache(path: Path, host_name: str, launcher_argv: list[str]) -> FlagCatalog | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("host") != host_name or data.get("launcher_argv") != launcher_argv:
            return None
        return FlagCatalog.model_validate(data["catalog"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError):
        return None  # unreadable or from an older format: run --help again and overwrite


def _write_cache(path: Path, host_name: str, launcher_argv: list[str], catalog: FlagCatalog) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": 1,
        "host": host_name,
        "launcher_argv": launcher_argv,
        "catalog": catalog.model_dump(mode="json"),
    }
    # Write-then-rename so a concurrent reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_SERVER_ARGS_RE = re.compile(r"server_args=(?:ServerArgs\((?P<repr>.*)\)|(?P<dict>\{.*\}))\s*$")
_REPR_FIELD_RE = re.compile(r"(?:^|, )([a-z_][a-z0-9_]*)=('(?:[^'\\]|\\.)*'|[^,()\[\]{}]*)")


def catalog_from_server_args(log_text: str) -> FlagCatalog | None:
    """A partial flag catalog read from the server-args line of a log, for when the host's ``--help`` is
    not at hand (``hypoloop analyze`` of a log alone): every server argument ``x_y`` becomes a flag
    ``--x-y`` with the type of its printed value (a bool is a switch). It tells which release's spelling
    a log's host uses (``cuda_graph_max_bs_decode`` in 0.5.23, ``cuda_graph_max_bs`` in 0.5.9) but
    knows no choices or aliases. Reads SGLang 0.5.9's ``server_args=ServerArgs(a=1, ...)`` and 0.5.23's
    ``server_args={'a': 1, ...}`` (entrypoints/engine.py). None when the log has no such line.
    """
    import ast

    for line in log_text.splitlines():
        m = _SERVER_ARGS_RE.search(line)
        if not m:
            continue
        values: dict[str, object] = {}
        if m.group("dict"):
            try:
                parsed = ast.literal_eval(m.group("dict"))
            except (ValueError, SyntaxError):
                parsed = None
            if isinstance(parsed, dict):
                values = {str(k): v for k, v in parsed.items()}
            else:
                values = {k: None for k in re.findall(r"'([a-z_][a-z0-9_]*)': ", m.group("dict"))}
        else:
            for key, raw in _REPR_FIELD_RE.findall(m.group("repr")):
                try:
                    values[key] = ast.literal_eval(raw.strip())
                except (ValueError, SyntaxError):
                    values[key] = None
        flags: dict[str, FlagSpec] = {}
        for key, value in values.items():
            name = "--" + key.replace("_", "-")
            vtype: ValueType = (
                "bool" if isinstance(value, bool) else "int" if isinstance(value, int)
                else "float" if isinstance(value, float) else "str"
            )
            flags[name] = FlagSpec(name=name, takes_value=vtype != "bool", value_type=vtype)
        return FlagCatalog(flags=flags, source="the log's server_args line") if flags else None
    return None
