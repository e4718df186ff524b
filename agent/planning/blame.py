"""Blame what changed: the package a not_isolated ending names when no setting fixed the failure.

An engineer whose flags and variables all failed asks what changed: the packages the user says were
upgraded, and those whose installed version differs from a known-good note's
(``agent.planning.package_changes.package_changes``), named first, with the old and new version and
where the claim comes from; then the packages the failing frames run in. A generic runtime (torch,
triton, the CUDA wheels: ``knowledge/packages.toml``) is named only with evidence against it: it
changed, no other package is in the frames, or the process died of a signal inside its own compiled code
(the innermost frame of the crash's native stack is its library, ``crashed_in``: a fault in torch's
``at::native::cpublas::brgemm`` called from a kernel package is torch's, and the caller is named after it).
A package the error message itself names ("FlashInfer
version mismatch: the installed flashinfer-python ...") is named before a change the case's description
tells that neither the frames nor the error involve: the error's own words outweigh the user's guess.
Native frames are named by their library and log lines by the library whose logger or kernel they show
(``knowledge/libraries.toml``, ``agent.planning.evidence_packages``): ``librccl.so`` is rccl even inside
torch's wheel, a ROCm fault report's ``Kernel Name: _ZN5aiter...`` or aiter's ``[aiter]`` lines name aiter; a
GPU runtime (the HIP/ROCr runtime, the NVIDIA driver) that reported the fault is named only when nothing
else is, and a crash inside it is its caller's. Log lines come after every frame's package.
A change of the engine itself (a new SGLang release or
image) comes after the frames' packages: it changed everything, so the frames say where. When the earlier version of a changed package is known,
pinning it back is the suggested fix, outside the flag and environment experiments (hypoloop does not
install packages).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agent.domain.case import Case
from agent.domain.models import STAGE_ORDER, Conclusion, Experiment, Outcome, RelevantFinding
from agent.planning.evidence_packages import (
    Library,
    died_in,
    entry,
    libraries,
    library_file,
    library_of,
    log_evidence,
    relabelled,
)
from agent.planning.package_changes import (
    PackageChange,
    crashed_in,
    error_packages,
    frame_packages,
    install_advice,
    is_generic_runtime,
    is_in,
    package_changes,
    packages_knowledge,
)
from agent.planning.platform_change import PlatformBuilds, host_platform_id, platform_builds
from tools.installed import dist_key, provides
from tools.tracebacks import Frame, is_library_file

__all__ = ["DistributionNames", "blamed", "implicated_of"]


def blamed(c: Conclusion, state: Any) -> Conclusion:
    """``c`` with what changed named first when it is a not_isolated ending with no fix, or only a
    workaround (``c.implicated`` is set: a failure was seen). ``state`` is the run's state (``RunState``:
    ``case``, ``fingerprint``, ``findings``, ``outcomes``). Adds to ``implicated``: ``changed`` (each
    ``{package, before, after, source, in_frames}``), ``packages`` (changed first, then the frames'),
    ``package`` (the first of them), ``pin`` (``NAME==OLD`` when the earlier version is known) and
    ``log_evidence`` (each ``{package, line, source}`` a log line names, ``knowledge/libraries.toml``),
    ``platform_builds`` (kernel packages built only for the host's platform, when the description says another
    build served: ``agent.planning.platform_change``), ``install`` (``NAME==VERSION`` the error asks to install,
    ``install_advice``: named first, a generic runtime too); says it in ``reason``. Else ``c`` as it is."""
    imp = c.implicated
    if c.status != "not_isolated" or not imp or any(not a.get("workaround") for a in c.alternatives):
        return c
    fingerprint = state.get("fingerprint") or {}
    installed, names = dict(fingerprint.get("installed") or {}), dict(fingerprint.get("import_names") or {})
    case = Case.model_validate(state["case"])
    dists = DistributionNames(names, installed, dict(fingerprint.get("import_versions") or {}), imp.get("missing"))
    c = _loader_named(c, imp, dists)
    changes = package_changes(case, installed, [RelevantFinding.model_validate(f) for f in state.get("findings") or []],
                              names)
    ev = _evidence(state, imp.get("experiment_id"), installed, _vendor(fingerprint), names)
    frames, said, crash = _missing_first(imp, ev.frames, _vendor(fingerprint)), ev.said, ev.crash
    # changed where it failed first; a change of the engine itself (a new release, a new image) after the
    # frames' packages: it changed everything, so the frames say where
    engine = dist_key(str(fingerprint.get("engine") or "sglang"))
    # evidence against it, a generic runtime too; spelled as the frames spell it when they run in it
    asked = [next((f for f in frames if is_in(n, [f], installed, names)), n) for n, _, _ in ev.asked if n != engine]
    # a distribution the error spells by its own name is named even when a frame's package is its import name:
    # "flashinfer-cubin version (0.6.13) does not match flashinfer version" blames that distribution of
    # flashinfer, not the package whose code raised it
    said = asked + [p for p in said if p != engine and p not in asked
                    and (not is_in(p, frames, installed, names) or (p in ev.spelled and p not in frames))]
    logged = [lib.package for lib, _ in ev.logged]
    where = {ch.name: is_in(ch.name, frames + said + logged, installed, names) for ch in changes}
    ordered = sorted(changes, key=lambda ch: (ch.name == engine, not where[ch.name]))
    involved = [ch.name for ch in ordered if ch.name != engine and where[ch.name]]
    aside = [ch.name for ch in ordered if ch.name != engine and not where[ch.name]]
    named = involved + aside
    told = [p for p in said if (p in asked or not is_generic_runtime(p))
            and not any(is_in(n, [p], installed, names) for n in named)]
    rest = [p for p in frames + said if p not in told and not any(is_in(n, [p], installed, names) for n in named)]
    own = crash.package if crash is not None else None  # died inside this package's compiled code
    plain, generic = ([p for p in rest if not is_generic_runtime(p) or p == own],
                      [p for p in rest if is_generic_runtime(p) and p != own])
    seen = named + told + rest
    logs = [p for p in logged if not is_generic_runtime(p) and not any(is_in(n, [p], installed, names) for n in seen)]
    runtimes = [p for p in logged if p not in logs and p not in generic and not any(is_in(n, [p], installed, names) for n in seen)]
    prebuilt = _prebuilt_for_arch(imp, installed, names, seen + logged, _vendor(fingerprint))
    builds, built = _platform_only(case, fingerprint, installed, involved + told + aside + plain + prebuilt + logs)
    packages = involved + told + aside + plain + prebuilt + logs + built + [ch.name for ch in ordered if ch.name == engine]
    packages += generic + runtimes if not packages else []
    if not packages:
        return c
    update, pin = _record(packages, ordered, where, ev, told, dists, imports := dists.imports(frames + said + packages))
    install, asks = _asked_for(ev.asked, told, update)
    shown = [(lib, line) for lib, line in ev.logged if lib.package in logs or (not plain and lib.package in packages)]
    words = _words(ordered, [p for p in told if install != p], plain + generic, where, pin,  # asked: its own sentence
                   crash if own in plain else None, dists, imports)
    words = _joined(_joined(_with_builds(update, words, builds, built), asks), _prebuilt_words(prebuilt, dists))
    return c.model_copy(update={"implicated": {**imp, **update}, "reason": _joined(c.reason, _joined(words, _log_words(shown)))})


def _prebuilt_for_arch(imp: dict[str, Any], installed: dict[str, str], names: dict[str, list[str]],
                       seen: list[str], vendor: str | None) -> list[str]:
    """The installed kernel packages whose wheels carry GPU code compiled ahead of time for a fixed list of
    architectures (knowledge/libraries.toml ``prebuilt``), when the failure says a kernel has no code for this
    GPU (symptom ``unsupported_arch``: "no kernel image is available for execution on the device") and no
    frame or line of the evidence (``seen``) names one of them: such a kernel fails unchecked, and the error
    surfaces at the next launch that checks, whichever package's that is (a torch op's). Empty otherwise,
    and when one of them is named already."""
    if "unsupported_arch" not in (imp.get("symptoms") or []):
        return []
    out: list[str] = []
    for lib in libraries():
        if not lib.prebuilt or not lib.applies_to(vendor):
            continue
        if any(is_in(lib.package, [p], installed, names) for p in seen):
            return []
        if any(dist_key(d) in installed for d in lib.distributions):
            out.append(lib.package)
    return out


def _prebuilt_words(prebuilt: list[str], dists: DistributionNames) -> str:
    """The ending's sentence on the ahead-of-time kernel packages ``_prebuilt_for_arch`` names ("" for none)."""
    if not prebuilt:
        return ""
    names = ", ".join(dists.label(p) for p in prebuilt)
    return (f"{names} ships GPU code compiled ahead of time for a fixed list of architectures: a kernel of it "
            "without this GPU's code fails unchecked, and the error surfaces at the next launch that checks, "
            "so it is named although no frame runs in it (a build with this GPU's architecture, or another GPU, "
            "is needed; no launch setting adds the code)")


