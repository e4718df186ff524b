"""The flag catalog: every flag a launcher accepts, argparse-like name resolution and value validation."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from tools.flags.spec import (
    AmbiguousFlagError,
    FlagError,
    FlagSpec,
    FlagValue,
    InvalidFlagValueError,
    UnknownFlagError,
)
from tools.flags.values import checked_value, expected, show, value_text

#: Defaults that mean a ``--X-mode`` feature is off (``--disaggregation-mode null``).
_OFF_VALUES = frozenset({"null", "none", "off", "disabled", "false"})


class _Lookups:
    """A catalog's option index (every option string to its flag's name), the names resolved so far
    (to the flag, or to the error's class, message and flag) and the feature switches found so far."""

    def __init__(self, flags: dict[str, FlagSpec]) -> None:
        self.flags = flags
        self.index: dict[str, str] = {}
        for spec in flags.values():
            for opt in spec.option_strings:
                self.index.setdefault(opt, spec.name)
        self.resolved: dict[str, FlagSpec | tuple[type[FlagError], str, str | None]] = {}
        self.switches: dict[str, FlagSpec | None] = {}


class FlagCatalog(BaseModel):
    """Every flag a launcher accepts, keyed by canonical name; JSON round-trippable.

    ``source`` says where the help text came from (host and command); ``version`` is the launcher's
    version when known (e.g. SGLang ``0.5.9``).
    """

    flags: dict[str, FlagSpec] = Field(default_factory=dict)
    source: str = ""
    version: str | None = None

    def _lookups(self) -> _Lookups:
        """This catalog's derived lookups, built once: a catalog is never changed after it is parsed or
        read back, and the planner asks it thousands of times a step. Kept in the instance ``__dict__``
        beside the fields, which pydantic's equality and dumps ignore (a private attribute would make
        two equal catalogs compare unequal), and tied to the ``flags`` mapping they were built from, so
        a copy with other flags (``model_copy(update=...)``) builds its own."""
        memo = self.__dict__.get("_lookups_memo")
        if not isinstance(memo, _Lookups) or memo.flags is not self.flags:
            memo = _Lookups(self.flags)
            self.__dict__["_lookups_memo"] = memo
        return memo

    def _option_index(self) -> dict[str, str]:
        return self._lookups().index

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
        when the flag is itself a switch. A deprecated switch is none: SGLang 0.5.23's
        ``--enable-flashinfer-allreduce-fusion`` ("Deprecated: use --flashinfer-allreduce-fusion-backend=auto")
        is off while the fusion is enabled by the backend flag or by SGLang for the model."""
        switches = self._lookups().switches
        if name not in switches:
            switches[name] = self._feature_switch(name)
        return switches[name]

    def _feature_switch(self, name: str) -> FlagSpec | None:
        spec = self.lookup(name)
        if spec is None or any(o.startswith(("--enable-", "--disable-")) for o in spec.option_strings):
            return None
        opts = spec.option_strings
        for switch in self.flags.values():
            if switch is spec or switch.deprecated:
                continue  # a deprecated switch no longer says whether the feature runs (another flag does)
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
        memo = self._lookups()
        hit = memo.resolved.get(name) if isinstance(name, str) else None
        if hit is None:
            try:
                hit = self._resolve(name)
            except FlagError as exc:  # kept as its class and words: each call raises a fresh one
                hit = (type(exc), str(exc), exc.flag)
            if isinstance(name, str):
                memo.resolved[name] = hit
        if isinstance(hit, tuple):
            raise hit[0](hit[1], flag=hit[2])
        return hit

    def canonical_name(self, name: str) -> str | None:
        """The name of the flag ``resolve`` finds for ``name``, or None where it raises (an unknown or
        ambiguous name); without building an exception, for callers that ask thousands of times."""
        hit = self._lookups().resolved.get(name)
        if hit is None:
            try:
                return self.resolve(name).name
            except FlagError:
                return None
        return None if isinstance(hit, tuple) else hit.name

    def _resolve(self, name: str) -> FlagSpec:
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
        ``tools/ssh/``).

        Raises UnknownFlagError / AmbiguousFlagError (from ``resolve``) or InvalidFlagValueError.
        """
        spec = self.resolve(name)
        flag = spec.name
        if not spec.takes_value:
            if value is True or (isinstance(value, str) and value.strip().lower() == "true"):
                return flag, True
            raise InvalidFlagValueError(
                f"{flag}: is a switch that takes no value; the only accepted value is true, got {show(value)} "
                "(omit the flag to leave it off)",
                flag=flag,
            )
        if value is True and spec.nargs == "?":
            return flag, True
        if spec.nargs in ("+", "*") and (
            isinstance(value, list | tuple) or (isinstance(value, str) and len(value.split()) > 1)
        ):
            words = [value_text(spec, w) for w in value] if isinstance(value, list | tuple) else value.split()
            if not words:
                raise InvalidFlagValueError(f"{flag}: empty list (expected {expected(spec)})", flag=flag)
            return flag, " ".join(str(self.validate(flag, w)[1]) for w in words)
        return flag, checked_value(spec, value)

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


def lists_choices(flags: FlagCatalog | None, name: str) -> bool | None:
    """Whether flag ``name`` chooses among named values (its ``--help`` lists choices: backends, dtypes):
    False when the host does not know the flag, None when there is no catalog to ask."""
    if flags is None:
        return None
    try:
        return bool(flags.resolve(name).choices)
    except FlagError:
        return False
