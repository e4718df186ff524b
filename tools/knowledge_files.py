"""The knowledge folder's files, read one way: which file is in force, read and checked once per version.

The folder in force is ``$HYPOLOOP_KNOWLEDGE`` (which ``--knowledge DIR`` sets for a command,
``agent.domain.knowledge_dir``), else the repository's ``knowledge/``. A file the folder lacks is the
repository's file of that name, so a folder can replace one file and keep the rest; a file that is
present is used as it is. A `KnowledgeFile` reads its file once per version on disk (path, size and
modification time), so a swapped folder, or an edited file, is read again and nothing else is. Within a
`steady` block (one decision of the planner, which asks for some files thousands of times) a file is
looked up on disk once per thread.

A file that cannot be read, is not TOML, or does not have the fields its model expects raises the
caller's error class with one line naming the file and the field (`read_toml`, `load_model`); an
unknown table or key is refused the same way (the models forbid extra fields).
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import threading
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = [
    "ENV_VAR",
    "REPOSITORY_DIR",
    "KnowledgeFile",
    "KnowledgeFileError",
    "check_keys",
    "field_error",
    "item_path",
    "knowledge_path",
    "load_model",
    "read_toml",
    "steady",
    "unknown_key",
]

#: The variable that names the knowledge folder in force (``agent.domain.knowledge_dir.ENV_VAR``).
ENV_VAR = "HYPOLOOP_KNOWLEDGE"
#: The repository's own knowledge folder.
REPOSITORY_DIR = Path(__file__).resolve().parents[1] / "knowledge"

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class KnowledgeFileError(ValueError):
    """A knowledge file that has no error class of its own cannot be used (one line naming it)."""


def knowledge_path(name: str) -> Path:
    """``name`` in the knowledge folder in force (``$HYPOLOOP_KNOWLEDGE``), else the repository's file."""
    folder = os.environ.get(ENV_VAR)
    if folder:
        own = Path(folder).expanduser() / name
        if own.is_file():
            return own
    return REPOSITORY_DIR / name


def read_toml(path: Path, error: type[Exception]) -> dict[str, Any]:
    """``path`` parsed as TOML. Raises ``error`` (one line): ``PATH: cannot read: WHY`` or ``PATH: not a
    TOML file: WHY``."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or type(exc).__name__}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise error(f"{path}: not a TOML file: {' '.join(str(exc).split())}") from None


def item_path(loc: Sequence[Any]) -> str:
    """Where a value sits in a TOML or JSON file, as a person counts: keys joined by dots, and an array
    item as ``#N`` counted from 1 (``probes #2.kind`` is the ``kind`` of the second ``[[probes]]``
    table). Every error message of hypoloop that names an item of an array counts this way."""
    out = ""
    for p in loc:
        out += f" #{p + 1}" if isinstance(p, int) else f".{p}"
    return out.lstrip(".")


def field_error(exc: ValidationError) -> tuple[str, str]:
    """The first error of a validation as (field, message): ``a.b #1.c`` (`item_path`); an unknown key
    says so."""
    err = exc.errors()[0]
    where = item_path(err["loc"])
    msg = "unknown key (not one this file has)" if err["type"] == "extra_forbidden" else err["msg"]
    return where, msg


def load_model(path: Path, model: type[M], error: type[Exception]) -> M:
    """``path`` read (`read_toml`) and checked against ``model``. Raises ``error`` (one line):
    ``PATH: field 'a.b': WHAT``."""
    data = read_toml(path, error)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where, msg = field_error(exc)
        raise error(f"{path}: field '{where}': {msg}" if where else f"{path}: {msg}") from None


def check_keys(
    path: Path, table: object, allowed: Iterable[str], error: type[Exception], where: str = ""
) -> None:
    """Raise ``error`` (one line) when the TOML table ``table`` has a key not in ``allowed``:
    ``PATH: WHERE: unknown table or key 'k' (expected: a, b)``. Anything but a table is left to the
    caller's own checks."""
    if not isinstance(table, dict):
        return
    known = list(allowed)
    extra = [k for k in table if k not in known]
    if extra:
        at = f"{where}: " if where else ""
        raise error(f"{path}: {at}unknown table or key {extra[0]!r} (expected: {', '.join(known)})")


