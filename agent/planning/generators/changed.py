"""The changed-package generator: one hypothesis per installed package that changed
(``agent.planning.package_changes`` reads what changed; see its docstring)."""

from __future__ import annotations

from agent.domain.models import Evidence
from agent.planning.generators import Candidate, GeneratorInput
from agent.planning.package_changes import frame_packages, is_in, package_changes, packages_knowledge

__all__ = ["ChangedPackageGenerator"]


class ChangedPackageGenerator:
    """One candidate per package that changed: ``package:NAME`` (see the module docstring)."""

    name = "changed_package"

    def generate(self, inp: GeneratorInput) -> list[Candidate]:
        """Changed packages, stronger when the failing frames run in them; none for a run that served."""
        if inp.evidence.stage == "ok" or inp.fingerprint is None:
            return []
        installed = inp.fingerprint.installed
        w = packages_knowledge().weights
        frames = frame_packages(inp.evidence.tracebacks)
        out: list[Candidate] = []
        names = inp.fingerprint.import_names
        for ch in package_changes(inp.case, installed, inp.findings, names):
            in_frames = is_in(ch.name, frames, installed, names)
            where = "; the failing traceback runs in it" if in_frames else ""
            out.append(Candidate(
                id=f"package:{ch.name}",
                statement=f"{ch.name} changed ({ch.describe()}) and the failure came with it; no launch setting "
                "reaches an installed package",
                component=f"package.{ch.name}",
                package=ch.name,
                weight=w.changed * (w.in_frames_factor if in_frames else 1.0),
                rationale=f"{ch.source}{where}",
                generator=self.name,
                evidence=[Evidence(kind="finding" if "note" in ch.source else "fact",
                                   detail=f"{ch.describe()}: {ch.source}{where}")],
                source="finding" if "known-good note" in ch.source else "evidence",
            ))
        return out
