"""Redaction of secrets (and, on request, host names and IP addresses) from text that leaves the machine.

One redaction for everything a run writes or sends: the transcript writer (``redact_data`` on every
event), reports, FINDINGS entries, ``show``/``runs`` output and ``--json`` lines, and every prompt the
LLM planner sends (``run_redactor`` builds the run's redactor). Two layers:

- **Literal secrets**: values of environment variables whose *name* says they are secret (``HF_TOKEN``,
  ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD`` ...), taken from the case (host env,
  baseline env) and from this process's environment, are replaced wherever they appear.
- **Patterns**: well-known token shapes (OpenAI ``sk-...``, Hugging Face ``hf_...``, GitHub, Slack, AWS
  access key ids, JWTs, PEM private keys), ``Bearer``/``Authorization`` headers, credentials in URLs,
  ``--api-key VALUE``-style command-line options and ``name=value`` / ``"name": "value"`` assignments
  whose name is secret-like (``api_key='sk-...'`` in SGLang's ``server_args=ServerArgs(...)`` line).

With ``mask_hosts`` it also replaces IP addresses (loopback and ``0.0.0.0`` excepted), the host names it
is told about (the case's SSH target, this machine's name), ``user@host`` forms and dotted host names
with a common top-level domain, each by a stable placeholder (``<host-1>``, ``<ip-2>``) so the reader
can still tell two hosts apart. A host name written as a bare word in free text (``inf-b6k-01``) is
only caught when it is one of the names given.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["REDACTED", "Redactor", "is_secret_name", "redact_data", "run_redactor", "scrub"]

REDACTED = "<redacted>"

#: Name parts (split on ``_``, ``-``, ``.``) that make a variable or option secret.
_SECRET_PARTS = frozenset(
    {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PWD", "PASS", "CREDENTIAL", "CREDENTIALS", "APIKEY", "AUTH"}
)
#: Consecutive parts that do (``API_KEY``), and a trailing ``KEY`` (``SSH_KEY``, ``OPENAI_API_KEY``).
_SECRET_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY")})
#: Values that are never secrets, whatever the name says (``api_key=None`` in a log line).
_NOT_SECRET_VALUES = frozenset({"none", "null", "true", "false", "", "empty", "not-needed", "-", REDACTED})

_TOKEN_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), REDACTED),
    # OpenAI-style keys (sk-..., sk-proj-...) of any length: a long one, or any with a digit in it
    (re.compile(r"\bsk-(?:[A-Za-z0-9_\-]{16,}|(?=[A-Za-z_\-]*\d)[A-Za-z0-9_\-]+)"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), REDACTED),  # Hugging Face
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),  # Slack
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),  # AWS access key id
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),  # JWT
    (
        re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;]+"),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}"), r"\1" + REDACTED),
    (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^/\s@]+@"), r"\1" + REDACTED + "@"),
]
#: ``--api-key VALUE`` / ``--hf-token=VALUE`` and any option whose last name part is secret-like.
_SECRET_OPTION = re.compile(
    r"(?i)(--(?:[a-z0-9]+-)*(?:api-key|key|token|secret|password|passwd|credentials?))(=|\s+)([\"']?)([^\s\"']+)\3"
)
#: ``"--api-key": "VALUE"`` / ``'--api-key', 'VALUE'`` (a quoted option in a dict or an argv list).
_QUOTED_SECRET_OPTION = re.compile(
    r"""(?i)(["'])(--(?:[a-z0-9]+-)*(?:api-key|key|token|secret|password|passwd|credentials?))\1(\s*[:=,]\s*)(["'])([^"']+)\4"""
)
#: A change as hypoloop words it (``--api-key: (unset) → VALUE``, ``HF_TOKEN: a → b``): a secret name's
#: values go, whatever their shape.
_CHANGE = re.compile(r"(?<![\w.\-/])(--?[A-Za-z0-9][\w.\-]*|[A-Za-z_][\w.\-]*)(:\s+)(\S+)(\s+→\s+)(\S+)")
#: ``name=value``, ``name: value``, ``"name": "value"``; the name decides (``is_secret_name``).
# The value may not itself be an assignment: in "RuntimeError: HF_TOKEN=hf_..." the match must be the
# inner HF_TOKEN=..., not "RuntimeError: <everything after>", which would hide the secret from the check.
# A name that is a file name inside a path ("with /home/u/.ssh/client_key: the host refused it") is no
# assignment: the lookbehind keeps the match from starting after a "/" (or inside a word).
_ASSIGNMENT = re.compile(
    r"(?<![\w.\-/])([A-Za-z_][A-Za-z0-9_.\-]*)([\"']?)(\s*[=:]\s*)([\"']?)"
    r"(?![A-Za-z_][A-Za-z0-9_.\-]*[\"']?\s*[=:])([^\s\"',;)}\]]+)\4"
)

_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_USER_AT_HOST = re.compile(r"\b([A-Za-z_][\w.\-]*)@([A-Za-z0-9][A-Za-z0-9.\-]*[A-Za-z0-9])\b")
_FQDN = re.compile(
    r"(?i)\b(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+"
    r"(?:com|net|org|io|ai|dev|cloud|internal|local|lan|corp|intra|home|edu|gov|us|eu|de|uk|fr|cn|jp)\b"
)
_KEEP_IPS = frozenset({"127.0.0.1", "0.0.0.0", "::1", "::"})


#: Environment variables whose names look secret but hold none: the working directories (``PWD``
#: would otherwise make every path under the current directory ``<redacted>``) and the agent socket.
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK"})


@functools.lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    """Whether a variable/option/key name says its value is secret (``HF_TOKEN``, ``api_key``,
    ``--hf-token``, ``AWS_SECRET_ACCESS_KEY``); ``max_total_tokens`` and ``TOKENIZERS_PARALLELISM`` are not."""
    parts = [p for p in re.split(r"[_\-.\s]+", name.strip().strip("-").upper()) if p]
    if not parts or name.strip() in _NOT_SECRET_NAMES:
        return False
    if any(p in _SECRET_PARTS for p in parts) or parts[-1] == "KEY":
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(parts, parts[1:], strict=False))


#: Texts up to this many characters, at most this many, are remembered with their redaction.
_MEMO_TEXT_MAX = 4096
_MEMO_ENTRIES = 20000
#: Longer texts up to this many characters, at most this many, are remembered too (a launch's settings line
#: and log excerpt, some 20,000 characters, pass three times: its partial and final saves and its outcome).
_MEMO_LONG_MAX = 1_000_000
_MEMO_LONG_ENTRIES = 32


class Redactor:
    """Replace secrets (and optionally hosts) in text; callable, ``str -> str``.

    ``secrets``: literal values to remove wherever they appear (values shorter than 6 characters are
    ignored: too likely to be ordinary words). ``hosts``: host names to mask when ``mask_hosts``.
    """

    def __init__(
        self, secrets: Iterable[str] = (), *, hosts: Iterable[str] = (), mask_hosts: bool = False
    ) -> None:
        literal = {s for s in secrets if s and len(s) >= 6 and s.strip().lower() not in _NOT_SECRET_VALUES}
        # Longest first, so a secret that contains another is removed whole.
        self._secrets = sorted(literal, key=len, reverse=True)
        self.mask_hosts = mask_hosts
        self._hosts = sorted(
            {h for h in hosts if h and h not in ("localhost", "local")}, key=len, reverse=True
        )
        self._placeholders: dict[str, str] = {}
        # Texts already redacted (the same flag help, paths and log lines pass many times in a run).
        self._memo: dict[str, str] = {}
        self._memo_long: dict[str, str] = {}

    @classmethod
    def for_env(
        cls,
        *envs: Mapping[str, str],
        secrets: Iterable[str] = (),
        hosts: Iterable[str] = (),
        mask_hosts: bool = False,
        include_process_env: bool = True,
    ) -> Redactor:
        """A redactor for the secret-named variables of ``envs`` (and of ``os.environ``) and the given
        ``secrets``, masking the given ``hosts`` plus this machine's names when ``mask_hosts``."""
        sources: list[Mapping[str, str]] = list(envs)
        if include_process_env:
            sources.append(os.environ)
        literal = [v for env in sources for k, v in env.items() if is_secret_name(k) and isinstance(v, str)]
        literal += list(secrets)
        names = list(hosts)
        if mask_hosts:
            try:
                names += [socket.gethostname(), socket.getfqdn()]
            except OSError:
                pass
        return cls(literal, hosts=names, mask_hosts=mask_hosts)

    def __call__(self, text: str) -> str:
        """``text`` with every secret replaced by ``<redacted>`` (and hosts masked if asked)."""
        memo = self._memo if len(text) <= _MEMO_TEXT_MAX else self._memo_long
        done = memo.get(text)
        if done is not None:
            return done
        out = self._redact(text)
        if len(text) <= _MEMO_LONG_MAX:
            if len(memo) >= (_MEMO_ENTRIES if memo is self._memo else _MEMO_LONG_ENTRIES):
                memo.clear()
            memo[text] = out
        return out

    def _redact(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, REDACTED)
        for pattern, repl in _TOKEN_PATTERNS:
            text = pattern.sub(repl, text)
        text = _SECRET_OPTION.sub(self._option, text)
        text = _QUOTED_SECRET_OPTION.sub(_quoted_option, text)
        text = _CHANGE.sub(_change, text)
        text = _API_KEY_FIELD.sub(_api_key_field, text)
        text = _ASSIGNMENT.sub(self._assignment, text)
        if self.mask_hosts:
            text = self._mask_hosts(text)
        return text

    @staticmethod
    def _option(m: re.Match[str]) -> str:
        value = m.group(4)
        # "--api-key str" in a flag catalog is a type, not a key: real secrets are longer.
        # A shell variable reference ("$API_KEY") names where the secret is, it is not the secret.
        if value.lower() in _NOT_SECRET_VALUES or value.startswith(("-", "$")) or len(value) < 6:
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}{m.group(3)}{REDACTED}{m.group(3)}"

    @staticmethod
    def _assignment(m: re.Match[str]) -> str:
        name, value = m.group(1), m.group(5)
        if not is_secret_name(name) or value.lower() in _NOT_SECRET_VALUES or value.startswith("$"):
            return m.group(0)
        if re.fullmatch(r"[0-9.]{1,7}", value):  # "#cached-token: 0" in SGLang's batch lines
            return m.group(0)
        return f"{name}{m.group(2)}{m.group(3)}{m.group(4)}{REDACTED}{m.group(4)}"

    def _placeholder(self, kind: str, value: str) -> str:
        key = f"{kind}:{value.lower()}"
        if key not in self._placeholders:
            n = 1 + sum(1 for k in self._placeholders if k.startswith(kind + ":"))
            self._placeholders[key] = f"<{kind}-{n}>"
        return self._placeholders[key]

    def _mask_hosts(self, text: str) -> str:
        for h in self._hosts:
            text = re.sub(rf"(?<![\w.\-]){re.escape(h)}(?![\w\-]|\.\w)", self._placeholder("host", h), text)
        text = _USER_AT_HOST.sub(lambda m: f"<user>@{self._placeholder('host', m.group(2))}", text)

        def ip(m: re.Match[str]) -> str:
            raw = m.group(0)
            try:
                addr = ipaddress.ip_address(raw)
            except ValueError:
                return raw
            return raw if str(addr) in _KEEP_IPS else self._placeholder("ip", str(addr))

        text = _IPV4.sub(ip, text)

        def ip6(m: re.Match[str]) -> str:
            # "04:48:03" (a time of day) is not an address: ask for "::" or the full eight groups.
            raw = m.group(0)
            return ip(m) if "::" in raw or raw.count(":") >= 7 else raw

        text = _IPV6.sub(ip6, text)
        text = _FQDN.sub(lambda m: self._placeholder("host", m.group(0)), text)
        return text