def _loader_named(c: Conclusion, imp: dict[str, Any], dists: DistributionNames) -> Conclusion:
    """``c`` with the package that loads a shared library that failed to load named by its distribution
    (``missing_words`` with ``dists``); unchanged when no library failed."""
    if not imp.get("library"):
        return c
    return c.model_copy(update={"reason": c.reason.replace(missing_words(imp), missing_words(imp, dists))})


def _record(packages: list[str], ordered: list[PackageChange], where: dict[str, bool], ev: _Evidence,
            told: list[str], dists: DistributionNames, imports: dict[str, str]) -> tuple[dict[str, Any], str | None]:
    """The ``implicated`` fields the blame adds (``package``, ``packages``, ``changed``, ``log_evidence``,
    ``pin``, ``imports``) and the pin: the earlier version of a changed package, unless the error names another
    package while the change is not involved (pinning that back is no fix). Packages are named by their
    distribution where the host's Python says which one provides an import name (``dists``), the import
    names the evidence spells kept in ``imports`` (``{distribution: import name}``) for those named."""
    named = list(dict.fromkeys(dists.name(p) for p in packages))
    imports = {d: p for d, p in imports.items() if d in named}
    update: dict[str, Any] = {
        "package": named[0],
        "packages": named,
        **({"imports": imports} if imports else {}),
        "changed": [{"package": ch.name, "before": ch.before, "after": ch.after, "source": ch.source,
                     "in_frames": where[ch.name]} for ch in ordered],
    }
    if ev.logged:
        update["log_evidence"] = [{"package": lib.package, "line": line, "source": lib.source} for lib, line in ev.logged]
    pinnable = [ch for ch in ordered if where[ch.name] or not told]
    pin = next((f"{ch.name}=={ch.before}" for ch in pinnable if ch.before), None)
    update.update({"pin": pin} if pin else {})
    return update, pin


