"""The hypothesis catalog: general causes of bring-up failures, as data (``knowledge/hypotheses.toml``).

Each entry says when it applies (signatures seen, effective-config facts, host facts, model features),
how much weight it starts with, and which one-variable interventions test it. The format is documented
at the top of the TOML file. A user adds knowledge by adding entries, not code.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agent.domain.models import Intervention
from tools.flags import FlagCatalog
from tools.knowledge_files import REPOSITORY_DIR, check_keys, unknown_key


class CatalogError(ValueError):
    """A catalog file that cannot be used; one line naming the file, the entry and the field."""


#: Facts the catalog's evidence context derives from the symptoms, not from the deployment
#: (``agent.planning.generators.catalog.evidence_context``).
SYMPTOM_FACTS = frozenset({"failure_under_load"})


class Condition(BaseModel):
    """One test against the evidence context. All given parts must hold.

    ``signature``: a signature id that must have matched. ``fact`` + ``matches``: an effective-config
    fact whose value must match the regex (``matches`` absent: the fact must be known). ``feature``: a
    model feature (moe, dsa, mla, nvfp4, fp8, dense). ``compute_capability_in`` / ``_not_in``: host GPU
    compute capability such as "12.0". ``stage``: the furthest stage the failing run reached.
    ``gpu_name_matches``: a regex searched in the host's GPU name. ``symptom``: a symptom class the
    failure falls into (``agent.planning.generators.SymptomClass``: nan_inf, garbage_output, hang, oom_capture, ...),
    so an entry can trigger on a class of failures rather than one exact log line.
    """

    signature: str | None = None
    symptom: str | None = None
    fact: str | None = None
    matches: str | None = None
    feature: str | None = None
    compute_capability_in: list[str] | None = None
    compute_capability_not_in: list[str] | None = None
    stage: list[str] | None = None
    gpu_name_matches: str | None = None

    @property
    def symptom_only(self) -> bool:
        """Whether the condition tests only the kind of failure (a symptom class, the stage, or a fact
        derived from the symptoms such as ``failure_under_load``), nothing of this deployment: no
        signature, effective setting, model feature or host."""
        return (
            self.signature is None
            and (self.fact is None or self.fact in SYMPTOM_FACTS)
            and self.feature is None
            and self.compute_capability_in is None
            and self.compute_capability_not_in is None
            and self.gpu_name_matches is None
        )

    def holds(self, ctx: EvidenceContext) -> bool:
        """Whether every part of the condition holds in ``ctx``."""
        if self.signature is not None and self.signature not in ctx.signatures:
            return False
        if self.symptom is not None and self.symptom not in ctx.symptoms:
            return False
        if self.fact is not None:
            value = ctx.facts.get(self.fact)
            if value is None:
                return False
            if self.matches is not None and not re.search(self.matches, str(value)):
                return False
        if self.feature is not None and self.feature not in ctx.features:
            return False
        cc = ctx.compute_capability
        if self.compute_capability_in is not None and (cc is None or cc not in self.compute_capability_in):
            return False
        if self.compute_capability_not_in is not None and (
            cc is None or cc in self.compute_capability_not_in
        ):
            return False
        if self.stage is not None and ctx.stage not in self.stage:
            return False
        if self.gpu_name_matches is not None and not re.search(self.gpu_name_matches, ctx.gpu_name or ""):
            return False
        return True

    def describe(self) -> str:
        """A short human text of the condition, for evidence entries."""
        parts = []
        if self.signature:
            parts.append(f"signature {self.signature}")
        if self.symptom:
            parts.append(f"symptom class {self.symptom}")
        if self.fact:
            parts.append(f"{self.fact}~/{self.matches}/" if self.matches else f"{self.fact} known")
        if self.feature:
            parts.append(f"model feature {self.feature}")
        if self.compute_capability_in:
            parts.append(f"compute capability in {self.compute_capability_in}")
        if self.compute_capability_not_in:
            parts.append(f"compute capability not in {self.compute_capability_not_in}")
        if self.stage:
            parts.append(f"stage in {self.stage}")
        if self.gpu_name_matches:
            parts.append(f"GPU name ~/{self.gpu_name_matches}/")
        return ", ".join(parts)


class Boost(Condition):
    """A condition that multiplies an entry's weight by ``factor`` (below 1 lowers it), with a reason."""

    factor: float = Field(gt=0)
    why: str = ""


class EvidenceContext(BaseModel):
    """What a failing run showed, as the catalog's conditions see it."""

    signatures: set[str] = Field(default_factory=set)
    symptoms: set[str] = Field(default_factory=set)
    facts: dict[str, str] = Field(default_factory=dict)
    features: set[str] = Field(default_factory=set)
    compute_capability: str | None = None
    gpu_name: str | None = None
    stage: str | None = None


