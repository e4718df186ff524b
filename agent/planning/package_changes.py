"""What changed on the host: packages whose installed version differs from what the user says it was, or
from what a known-good note recorded; each is a hypothesis no launch setting tests.

Two sources, both matched against the host's installed packages (``HostFingerprint.installed``, read by
the host's own Python; a name is never guessed from a list in code):

- the case's description: a sentence that says something changed (``knowledge/packages.toml``
  ``[change_words]``: "after upgrading", "since", "pip install -U", ...) and names an installed
  distribution (``flashinfer-python``, ``sgl_kernel``, or an import name such as ``flashinfer`` that
  installed distributions are named after); its earlier version is the one the sentence gives with
  "from X" / "X -> Y", else unknown;
- a relevant known-good FINDINGS.md note (``outcome`` works, relevance at least ``finding_min_relevance``)
  with a ``packages:`` line: each recorded version that differs from the installed one; ``rocm`` and
  ``cuda`` are compared with the toolkit the host's torch was built for (``tools.installed.toolkit_versions``:
  ``2.9.1+rocm7.0``), so a note's ``rocm==7.0`` on a host now built for ROCm 7.2 is a change.

The candidate's weight is ``[weights] changed`` of ``knowledge/packages.toml``, times ``in_frames_factor``
when the failing traceback runs in that package. It carries no intervention (hypoloop changes launch
settings, never installs packages), so it orders the ending, not the experiments: a run where no setting
fixes the failure names it first (``agent.planning.blame``). The generator is
``agent.planning.generators.changed``.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.planning.weights import weights as tunables
from tools.installed import dist_key, distributions_of, provides, same_version, toolkit_versions
from tools.logwatch import LogLine
from tools.tracebacks import Frame, Traceback

if TYPE_CHECKING:
    from agent.domain.case import Case
    from agent.domain.models import RelevantFinding

__all__ = [
    "PackageChange",
    "PackagesError",
    "crashed_in",
    "error_packages",
    "frame_packages",
    "install_advice",
    "is_generic_runtime",
    "is_in",
    "message_lines",
    "outdated_package",
    "package_changes",
    "packages_knowledge",
]

FILE = "packages.toml"


class PackagesError(ValueError):
    """``packages.toml`` cannot be used (one line naming the file and the field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Generic(_Strict):
    names: tuple[str, ...]
    reason: str
    source: str


class _Words(_Strict):
    words: tuple[str, ...]
    source: str


class _Weights(_Strict):
    changed: float = Field(gt=0)
    in_frames_factor: float = Field(ge=1)
    source: str


class _Advice(_Strict):
    patterns: tuple[str, ...] = Field(min_length=1)
    source: str


class _Builds(_Strict):
    works_words: tuple[str, ...] = ()
    source: str


class _Install(_Strict):
    patterns: tuple[str, ...] = Field(min_length=1)
    source: str


class PackagesKnowledge(_Strict):
    """``knowledge/packages.toml``: the generic runtimes, the words that say something changed, weights,
    the words of an error that says its own package is too old (``upgrade_advice``), the words that
    say another build of the platform served (``platform_builds``, optional) and those of an error that
    says what to install (``install_advice``, optional)."""

    generic_runtimes: _Generic
    change_words: _Words
    weights: _Weights
    upgrade_advice: _Advice
    platform_builds: _Builds | None = None
    install_advice: _Install | None = None


@functools.cache
def _of(path: Path, mtime: float) -> PackagesKnowledge:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PackagesError(f"{path}: {exc}") from None
    try:
        return PackagesKnowledge.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise PackagesError(f"{path}: field '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}") from None


def packages_knowledge() -> PackagesKnowledge:
    """``packages.toml`` of the knowledge folder in force (else the repository's), read once per file
    version. Raises PackagesError (one line naming the file and the field)."""
    from agent.domain.knowledge_dir import knowledge_file

    path = knowledge_file(FILE)
    return _of(path, path.stat().st_mtime)


def is_generic_runtime(name: str) -> bool:
    """Whether a distribution (or import name) is a generic runtime (``[generic_runtimes]``: the tensor
    library, the kernel compiler, the CUDA runtime wheels), blamed only with evidence against it."""
    from agent.planning.evidence_packages import entry

    key = dist_key(name)
    for pat in packages_knowledge().generic_runtimes.names:
        p = dist_key(pat.rstrip("*"))
        if key == p or (pat.endswith("*") and key.startswith(p)):
            return True
    lib = entry(name)  # a driver or GPU runtime of knowledge/libraries.toml
    return lib is not None and lib.runtime


class PackageChange(BaseModel):
    """One installed package that changed: ``before`` the version it had (None: unknown), ``after`` the
    installed one (None: no longer installed), ``source`` where the claim comes from, in words."""

    name: str
    before: str | None = None
    after: str | None = None
    source: str

    def describe(self) -> str:
        """``torch 2.9.1 -> 2.10.0`` (``?`` for an unknown version, ``not installed`` for none)."""
        return f"{self.name} {self.before or '?'} -> {self.after or 'not installed'}"


_VER = r"v?(\d+(?:\.[0-9A-Za-z]+)+(?:[.+\-][0-9A-Za-z]+)*)"
#: "from [up to three words] X [words] to [up to three words] Y": "from the lmsysorg/sglang v0.5.9 ROCm image
#: to the newer v0.5.10 image"
_FROM_TO = re.compile(rf"\bfrom\s+(?:\S+\s+){{0,3}}?{_VER}\b.*?\bto\s+(?:\S+\s+){{0,3}}?{_VER}", re.I)
_ARROW = re.compile(rf"{_VER}\s*(?:->|→|=>)\s*{_VER}")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9._\-]*[A-Za-z0-9]")


