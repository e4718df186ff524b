"""Guard rails every proposal passes, whoever made it (rule planner, LLM planner, a person's edit).

Exactly one change for a test (none for a baseline or confirmation run); a flag the host's catalog
knows with a legal value; an env variable with a plain name and a value free of shell metacharacters;
not a change that leaves the baseline as it is (a launch identical to the baseline); not an experiment
already run; not a rejected one; within budget.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.domain.models import Baseline, Change, Experiment, value_key
from agent.planning.unset import at_unset_value, unset_values
from agent.planning.values import clean_value, env_value_ok, prose_punctuation
from tools.flags import FlagCatalog, FlagError
from tools.knowledge_files import KnowledgeFileError, check_keys, read_toml

if TYPE_CHECKING:
    from agent.planning.view import PlannerView

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def value_limits() -> dict[str, dict[str, Any]]:
    """Value ranges from ``limits.toml`` of the knowledge folder in force (``agent.domain.knowledge_dir``) by
    flag name (empty if the file is absent). Raises KnowledgeFileError (one line) for a file that cannot be used."""
    from agent.domain.knowledge_dir import knowledge_file

    return _limits_of(knowledge_file("limits.toml"))


@functools.cache
def _limits_of(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    data = read_toml(path, KnowledgeFileError)
    check_keys(path, data, ["limit"], KnowledgeFileError)
    for i, item in enumerate(data.get("limit", [])):
        check_keys(path, item, ["flag", "min", "max", "min_exclusive", "why", "source"], KnowledgeFileError,
                   f"limit #{i + 1}")
        if not isinstance(item, dict) or not isinstance(item.get("flag"), str):
            raise KnowledgeFileError(f"{path}: limit #{i + 1}: expected a table with flag = \"--name\"")
    return {item["flag"]: item for item in data.get("limit", [])}


def _check_range(name: str, value: object) -> None:
    limit = value_limits().get(name)
    if limit is None or value is None or isinstance(value, bool):
        return
    try:
        x = float(str(value))
    except ValueError:
        return  # the flag catalog already judged the type
    lo, hi = limit.get("min"), limit.get("max")
    too_low = lo is not None and (x <= lo if limit.get("min_exclusive") else x < lo)
    if too_low or (hi is not None and x > hi) or x != x:
        low = f"more than {lo}" if limit.get("min_exclusive") else f"at least {lo}"
        raise GuardError(f"{name}: {value} is out of range (expected {low} and at most {hi}: {limit.get('why', '')})")


class GuardError(ValueError):
    """A proposal that must not run; the message says which rule it broke, in one line."""


def _same_baseline(a: Baseline, b: Baseline) -> bool:
    """Two baselines set the same values, whatever the spelling (``bf16`` is ``bfloat16``, ``0.930`` is
    ``0.93``); a flag set to the value the engine resolves when it is not given (``--kv-cache-dtype auto``,
    knowledge/served.toml ``default``: ``agent.planning.unset``) is the flag left out."""
    unset = unset_values()

    def keyed(base: Baseline) -> tuple[dict[str, Any], dict[str, Any]]:
        return (
            {k: value_key(v) for k, v in base.flags.items() if not at_unset_value(k, v, unset)},
            {k: value_key(v) for k, v in base.env.items()},
        )

    return keyed(a) == keyed(b)


def changes_nothing(baseline: Baseline, change: Change) -> bool:
    """Whether ``change`` leaves ``baseline`` as it is: it sets the value the baseline has (in any
    spelling), or removes a flag or variable the baseline does not set, or sets a flag the baseline leaves
    out to the value the engine resolves for it then (``--kv-cache-dtype auto``; or removes one the baseline
    sets to that value). Its launch would be the baseline's."""
    return _same_baseline(baseline, baseline.apply(change))


def launched_before(baseline: Baseline, change: Change, experiments: list[Experiment], probes: list[Any]) -> Experiment | None:
    """The done experiment that already launched the configuration ``change`` makes of ``baseline``
    (flags and env, in any spelling) with at least ``probes``, or None. A new test of it would repeat a
    launch the run has seen (after an adoption or a user's edit, undoing one change can land on an
    earlier configuration); a repeat for flakiness is a baseline or confirmation run, not a test."""
    config = baseline.apply(change)
    for e in experiments:
        if e.status == "done" and _same_baseline(e.config(), config) and all(p in e.probes for p in probes):
            return e
    return None


