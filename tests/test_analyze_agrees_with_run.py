"""`hypoloop analyze LOG --case CASE` reads a log as a run's first step reads the same launch: the case
host's flag catalog from its launcher's help, and the installed source at the traceback's frames on
that host. So on the real SGLang 0.5.23 log of SGLANG_USE_CPU_ENGINE=1 (tests/data/logs_0.5.23/
cpu_engine.log, the baseline launch of bench/real/sglang-cpu-engine) it forms the run's hypotheses with
the run's probabilities and proposes the run's first experiment, where it used to say only "install
sgl_kernel".

The run's figures below are from its transcript (run 20261205-004656-357439, `hypoloop run
bench/real/sglang-cpu-engine` on the real-engine bed, step 1 ``hypothesis.added`` and step 2
``experiment.proposed``; recorded again when choices of subsystems out of play stopped being hypotheses and
a switch the user set got its ``flip:``). Like the run, analyze reads the model's config.json on the case's
host (the multimodal attention is out of play for the bed's text-only model). The source files are the bed's own installed SGLang ($HYPOLOOP_ENGINES); the
launcher of the case prints SGLang 0.5.23's real --help (tests/data/help_sglang_0.5.23.txt), launching
nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clirun import run_cli

DATA = Path(__file__).parent / "data"
#: where the bed was when the log was written
RECORDED_BED = "/root/.cache/hypoloop/engines-v1"

#: (hypothesis id, posterior) after the run's baseline launch, as its transcript records them
RUN_HYPOTHESES = [
    ("component:--attention-backend", 0.05), ("component:--decode-attention-backend", 0.05),
    ("component:--prefill-attention-backend", 0.05), ("flip:SGLANG_USE_CPU_ENGINE", 0.125),
    ("revert:--device", 0.05), ("revert:--max-total-tokens", 0.05), ("revert:SGLANG_USE_CPU_ENGINE", 0.25),
    ("source:env:SGLANG_USE_CPU_ENGINE", 0.125),
]


def test_analyze_with_the_case_agrees_with_the_run(tmp_path: Path) -> None:
    bed = os.environ.get("HYPOLOOP_ENGINES")
    if not bed or not (Path(bed) / "lib/python3.11/site-packages/sglang").is_dir():
        pytest.skip("HYPOLOOP_ENGINES (the real-engine bed with SGLang 0.5.23) not set")
    log = tmp_path / "cpu_engine.log"
    log.write_text((DATA / "logs_0.5.23" / "cpu_engine.log").read_text().replace(RECORDED_BED, bed))
    helper = tmp_path / "launch_server"
    helper.write_text(f"#!/bin/sh\ncat {DATA / 'help_sglang_0.5.23.txt'}\n")
    helper.chmod(0o755)
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "cpu-engine"\n[host]\ntarget = "local"\n'
        f'[launcher]\nargv = ["{helper}"]\n[model]\npath = "{bed}/tiny-llama"\nfeatures = ["dense"]\n'
        '[baseline]\nflags = { "--device" = "cpu", "--max-total-tokens" = 2048 }\n'
        'env = { SGLANG_USE_CPU_ENGINE = "1" }\n'
    )
    done = run_cli(tmp_path, "analyze", str(log), "--case", str(case), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    got = sorted((h["id"], round(h["posterior"], 4)) for h in doc["hypotheses"])
    assert got == sorted(RUN_HYPOTHESES)
    # the run's first experiment: SGLANG_USE_CPU_ENGINE unset
    assert doc["first_experiment"]["kind"] == "env" and doc["first_experiment"]["name"] == "SGLANG_USE_CPU_ENGINE"
    assert doc["first_experiment"]["after"] is None
    assert doc["package_change"] is None
    text = run_cli(tmp_path, "analyze", str(log), "--case", str(case)).stdout
    assert "read the installed source at the traceback's frames on local" in text
    assert "only a package change can help" not in text


def test_without_a_case_analyze_says_the_source_was_not_read(tmp_path: Path) -> None:
    """Without a host analyze cannot read the installed source: it says so and how to have it read,
    rather than leave "install sgl_kernel" as if it were all a run would find."""
    done = run_cli(tmp_path, "analyze", str(DATA / "logs_0.5.23" / "cpu_engine.log"))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "the installed source at the traceback was not read (no host): --case CASE reads it" in text
