"""The lab checked against the real thing (issue 22, item 5): each real SGLang case of bench/real has a lab
twin in lab/worlds-twins (the same case file with the lab's launcher, on the real-engine bed written as a
lab world whose failure texts were copied from the real engine), and hypoloop must end the twin as a good
run ends the real case, scored with the real case's own truth.toml by the scorer of ``python -m bench
--real`` (``bench.worlds.score_run``). tests/test_twins_real.py runs both and compares the endings.

vLLM cases have no twin: the lab speaks SGLang only.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from clirun import run_auto
from conftest import _in_ci

from agent.domain.models import Baseline, Change
from bench.methods import read_ending
from bench.real import REAL_DIR, TWINS_DIR, RealCase, discover, twins
from bench.worlds import score_run
from lab.rules import plan_launch
from lab.world import load_world

TWINS = [t.name for t in twins()]
#: The lab's clock for the twins. hypoloop counts a lab run's host-seconds as wall time / scale, its own
#: work between launches included: at 0.002 a busy 2-core machine's few seconds of probing counted as
#: thousands of simulated seconds and spent the case's host-second budget, which real runs never do.
TIME_SCALE = "0.05"
#: The installed SGLang the twins' tracebacks name, as the real engine's do (the bed's default place,
#: ``.ci/real-engines``): hypoloop reads the source at a traceback's frames, and what it finds there
#: decides some endings (tests/test_twins_real.py showed it for sglang-cpu-engine).
BED_SGLANG = Path.home() / ".cache/hypoloop/engines-v1/lib/python3.11/site-packages/sglang"


def test_every_real_sglang_case_has_a_lab_twin() -> None:
    # A case with a before.toml sets the host up before the run (another server holds its port): its twin
    # is the lab with the same holder in place (tests/test_port_taken.py), not a world of the bed.
    real = sorted(p.parent.name for p in REAL_DIR.glob("sglang-*/case.toml")
                  if not (p.parent / "before.toml").is_file())
    assert real and TWINS == real


def _comparable(case: Any) -> dict[str, Any]:
    """A case as data, without what a twin must change: the launcher, the model's path (a hub id in the
    lab, the bed's folder for real), the lab's world variable and the file's own path."""
    data = case.model_dump()
    data.pop("launcher")
    data.pop("source_path")
    data["model"].pop("path")
    data["host"]["env"].pop("HYPOLOOP_LAB_WORLD", None)
    return data


@pytest.mark.parametrize("name", TWINS)
def test_a_twin_is_its_real_case_but_for_the_launcher(name: str, tmp_path: Path) -> None:
    (real,) = discover(names=[name], out_dir=tmp_path, root=tmp_path / "bed")
    (twin,) = twins([name])
    assert twin.case.launcher.argv[1:] == ["-m", "lab.launch_server"]
    assert _comparable(twin.case) == _comparable(real.case)


def _argv(twin: RealCase, base: Baseline) -> list[str]:
    argv = ["--model-path", twin.case.model.path]
    for flag, value in base.flags.items():
        argv += [flag] if value in (None, True) else [flag, *str(value).split()]
    return argv


def _fatal(twin: RealCase, changes: list[dict[str, Any]]) -> str | None:
    """The id of the fault that stops the twin's baseline with the truth's ``changes`` applied, or None."""
    base = twin.case.baseline
    for fix in changes:
        after = None if fix["value"] is False else str(fix["value"])
        base = base.apply(Change(kind=fix["kind"], name=fix["name"], before=base.value(fix["kind"], fix["name"]), after=after))
    world = load_world(str(TWINS_DIR / "world.toml"))
    fault = plan_launch(world, _argv(twin, base), {k: str(v) for k, v in base.env.items()}).fatal
    return fault.id if fault else None


@pytest.mark.parametrize("name", TWINS)
def test_the_twin_fails_as_the_real_case_and_its_truth_undoes_it(name: str) -> None:
    """Cheap (no launch): the twin's baseline meets a fatal fault unless the real case is the control,
    every fix the truth lists clears it, and a chain's first link alone moves the failure on."""
    (twin,) = twins([name])
    first = _fatal(twin, [])
    if twin.expect == "not_reproduced":
        assert first is None
        return
    assert first is not None
    if twin.chain:
        assert _fatal(twin, [twin.chain[0][0]]) not in (None, first)
        for picks in itertools.product(*twin.chain):
            assert _fatal(twin, list(picks)) is None, picks
    for fix in twin.truth.fixes:
        assert _fatal(twin, [fix]) is None, fix


