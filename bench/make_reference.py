"""Regenerate the reference transcripts in transcripts/reference/ from lab runs, then re-decide each.

    python -m bench.make_reference [--only NAME ...] [--time-scale 0.01]

Each scenario runs ``hypoloop`` against a lab world the way a user does (a subprocess; approvals given
with ``resume --decision`` where the scenario answers by hand), copies the transcript to
``transcripts/reference/NAME.jsonl`` and checks that ``hypoloop replay --redecide`` matches it. Run it
after a deliberate change of the planner's behaviour; ``tests/test_replay.py`` replays these files with
``--redecide`` so an unintended change shows up in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "transcripts" / "reference"
HYPOLOOP = [sys.executable, "-c", "from agent.cli import main; main()"]


@dataclass
class Scenario:
    """A lab run: ``answers`` are (decision, reason) given in turn to the approvals it waits for (then
    the rest is approved automatically); no answers: ``run --auto``."""

    name: str
    world: str
    answers: list[tuple[str, str | None]] = field(default_factory=list)
    note: str = ""


SCENARIOS = [
    Scenario("glm5-nvfp4-sm120", "glm5-nvfp4-sm120", note="the motivating case, approved automatically"),
    Scenario(
        "glm5-nvfp4-sm120-reject-kv",
        "glm5-nvfp4-sm120",
        answers=[
            ("approve", None),
            ("reject", "a bf16 KV cache halves the tokens that fit; try the other ideas first"),
        ],
        note="a person rejects the KV-cache change; the planner works through the rest of the ledger",
    ),
    Scenario("triton-ptxas-sm120", "triton-ptxas-sm120", note="an environment-variable fix"),
    Scenario("glm5-shared-experts-fusion", "glm5-shared-experts-fusion", note="a second GLM-5 fault"),
]


def _hypoloop(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HYPOLOOP, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )


def _last_json(out: str) -> dict[str, object]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run_scenario(sc: Scenario, work: Path, time_scale: str) -> Path:
    """Run one scenario in ``work``; returns its transcript. Raises RuntimeError on an unexpected exit."""
    env = dict(os.environ, HYPOLOOP_HOME=str(work / "home"), HYPOLOOP_LAB_TIME_SCALE=time_scale)
    tdir = work / "transcripts"
    if not sc.answers:
        r = _hypoloop(
            ["run", f"lab:{sc.world}", "--auto", "--json", "--transcript-dir", str(tdir)], env, work
        )
        if r.returncode != 0:
            raise RuntimeError(f"{sc.name}: run exited {r.returncode}: {r.stderr[-2000:]}")
        return Path(str(_last_json(r.stdout)["transcript"]))
    r = _hypoloop(["run", f"lab:{sc.world}", "--json", "--transcript-dir", str(tdir)], env, work)
    if r.returncode != 3:
        raise RuntimeError(
            f"{sc.name}: expected to wait for approval (exit 3), got {r.returncode}: {r.stderr[-2000:]}"
        )
    run_id = str(_last_json(r.stdout)["run_id"])
    for decision, reason in sc.answers:
        args = ["resume", run_id, "--decision", decision, "--json"]
        if reason:
            args += ["--reason", reason]
        r = _hypoloop(args, env, work)
        if r.returncode not in (0, 3):
            raise RuntimeError(f"{sc.name}: resume exited {r.returncode}: {r.stderr[-2000:]}")
    r = _hypoloop(["resume", run_id, "--decision", "approve", "--auto", "--json"], env, work)
    if r.returncode != 0:
        raise RuntimeError(f"{sc.name}: final resume exited {r.returncode}: {r.stderr[-2000:]}")
    return Path(str(_last_json(r.stdout)["transcript"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--time-scale", default="0.01", help="HYPOLOOP_LAB_TIME_SCALE for the runs")
    ap.add_argument("--out", type=Path, default=REFERENCE, help="where the transcripts go")
    args = ap.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for sc in chosen:
        with tempfile.TemporaryDirectory(prefix=f"hypoloop-ref-{sc.name}-") as tmp:
            src = run_scenario(sc, Path(tmp), args.time_scale)
            dest = args.out / f"{sc.name}.jsonl"
            shutil.copyfile(src, dest)
        check = _hypoloop(["replay", str(dest), "--redecide"], dict(os.environ), REPO)
        verdict = "re-decides identically" if check.returncode == 0 else f"DIVERGES (exit {check.returncode})"
        failed += check.returncode != 0
        print(
            f"{sc.name:<32} {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}  {verdict}  ({sc.note})"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