#: ``api_key='...'`` (0.5.9's ``ServerArgs(...)`` repr) and ``'api_key': '...'`` (0.5.23's dict form) in
#: SGLang's server-args line; also ``admin_api_key``.
def _quoted_option(m: re.Match[str]) -> str:
    value = m.group(5)
    if value.lower() in _NOT_SECRET_VALUES or value.startswith(("-", "$")):
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}{m.group(4)}"


def _change(m: re.Match[str]) -> str:
    if not is_secret_name(m.group(1)):
        return m.group(0)

    def hide(v: str) -> str:
        return v if v in ("(unset)", "(on)", "(off)", REDACTED) or v.startswith("$") else REDACTED

    return f"{m.group(1)}{m.group(2)}{hide(m.group(3))}{m.group(4)}{hide(m.group(5))}"


_API_KEY_FIELD = re.compile(r"""(?i)(\b\w*api_key['"]?\s*[=:]\s*)(['"])([^'"]+)\2""")


def _api_key_field(m: re.Match[str]) -> str:
    if m.group(3).lower() in _NOT_SECRET_VALUES or m.group(3).startswith("$"):  # "$OPENAI_API_KEY": where it is
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{REDACTED}{m.group(2)}"


@functools.lru_cache(maxsize=8192)
def _secret_field(key: str) -> bool:
    """Whether a field of structured data holds a secret: an environment variable or a command-line
    option with a secret name (``HF_TOKEN``, ``--api-key``), or a lower-case field whose name is plainly
    secret (``api_key``, ``password``). A lower-case name that ends in ``_key`` only (``change_key``) is
    an identifier, not a key."""
    if key.startswith("-") or key.isupper():
        return is_secret_name(key)
    parts = [p for p in re.split(r"[_\-.\s]+", key.upper()) if p]
    if not parts or not is_secret_name(key):
        return False
    return any(p in _SECRET_PARTS for p in parts) or any(
        pair in _SECRET_PAIRS for pair in zip(parts, parts[1:], strict=False)
    )