#: The endings a change word may take ("upgrad" -> "upgrade", "upgraded", "upgrading"; "bump" -> "bumped"): a
#: change word is a whole word with one of these, never the inside of another ("removed" is not "moved",
#: "unchanged" not "changed", "afternoon" not "after").
_INFLECTION = "(?:e|ed|es|ing|s|d)?"


def _sentences(text: str) -> list[str]:
    """Sentences of a description: split at a full stop followed by a space, a newline or a semicolon."""
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+|;\s*", text) if s.strip()]


def _from_text(description: str, installed: Mapping[str, str],
               import_names: Mapping[str, Sequence[str]] | None = None) -> list[PackageChange]:
    """Changes the case's description tells (see the module docstring): a change word matches as a whole word
    (``_INFLECTION``); an import name is read as the distribution the host's Python says provides it
    (``import_names``)."""
    words = packages_knowledge().change_words.words
    out: list[PackageChange] = []
    for sentence in _sentences(description):
        low = sentence.lower()
        if not any(re.search(rf"(?<![a-z]){re.escape(w)}{_INFLECTION}(?![a-z])", low) for w in words):
            continue
        names: list[str] = []
        for tok in _TOKEN.findall(sentence):
            for dist in distributions_of(tok, installed, import_names):
                if dist not in names:
                    names.append(dist)
        span = _FROM_TO.search(sentence) or _ARROW.search(sentence)
        for dist in names:
            # "from X to Y" gives the earlier version only when one package is named in the sentence
            before = span.group(1) if span and len(names) == 1 else None
            if before is not None and before == installed[dist]:
                continue  # the sentence's "before" is what is installed: nothing changed
            quoted = sentence if len(sentence) <= 200 else sentence[:197] + "..."
            out.append(PackageChange(name=dist, before=before, after=installed[dist],
                                     source=f"the case's description: \"{quoted}\""))
    return out


def _from_findings(findings: Iterable[RelevantFinding], installed: Mapping[str, str]) -> list[PackageChange]:
    """Recorded versions of relevant known-good notes that differ from the installed ones."""
    least = tunables().ledger.finding_min_relevance
    out: list[PackageChange] = []
    for rf in findings:
        f = rf.finding
        if f.outcome != "works" or rf.relevance < least or not f.packages or not installed:
            continue
        where = Path(f.source).name if f.source else "notes"
        hosted = {**toolkit_versions(installed), **installed}  # the ROCm / CUDA the host's torch was built for
        for name, version in sorted(f.packages.items()):
            now = hosted.get(dist_key(name))
            if not same_version(now, version):
                out.append(PackageChange(name=dist_key(name), before=version, after=now,
                                         source=f"the known-good note '{f.title}' ({where}) records {name}=={version}"))
    return out


