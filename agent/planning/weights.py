"""The rule planner's tunable weights and thresholds, as data: ``planner.toml`` of the knowledge folder in
force (``--knowledge DIR``, ``$HYPOLOOP_KNOWLEDGE``; else the repository's ``knowledge/planner.toml``).

The file says what each number does and where it came from. It is read once per file version, on first
use (``weights()``); a bad file raises ``PlannerWeightsError`` with one line naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.knowledge_files import REPOSITORY_DIR, KnowledgeFile, load_model

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
    min_test_p: float = _Probability
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
    return REPOSITORY_DIR / "planner.toml"


def load_weights(path: Path | None = None) -> PlannerWeights:
    """Read and check the weights file (default: the repository's). Raises PlannerWeightsError (one line
    naming the file and the field)."""
    return load_model(path or default_weights_path(), PlannerWeights, PlannerWeightsError)


_PLANNER: KnowledgeFile[PlannerWeights] = KnowledgeFile("planner.toml", load_weights)


def weights() -> PlannerWeights:
    """The planner weights of the knowledge folder in force (``planner.toml`` there, else the
    repository's), read once per file version: ``python -m bench --sweep`` runs the bench over folders
    that differ in one tunable. Raises PlannerWeightsError."""
    return _PLANNER()