def _asked_for(asked: list[tuple[str, str | None, str]], told: list[str],
               update: dict[str, Any]) -> tuple[str | None, str]:
    """The first distribution the error asks to install at a version (``install_advice``) among those the
    ending names (``told``), recorded in ``update["install"]`` as ``NAME==VERSION``, and the ending's
    sentence on it; ``(None, "")`` when there is none."""
    found = next(((n, v, line, t) for n, v, line in asked for t in told if dist_key(t) == n and v), None)
    if found is None:
        return None, ""
    name, version, line, spelled = found
    update["install"] = f"{name}=={version}"
    return spelled, (f"the error itself asks for {name}=={version} (\"{line}\"): suggested fix outside the flag and "
                  "environment experiments (hypoloop does not install packages)")


def _platform_only(case: Case, fingerprint: dict[str, Any], installed: dict[str, str],
                   named: list[str]) -> tuple[PlatformBuilds | None, list[str]]:
    """What the description says about another build of the host's platform (``platform_builds``) and the
    kernel packages built only for it that nothing else named yet (``named``)."""
    words = packages_knowledge().platform_builds
    builds = platform_builds(case, host_platform_id(fingerprint, case), installed,
                             dict(fingerprint.get("check_env") or {}), libraries(),
                             words.works_words if words is not None else ())
    return builds, [lib.package for lib, _ in builds.packages if lib.package not in named] if builds else []


