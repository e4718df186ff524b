"""Python tracebacks in a server log: their frames (innermost first) and what an import failure names.

A log may hold several tracebacks: one per TP rank (usually identical), and chained ones ("During
handling of the above exception ..."). `parse_tracebacks` returns each distinct one; `missing_import`
reads the module, package or shared library an ``ImportError`` / ``ModuleNotFoundError`` / "could not
load ... library" line names.

Format read: CPython's ``traceback`` module (3.8-3.13): a ``Traceback (most recent call last):`` header,
``  File "PATH", line N, in FUNCTION`` per frame (outermost first) optionally followed by the source line
and ``^^^^`` markers, then ``ExceptionType: message``. SGLang logs the header after a prefix
(``[2026-01-10 13:23:27 TP0] Scheduler hit an exception: Traceback (most recent call last):``,
``srt/managers/scheduler.py``), so the header and frames are searched for anywhere in a line. vLLM
repeats its record header (``(EngineCore pid=N) ERROR MM-DD HH:MM:SS [core.py:N] ``) on every line of a
logged traceback (``tools.log_records``): a line whose header names a level is read without it.

A process killed by a signal leaves another format: CPython's ``faulthandler`` (3.8-3.13,
Python/faulthandler.c), which SGLang enables in its scheduler: ``Fatal Python error: Segmentation fault``,
then per thread ``Current thread 0x... (most recent call first):`` (or ``Thread 0x...``) and ``  File
"PATH", line N in FUNCTION`` frames, innermost first, then ``Extension modules: ...``; a reporter often adds
the native stack of the crash as a debugger prints it (gdb's ``#0  0x... in SYMBOL () from LIB`` or ``#1
0x... in SYMBOL (...) at FILE:LINE``, innermost first). Such a dump is one ``Traceback`` whose exception is
``Fatal Python error`` with the signal's name as its message; its frames are the native ones (innermost
first, ``Frame.native``) and then the Python frames of the crashed thread (the ``Current thread`` block,
else the first one printed). A dump with no frame at all is not a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

from tools.log_records import read_record

#: The header CPython writes before a traceback (what a log reader looks for to find one).
TRACEBACK_START = re.compile(r"Traceback \(most recent call last\)")
_HEADER = re.compile(r"Traceback \(most recent call last\):")
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S.*?)\s*$')
_MARKERS = re.compile(r"^[\s~^\-]+$")
#: ``ValueError: ...``, ``torch.OutOfMemoryError: ...``, ``triton.compiler.errors.CompilationError``.
_EXCEPTION = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure))(?::\s?(?P<msg>.*))?$"
)
_CHAIN = re.compile(r"^(During handling of the above exception|The above exception was the direct cause)")
#: faulthandler's dump (CPython Python/faulthandler.c): its first line, a thread's header, a frame.
_FATAL = re.compile(r"Fatal Python error: (?P<what>\S.*?)\s*$")
_THREAD = re.compile(r"^(?:(?P<current>Current thread)|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):|^Stack \(most recent call first\):")
_DUMP_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S.*?)\s*$')
#: Lines of a dump that neither end it nor hold a frame.
_DUMP_OTHER = re.compile(r"^\s*<no Python frame>\s*$|^Extension modules: |^\s*\.\.\.\s*$")
#: A native frame as gdb prints it: ``#0  0x00007f... in ldtilecfg () from /x/torch/lib/libtorch_cpu.so``,
#: ``#2 0x... in at::native::cpublas::brgemm(long, ...) () from LIB``, ``#3  f (a=1) at src/x.cpp:42``.
_NATIVE = re.compile(
    r"^#(?P<n>\d+)\s+(?:0x[0-9a-fA-F]+ in )?(?P<func>\S.*?)\s*(?:\(.*\))?\s+"
    r"(?:from (?P<lib>\S+)|at (?P<file>\S+?):(?P<line>\d+))\s*$"
)
#: gdb wraps a long frame: ``#0  0x... in ncclTopoCompute(ncclTopoSystem*, ncclTopoGraph*) ()`` and, on the
#: next line, ``   from /opt/rocm/lib/librccl.so.1`` (ROCm/rccl-tests#72).
_NATIVE_OPEN = re.compile(r"^#(?P<n>\d+)\s+0x[0-9a-fA-F]+ in (?P<func>[^\s(]+)")
_NATIVE_FROM = re.compile(r"^\s+(?:from (?P<lib>\S+)|at (?P<file>\S+?):(?P<line>\d+))\s*$")
#: Any line of a faulthandler dump with its native stack (what a log reader keeps of one).
DUMP_LINE = re.compile(
    r"Fatal Python error: |(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):|"
    r'^\s*File "[^"]+", line \d+ in |^#\d+\s+(?:0x[0-9a-fA-F]+ in )?\S.*\s(?:from|at) \S+|^#\d+\s+0x[0-9a-fA-F]+ in \S|^\s+from /\S+\.so\S*\s*$|^Extension modules: '
)
_SITE_PACKAGE = re.compile(r"(?:site|dist)-packages/(?P<pkg>[A-Za-z_]\w*)/")


#: An installed package's file: ``.../site-packages/sglang/srt/layers/attention/triton_backend.py``.
_PACKAGE_PATH = re.compile(r"(?:site|dist)-packages/(?P<mod>[^\"]+?)\.py$")
#: Source checkouts: ``.../sglang/python/sglang/srt/...`` or ``.../python/sglang/...``.
_SOURCE_PATH = re.compile(r"/python/(?P<mod>[A-Za-z_]\w*/[^\"]+?)\.py$")


class Frame(BaseModel):
    """One traceback frame. `line` is the 1-based line in `path`; `code` the source line Python printed
    under it (stripped; None when it printed none); `log_line` the 1-based log line of the ``File``
    line. ``module`` is the dotted module path read from the path after ``site-packages/`` or
    ``dist-packages/`` (or a source checkout's ``/python/``), e.g.
    ``sglang.srt.layers.attention.triton_backend``, and ``package`` its top-level package (``sglang``,
    ``flashinfer``, ``deep_gemm``, ...); both None for ``<frozen runpy>`` or a file outside packages."""

    path: str
    line: int
    function: str
    code: str | None = None
    log_line: int = 0
    package: str | None = None
    module: str | None = None
    #: A frame of compiled code (a native stack's, ``path`` the shared library or C++ file): no Python
    #: source to read, ``module`` None, ``package`` the installed package whose library it is.
    native: bool = False

    @classmethod
    def native_at(cls, path: str, function: str, line: int = 0, log_line: int = 0) -> Frame:
        """A native frame; its ``package`` read from an installed package's path (``site-packages/torch/lib/
        libtorch_cpu.so`` is ``torch``), else None (a system library)."""
        m = _SITE_PACKAGE.search(path)
        return cls(path=path, line=line, function=function, log_line=log_line,
                   package=m.group("pkg") if m else None, native=True)

    @classmethod
    def at(cls, path: str, line: int, function: str, log_line: int = 0) -> Frame:
        """A frame with its ``module`` and ``package`` read from ``path``."""
        m = _PACKAGE_PATH.search(path) or _SOURCE_PATH.search(path)
        module = m.group("mod").replace("/", ".").removesuffix(".__init__") if m else None
        package = module.split(".", 1)[0] if module else None
        return cls(path=path, line=line, function=function, log_line=log_line, package=package, module=module)


class Traceback(BaseModel):
    """One Python traceback: frames innermost first, the exception type and its message (first line).

    ``log_line``: the 1-based log line of the exception line (of the last frame when none was printed);
    ``start_line``: that of the header (or first frame); ``exception_line``: the line that ended the
    traceback as printed (``RuntimeError: ...``, a bare ``AssertionError``), stripped.
    """

    frames: list[Frame] = Field(default_factory=list)
    exception: str | None = None
    message: str = ""
    log_line: int = 0
    start_line: int = 0
    exception_line: str = ""

    @property
    def innermost(self) -> Frame | None:
        """The frame where the exception was raised (the last one printed)."""
        return self.frames[0] if self.frames else None

    def key(self) -> tuple[object, ...]:
        """Identity for de-duplication (the same traceback printed by every TP rank)."""
        return (tuple((f.path, f.line, f.function) for f in self.frames), self.exception, self.message)


class MissingImport(BaseModel):
    """What a failed import names.

    ``kind``: ``module`` (``No module named 'x.y'``), ``name`` (``cannot import name 'f' from 'pkg'``:
    the package is there but lacks the name, usually a version mismatch) or ``library`` (a shared
    library that could not be loaded: ``libcudnn.so.9``, or an extension module with an undefined
    symbol). ``package`` is the top-level importable package (``deep_gemm`` for ``deep_gemm.jit``), or
    the library's file name. ``text`` is the log line; ``log_line`` its 1-based number.
    """

    kind: Literal["module", "name", "library"]
    module: str
    package: str
    text: str
    log_line: int = 0

    def what(self) -> str:
        """What to install, in words: "the package X", or for a shared library (``libnvrtc.so.12``) "the
        library X (through the package that ships it)": a library file is no package."""
        if self.kind == "library" and is_library_file(self.package):
            return f"the library {self.package} (through the package that ships it)"
        return f"the package {self.package}"


