"""Another build of the platform served: the kernel packages built only for it are what differs.

A user who says "the ROCm 7.0 image of the same release looked fine on another node, but we are stuck on
ROCm 6.3" compares two builds of one release for two versions of the host's platform. When no launch
setting repairs the failure, an engineer asks what differs between those builds besides the platform's
runtime: the kernel packages built only for that platform (``knowledge/libraries.toml`` ``platforms``: a
ROCm-only kernel library), whose versions each platform image pins. A not_isolated ending names them, after
every package the failure's own evidence names (``agent.planning.blame``).

Read: the case's description, clause by clause (``knowledge/packages.toml`` ``[platform_builds]
works_words``), the host's platform (its GPU vendor or the baseline's ``--device``) and the host's installed
packages (a package the host reports as not installed is left out). Nothing is named here.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.planning.platform_rule import platform_id
from tools.installed import dist_key, same_version, toolkit_versions

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from agent.domain.case import Case
    from agent.planning.evidence_packages import Library

__all__ = ["PlatformBuilds", "host_platform_id", "platform_builds"]

#: Clauses of a sentence: a comma, a semicolon or a contrasting conjunction starts a new one.
_CLAUSE = re.compile(r"[,;]\s*|\s+\b(?:but|while|whereas|although|though)\b\s+", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class PlatformBuilds:
    """What the description says about builds of the host's platform: the platform id, the versions said to
    serve well (``good``), the others it names (``other``: the failing host's), the clause that says one
    served, and the kernel packages built only for that platform (``packages``, each with its installed
    version or None when the host does not report it)."""

    platform: str
    good: tuple[str, ...]
    other: tuple[str, ...]
    clause: str
    packages: tuple[tuple[Library, str | None], ...]

    def words(self) -> str:
        """The ending's sentence about them."""
        named = ", ".join(f"{lib.package} ({'installed ' + v if v else 'its installed version not reported'})"
                          for lib, v in self.packages)
        shown = self.clause if len(self.clause) <= 160 else self.clause[:157] + "..."
        return (f"the description says a build for {self.platform} {'/'.join(self.good)} served (\"{shown}\") "
                f"where this host's {self.platform} {'/'.join(self.other) or '(another version)'} does not: "
                f"besides the runtime, the builds differ in the kernel packages built only for {self.platform}, "
                f"whose versions each image pins: {named}")


def _versions(platform: str, text: str) -> list[str]:
    return re.findall(rf"(?<![\w-]){re.escape(platform)}[\s-]*v?(\d+(?:\.\d+)+)\b", text, re.I)


def platform_builds(case: Case, platform: str | None, installed: dict[str, str], check_env: dict[str, str],
                    libs: Iterable[Library], works_words: Sequence[str]) -> PlatformBuilds | None:
    """The description's comparison of two builds of ``platform`` (the host's platform id), or None when
    it makes none: a clause names the platform with a version and a word saying it served, and another
    clause (or the host's toolkit, ``tools.installed.toolkit_versions``) gives another version. ``installed``
    and ``check_env`` are the fingerprint's: a package whose distribution check_env reports as not installed
    is left out. None too when no package is built only for that platform. ``libs`` are knowledge/
    libraries.toml's entries, ``works_words`` packages.toml's ``[platform_builds] works_words``."""
    if not platform or not works_words or not case.description:
        return None
    works = re.compile(r"\b(?:" + "|".join(works_words) + r")\b", re.I)
    good: list[str] = []
    other: list[str] = []
    said = ""
    for sentence in _SENTENCE.split(case.description):
        for clause in _CLAUSE.split(sentence):
            found = _versions(platform, clause)
            if found and works.search(clause):
                good += [v for v in found if v not in good]
                said = said or clause.strip()
            else:
                other += [v for v in found if v not in other]
    host = toolkit_versions(installed).get(platform)
    if host:
        other = [host]
    other = [v for v in other if not any(same_version(v, g) for g in good)]
    if not good or not other:
        return None
    reported = {dist_key(k) for k in check_env}
    packages: list[tuple[Library, str | None]] = []
    for lib in libs:
        if tuple(lib.platforms) != (platform,):
            continue
        names = [dist_key(n) for n in (*lib.distributions, lib.package)]
        version = next((installed[n] for n in names if n in installed), None)
        if version is None and any(n in reported for n in names):
            continue  # the host reports it as not installed
        packages.append((lib, version))
    if not packages:
        return None
    return PlatformBuilds(platform, tuple(good), tuple(other), said, tuple(packages))


def host_platform_id(fingerprint: dict[str, Any], case: Case) -> str | None:
    """The host's platform id (knowledge/subsystems.toml ``[[platform]]``) from the case's ``--device`` or
    the fingerprint's GPU vendor; None when neither tells (the planner's rule, ``platform_rule.platform_id``,
    over the table read here: the ending sits at the bottom of the import chain)."""
    from agent.domain.knowledge_dir import knowledge_file

    try:
        platforms = tomllib.loads(knowledge_file("subsystems.toml").read_text(encoding="utf-8")).get("platform", [])
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return platform_id(platforms, str(case.baseline.flags.get("--device") or ""), (fingerprint or {}).get("gpu_vendor"))

