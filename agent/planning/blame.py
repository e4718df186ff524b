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
A change of the engine itself (a new SGLang release or
image) comes after the frames' packages: it changed everything, so the frames say where. When the earlier version of a changed package is known,
pinning it back is the suggested fix, outside the flag and environment experiments (hypoloop does not
install packages).
"""

from __future__ import annotations

from typing import Any

from agent.domain.case import Case
from agent.domain.models import Conclusion, Outcome, RelevantFinding
from agent.planning.package_changes import (
    PackageChange,
    crashed_in,
    error_packages,
    frame_packages,
    is_generic_runtime,
    is_in,
    package_changes,
)
from tools.installed import dist_key
from tools.tracebacks import Frame

__all__ = ["blamed"]


def blamed(c: Conclusion, state: Any) -> Conclusion:
    """``c`` with what changed named first when it is a not_isolated ending with no fix, or only a
    workaround (``c.implicated`` is set: a failure was seen). ``state`` is the run's state (``RunState``:
    ``case``, ``fingerprint``, ``findings``, ``outcomes``). Adds to ``implicated``: ``changed`` (each
    ``{package, before, after, source, in_frames}``), ``packages`` (changed first, then the frames'),
    ``package`` (the first of them) and ``pin`` (``NAME==OLD`` when the earlier version is known); and
    says it in ``reason``. Any other conclusion is returned as it is."""
    imp = c.implicated
    if c.status != "not_isolated" or not imp or any(not a.get("workaround") for a in c.alternatives):
        return c
    installed = dict((state.get("fingerprint") or {}).get("installed") or {})
    case = Case.model_validate(state["case"])
    findings = [RelevantFinding.model_validate(f) for f in state.get("findings") or []]
    changes = package_changes(case, installed, findings)
    frames, said, crash = _frames(state, imp.get("experiment_id"), installed)
    if imp.get("missing") and imp.get("package"):  # a failed import names what is missing
        frames = [str(imp["package"]), *(p for p in frames if p != imp["package"])]
    # changed where it failed first; a change of the engine itself (a new release, a new image) after the
    # frames' packages: it changed everything, so the frames say where
    engine = dist_key(str((state.get("fingerprint") or {}).get("engine") or "sglang"))
    said = [p for p in said if p != engine and not is_in(p, frames, installed)]
    where = {ch.name: is_in(ch.name, frames + said, installed) for ch in changes}
    ordered = sorted(changes, key=lambda ch: (ch.name == engine, not where[ch.name]))
    involved = [ch.name for ch in ordered if ch.name != engine and where[ch.name]]
    aside = [ch.name for ch in ordered if ch.name != engine and not where[ch.name]]
    named = involved + aside
    told = [p for p in said if not is_generic_runtime(p) and not any(is_in(n, [p], installed) for n in named)]
    rest = [p for p in frames + said if p not in told and not any(is_in(n, [p], installed) for n in named)]
    own = crash.package if crash is not None else None  # died inside this package's compiled code
    plain = [p for p in rest if not is_generic_runtime(p) or p == own]
    generic = [p for p in rest if is_generic_runtime(p) and p != own]
    packages = involved + told + aside + plain + [ch.name for ch in ordered if ch.name == engine]
    packages += generic if not packages else []
    if not packages:
        return c
    update: dict[str, Any] = {
        "package": packages[0],
        "packages": packages,
        "changed": [{"package": ch.name, "before": ch.before, "after": ch.after, "source": ch.source,
                     "in_frames": where[ch.name]} for ch in ordered],
    }
    # pinning back a change the error does not involve, while it names another package, is no fix
    pinnable = [ch for ch in ordered if where[ch.name] or not told]
    pin = next((f"{ch.name}=={ch.before}" for ch in pinnable if ch.before), None)
    if pin:
        update["pin"] = pin
    return c.model_copy(update={"implicated": {**imp, **update},
                                "reason": _joined(c.reason, _words(ordered, told, plain + generic, where, pin,
                                                                   crash if own in plain else None))})


def _frames(state: Any, experiment_id: str | None,
            installed: dict[str, str]) -> tuple[list[str], list[str], Frame | None]:
    """The packages the failing launch's frames run in, innermost first (the last traceback first), the
    installed distributions its exception lines name (``error_packages``), and the compiled frame of an
    installed package the process died in (``crashed_in``)."""
    raw = next((o for o in state.get("outcomes") or [] if o.get("experiment_id") == experiment_id), None)
    if raw is None:
        return [], [], None
    tracebacks = Outcome.model_validate(raw).tracebacks
    said = error_packages((tb.exception_line for tb in reversed(tracebacks) if tb.exception_line), installed)
    return frame_packages(reversed(tracebacks)), said, crashed_in(tracebacks)


def _words(changes: list[PackageChange], said: list[str], others: list[str], where: dict[str, bool],
           pin: str | None, crash: Frame | None = None) -> str:
    """The ending's sentence about packages: what changed (with its source), the packages the error names,
    where the process died (``crash``), then the frames' packages."""
    parts: list[str] = []
    if crash is not None:
        lib = crash.path.rsplit("/", 1)[-1]
        parts.append(f"the process died inside {crash.package}'s own compiled code ({crash.function} in {lib}, "
                     "the innermost frame of the crash's native stack)")
    if changes:
        told = "; ".join(f"{ch.describe()} ({ch.source}"
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


def _joined(reason: str, extra: str) -> str:
    return f"{reason}; {extra}" if reason and extra else (reason or extra)