def parse_tracebacks(text: str) -> list[Traceback]:
    """Every distinct traceback in a log text, in order of appearance; frames innermost first.

    Lines are split on ``\\n`` and ``\\r``. A traceback starts at its header (or at a ``File`` line with
    no header before it, for a log cut at its start) and ends at its exception line or at the first
    line that is neither a frame nor indented source. Identical tracebacks (one per rank) are kept once.
    """
    return parse_numbered_lines(enumerate(re.split(r"\r\n|\r|\n", text), 1))


def _without_repeated_header(line: str) -> str:
    """A line without a record header that names a level (vLLM repeats it on every line of a record)."""
    record = read_record(line)
    return record.message if record.level else line


def parse_numbered_lines(lines: Iterable[tuple[int, str]], *, unique: bool = True) -> list[Traceback]:
    """Tracebacks in ``(log line number, text)`` pairs (a log's kept lines), as `parse_tracebacks`; a gap in the
    numbers (lines not kept) also ends one. ``unique``: identical ones (one per TP rank) are kept once."""
    out: list[Traceback] = []
    seen: set[tuple[object, ...]] = set()
    frames: list[Frame] | None = None
    start = prev = 0

    def close(exc: str | None, msg: str, lineno: int, raw: str = "") -> None:
        nonlocal frames
        if frames or raw:
            tb = Traceback(
                frames=list(reversed(frames or [])),
                exception=exc,
                message=msg,
                log_line=lineno or (frames[-1].log_line if frames else start),
                start_line=start,
                exception_line=raw,
            )
            if not unique or tb.key() not in seen:
                seen.add(tb.key())
                out.append(tb)
        frames = None

    numbered = list(lines)
    for lineno, raw_line in numbered:
        line = _without_repeated_header(raw_line.rstrip())
        if frames is not None and prev and lineno != prev + 1:
            close(None, "", 0)
        prev = lineno
        if _HEADER.search(line):
            close(None, "", 0)
            frames, start = [], lineno
            continue
        m = _FRAME.search(line)
        if m and (frames is not None or line.lstrip().startswith("File ")):
            if frames is None:
                frames, start = [], lineno
            frames.append(Frame.at(m.group("path"), int(m.group("line")), m.group("func"), log_line=lineno))
            continue
        if frames is None:
            continue
        stripped = line.strip()
        if not stripped or _MARKERS.match(line):
            continue
        if line[:1].isspace():
            if frames and frames[-1].code is None and not stripped.startswith("["):
                frames[-1].code = stripped
            continue
        e = _EXCEPTION.match(stripped)
        if e:
            close(e.group("type"), (e.group("msg") or "").strip(), lineno, stripped)
        elif _CHAIN.match(stripped):
            close(None, "", lineno)
        else:
            close(None, stripped[:300], lineno, stripped)
    close(None, "", 0)
    out += [tb for tb in _dumps(numbered) if not unique or tb.key() not in seen]
    return sorted(out, key=lambda tb: tb.start_line)