def package_changes(case: Case, installed: Mapping[str, str], findings: Iterable[RelevantFinding],
                    import_names: Mapping[str, Sequence[str]] | None = None) -> list[PackageChange]:
    """What changed on the host, the case's own words first, then known-good notes; one entry per
    package (a note fills in an earlier version the words left unknown). ``import_names``: which
    distributions provide each import name, as the host's Python says (``HostFingerprint.import_names``),
    so that words naming ``sgl_kernel`` find ``sglang-kernel``. ``[]`` when the host's installed packages are
    unknown (nothing is matched against a guess)."""
    if not installed:
        return []
    merged: dict[str, PackageChange] = {}
    for ch in [*_from_text(case.description or "", installed, import_names), *_from_findings(findings, installed)]:
        known = merged.get(ch.name)
        if known is None:
            merged[ch.name] = ch
        elif known.before is None and ch.before is not None:
            merged[ch.name] = known.model_copy(update={"before": ch.before, "source": f"{known.source}; {ch.source}"})
    return list(merged.values())


def frame_packages(tracebacks: Iterable[Traceback]) -> list[str]:
    """The top-level packages the failing frames run in (import names, ``sgl_kernel``, ``flashinfer``),
    innermost first; the engine, the standard library and frames outside packages left out."""
    import sys

    out: list[str] = []
    for tb in tracebacks:
        for fr in tb.frames:
            pkg = fr.package
            if pkg and pkg not in sys.stdlib_module_names and pkg != "sglang" and pkg not in out:
                out.append(pkg)
    return out


def crashed_in(tracebacks: Iterable[Traceback]) -> Frame | None:
    """The innermost frame of a process killed by a signal, when it is compiled code of an installed
    package (a crash dump's native stack, ``tools.tracebacks``: ``ldtilecfg`` in ``site-packages/torch/lib/
    libtorch_cpu.so``): the fault happened inside that package's own code, not in a caller that passed
    through it. Of the last such traceback given; None when there is none."""
    found = None
    for tb in tracebacks:
        inner = tb.innermost
        if inner is not None and inner.native and inner.package:
            found = inner
    return found


#: A word of an error message that refers to a package: a distribution-like name (``flashinfer-python``,
#: ``sgl_kernel``), a product spelling (``FlashInfer``, ``DeepGEMM``), or any word followed by a version or the
#: word "version" ("triton 3.5", "torch version"). A plain lower-case word ("requests", "outlines") is
#: English more often than a package.
_PKG_WORD = re.compile(r"(?<![\w.\-/])([A-Za-z][A-Za-z0-9]*(?:[_\-][A-Za-z0-9]+)*)(?![\w.\-/])(\s+v?\d+\.\d|\s+version)?")