def _with_builds(update: dict[str, Any], words: str, builds: PlatformBuilds | None, built: list[str]) -> str:
    """``words`` with the sentence about another build of the platform, and ``update`` with its record, when
    it named a package (``built``)."""
    if builds is None or not built:
        return words
    update["platform_builds"] = {"platform": builds.platform, "served": list(builds.good),
                                 "failing": list(builds.other), "packages": built}
    return _joined(words, builds.words())


def missing_words(imp: dict[str, Any], dists: DistributionNames | None = None) -> str:
    """The ending's sentence on a failed import no setting avoids (``imp``: ``implicated_of``'s record), or "".
    A shared library (``library``, ``libnvrtc.so.12``) is named as a library and the package as the
    distribution whose code loads it (by its distribution's name where ``dists`` knows it), never the
    library as a package."""
    lib, package = imp.get("library"), imp.get("package")
    avoids = "that no flag or environment variable in the installed source avoids"
    if lib:
        who = dists.label(str(package)) if dists is not None and package else package
        loader = f", which the package {who} loads," if package and package != lib else ""
        return f"the failure is a failed load of the library {lib}{loader} {avoids}"
    if imp.get("missing"):
        return f"the failure is a failed import of {imp['missing']} (package {package}) {avoids}"
    return ""


def _missing_first(imp: dict[str, Any], frames: list[str], vendor: str | None) -> list[str]:
    """The frames' packages with what a failed import names first (a shared library by the package that
    ships it, ``knowledge/libraries.toml``: ``libcudnn.so.8`` is the cuDNN wheel's)."""
    if not (imp.get("missing") and imp.get("package")):
        return frames
    lost = library_file(str(imp["missing"]), vendor)
    if lost is None and imp.get("library"):  # an unknown shared library: no package ships it by name here
        return frames
    first = lost.package if lost is not None else str(imp["package"])
    return [first, *(p for p in frames if p != first)]


def _vendor(fingerprint: dict[str, Any]) -> str | None:
    """The host's GPU vendor ("nvidia", "amd"; None when unknown or CPU-only, where every entry applies)."""
    vendor = fingerprint.get("gpu_vendor")
    return str(vendor) if vendor in ("nvidia", "amd") else None


@dataclass(frozen=True)
class _Evidence:
    """What the failing launch's evidence names: the packages its frames run in (innermost first, the last
    traceback first; native frames by their library, ``knowledge/libraries.toml``), the installed
    distributions its exception lines name, the native frame the process died in, and the libraries its
    log lines name (the latest first)."""

    frames: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    crash: Frame | None = None
    logged: list[tuple[Library, str]] = field(default_factory=list)
    asked: list[tuple[str, str | None, str]] = field(default_factory=list)
    #: the installed distributions the error spells by their own names (``flashinfer-cubin``), not only by a
    #: name they share (``flashinfer``): one of several distributions of a frame's package, named exactly
    spelled: list[str] = field(default_factory=list)