def exception_of(lines: Iterable[tuple[int, str]], start: int) -> tuple[int, str] | None:
    """The line that states the failure of the traceback whose header is log line ``start``, as (log line,
    text stripped): its exception line (``RuntimeError: ...``), or when another exception was raised while
    handling it ("During handling of the above exception, another exception occurred:", "The above
    exception was the direct cause of the following exception:"), the exception line of the last traceback
    of that chain: the last line CPython printed, the exception that propagated. ``lines`` are (log line
    number, text) pairs from ``start`` on; None while the traceback has not ended among them."""
    numbered = list(lines)
    text = dict(numbered)
    tracebacks = parse_numbered_lines(numbered, unique=False)
    current = next((tb for tb in tracebacks if tb.start_line == start and tb.exception_line), None)
    if current is None:
        return None
    for tb in tracebacks:
        if tb.start_line <= current.log_line or not tb.exception_line:
            continue
        if not _chained(text, current, tb):
            break  # not a chained exception: another failure, after this one
        current = tb
    return current.log_line, current.exception_line


def _chained(text: dict[int, str], cause: Traceback, tb: Traceback) -> bool:
    """Whether the lines between ``cause``'s exception line and ``tb``'s header (``text``: the log's lines by
    number, a line not kept absent) are CPython's chain lines and blanks only, one chain line at least: ``tb``
    was raised while handling ``cause``."""
    between = [_without_repeated_header(text.get(n, "\0")).strip() for n in range(cause.log_line + 1, tb.start_line)]
    return any(_CHAIN.match(b) for b in between) and all(not b or _CHAIN.match(b) for b in between)


