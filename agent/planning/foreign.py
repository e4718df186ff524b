"""A package built for another platform than the host's (issue 20, points 1 and 7): a CUDA-only kernel
library on a ROCm host, a ROCm-only one on a CUDA host. Which platforms each kernel package's builds
target is data, ``platforms`` and ``ports`` of ``knowledge/libraries.toml`` (with their public sources:
the projects' READMEs and install pages, SGLang 0.5.23's own platform checks); nothing is named here.

An engineer who sees the failing frames inside such a package, raised by the package's own module-level
code while Python imported it (before any request), knows that no option of that package or of SGLang
repairs it: the package cannot run on this platform, and an installed copy defeats SGLang's guards that
expect it to be missing (``except ImportError``). The fix is a package change (uninstall it, or install the
build for this platform). This is another evidence path than the import-time dead end of
``agent.planning.observations.import_time_failure`` (which needs every import on the way to be
module-level, whatever the package): here the outer import may be lazy, and what decides is that the
package raising is built for another platform.

Not taken: a platform the host does not tell (no GPU query, no check_env), a package whose build for this
platform exists and the installed version could be it (``ports``: FlashInfer's ROCm port carries an
``amd`` version label), a package the case's own settings name (``--attention-backend flashinfer`` on
ROCm: the user's choice leads to it, and changing it is a candidate), a failing path the installed source
shows behind a variable (``Outcome.source_reading``), an exception raised in a function of the package
called after its import (a kernel call at run time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.domain.models import Baseline, Conclusion, Experiment, Hypothesis, Outcome
from agent.planning.evidence_packages import entry
from agent.planning.in_play import load_subsystems, platform_of
from agent.planning.platform_builds import foreign_build, installed_version, names_package
from tools.fingerprint import HostFingerprint
from tools.tracebacks import Frame, Traceback

if TYPE_CHECKING:
    from agent.planning.view import HistoryState, PlannerView

__all__ = ["ForeignPackage", "foreign_dead_end", "foreign_import", "host_platform", "ruled_out_by_platform"]

#: SGLang's flag that picks the device (its value is a ``[[platform]]``'s ``device``).
_DEVICE = "--device"


@dataclass(frozen=True)
class ForeignPackage:
    """A package whose builds target other platforms than the host's, and what shows it failed here."""

    package: str
    #: the installed distribution and its version ("flashinfer-python", "0.7.2"), when the host said
    distribution: str | None
    version: str | None
    platforms: tuple[str, ...]
    host: str
    #: the package's module whose import raised, and the exception line
    module: str
    exception: str
    source: str

    def statement(self) -> str:
        """The finding in one sentence, with the remedy (a package change) and the knowledge's source."""
        installed = f"{self.distribution} {self.version}" if self.distribution and self.version else self.package
        remove = self.distribution or self.package
        return (f"the failure is raised by {self.package}'s own module-level code while Python imports it "
                f"({self.module}: {self.exception}), before any request; {installed} is built for "
                f"{' / '.join(self.platforms)} and this host is {self.host}: the package cannot run here whatever "
                f"its options or SGLang's settings say, and an installed copy defeats SGLang's guards that expect it "
                f"to be missing. Fix: a package change, not a launch setting (uninstall {remove}, or install its "
                f"build for {self.host}); source: {self.source.split(';')[0]} (knowledge/libraries.toml)")


def host_platform(fingerprint: HostFingerprint | dict[str, Any] | None, baseline: Baseline) -> str | None:
    """The host's platform id (``cuda``, ``rocm``, ``cpu``; knowledge/subsystems.toml ``[[platform]]``):
    the baseline's ``--device`` when it names one, else the fingerprint's GPU vendor; None when unknown."""
    fp = HostFingerprint.model_validate(fingerprint) if isinstance(fingerprint, dict) else fingerprint
    device = baseline.flags.get(_DEVICE)
    return platform_of(fp, str(device) if isinstance(device, str) else None, load_subsystems())


def _raised_at_import(tb: Traceback) -> tuple[str, str] | None:
    """(package, module) when ``tb`` was raised by a package's module-level code while it was imported: its
    innermost frames (after any of the standard library's, which have no package) are one package's, not
    SGLang's, and the outermost of them is a ``<module>`` frame (the package's import began there; what ran
    inside it, a constructor its module-level code called included, is the import's)."""
    frames = [f for f in tb.frames if not f.native and not f.path.startswith("<frozen")]
    inner = next((i for i, f in enumerate(frames) if f.package is not None), None)
    if inner is None or frames[inner].package == "sglang":
        return None
    package = frames[inner].package
    assert package is not None
    own: list[Frame] = []
    for f in frames[inner:]:
        if f.package != package:
            break
        own.append(f)
    top = own[-1]
    if top.function != "<module>":
        return None
    where = next((f.module for f in own if f.function == "<module>" and f.module), top.module or package)
    return package, where


