"""A flag whose choices are logging levels (vLLM 0.32.0's ``--log-level {CRITICAL,ERROR,...}`` and
``--uvicorn-log-level``) sets how much is logged, never which implementation runs: the word "error" in a
vLLM record's ``ERROR`` header or in "1 validation error for ModelConfig" names none of its choices.
`hypoloop analyze --case` on the real vLLM 0.32.0 logs, with the real ``vllm serve --help=all``
(tests/data/help_vllm_0.32.0_all.txt, printed by the case's launcher, launching nothing), proposes no
log-level change and forms no hypothesis about one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import run_cli

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("log", ["max-model-len.log", "kvcache-above-free.log", "quant-awq.log"])
def test_no_log_level_hypothesis_from_a_vllm_error(tmp_path: Path, log: str) -> None:
    helper = tmp_path / "vllm"
    helper.write_text(f"#!/bin/sh\ncat {DATA / 'help_vllm_0.32.0_all.txt'}\n")
    helper.chmod(0o755)
    case = tmp_path / "case.toml"
    case.write_text(f'name = "v"\n[host]\ntarget = "local"\n[launcher]\nengine = "vllm"\nargv = ["{helper}"]\n'
                    '[model]\npath = "/models/tiny"\n')
    done = run_cli(tmp_path, "analyze", str(DATA / "logs_vllm_0.32.0" / log), "--case", str(case), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["hypotheses"], doc  # the catalog explains the failure: the check is not vacuous
    named = [h["id"] for h in doc["hypotheses"] if "log-level" in h["id"]]
    named += [a["change"] for a in doc["alternatives"] if "log-level" in a["change"]]
    assert not named, named