def chained_to_cause(tracebacks: list[Traceback], text: dict[int, str]) -> list[Traceback]:
    """``tracebacks`` (in log order) with each chain of exceptions reversed, its original error last: where
    CPython printed "During handling of the above exception, another exception occurred:" or "The above
    exception was the direct cause of the following exception:" (and nothing else) between one traceback's
    exception line and the next one's header, the first is the cause. A reader that takes the last
    traceback as the failure's site then reads where the original error was raised (a kernel package's
    assertion), not the wrapper that caught and re-raised it ("Capture cuda graph failed: ..."). ``text``:
    the log's lines by 1-based number (lines not kept are absent, which breaks a chain)."""
    out: list[Traceback] = []
    group: list[Traceback] = []
    for tb in tracebacks:
        if group and _chained(text, group[-1], tb):
            group.append(tb)
            continue
        out += reversed(group)
        group = [tb]
    return out + list(reversed(group))


def _dumps(lines: Iterable[tuple[int, str]]) -> list[Traceback]:
    """The faulthandler dumps in numbered lines, as tracebacks (see the module docstring). A dump's blank
    lines are seldom kept as evidence: a gap in the numbers does not end it, a line outside it does."""
    out: list[Traceback] = []
    dump: _Dump | None = None
    for lineno, raw_line in lines:
        line = _without_repeated_header(raw_line.rstrip())
        if dump is not None and dump.feed(lineno, line):
            continue
        if dump is not None and (tb := dump.traceback()) is not None:
            out.append(tb)
        dump = _Dump(lineno, f.group("what"), line.strip()) if (f := _FATAL.search(line)) else None
    if dump is not None and (tb := dump.traceback()) is not None:
        out.append(tb)
    return out


