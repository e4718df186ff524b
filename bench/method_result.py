"""What every bench method returns, and what the launching baselines share: the result of one method on one
world, the launch cache of the random seeds, and the summary of a sequence of launches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.domain.models import Baseline, Change
from bench.launcher import Launcher, LaunchRecord
from bench.worlds import BenchWorld, score_run


@dataclass
class MethodResult:
    """One method on one world. For random, numbers are means over seeds and ``correct_rate`` is the
    share of seeds that ended on a root-cause fix; ``correct`` is then whether most did."""

    method: str
    correct: bool
    launches: float
    host_s: float
    wall_s: float
    found: str | None = None
    status: str = ""
    correct_rate: float | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    wrong_isolated: int = 0  # runs that ended `isolated` on something the truth does not call the fix

    def as_json(self) -> dict[str, Any]:
        """A JSON-plain dict of the result."""
        out = {
            "method": self.method,
            "correct_root_cause": self.correct,
            "launches": round(self.launches, 2),
            "host_seconds": round(self.host_s, 1),
            "wall_seconds": round(self.wall_s, 2),
            "found": self.found,
            "status": self.status,
            "wrong_isolated": self.wrong_isolated,
        }
        if self.correct_rate is not None:
            out["correct_rate"] = round(self.correct_rate, 3)
        if self.runs:
            out["runs"] = self.runs
        out.update(self.extra)
        return out



def describe_change(kind: str, name: str, value: Any) -> str:
    """A change as the bench table prints it: `--flag value`, `--switch`, `no --flag`, `NAME=v`, `unset NAME`."""
    if value is None or value is False:
        return f"unset {name}" if kind == "env" else f"no {name}"
    if kind == "env":
        return f"{name}={value}"
    return name if value is True else f"{name} {value}"


class LaunchCache:
    """Launch results per configuration, shared by the random seeds of one world.

    A world whose faults are deterministic gives the same outcome for the same configuration, so a
    configuration another seed already launched is replayed from that launch (its measured wall and
    host seconds are counted again). Flaky worlds are never replayed.
    """

    def __init__(self, launcher: Launcher, *, enabled: bool, seed_env: Callable[[], dict[str, str]]) -> None:
        self.launcher = launcher
        self.enabled = enabled
        self.seed_env = seed_env
        self._seen: dict[str, LaunchRecord] = {}
        self.real = 0

    def run(self, config: Baseline) -> LaunchRecord:
        """Launch `config` (or replay another seed's launch of it on a deterministic world)."""
        key = json.dumps([config.flags, config.env], sort_keys=True)
        if self.enabled and key in self._seen:
            rec = self._seen[key]
            return LaunchRecord(rec.ok, rec.status, rec.host_s, rec.wall_s, rec.signatures, replayed=True)
        rec = self.launcher.launch(dict(config.flags), {**config.env, **self.seed_env()})
        self.real += 1
        self._seen[key] = rec
        return rec


def summarize(
    method: str, world: BenchWorld, records: list[LaunchRecord], fix: Change | None, status: str
) -> MethodResult:
    """The result of a baseline method's launches `records`, ending on `fix` (None: no change worked)."""
    # A baseline method "isolates" when its launches found a working change; a baseline that served
    # at once blames nothing; otherwise it ends not isolated (and names nothing).
    served_at_once = bool(records) and records[0].ok
    ending = "isolated" if fix is not None else ("not_reproduced" if served_at_once else "not_isolated")
    final = world.case.baseline.apply(fix) if fix is not None else world.case.baseline
    score = score_run(world, ending, (fix.kind, fix.name, fix.after) if fix else None, final)
    return MethodResult(
        method=method,
        correct=score.correct,
        wrong_isolated=int(score.wrong_isolated),
        launches=len(records),
        host_s=sum(r.host_s for r in records),
        wall_s=sum(r.wall_s for r in records),
        found=describe_change(fix.kind, fix.name, fix.after) if fix else None,
        status=status,
    )