def _secret_value(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() not in _NOT_SECRET_VALUES


def redact_data(obj: Any, redactor: Callable[[str], str]) -> Any:
    """A copy of JSON-like data with every secret replaced by ``<redacted>``: the value of a field named
    like a secret (``{"HF_TOKEN": ...}``, ``{"--api-key": ...}``), the item after a secret option in an
    argv list (``["--api-key", "sk-..."]``), the ``before``/``after`` of a change of a secret-named
    variable, and, in every string, what ``redactor`` finds (known secret values, token shapes,
    ``--api-key VALUE`` and ``api_key='...'`` in log lines)."""
    if isinstance(obj, str):
        return redactor(obj)
    if isinstance(obj, dict):
        secret_change = isinstance(obj.get("name"), str) and _secret_field(obj["name"]) and (
            "before" in obj or "after" in obj
        )
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and _secret_field(k) and _secret_value(v):
                out[k] = REDACTED
            elif secret_change and k in ("before", "after") and _secret_value(v):
                out[k] = REDACTED
            else:
                out[k] = redact_data(v, redactor)
        return out
    if isinstance(obj, list | tuple):
        items = list(obj)
        result: list[Any] = []
        for i, v in enumerate(items):
            prev = items[i - 1] if i else None
            option = isinstance(prev, str) and prev.startswith("-") and "=" not in prev
            if option and _secret_field(str(prev)) and _secret_value(v) and not str(v).startswith("-"):
                result.append(REDACTED)
            else:
                result.append(redact_data(v, redactor))
        return result
    return obj


def run_redactor(
    case: Any = None, *, secrets: Iterable[str] = (), hosts: Iterable[str] = (), mask_hosts: bool = False
) -> Redactor:
    """The one redactor of a run: secret-named variables of the case (host and baseline env) and of this
    process's environment, the values of secret-named baseline flags (``--api-key``), plus the token
    shapes every redactor knows; ``secrets`` adds literal values (an LLM key), ``hosts``/``mask_hosts``
    as for `Redactor.for_env`. ``case`` is an ``agent.domain.case.Case`` (or None: the environment only)."""
    envs: list[Mapping[str, str]] = []
    flag_secrets: list[str] = []
    if case is not None:
        envs = [dict(case.host.env), dict(case.baseline.env)]
        flag_secrets = [
            str(v) for k, v in case.baseline.flags.items() if _secret_field(str(k)) and isinstance(v, str)
        ]
    return Redactor.for_env(*envs, secrets=[*flag_secrets, *secrets], hosts=hosts, mask_hosts=mask_hosts)


def scrub(obj: Any) -> Any:
    """``redact_data`` with this process's redactor (no case): for callers that hold no run."""
    return redact_data(obj, run_redactor())