class _Dump:
    """A faulthandler dump being read (see the module docstring): the native frames and the Python frames
    of the crashed thread, each innermost first."""

    def __init__(self, lineno: int, what: str, text: str) -> None:
        self.start, self.what, self.text = lineno, what, text[text.find("Fatal Python error"):]
        self.native: list[Frame] = []
        self.python: list[Frame] = []
        self.block: list[Frame] | None = None  # the thread block being read (None: one not kept)

    def feed(self, lineno: int, line: str) -> bool:
        """Read one line of the dump; False when the line is not part of it (the dump has ended)."""
        stripped = line.strip()
        if not stripped or _DUMP_OTHER.search(line):
            return True
        if t := _THREAD.search(stripped):
            # the crashed thread: the "Current thread" block, else the first one printed
            if t.group("current") or not self.python:
                self.python = []
                self.block = self.python
            else:
                self.block = None
            return True
        if m := _DUMP_FRAME.match(line):
            if self.block is not None:
                self.block.append(Frame.at(m.group("path"), int(m.group("line")), m.group("func"), log_line=lineno))
            return True
        if n := _NATIVE.match(stripped):
            path = n.group("lib") or n.group("file") or ""
            self.native.append(Frame.native_at(path, n.group("func"), int(n.group("line") or 0), log_line=lineno))
            return True
        if n := _NATIVE_OPEN.match(stripped):  # a frame gdb wrapped: its library on the next line
            self.native.append(Frame.native_at("", n.group("func"), log_line=lineno))
            return True
        if (n := _NATIVE_FROM.match(line)) and self.native and not self.native[-1].path:
            last = self.native[-1]
            self.native[-1] = Frame.native_at(n.group("lib") or n.group("file"), last.function,
                                              int(n.group("line") or 0), log_line=last.log_line)
            return True
        return False

    def traceback(self) -> Traceback | None:
        """The dump as a ``Traceback`` (frames innermost first: native, then Python), or None without frames."""
        frames = [*self.native, *self.python]
        if not frames:
            return None
        return Traceback(frames=frames, exception="Fatal Python error", message=self.what,
                         log_line=self.start, start_line=self.start, exception_line=self.text)


_NO_MODULE = re.compile(r"No module named '(?P<mod>[\w.]+)'")
_NO_NAME = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<mod>[\w.]+)'")
_NO_LIBRARY = re.compile(
    r"(?P<lib>[\w./+-]*lib[\w.+-]*\.so(?:\.[\w.]+)?): cannot open shared object file"
    r"|[Cc]ould not load (?:library |dynamic library )?(?P<lib2>\S+)"
    r"|(?P<ext>/[\w./+-]+\.so): undefined symbol"
)
_SITE = re.compile(r"/(?:site|dist)-packages/(?P<pkg>[A-Za-z_]\w*)")


def missing_import(text: str, tracebacks: list[Traceback] | None = None) -> MissingImport | None:
    """The module, package or library a failed import names in the log `text`, or None.

    Looks at each traceback's exception line first (``ModuleNotFoundError``, ``ImportError``,
    ``OSError``), then at any log line with "No module named", "cannot import name", "cannot open
    shared object file", "could not load ... library" or "undefined symbol". An extension module with an
    undefined symbol is named by the package it lives in (``.../site-packages/sgl_kernel/common_ops.so``
    is ``sgl_kernel``). Wording from CPython's import system and the dynamic loader's ``dlerror``. A
    line where the engine says it ignored the import error (``_IGNORED``: "Ignore import error when loading
    sglang.srt.models.falcon_mamba: cannot import name ...", printed on every start) is not one, nor a line
    outside the tracebacks, written before the last traceback, when that traceback is a fatal error of
    another kind that never runs in what the line says is missing (``_unrelated``): a warning's import is
    not the failure then. Except the model's own implementation: when SGLang says an architecture has no
    implementation of its own and falls back to Transformers, the ignored import of the module that
    implements it (``sglang.srt.models.deepseek_v4`` for ``DeepseekV4ForCausalLM``) is why, and is the failure.
    """
    tbs = tracebacks if tracebacks is not None else parse_tracebacks(text)
    candidates: list[tuple[str, int]] = []
    for tb in tbs:
        if tb.exception and tb.exception.split(".")[-1] in _IMPORT_ERRORS:
            candidates.append((f"{tb.exception}: {tb.message}", tb.log_line))
    # no traceback is a failed import: its last one is the fatal error, and a loose line must touch it
    fatal = tbs[-1] if tbs and not candidates and tbs[-1].exception else None
    lines = re.split(r"\r\n|\r|\n", text)
    fallen = {_arch_key(m.group("arch")) for line in lines  # a word run is read once (\b), not from each letter
              if "has no SGLang" in line and (m := _FALLBACK.search(line))}
    own: set[int] = set()  # lines of an ignored import of the model's own implementation
    for lineno, line in enumerate(lines, 1):
        if (m := _IGNORED.search(line)) is not None:
            if _arch_key(m.group("module").rsplit(".", 1)[-1]) in fallen:
                candidates.append((m.group("error").strip(), lineno))
                own.add(lineno)
            continue  # otherwise the engine caught it and went on: not the failure
        if "module named" in line or "cannot import name" in line or ".so" in line or "load" in line:
            candidates.append((line.strip(), lineno))
    for line, lineno in candidates:
        found = _missing_in(line, lineno)
        if found is not None and (fatal is None or lineno > fatal.log_line or lineno in own
                                  or not _unrelated(found, fatal)):
            return found
    return None