def _nested_model(annotation: object) -> type[BaseModel] | None:
    """The pydantic model a field's annotation holds (``list[Condition]``, ``Condition | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None


def unknown_key(data: object, model: type[BaseModel]) -> str | None:
    """The first key of the TOML table ``data``, nested tables included (``when_any #1.bogus``, `item_path`), that
    ``model`` has no field for; None when there is none. For models that must also read other input
    leniently (a transcript), so cannot forbid extra fields themselves."""
    if not isinstance(data, dict):
        return None
    fields = model.model_fields
    names = {n: f for n, f in fields.items()} | {f.alias: f for f in fields.values() if f.alias}
    for key, value in data.items():
        field = names.get(key)
        if field is None:
            return str(key)
        inner = _nested_model(field.annotation)
        if inner is None:
            continue
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for i, item in items:
            bad = unknown_key(item, inner)
            if bad is not None:
                return f"{key} #{i + 1}.{bad}" if i is not None else f"{key}.{bad}"
    return None


#: Per thread: the files read inside the `steady` block in force (id of the `KnowledgeFile` -> value), or None.
_STEADY = threading.local()


@contextlib.contextmanager
def steady() -> Iterator[None]:
    """Within the block, each knowledge file is looked up on disk at most once in this thread: a caller
    that asks for files thousands of times in one decision (the rule planner's step,
    ``agent.planning.planner``) treats the folder in force and its files as unchanged meanwhile; another
    folder chosen, or an edit made, during the block is read after it. A block inside another shares the
    outer one's readings."""
    if getattr(_STEADY, "seen", None) is not None:
        yield
        return
    _STEADY.seen = {}
    try:
        yield
    finally:
        _STEADY.seen = None


class KnowledgeFile(Generic[T]):
    """One file of the knowledge folder, ``parse``d once per version on disk.

    ``absent`` gives the value when not even the repository has the file (None: ``parse`` is called
    and says it cannot read it). ``parse`` raises the file's own error class, one line.
    """

    def __init__(self, name: str, parse: Callable[[Path], T], *, absent: Callable[[], T] | None = None) -> None:
        self.name = name
        self._parse = parse
        self._absent = absent
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, int, int], T] = {}

    def path(self) -> Path:
        """The file in force (`knowledge_path`)."""
        return knowledge_path(self.name)

    def __call__(self) -> T:
        """The file in force, parsed (a cached value when it has not changed on disk). One ``stat`` a
        call (none inside a `steady` block once read there): the planner asks for some files (its weights)
        thousands of times a step."""
        seen: dict[int, Any] | None = getattr(_STEADY, "seen", None)
        if seen is None:
            return self._read()
        if id(self) not in seen:
            seen[id(self)] = self._read()
        return typing.cast(T, seen[id(self)])

    def _read(self) -> T:
        """The file in force, parsed, or the cached value when it has not changed on disk (one ``stat``)."""
        path, st = self._in_force()
        if st is None:
            if self._absent is not None:
                return self._absent()
            return self._parse(path)  # raises the one-line "cannot read"
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        value = self._parse(path)
        with self._lock:
            if len(self._cache) >= 8:
                self._cache.clear()
            self._cache[key] = value
        return value

    def _in_force(self) -> tuple[Path, os.stat_result | None]:
        """The file in force (`knowledge_path`) with its ``stat`` (None: it cannot be read), from one
        ``stat`` of the folder's own file and, when that is not a file, one of the repository's."""
        folder = os.environ.get(ENV_VAR)
        if folder:
            own = Path(folder).expanduser() / self.name if folder.startswith("~") else _own_path(folder, self.name)
            try:
                st = os.stat(own)
            except (OSError, ValueError):
                st = None
            if st is not None and stat.S_ISREG(st.st_mode):
                return own, st
        repo = _own_path(None, self.name)
        try:
            return repo, os.stat(repo)
        except (OSError, ValueError):
            return repo, None


@functools.lru_cache(maxsize=256)
def _own_path(folder: str | None, name: str) -> Path:
    """``name`` in ``folder`` (None: the repository's folder; one without ``~``, so the path is the same
    whatever ``$HOME`` says), as `knowledge_path` spells it."""
    return (Path(folder) if folder is not None else REPOSITORY_DIR) / name