def error_packages(texts: Iterable[str], installed: Mapping[str, str],
                   import_names: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The installed distributions the error messages ``texts`` name, in the order named: a distribution's
    own name (``flashinfer-python``, ``sgl-kernel``) first; a name they are called after (``FlashInfer`` ->
    ``flashinfer-python``, ``flashinfer-cubin``) only when the text names none of them by its own name.
    A word counts when it looks like a package (``_PKG_WORD``); dotted names (``torch.cuda.OutOfMemoryError``,
    a module path) are where the error was raised, not what it blames; an import name is read as the
    distribution the host's Python says provides it (``import_names``). ``[]`` without installed packages."""
    if not installed:
        return []
    words = [m.group(1) for text in texts for m in _PKG_WORD.finditer(text)
             if re.search(r"[_\-]|.[A-Z]", m.group(1)) or m.group(2)]
    exact: list[str] = []
    for w in words:
        if dist_key(w) in installed and dist_key(w) not in exact:
            exact.append(dist_key(w))
    out = list(exact)
    for w in words:
        dists = distributions_of(w, installed, import_names)
        if any(d in exact for d in dists):
            continue
        out += [d for d in dists if d not in out]
    return out


def outdated_package(tracebacks: Iterable[Traceback]) -> str | None:
    """The package a failing traceback's own message says is too old (``[upgrade_advice]`` of
    packages.toml: "your version of Transformers is out of date", "pip install --upgrade X"), when the
    exception was raised in that package's code (its innermost frame runs in it): the package checked
    itself against what the deployment needs, so its installed version is the remedy, not a launch
    setting. The import name of that package, or None. Raises PackagesError for a pattern that is not a
    regular expression with a ``package`` group."""
    advice = packages_knowledge().upgrade_advice
    for tb in tracebacks:
        inner = tb.innermost
        if inner is None or not inner.package:
            continue
        for pat in advice.patterns:
            try:
                m = re.search(pat, tb.message, re.IGNORECASE)
                named = m.group("package") if m else None
            except (re.error, IndexError) as exc:
                raise PackagesError(f"{FILE}: field 'upgrade_advice.patterns': {pat!r}: {exc}") from None
            if named and dist_key(named) == dist_key(inner.package):
                return inner.package
    return None


#: A line that ends an exception's message: a new log record, a new traceback or one of its frames.
_NOT_MESSAGE = re.compile(r'^(?:\[\d{4}-\d\d-\d\d[ T][\d:.,]+\]|\d{4}-\d\d-\d\d[ T][\d:.,]+ |'
                          r'(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ]|Traceback \(most recent call last\)|\s*File ")')


def message_lines(tb: Traceback, log: Sequence[LogLine]) -> list[LogLine]:
    """The exception line of ``tb`` and the lines of its message printed right after it in ``log`` (a
    multi-line ``RuntimeError(msg)``, pydantic's ``1 validation error for X`` and the error under it), up
    to the next log record, traceback or frame, or a line the kept excerpt left out; at most 60 lines.
    Only the exception line (numbered ``tb.log_line``) when ``log`` does not hold it."""
    at = next((i for i, ll in enumerate(log) if ll.line == tb.log_line), None)
    if at is None:
        return [LogLine(line=tb.log_line, text=tb.exception_line)] if tb.exception_line else []
    out = [log[at]]
    for prev, ll in zip(log[at:], log[at + 1 : at + 60], strict=False):
        if ll.line != prev.line + 1 or _NOT_MESSAGE.match(ll.text):
            break
        out.append(ll)
    return out


def _message_lines(tb: Traceback, log: Sequence[LogLine]) -> list[str]:
    """The texts of ``message_lines``."""
    return [ll.text for ll in message_lines(tb, log)]


def install_advice(tracebacks: Sequence[Traceback], log: Sequence[LogLine]) -> list[tuple[str, str | None, str]]:
    """What the failing errors' own messages tell the user to install (``[install_advice]`` of
    packages.toml: ``pip install nvidia-cudnn-cu12==9.16.0.29``), the last traceback first: ``(distribution,
    version or None, the line that says it)`` once per distribution (PEP 503 name). ``[]`` when the
    knowledge has no such section. Raises PackagesError for a pattern that is not a regular expression with
    a ``package`` group."""
    advice = packages_knowledge().install_advice
    if advice is None:
        return []
    out: dict[str, tuple[str, str | None, str]] = {}
    for tb in reversed(list(tracebacks)):
        for line in _message_lines(tb, log):
            for pat in advice.patterns:
                try:
                    m = re.search(pat, line, re.IGNORECASE)
                    found = (dist_key(m.group("package")), m.groupdict().get("version")) if m else None
                except (re.error, IndexError) as exc:
                    raise PackagesError(f"{FILE}: field 'install_advice.patterns': {pat!r}: {exc}") from None
                if found is not None and found[0] not in out:
                    out[found[0]] = (found[0], found[1], " ".join(line.split()))
    return list(out.values())


def is_in(dist: str, packages: Iterable[str], installed: Mapping[str, str],
          import_names: Mapping[str, Sequence[str]] | None = None) -> bool:
    """Whether a distribution is one of ``packages`` (import names such as ``frame_packages`` gives): the
    same name as pip compares them, or one the host's Python says provides one of them (``import_names``:
    ``sglang-kernel`` for ``sgl_kernel``), or a distribution named after one of them
    (``flashinfer-python`` for ``flashinfer``, ``tools.installed.distributions_of``), or one a
    ``knowledge/libraries.toml`` entry says ships it (``amd-aiter`` for ``aiter``)."""
    from agent.planning.evidence_packages import entry

    key = dist_key(dist)
    packages = list(packages)
    ships = {p for p in packages if (lib := entry(p)) is not None and key in (dist_key(d) for d in lib.distributions)}
    return any(dist_key(p) == key or key in distributions_of(p, installed, import_names)
               or key in provides(p, import_names) or p in ships for p in packages)