#: SGLang's notice that a model's own implementation is missing from its registry (0.5.23
#: srt/model_loader/utils.py: "%s has no SGLang implementation, falling back to Transformers implementation.").
_FALLBACK = re.compile(r"\b(?P<arch>[A-Za-z_]\w*) has no SGLang implementation, falling back to Transformers")
#: The registry's notice for a model module whose import failed (0.5.23 srt/models/registry.py
#: ``import_model_classes``: "Ignore import error when loading {name}: {e}"): skipped, so the architecture it
#: implements is not registered.
_IGNORED = re.compile(r"Ignore import error when loading (?P<module>[\w.]+): (?P<error>.+)$")


def _arch_key(name: str) -> str:
    """A model architecture or model module name compared loosely: ``DeepseekV4ForCausalLM`` and
    ``deepseek_v4`` are both ``deepseekv4`` (the class suffix that says what kind of head it has left out)."""
    key = re.sub(r"(?:For(?:CausalLM|ConditionalGeneration|SequenceClassification)|Model|LMHeadModel)$", "", name)
    return key.replace("_", "").lower()


#: Exceptions that are themselves a failed import (CPython's import system; the loader's OSError).
_IMPORT_ERRORS = ("ModuleNotFoundError", "ImportError", "OSError")


def _unrelated(missing: MissingImport, fatal: Traceback) -> bool:
    """Whether the fatal traceback (an error that is not an import) never touches what ``missing`` names:
    no frame runs in the missing module (or, for a missing name, the module it was imported from) nor in
    a third-party package of that name, and its message does not name it."""
    where = missing.module.rsplit(".", 1)[0] if missing.kind == "name" else missing.module
    own = {f.package for f in fatal.frames if f.package}
    for f in fatal.frames:
        if f.module and (f.module == where or f.module.startswith(where + ".")):
            return False
    if missing.package not in own and missing.package.lower() in " ".join(
            [*(f.module or "" for f in fatal.frames), fatal.message]).lower():
        return False
    return True


def is_library_file(name: str) -> bool:
    """Whether ``name`` is a shared library's file name (``libnvrtc.so.12``, ``common_ops.abi3.so``,
    ``foo.dylib``, ``foo.dll``) rather than a Python package's."""
    return re.search(r"\.(?:so|dylib|dll)(?:\.[0-9][0-9.]*)?$", name) is not None


def _missing_in(line: str, lineno: int) -> MissingImport | None:
    """The failed import one log ``line`` names (see ``missing_import``), or None."""
    if m := _NO_MODULE.search(line):
        mod = m.group("mod")
        return MissingImport(
            kind="module", module=mod, package=mod.split(".")[0], text=line[:300], log_line=lineno
        )
    if m := _NO_NAME.search(line):
        mod = m.group("mod")
        return MissingImport(
            kind="name",
            module=f"{mod}.{m.group('name')}",
            package=mod.split(".")[0],
            text=line[:300],
            log_line=lineno,
        )
    if m := _NO_LIBRARY.search(line):
        lib = (m.group("lib") or m.group("lib2") or m.group("ext") or "").strip("'\"`.,:;")
        if not lib or ("load" in line and "lib" not in lib.lower() and ".so" not in lib):
            return None
        site = _SITE.search(lib)
        package = site.group("pkg") if site else lib.rsplit("/", 1)[-1]
        return MissingImport(
            kind="library", module=lib, package=package, text=line[:300], log_line=lineno
        )
    return None