def _user_names(baseline: Baseline, package: str) -> bool:
    """Whether a setting of the case's configuration names ``package`` (its name or its value)."""
    settings = [*baseline.flags.items(), *baseline.env.items()]
    return any(names_package(f"{k} {v if isinstance(v, str) else ''}", package) for k, v in settings)


def foreign_import(ref: Outcome, fingerprint: HostFingerprint | dict[str, Any] | None,
                   baseline: Baseline) -> ForeignPackage | None:
    """The package built for another platform whose module-level code raised the failure of ``ref`` while it
    was imported, on this host (``fingerprint``) and configuration (``baseline``); None when the evidence
    is not there (see the module's docstring for what is not taken)."""
    fp = HostFingerprint.model_validate(fingerprint) if isinstance(fingerprint, dict) else fingerprint
    host = host_platform(fp, baseline)
    reading = ref.source_reading
    if host is None or ref.stage == "ok" or (reading is not None and reading.leads):
        return None
    for tb in ref.tracebacks:
        found = _raised_at_import(tb)
        if found is None or (lib := entry(found[0])) is None:
            continue
        distribution, version = installed_version(lib, found[0], fp.installed if fp is not None else {})
        if not foreign_build(lib, host, version) or _user_names(baseline, found[0]):
            continue
        return ForeignPackage(found[0], distribution, version, lib.platforms, host, found[1],
                              tb.exception_line or tb.exception or "an exception", lib.platforms_source or lib.source)
    return None


def foreign_dead_end(view: PlannerView, ref: Outcome, state: HistoryState) -> str | None:
    """Why no launch setting can fix the failing run ``ref``: a package built for another platform than the
    host's raised it while it was imported (``foreign_import``), so the run ends naming the package; None
    otherwise, and when the error itself names a setting (the ``remedies`` generator's hypotheses: that
    remedy is tested first)."""
    if any(h.generator == "remedies" for h in state.hypotheses):
        return None
    found = foreign_import(ref, view.fingerprint, state.baseline)
    return found.statement() if found is not None else None


def ruled_out_by_platform(base: Conclusion, untested: list[dict[str, Any]], hyps: list[Hypothesis],
                          experiments: dict[str, Experiment], outcomes: dict[str, Outcome],
                          state: Any) -> tuple[Conclusion, list[dict[str, Any]]]:
    """``base`` and ``untested`` when the run's last failing launch (of ``experiments``, by their
    ``outcomes``) is a package built for another platform failing at import (``foreign_import``): the open
    hypotheses whose every test configures that package are ruled out by it (it cannot run here whatever its
    options say), with that evidence, and leave ``untested``. ``state`` is the run's state (its
    ``fingerprint``); anything else leaves both as they are."""
    failing = [(e, outcomes[e.id]) for e in experiments.values()
               if e.id in outcomes and outcomes[e.id].stage not in ("ok", "infra_error")]
    if not failing:
        return base, untested
    exp, last = failing[-1]
    found = foreign_import(last, state.get("fingerprint"), exp.config())
    if found is None:
        return base, untested
    by_id = {h.id: h for h in hyps}
    gone = {u["id"] for u in untested if (h := by_id.get(u["id"])) is not None and h.interventions
            and all(names_package(f"{' '.join(iv.names)} {' '.join(map(str, iv.values))}", found.package)
                    for iv in h.interventions)}
    detail = (f"{found.package} is built for {' / '.join(found.platforms)} and this host is {found.host}: its options "
              f"cannot matter here ({last.experiment_id})")
    ruled = [{"id": h.id, "statement": h.statement, "component": h.component,
              "evidence": [{"kind": "fact", "detail": detail, "experiment_id": last.experiment_id,
                            "lines": [], "effect": "refutes"}]}
             for h in sorted((by_id[i] for i in gone), key=lambda h: (-h.posterior, h.id))]
    rest = [u for u in untested if u["id"] not in gone]
    return base.model_copy(update={"refuted": [*base.refuted, *ruled]}), rest