def _evidence(state: Any, experiment_id: str | None, installed: dict[str, str], vendor: str | None,
              names: dict[str, list[str]]) -> _Evidence:
    """The failing launch's ``_Evidence`` (empty when the launch is not in the state); ``names`` the host's
    import names (``HostFingerprint.import_names``)."""
    raw = next((o for o in state.get("outcomes") or [] if o.get("experiment_id") == experiment_id), None)
    if raw is None:
        return _Evidence()
    outcome = Outcome.model_validate(raw)
    tracebacks = relabelled(outcome.tracebacks, vendor)
    errors = [tb.exception_line for tb in reversed(tracebacks) if tb.exception_line]
    said = error_packages(errors, installed, names)
    crash = died_in(tracebacks, vendor) or crashed_in(tracebacks)
    text = " ".join(errors).lower()
    spelled = [p for p in said if re.search(rf"(?<![\w-]){re.escape(p.lower())}(?![\w-])", text)]
    return _Evidence(frame_packages(reversed(tracebacks)), said, crash,
                     log_evidence((ln.text for ln in outcome.log), vendor), install_advice(tracebacks, outcome.log),
                     spelled)


@dataclass(frozen=True)
class DistributionNames:
    """How the ending names a package: a traceback's import name (``sgl_kernel``) by the one distribution the
    host's own Python says provides it (``import_names``, ``HostFingerprint.import_names``: ``sglang-kernel``),
    which is what ``pip install -U`` takes; as it is spelled when the host did not say, said several (a
    namespace such as ``nvidia``), or it is an installed distribution's own name already."""

    import_names: dict[str, list[str]] = field(default_factory=dict)
    installed: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    missing: str | None = None

    def name(self, package: str) -> str:
        """The distribution that provides ``package``, else ``package`` itself. The module the failure says
        is missing (``missing``), which no installed distribution provides, is named by the distribution that
        ships it (knowledge/libraries.toml ``distributions``: ``cutlass`` by ``nvidia-cutlass-dsl``), which is
        what ``pip install`` takes."""
        if dist_key(package) in self.installed:
            return package
        found = provides(package, self.import_names)
        if len(found) > 1:
            found = [d for d in found if d in self.installed] or found
        if not found and package == self.missing and (lib := entry(package)) is not None and lib.package == package \
                and lib.distributions:
            return lib.distributions[0] if dist_key(lib.distributions[0]) != dist_key(package) else package
        return found[0] if len(found) == 1 and found[0] != dist_key(package) else package

    def imports(self, packages: list[str]) -> dict[str, str]:
        """``{distribution: import name}`` for the import names among ``packages`` another distribution
        provides (``name``): the names the evidence spells, kept beside the distribution the ending names."""
        return {self.name(p): p for p in packages if self.name(p) != p}

    def label(self, package: str) -> str:
        """``sglang-kernel 0.4.10 (import name sgl_kernel)`` for an import name another distribution provides
        (its version when the host said it), else ``package``."""
        dist = self.name(package)
        if dist == package:
            return package
        version = self.installed.get(dist) or self.versions.get(dist)
        return f"{dist}{' ' + version if version else ''} (import name {package})"


def _log_words(shown: list[tuple[Library, str]]) -> str:
    """The ending's sentence about the log lines that name a library (no Python frame did)."""
    if not shown:
        return ""
    return "the log names " + "; ".join(
        f"{lib.package} (\"{line}\"" + (": the GPU runtime that reported the fault, named only because no library "
                                         "that ran on it is)" if lib.runtime else ")") for lib, line in shown)


def _words(changes: list[PackageChange], said: list[str], others: list[str], where: dict[str, bool],
           pin: str | None, crash: Frame | None = None, dists: DistributionNames | None = None,
           imports: dict[str, str] | None = None) -> str:
    """The ending's sentence about packages: what changed (with its source; ``imports`` the import name the
    evidence spells a changed distribution by), the packages the error names, where the process died
    (``crash``), then the frames' packages; an import name by the distribution that provides it (``dists``)."""
    label = dists.label if dists is not None else str
    said, others = [label(p) for p in said], [label(p) for p in others]
    parts: list[str] = []
    if crash is not None:
        lib = crash.path.rsplit("/", 1)[-1]
        known = library_of(crash)
        bundled = f", its bundled {known.component}" if known is not None and known.component else ""
        parts.append(f"the process died inside {crash.package}'s own compiled code ({crash.function} in {lib}"
                     f"{bundled}, the innermost frame of the crash's native stack that is not a system library "
                     "or a GPU runtime)")
    if changes:
        told = "; ".join(f"{ch.describe()}{_imported_as(ch.name, imports)} ({ch.source}"
                         + (", and the failing traceback or its error involves it)" if where[ch.name] else ")")
                         for ch in changes)
        parts.append(f"no launch setting repaired it, and packages changed on the host: {told}")
    if said:
        parts.append(f"the error names {', '.join(said)}")
    if others:
        parts.append(f"the failing traceback runs in {', '.join(others)}")
    if pin:
        parts.append(f"suggested fix outside the flag and environment experiments: pin {pin} (the version it "
                     "had before; hypoloop does not install packages)")
    return "; ".join(parts)


