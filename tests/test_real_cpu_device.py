"""Real SGLang 0.5.23 on this CPU-only host, from the bare command (issue 20).

The bare ``launch_server`` command on a host without an accelerator stops in ServerArgs with
``RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.``; the
host's own ``--help`` lists ``cpu`` among ``--device``'s values. The first experiment must be
``--device cpu``, and no experiment may touch a subsystem that is not in play here (CUDA graphs on a host
without CUDA, MoE settings on the dense tiny Llama whose config.json the agent reads from the host).

Needs the engines environment (``$HOME/.cache/hypoloop/engines-v1``: real SGLang 0.5.23 with a CPU torch
and the tiny trained Llama); skipped where it is not installed. Marker ``real_engine``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clirun import run_cli

from agent.domain.models import Baseline, Change
from agent.planning.in_play import InPlay
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog

ENGINES = Path(os.environ.get("HYPOLOOP_ENGINES", "~/.cache/hypoloop/engines-v1")).expanduser()
PYTHON = ENGINES / "bin" / "python"
MODEL = ENGINES / "tiny-llama"

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.skipif(
        not (PYTHON.is_file() and (MODEL / "config.json").is_file()
             and any((ENGINES / "lib").glob("python3*/site-packages/sglang-0.5.23.dist-info"))),
        reason=f"real SGLang 0.5.23 engines environment not installed at {ENGINES}",
    ),
]


def test_bare_command_on_this_cpu_host_tries_the_cpu_device_first_and_nothing_out_of_play(tmp_path: Path) -> None:
    case = tmp_path / "case.toml"
    case.write_text(
        f"""name = "real-sglang-bare-cpu"
description = "SGLang on a CPU-only host, launched with the bare command"
approval = "auto"

[host]
target = "local"
env = {{ HF_HUB_OFFLINE = "1" }}

[launcher]
argv = ["{PYTHON}", "-m", "sglang.launch_server"]
version_argv = ["{PYTHON}", "-c", "import importlib.metadata as m; print(m.version('sglang'))"]
gpu_query_argv = ["nvidia-smi"]
check_env_argv = []

[model]
path = "{MODEL}"

[baseline]
flags = {{ "--model-path" = "{MODEL}", "--host" = "127.0.0.1", "--max-total-tokens" = 4096 }}

[budget]
experiments = 3
ready_timeout_s = 600
""",
        encoding="utf-8",
    )
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json", "--transcript-dir", str(tmp_path / "tr"),
                timeout=900, HYPOLOOP_LAB_TIME_SCALE="1")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    events = [json.loads(line) for p in (tmp_path / "tr").glob("*.jsonl") for line in p.read_text().splitlines()]
    fp = HostFingerprint.model_validate(next(e["data"] for e in events if e["type"] == "host.fingerprint"))
    flags = FlagCatalog.model_validate(
        next(e["data"]["catalog"] for e in events if e["type"] == "tool.result" and e["data"].get("tool") == "flag_catalog")
    )
    assert fp.gpu_vendor == "none" and fp.checkpoint.get("architecture") == "LlamaForCausalLM"
    tests = [e["data"] for e in events if e["type"] == "experiment.proposed" and e["data"]["purpose"] == "test"]
    assert tests, result
    first = tests[0]["change"]
    assert (first["name"], first["after"]) == ("--device", "cpu"), tests[0]["rationale"]
    for t in tests:
        change = Change.model_validate(t["change"])
        play = InPlay(fp, Baseline.model_validate(t["baseline"]), {}, flags)
        assert play.why_not(change) is None, f"{change.describe()} touches a subsystem not in play"
    # --device cpu is what it needed: the server came up on it, and the run says so
    assert result["status"] == "isolated" and result["root_cause"]["fix"]["name"] == "--device"