def twin_ending(twin: RealCase, tmp_path: Path) -> dict[str, Any]:
    """Run ``hypoloop run TWIN --auto --json`` on the lab (the real CLI and planner, lab launches) and
    return its result with ``score`` (bench.worlds.Score against the real case's truth) and ``ending``
    (`ending_of`)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    result, _ = run_auto(tmp_path, twin.case_path, timeout=900, HYPOLOOP_LAB_TIME_SCALE=TIME_SCALE,
                         HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))
    return scored(twin, result)


def scored(case: RealCase, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (a run's JSON line) with ``score`` and ``ending`` added, scored against ``case``'s truth."""
    ending = read_ending(case, Path(result["transcript"]), result)  # type: ignore[arg-type]
    fix = (result.get("root_cause") or {}).get("fix")
    result["score"] = score_run(
        case,  # type: ignore[arg-type]
        result["status"],
        (fix["kind"], fix["name"], fix["after"]) if fix else None,
        ending["final"],
        ending["named"],
    )
    result["ending"] = ending_of(result)
    return result


def ending_of(result: dict[str, Any]) -> tuple[str, str | None]:
    """What must be the same for a real run and its twin: the status, and the fix named (``kind name``)
    or None when none is."""
    fix = (result.get("root_cause") or {}).get("fix")
    return result["status"], (f"{fix['kind']} {fix['name']}" if fix else None)


#: Twins that end wrong today because their real case does too, in the same way (the same experiments and
#: ending on the real engine, 2026-12-02): the planner's to fix, not the lab's. Strict: when the planner
#: gets one right, its test fails here until the entry is removed (and tests/test_real_cases.py can run it).
REAL_ALSO_WRONG: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=REAL_ALSO_WRONG[n])) if n in REAL_ALSO_WRONG else n
     for n in TWINS],
)
def test_hypoloop_ends_the_twin_as_the_real_case_should_end(name: str, tmp_path: Path) -> None:
    if not (BED_SGLANG / "srt" / "managers" / "scheduler.py").is_file():
        why = f"the twins' tracebacks name the real bed's SGLang source at {BED_SGLANG}, which is not there"
        if _in_ci():
            pytest.fail(why + "; .ci/run builds the bed, so under CI this is an error")
        pytest.skip(why + "; build the bed with .ci/real-engines")
    (twin,) = twins([name])
    result = twin_ending(twin, tmp_path)
    want = "not_isolated" if twin.expect == "not_reproduced" else twin.expect
    assert result["status"] == want, f"{name}: ended {result['status']} ({result['reason']}), the real case should end {want}"
    assert result["score"].correct, f"{name}: {result['score'].why}"
    assert 1 <= result["launches"] <= twin.max_launches, f"{name}: {result['launches']} launches"


def test_the_twins_tracebacks_quote_the_real_bed_source() -> None:
    """Each frame of the twin world's tracebacks names a file of the real bed and quotes its line, as the
    real engine's traceback does (hypoloop reads those files), so a bed of another release shows here."""
    site = BED_SGLANG.parent
    if not (site / "sglang").is_dir():
        pytest.skip(f"the real bed's site-packages is not at {site}; build it with .ci/real-engines")
    text = (TWINS_DIR / "world.toml").read_text()
    frame = re.compile(r'File "\{env\.HOME\}/\.cache/hypoloop/engines-v1/lib/python3\.11/site-packages/([^"]+)", '
                       r"line (\d+), in \S+\n {4}(.+)")
    checked = 0
    for rel, line, quoted in frame.findall(text):
        lines = (site / rel).read_text().splitlines()
        assert lines[int(line) - 1].strip() == quoted.strip().replace("{{", "{").replace("}}", "}"), f"{rel}:{line}"
        checked += 1
    assert checked >= 40