def _imported_as(dist: str, imports: dict[str, str] | None) -> str:
    """`` (imported as sgl_kernel)`` when the evidence spells the distribution ``dist`` by an import name."""
    name = (imports or {}).get(dist)
    return f" (imported as {name}, the host's Python says)" if name else ""


def _joined(reason: str, extra: str) -> str:
    return f"{reason}; {extra}" if reason and extra else (reason or extra)


def implicated_of(experiments: dict[str, Experiment], outcomes: dict[str, Outcome]) -> dict[str, Any] | None:
    """What a run that found no fix blames: the component (the innermost SGLang module of the last
    failure's traceback) and the third-party package in its frames, with the exception line as
    evidence; None when nothing failed (a failure that did not reproduce blames nothing). The failure read
    is the last of those that got furthest (``STAGE_ORDER``): a test whose own change failed earlier (a
    kernel backend refused at start-up) shows what that change broke, not the failure the run chased."""
    from agent.planning.generators.evidence import failure_evidence

    failing = [outcomes[e.id] for e in experiments.values()
               if e.id in outcomes and outcomes[e.id].stage not in ("ok", "infra_error")]
    if not failing:
        return None
    furthest = max(STAGE_ORDER[o.stage] for o in failing)
    failing = [o for o in failing if STAGE_ORDER[o.stage] == furthest]
    ev = failure_evidence(failing[-1])
    frames = [f for tb in reversed(ev.tracebacks) for f in tb.frames]
    sglang = next((f for f in frames if f.package == "sglang" and f.module), None)
    package = next((f.package for f in frames if f.package and f.package not in _NOT_BLAMED), None)
    package = package or next((f.package for f in frames if f.package == "torch"), None)
    exc = next((tb.exception_line for tb in reversed(ev.tracebacks) if tb.exception_line), "")
    component = sglang.module.removeprefix("sglang.srt.").removeprefix("sglang.") if sglang and sglang.module else None
    if component is None and not package:
        sig = failing[-1].failure_signatures()
        component = sig[0] if sig else failing[-1].stage
    missing = failing[-1].source_reading.missing if failing[-1].source_reading is not None else None
    library = missing.package if missing is not None and missing.kind == "library" and is_library_file(missing.package) else None
    if missing is not None:
        # A failed import names what is missing: that package is what no flag or variable avoided; a shared
        # library is no package (``library``): the package is the distribution whose code loads it.
        package, exc = (package if library else None) or missing.package, missing.text
    return {
        "component": component,
        "package": package,
        "missing": missing.module if missing is not None else None,
        **({"library": library} if library else {}),
        "evidence": exc or failing[-1].summary,  # the whole line: evidence is never cut where shown
        "experiment_id": failing[-1].experiment_id,
        "symptoms": ev.symptoms,
    }


#: Packages a failure is not blamed on by name: SGLang itself (its module is the component), PyTorch
#: (blamed only when nothing else is in the frames) and the standard library's machinery.
_NOT_BLAMED = frozenset({"sglang", "torch", "runpy", "importlib", "asyncio", "concurrent", "threading",
                         "multiprocessing", "typing", "contextlib", "functools"})
