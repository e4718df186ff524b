"""Checks of one proposed flag value against its ``FlagSpec``: type, choices, JSON, and the characters a
value must not carry to an SSH host's shell; and how a value becomes command-line words."""

from __future__ import annotations

import json
import math
import re

from tools.flags.spec import FlagSpec, FlagValue, InvalidFlagValueError


def value_words(value: str) -> list[str]:
    """The command-line words of one flag value: a list-valued flag's value (argparse ``nargs='+'``/``'*'``,
    ``--cuda-graph-bs 1 2 4 8``) is kept as one string of space-separated words and becomes one argv
    item per word; a JSON document (``--json-model-override-args '{"a": 1}'``) and any value without
    whitespace stay one item. Values with whitespace are refused by ``FlagCatalog.validate`` for every
    flag that is neither list-valued nor JSON-taking."""
    text = str(value)
    if not any(ch.isspace() for ch in text) or is_json_document(text):
        return [text]
    return text.split()


# Characters refused in any flag value. Values become argv elements, but on an SSH host the argv is
# joined into a shell command line, so a value must not be able to change that command's meaning
# even if some layer forgets to quote it. Glob and brace characters are refused for the same reason.
_SHELL_METACHARS = frozenset(";|&$`<>()'\"\\*?[]{}")


def is_int(text: str) -> bool:
    """Whether ``text`` parses as a Python int."""
    try:
        int(text)
    except ValueError:
        return False
    return True


def is_number(text: str) -> bool:
    """Whether ``text`` parses as a finite float."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def value_text(spec: FlagSpec, value: str | int | float) -> str:
    """``value`` as command-line text (a whole float of an int flag as an int, else ``repr``); raises
    InvalidFlagValueError for a float that is not finite."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidFlagValueError(f"{spec.name}: {value!r} is not a finite number", flag=spec.name)
        if spec.value_type == "int" and value.is_integer():
            return str(int(value))
        return repr(value)
    return str(value)


# "JSON" in a name or help, but not "Path to the JSON file ..." (--quantization-param-path) nor a file name
# such as "read from the model's config.json" (a help that says where a default comes from).
_JSON_WORD_RE = re.compile(r"(?<!\.)\bjson\b(?![\s-]+files?\b)", re.IGNORECASE)


def takes_json(spec: FlagSpec) -> bool:
    """Whether a value flag takes JSON: its name or help says so (SGLang's ``--json-model-override-args``:
    "A dictionary in JSON string format ..."), or its default is an empty JSON object or array
    (``--model-loader-extra-config``, default ``{}``). A flag with choices takes one of them, never JSON
    (``--log-requests-format {text,json}``)."""
    if spec.value_type != "str" or spec.choices:
        return False
    return spec.default in ("{}", "[]") or bool(
        _JSON_WORD_RE.search(f"{spec.name.replace('-', ' ')} {spec.help}")
    )


def is_json_document(text: str) -> bool:
    """A one-line, printable JSON object or array (what JSON-taking SGLang flags expect)."""
    if not text.lstrip().startswith(("{", "[")) or not all(ch.isprintable() for ch in text):
        return False
    try:
        return isinstance(json.loads(text), dict | list)
    except ValueError:
        return False


def first_unsafe_char(text: str) -> str | None:
    """The first shell metacharacter, whitespace or unprintable character of ``text``, else None."""
    for ch in text:
        if ch in _SHELL_METACHARS or ch.isspace() or not ch.isprintable():
            return ch
    return None


def coerce(spec: FlagSpec, text: str) -> str:
    """``text`` normalised for the flag's type (``"08"`` -> ``"8"`` for an int); raises InvalidFlagValueError
    when it is not of that type."""
    if spec.value_type == "int":
        try:
            return str(int(text))
        except ValueError:
            raise InvalidFlagValueError(
                f"{spec.name}: {show(text)} is not an integer", flag=spec.name
            ) from None
    if spec.value_type == "float":
        try:
            number = float(text)
        except ValueError:
            raise InvalidFlagValueError(
                f"{spec.name}: {show(text)} is not a number", flag=spec.name
            ) from None
        if not math.isfinite(number):
            raise InvalidFlagValueError(f"{spec.name}: {show(text)} is not a finite number", flag=spec.name)
    return text


def in_choices(spec: FlagSpec, text: str) -> bool:
    """Whether ``text`` is one of the flag's choices (as argparse compares them; ints by value)."""
    assert spec.choices is not None
    if text in spec.choices:
        return True
    if spec.value_type == "int":
        return any(is_int(c) and int(c) == int(text) for c in spec.choices)
    return False


def expected(spec: FlagSpec) -> str:
    """What the flag takes, for error messages (``one of a, b``, ``an integer``)."""
    if spec.choices:
        return "one of " + ", ".join(spec.choices)
    return {"int": "an integer", "float": "a number", "str": "a plain string", "bool": "no value"}[
        spec.value_type
    ]


def show(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def checked_value(spec: FlagSpec, value: FlagValue) -> str:
    """One value of the value flag ``spec``, checked and normalised (the rules of ``FlagCatalog.validate``
    for a single value); raises InvalidFlagValueError naming the flag."""
    flag = spec.name
    if isinstance(value, list | tuple):
        raise InvalidFlagValueError(
            f"{flag}: takes one value ({expected(spec)}), got a list of {len(value)}", flag=flag
        )
    if value is None or isinstance(value, bool):
        # True is how a switch is written (`"--flag" = true`, or the flag alone): say so, not "no value"
        got = "no value" if value is None else "true (a switch's form: no value)" if value is True else show(value)
        raise InvalidFlagValueError(f"{flag}: expects a value ({expected(spec)}), got {got}", flag=flag)
    text = value_text(spec, value)
    if takes_json(spec) and is_json_document(text):
        return json.dumps(json.loads(text))  # one spelling: {"a":1} and {"a": 1} are one value
    bad = first_unsafe_char(text)
    if takes_json(spec):
        raise InvalidFlagValueError(
            f"{flag}: {show(text)} is not a one-line JSON object or array (this flag takes JSON, "
            'e.g. \'{"key": "value"}\')',
            flag=flag,
        )
    if bad is not None:
        raise InvalidFlagValueError(
            f"{flag}: {show(text)} contains {bad!r}; shell metacharacters, quotes, whitespace and "
            f"control characters are refused (expected {expected(spec)})",
            flag=flag,
        )
    if not text:
        raise InvalidFlagValueError(f"{flag}: empty value (expected {expected(spec)})", flag=flag)
    if text.startswith("-") and not is_number(text):
        raise InvalidFlagValueError(
            f"{flag}: {show(text)} starts with '-' and would be read as another option (expected {expected(spec)})",
            flag=flag,
        )
    text = coerce(spec, text)
    if spec.choices is not None and not in_choices(spec, text):
        raise InvalidFlagValueError(
            f"{flag}: {show(text)} is not one of {', '.join(spec.choices)}", flag=flag
        )
    return text
