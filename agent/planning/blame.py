"""Blame what changed: the package a not_isolated ending names when no setting fixed the failure.

An engineer whose flags and variables all failed asks what changed: the packages the user says were
upgraded, and those whose installed version differs from a known-good note's
(``agent.planning.package_changes.package_changes``), named first, with the old and new version and
where the claim comes from; then the packages the failing frames run in. A generic runtime (torch,
triton, the CUDA wheels: ``knowledge/packages.toml``) is named only with evidence against it: it
changed, or no other package is in the frames. A change of the engine itself (a new SGLang release or
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
    frame_packages,
    is_generic_runtime,
    is_in,
    package_changes,
)
from tools.installed import dist_key

__all__ = ["blamed"]


def blamed(c: Conclusion, state: Any) -> Conclusion:
    """``c`` with what changed named first when it is a not_isolated ending with no fix and no
    workaround (``c.implicated`` is set: a failure was seen). ``state`` is the run's state (``RunState``:
    ``case``, ``fingerprint``, ``findings``, ``outcomes``). Adds to ``implicated``: ``changed`` (each
    ``{package, before, after, source, in_frames}``), ``packages`` (changed first, then the frames'),
    ``package`` (the first of them) and ``pin`` (``NAME==OLD`` when the earlier version is known); and
    says it in ``reason``. Any other conclusion is returned as it is."""
    imp = c.implicated
    if c.status != "not_isolated" or c.alternatives or not imp:
        return c
    installed = dict((state.get("fingerprint") or {}).get("installed") or {})
    case = Case.model_validate(state["case"])
    findings = [RelevantFinding.model_validate(f) for f in state.get("findings") or []]
    changes = package_changes(case, installed, findings)
    frames = _frames(state, imp.get("experiment_id"))
    if imp.get("missing") and imp.get("package"):  # a failed import names what is missing
        frames = [str(imp["package"]), *(p for p in frames if p != imp["package"])]
    # changed where it failed first; a change of the engine itself (a new release, a new image) after the
    # frames' packages: it changed everything, so the frames say where
    engine = dist_key(str((state.get("fingerprint") or {}).get("engine") or "sglang"))
    where = {ch.name: is_in(ch.name, frames, installed) for ch in changes}
    ordered = sorted(changes, key=lambda ch: (ch.name == engine, not where[ch.name]))
    named = [ch.name for ch in ordered if ch.name != engine]
    rest = [p for p in frames if not any(is_in(n, [p], installed) for n in named)]
    plain = [p for p in rest if not is_generic_runtime(p)]
    generic = [p for p in rest if is_generic_runtime(p)]
    packages = named + plain + [ch.name for ch in ordered if ch.name == engine]
    packages += generic if not packages else []
    if not packages:
        return c
    update: dict[str, Any] = {
        "package": packages[0],
        "packages": packages,
        "changed": [{"package": ch.name, "before": ch.before, "after": ch.after, "source": ch.source,
                     "in_frames": where[ch.name]} for ch in ordered],
    }
    pin = next((f"{ch.name}=={ch.before}" for ch in ordered if ch.before), None)
    if pin:
        update["pin"] = pin
    return c.model_copy(update={"implicated": {**imp, **update},
                                "reason": _joined(c.reason, _words(ordered, plain + generic, where, pin))})


def _frames(state: Any, experiment_id: str | None) -> list[str]:
    """The packages the failing launch's frames run in, innermost first (the last traceback first)."""
    raw = next((o for o in state.get("outcomes") or [] if o.get("experiment_id") == experiment_id), None)
    if raw is None:
        return []
    return frame_packages(reversed(Outcome.model_validate(raw).tracebacks))


def _words(changes: list[PackageChange], others: list[str], where: dict[str, bool], pin: str | None) -> str:
    """The ending's sentence about packages: what changed (with its source), then the frames' packages."""
    parts: list[str] = []
    if changes:
        told = "; ".join(f"{ch.describe()} ({ch.source}"
                         + (", and the failing traceback runs in it)" if where[ch.name] else ")")
                         for ch in changes)
        parts.append(f"no launch setting fixed it, and packages changed on the host: {told}")
    if others:
        parts.append(f"the failing traceback runs in {', '.join(others)}")
    if pin:
        parts.append(f"suggested fix outside the flag and environment experiments: pin {pin} (the version it "
                     "had before; hypoloop does not install packages)")
    return "; ".join(parts)


def _joined(reason: str, extra: str) -> str:
    return f"{reason}; {extra}" if reason and extra else (reason or extra)
