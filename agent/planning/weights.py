"""The rule planner's tunable weights and thresholds, as data: ``planner.toml`` of the knowledge folder in
force (``--knowledge DIR``, ``$HYPOLOOP_KNOWLEDGE``; else the repository's ``knowledge/planner.toml``).

The file says what each number does and where it came from. It is read once per file version, on first
use (``weights()``); a bad file raises ``PlannerWeightsError`` with one line naming the file and the field.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: The keys each table must have, exactly (a hypothesis's predictions, the observations an outcome is
#: classified as, the catalog's performance costs).
PREDICTIONS = ("fixed", "may_fix", "persists")
OBSERVATIONS = ("fixed", "persists", "changed", "advanced", "different")
PERF_COSTS = ("none", "low", "medium", "high")

_Probability = Field(ge=0.0, le=1.0)


class PlannerWeightsError(ValueError):
    """``knowledge/planner.toml`` cannot be used (one line naming the file and the field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LedgerWeights(_Strict):
    """How evidence moves the hypothesis ledger (see the file's comments)."""

    unlisted_weight: float = Field(gt=0.0)
    finding_min_relevance: float = _Probability
    finding_hypothesis_weight: float = Field(gt=0.0)
    failed_confirmation_decisive: float = _Probability
    failed_confirmation_may_fix: float = _Probability
    passed_blocker: float = _Probability
    passed_blocker_own: float = _Probability
    elsewhere_factor: float = _Probability


class ChoiceWeights(_Strict):
    """How the next experiment is chosen (see the file's comments)."""

    p_fix: dict[str, float]
    performance_factor: dict[str, float]
    workaround_factor: float = Field(gt=0.0)
    min_alternative_p: float = _Probability
    default_launch_cost_s: float = Field(gt=0.0)


class PlannerWeights(_Strict):
    """All of ``knowledge/planner.toml``: ``likelihood[prediction][observation]`` is P(observation |
    prediction); ``ledger`` and ``choice`` as their models say. Every prediction/observation/cost key
    must be present."""

    likelihood: dict[str, dict[str, float]]
    ledger: LedgerWeights
    choice: ChoiceWeights

    @model_validator(mode="after")
    def _complete(self) -> PlannerWeights:
        tables: list[tuple[str, dict[str, object], tuple[str, ...]]] = [
            ("likelihood", dict(self.likelihood), PREDICTIONS),
            ("choice.p_fix", dict(self.choice.p_fix), PREDICTIONS),
            ("choice.performance_factor", dict(self.choice.performance_factor), PERF_COSTS),
        ]
        tables += [(f"likelihood.{row}", dict(cols), OBSERVATIONS) for row, cols in self.likelihood.items()]
        for name, table, keys in tables:
            if set(table) != set(keys):
                raise ValueError(f"{name}: expected the keys {', '.join(keys)}, got {', '.join(table)}")
        return self


def default_weights_path() -> Path:
    """``knowledge/planner.toml`` of the repository."""
    return Path(__file__).resolve().parents[2] / "knowledge" / "planner.toml"


def load_weights(path: Path | None = None) -> PlannerWeights:
    """Read and check the weights file. Raises PlannerWeightsError (one line)."""
    path = path or default_weights_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PlannerWeightsError(f"{path}: {exc}") from None
    try:
        return PlannerWeights.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        where = f"field '{field}': " if field else ""
        raise PlannerWeightsError(f"{path}: {where}{err['msg']}") from None


@functools.cache
def _weights_of(path: Path, mtime: float) -> PlannerWeights:
    return load_weights(path)


def weights() -> PlannerWeights:
    """The planner weights of the knowledge folder in force (``planner.toml`` there, else the
    repository's), read once per file version: ``python -m bench --sweep`` runs the bench over folders
    that differ in one tunable. Raises PlannerWeightsError."""
    from agent.domain.knowledge_dir import knowledge_file

    path = knowledge_file("planner.toml")
    if not path.is_file():
        path = default_weights_path()
    return _weights_of(path, path.stat().st_mtime)