def check_experiment(exp: Experiment, *, view: PlannerView, flags: FlagCatalog | None) -> None:
    """Raise GuardError unless ``exp`` may run now. Canonicalises nothing; the change must already be
    in canonical form (the caller normalises edits through ``FlagCatalog.validate``)."""
    if exp.purpose == "test" and exp.change is None:
        raise GuardError("a test experiment needs exactly one change")
    if exp.purpose != "test" and exp.change is not None:
        raise GuardError(f"a {exp.purpose} run changes nothing; got {exp.change.describe()}")
    if exp.change is not None:
        _check_change(exp, exp.change, flags)
        if changes_nothing(exp.baseline, exp.change):
            ch = exp.change
            why = (f"{ch.after} is what the engine resolves {ch.name} to when it is not given (knowledge/served.toml)"
                   if ch.kind == "flag" and ch.name not in exp.baseline.flags and at_unset_value(ch.name, ch.after)
                   else "the baseline already has it")
            raise GuardError(f"{ch.describe()} changes nothing: {why}, so the launch would be the baseline's")
    _check_history(exp, view)
    if view.launches + 1 > view.case.budget.experiments:
        raise GuardError(f"experiment budget spent ({view.launches} of {view.case.budget.experiments})")


def _check_change(exp: Experiment, ch: Change, flags: FlagCatalog | None) -> None:
    """Raise GuardError unless ``ch`` names a known flag (canonical spelling, legal and in-range value)
    or a plain environment variable with a value no shell would interpret, without prose punctuation."""
    if ch.kind == "flag":
        # removing a baseline flag the host's --help does not list (kept as the case wrote it) is allowed
        unlisted = ch.after is None and ch.name in exp.baseline.flags and flags is not None and flags.lookup(ch.name) is None
        if flags is not None and not unlisted:
            try:
                if ch.after is None:  # removing the flag from the baseline: only the name must exist
                    canon = flags.resolve(ch.name).name
                else:
                    canon, _ = flags.validate(ch.name, ch.after)
            except FlagError as exc:
                raise GuardError(str(exc)) from None
            if canon != ch.name:
                raise GuardError(f"{ch.name}: use the canonical flag name {canon}")
        _check_range(ch.name, ch.after)
    else:
        if not _ENV_NAME.match(ch.name):
            raise GuardError(f"env {ch.name!r}: expected a variable name like NCCL_P2P_DISABLE")
    # a value a shell would interpret even without its prose punctuation is refused for that; otherwise
    # the prose punctuation is named first, since it says what the value is
    if ch.kind == "env" and ch.after is not None and not env_value_ok(str(clean_value(ch.after))):
        raise GuardError(f"env {ch.name}: value {ch.after!r} contains characters a shell would interpret")
    tail = prose_punctuation(ch.after)
    if tail is not None:
        raise GuardError(
            f"{ch.name}: {ch.after!r} carries prose punctuation ({tail!r}) copied from a sentence; the value "
            f"is {clean_value(ch.after)!r}"
        )
    if ch.kind == "env" and ch.after is not None and not env_value_ok(str(ch.after)):
        raise GuardError(f"env {ch.name}: value {ch.after!r} contains characters a shell would interpret")
    if exp.id != exp.expected_id():
        raise GuardError(f"{exp.id}: id does not match the baseline and change")


def _check_history(exp: Experiment, view: PlannerView) -> None:
    """Raise GuardError when ``exp`` was run (in any spelling) or rejected earlier in this run."""
    done = {e.id for e in view.experiments if e.status == "done"}
    if exp.id in done:
        raise GuardError(f"{exp.id} was already run: {exp.change.describe() if exp.change else exp.purpose}")
    if exp.change is not None and exp.purpose == "test":
        same = next(
            (
                e
                for e in view.experiments
                if e.status == "done"
                and e.purpose == "test"
                and e.change is not None
                and _same_baseline(e.baseline, exp.baseline)
                and e.change.key() == exp.change.key()
            ),
            None,
        )
        if same is not None:
            raise GuardError(
                f"{exp.change.describe()} was already run as {same.id} (the same value, spelled differently)"
            )
    if any(r.experiment_id == exp.id for r in view.rejections):
        raise GuardError(f"{exp.id} was rejected earlier in this run")
    # A planner must not come back with a rejected change spelled differently; a person who edits their
    # way back to it has changed their mind, and that is theirs to do.
    # An alias of the rejected value (``bfloat16`` after ``bf16``) is the rejected change, whoever proposes
    # it: only the very spelling a person rejected, typed by a person, counts as a change of mind.
    by_planner = exp.proposed_by in ("rules", "llm")
    proposed = exp.change
    for r in view.rejections if proposed is not None else []:
        assert proposed is not None
        if r.change_key != proposed.key():
            continue
        respelled = r.change is not None and r.change.after != proposed.after
        if by_planner or respelled:
            said = f" as {r.change.describe()}" if respelled and r.change is not None else ""
            raise GuardError(
                f"{proposed.describe()} was rejected earlier in this run{said} (the same value, spelled "
                f"{'differently' if respelled else 'the same'}): {r.reason}"
            )