class CatalogEntry(BaseModel):
    """One cause in the catalog (see ``knowledge/hypotheses.toml`` for the field meanings)."""

    id: str
    statement: str
    statement_by_feature: dict[str, str] = Field(default_factory=dict)
    statement_by_symptom: dict[str, str] = Field(default_factory=dict)
    component: str
    component_by_feature: dict[str, str] = Field(default_factory=dict)
    rationale: str
    source: str = ""
    prior: float = Field(gt=0, le=1)
    stage: str | None = None
    when_any: list[Condition] = Field(default_factory=list)
    when_all: list[Condition] = Field(default_factory=list)
    boost: list[Boost] = Field(default_factory=list)
    cause_signatures: list[str] = Field(default_factory=list)
    intervention: list[Intervention] = Field(default_factory=list)
    #: A cause no launch setting reaches: the package to change and what to change (then no intervention).
    package: str | None = None
    package_fix: str = ""

    def triggered(self, ctx: EvidenceContext) -> list[Condition] | None:
        """The conditions that made this entry apply to ``ctx``, or ``None`` when it does not apply."""
        if any(not c.holds(ctx) for c in self.when_all):
            return None
        fired = [c for c in self.when_any if c.holds(ctx)]
        if self.when_any and not fired:
            return None
        return fired + list(self.when_all)

    def weight(self, ctx: EvidenceContext) -> tuple[float, list[Boost]]:
        """The entry's unnormalised weight in ``ctx`` and the boosts that applied."""
        w, applied = self.prior, []
        for b in self.boost:
            if b.holds(ctx):
                w *= b.factor
                applied.append(b)
        return w, applied

    def render(self, ctx: EvidenceContext) -> tuple[str, str]:
        """The statement and component for ``ctx``: feature-specific variants, a symptom-specific statement
        over them, ``{fact}`` placeholders filled."""
        statement, component = self.statement, self.component
        for feature, text in self.statement_by_feature.items():
            if feature in ctx.features:
                statement = text
                break
        # what was seen decides the wording over the model's features: an accuracy drop is not "NaN at decode"
        for symptom, text in self.statement_by_symptom.items():
            if symptom in ctx.symptoms:
                statement = text
                break
        for feature, comp in self.component_by_feature.items():
            if feature in ctx.features:
                component = comp
                break
        values: dict[str, str] = {
            **{k: str(v) for k, v in ctx.facts.items()},
            "compute_capability": ctx.compute_capability or "unknown",
            "gpu_name": ctx.gpu_name or "this GPU",
        }
        statement = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), statement)
        return statement, component


def default_catalog_path() -> Path:
    """``hypotheses.toml`` of the knowledge folder in force (``agent.domain.knowledge_dir``; default the
    repository's ``knowledge/hypotheses.toml``)."""
    from agent.domain.knowledge_dir import knowledge_file

    return knowledge_file("hypotheses.toml")


def load_roles(path: Path | None = None) -> dict[str, list[str]]:
    """Flag roles (``knowledge/flag_roles.toml``): role id -> its spellings across releases, newest first.

    A missing file means no roles. Raises CatalogError naming the file and entry for a malformed one.
    """
    if path is None:
        from agent.domain.knowledge_dir import knowledge_file

        path = knowledge_file("flag_roles.toml")
    if not path.is_file():
        return {}
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path}: {exc}") from None
    check_keys(path, data, ["role"], CatalogError)
    roles: dict[str, list[str]] = {}
    for i, raw in enumerate(data.get("role", [])):
        check_keys(path, raw, ["id", "spellings", "meaning", "source"], CatalogError, f"role #{i + 1}")
        spellings = raw.get("spellings") if isinstance(raw, dict) else None
        rid = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(rid, str) or not isinstance(spellings, list) or not spellings or not all(
            isinstance(x, str) and x.startswith("--") for x in spellings
        ):
            raise CatalogError(f"{path}: role #{i + 1}: expected an id and a list of --flag spellings")
        roles[rid] = list(spellings)
    return roles


def load_catalog(path: Path | None = None) -> list[CatalogEntry]:
    """Load the hypothesis catalog (default ``knowledge/hypotheses.toml``; a directory means its
    ``hypotheses.toml``, see ``agent.domain.knowledge_dir``); raises CatalogError naming the file, entry and field.
    An empty file is an empty catalog."""
    path = path or default_catalog_path()
    if path.is_dir():
        path = path / "hypotheses.toml"
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path}: {exc}") from None
    check_keys(path, data, ["hypothesis"], CatalogError)
    sibling = path.parent / "flag_roles.toml"  # else the folder in force's (a folder may swap only the roles)
    roles = load_roles(sibling if sibling.is_file() and sibling.parent != REPOSITORY_DIR else None)
    entries = []
    for i, raw in enumerate(data.get("hypothesis", [])):
        if (bad := unknown_key(raw, CatalogEntry)) is not None:
            raise CatalogError(f"{path}: hypothesis #{i + 1} ({raw.get('id', '?')}): unknown key '{bad}'")
        try:
            for j, iv in enumerate(raw.get("intervention", []) if isinstance(raw, dict) else []):
                if isinstance(iv, dict) and "role" in iv:
                    if iv["role"] not in roles:
                        raise CatalogError(
                            f"{path}: hypothesis #{i + 1} ({raw.get('id', '?')}): intervention #{j + 1}: "
                            f"unknown role {iv['role']!r} (known: {', '.join(sorted(roles))})"
                        )
                    iv.setdefault("names", list(roles[iv["role"]]))
            entries.append(CatalogEntry.model_validate(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise CatalogError(
                f"{path}: hypothesis #{i + 1} ({raw.get('id', '?')}): field '{field}': {err['msg']}"
            ) from None
    ids = [e.id for e in entries]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise CatalogError(f"{path}: duplicate hypothesis ids: {', '.join(sorted(dup))}")
    return entries


def role_spellings(flags: FlagCatalog | None) -> dict[str, str]:
    """Each flag role's spelling on a host, from its flag catalog (roles it does not know are left out)."""
    if flags is None:
        return {}
    return {role: spec.name for role, names in load_roles().items() if (spec := flags.resolve_role(names))}
