"""Blame from the evidence when no Python frame names a package (issue 20, points 7 and 8): a native stack's
shared library or symbol, a log line's prefix or kernel name (``knowledge/libraries.toml``). The failing
launches here are real public logs, quoted with their source; the ending is the real conclusion
(``agent.planning.conclusion.conclusion_of``) of a run whose one launch failed with that log."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from clirun import run_cli

from agent.domain.case import Case
from agent.domain.models import Baseline, Experiment, Outcome, RelevantFinding
from agent.planning.conclusion import conclusion_of
from agent.planning.evidence_packages import died_in, log_evidence, relabelled
from agent.planning.package_changes import package_changes
from tools.knowledge import parse_findings
from tools.logwatch import LogLine
from tools.source_guards.models import SourceReading
from tools.tracebacks import missing_import, parse_tracebacks

#: https://github.com/ROCm/aiter/issues/1143 (vLLM on MI300X, 2025-10-09): ROCr's report of the fault,
#: naming the kernel that faulted.
AITER_FAULT = """\
:0:rocdevice.cpp            :3675: 2139490044663 us:  Callback: Queue 0x7ee7b4200000 aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address. code: 0x29
Kernel Name: _ZN5aiter50fmoe_bf16_blockscaleFp8_g1u1_vs_silu_1tg_ps_32x256E
VGPU=0x1305a780 SWq=0x7f17d4008000, HWq=0x7ee7b4200000, id=1
"""

#: https://github.com/sgl-project/sglang/issues/10195 (SGLang, EP on MI300X, 2025-09-09): aiter's own log
#: line before the fault, and the fault as ROCr prints it
#: (https://github.com/ROCm/pytorch/issues/797: "Memory access fault by GPU node-2 (Agent handle:
#: 0x56468ab3bb50) on address 0x7fe55fb03000. Reason: Page not present or supervisor privilege.").
AITER_LOGGED = """\
[aiter] shape M:16384, N:512, K:7168 is tuned on cu_num = 304 in CKGEMM, kernel name is a8w8_blockscale_1x128x128_256x128x128x128_16x16_32x32_8x32x1_8x32x1_1x32x1x8_8_1x1_intrawave_v3!
Memory access fault by GPU node-2 (Agent handle: 0x56468ab3bb50) on address 0x7fe55fb03000. Reason: Page not present or supervisor privilege.
"""

#: https://github.com/ROCm/rccl-tests/issues/72 (RCCL on MI250, 2024-04-19): gdb's frame, wrapped as gdb
#: wraps a long one; under CPython's faulthandler header as SGLang's scheduler prints it on SIGSEGV.
RCCL_CRASH = """\
Fatal Python error: Segmentation fault

#0  0x000014ca4d0a14ca in ncclTopoCompute(ncclTopoSystem*, ncclTopoGraph*) ()
   from /<CUSTOM_PATH>/lib/librccl.so.1
"""

#: https://github.com/pytorch/pytorch/issues/6449 (2018-04-09): the driver innermost, called by cuDNN,
#: called by torch.
CUDNN_CRASH = """\
Fatal Python error: Segmentation fault

#0  0x00007fffe958f5ca in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1
#1  0x00007fffe94b5269 in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1
#2  0x00007fffe95ecd83 in cuEventDestroy_v2 () from /usr/lib/x86_64-linux-gnu/libcuda.so.1
#3  0x00007fffb3535ec4 in ?? () from /usr/local/cuda/lib64/libcudnn.so.7
#7  0x00007fffb329587e in cudnnRNNForwardInference () from /usr/local/cuda/lib64/libcudnn.so.7
"""

#: https://github.com/pytorch/pytorch/issues/120406 (CPU, PyTorch 2.2, 2024-02): a fault inside the
#: oneDNN that torch links into libtorch_cpu.so.
ONEDNN_CRASH = """\
Fatal Python error: Segmentation fault

#10 0x00007fd26dc8eb10 in dnnl::impl::cpu::x64::brdgmm_kernel_t<(dnnl::impl::cpu::x64::cpu_isa_t)39, Xbyak::Zmm>::create_kernel() () from /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cpu.so
#11 0x00007fd26dc7d293 in dnnl::impl::cpu::x64::brgemm_kernel_create(dnnl::impl::cpu::x64::brgemm_kernel_t**, dnnl::impl::cpu::x64::brgemm_t const&) () from /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cpu.so
"""


#: https://github.com/chatchat-space/Langchain-Chatchat/issues/324 (2023-05-12): torch's own import fails
#: for a cuDNN library the loader cannot find.
CUDNN_MISSING = """\
Traceback (most recent call last):
  File "/home/hope/work/langchain-ChatGLM/configs/model_config.py", line 1, in <module>
    import torch.cuda
  File "/home/hope/miniconda3/envs/langchain/lib/python3.8/site-packages/torch/__init__.py", line 229, in <module>
    from torch._C import *  # noqa: F403
ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory
"""


def _ending(log: str, vendor: str, installed: dict[str, str] | None = None, description: str = "") -> Any:
    """The conclusion of a run whose baseline launch failed with ``log`` on a host of ``vendor`` (a failed
    import's reading as the analyze node makes it, ``tools.tracebacks.missing_import``)."""
    case = Case.model_validate({"name": "c", "description": description, "model": {"path": "org/M"}})
    exp = Experiment(id="e1", purpose="baseline", baseline=Baseline(), status="done")
    lines = [LogLine(line=i, text=t) for i, t in enumerate(log.splitlines(), 1)]
    missing = missing_import(log)
    out = Outcome(experiment_id="e1", stage="launch_failed", exit_code=-11, log_excerpt=lines, summary="died",
                  source_reading=SourceReading(missing=missing) if missing is not None else None)
    state = {"case": case.model_dump(mode="json"), "experiments": [exp.model_dump(mode="json")],
             "outcomes": [out.model_dump(mode="json")], "hypotheses": [], "rejections": [], "launches": 1,
             "status": "not_isolated", "conclude_reason": "nothing left to try",
             "fingerprint": {"gpu_vendor": vendor, "engine": "sglang", "installed": installed or {}}}
    return conclusion_of(state)  # type: ignore[arg-type]


def test_a_rocm_fault_report_names_the_kernels_library_not_the_runtime_that_reported_it() -> None:
    found = [(lib.package, lib.runtime) for lib, _ in log_evidence(AITER_FAULT.splitlines(), "amd")]
    assert found == [("aiter", False), ("hip-runtime-amd", True)]
    c = _ending(AITER_FAULT, "amd")
    assert c.status == "not_isolated"
    assert c.implicated["package"] == "aiter" and "hip-runtime-amd" not in c.implicated["packages"]
    assert "the log names aiter" in c.reason and "_ZN5aiter50fmoe" in c.reason


def test_aiters_log_lines_before_a_memory_access_fault_name_aiter() -> None:
    c = _ending(AITER_LOGGED, "amd", installed={"torch": "2.9.1", "amd-aiter": "0.1.5"})
    assert c.implicated["package"] == "aiter"
    assert "[aiter] shape M:16384" in c.reason


def test_a_fault_with_nothing_but_the_runtimes_report_names_the_runtime() -> None:
    fault = AITER_LOGGED.splitlines()[1]
    c = _ending(fault, "amd")
    assert c.implicated["packages"] == ["hip-runtime-amd"]  # the last resort, but named


def test_a_crash_in_rccl_is_rcclss_even_from_a_wrapped_gdb_frame() -> None:
    tbs = relabelled(parse_tracebacks(RCCL_CRASH), "amd")
    frame = died_in(tbs, "amd")
    assert frame is not None and frame.package == "rccl" and frame.function == "ncclTopoCompute"
    c = _ending(RCCL_CRASH, "amd")
    assert c.implicated["package"] == "rccl"
    assert "ncclTopoCompute in librccl.so.1" in c.reason


def test_the_library_that_called_the_driver_is_blamed_not_the_driver() -> None:
    frame = died_in(parse_tracebacks(CUDNN_CRASH), "nvidia")
    assert frame is not None and frame.package == "nvidia-cudnn-cu12"
    c = _ending(CUDNN_CRASH, "nvidia")
    assert c.implicated["package"] == "nvidia-cudnn-cu12" and "nvidia-driver" not in c.implicated["packages"]


def test_a_fault_in_torchs_bundled_onednn_on_a_cpu_host_names_torch_with_the_evidence() -> None:
    c = _ending(ONEDNN_CRASH, "none")
    assert c.implicated["package"] == "torch"
    assert "its bundled oneDNN" in c.reason and "libtorch_cpu.so" in c.reason


def test_a_shared_library_an_import_could_not_load_names_the_distribution_that_ships_it() -> None:
    c = _ending(CUDNN_MISSING, "nvidia", installed={"torch": "2.0.1"})
    assert c.implicated["missing"] == "libcudnn.so.8"
    assert c.implicated["package"] == "nvidia-cudnn-cu12"  # not torch, whose import needed it


def test_a_changed_distribution_is_matched_to_the_library_that_ships_it() -> None:
    # the case says the kernel library's distribution was upgraded; the log shows its import name
    c = _ending(AITER_FAULT, "amd", installed={"amd-aiter": "0.1.6"},
                description="It broke after upgrading amd-aiter from 0.1.5 to 0.1.6.")
    assert c.implicated["package"] == "amd-aiter" and c.implicated["pin"] == "amd-aiter==0.1.5"
    assert c.implicated["changed"][0]["in_frames"] is True


def test_an_nvidia_host_does_not_read_nccl_warnings_as_rccl() -> None:
    line = "node1:123:456 [0] NCCL WARN Cuda failure 'invalid device ordinal'"
    assert [lib.package for lib, _ in log_evidence([line], "nvidia")] == ["nvidia-nccl-cu12"]
    assert [lib.package for lib, _ in log_evidence([line], "amd")] == ["rccl"]


ROCM_WORLD = Path(__file__).resolve().parent / "data" / "worlds" / "rocm-kernel-fault-no-setting"


def _run(tmp_path: Path, experiments: int) -> dict[str, Any]:
    """``hypoloop run --auto --json`` on a copy of the ROCm test world's case with a budget of
    ``experiments`` launches (real processes, real HTTP against the lab host); the result line."""
    work = tmp_path / ROCM_WORLD.name
    shutil.copytree(ROCM_WORLD, work)
    case = work / "case.toml"
    case.write_text(re.sub(r"experiments = \d+", f"experiments = {experiments}", case.read_text()))
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json", "--transcript-dir", str(tmp_path), timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def test_a_run_whose_every_candidate_was_refuted_ends_before_its_budget_naming_the_kernels_library(
        tmp_path: Path) -> None:
    budget = 12
    result = _run(tmp_path, budget)
    assert result["status"] == "not_isolated"
    assert result["launches"] < budget  # ended when nothing was left worth a launch, not on the budget
    assert "budget" not in result["reason"]
    assert result["implicated"]["package"] == "aiter"
    assert "_ZN5aiter50fmoe" in result["reason"]  # with the evidence that points at it


def test_a_run_that_ends_on_its_launch_budget_still_names_the_package(tmp_path: Path) -> None:
    result = _run(tmp_path, 1)
    assert result["status"] == "not_isolated" and result["launches"] == 1
    assert "budget spent" in result["reason"]
    assert result["implicated"]["package"] == "aiter" and "the log names aiter" in result["reason"]


def test_a_known_good_notes_rocm_is_compared_with_the_toolkit_the_hosts_torch_was_built_for() -> None:
    note = parse_findings("## 2026-03-02 — meta-llama/Llama-3.1-8B-Instruct on 1x MI300X: works\n\nfine.\n\n"
                          "- Packages: torch==2.9.1, rocm==7.0.0\n")[0]
    case = Case.model_validate({"name": "c", "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"}})
    seen = [RelevantFinding(finding=note, relevance=1.0)]
    moved = package_changes(case, {"torch": "2.9.1+rocm7.2"}, seen)
    # torch's own release is the same; the ROCm it is built for moved (PyTorch's '+rocm7.2' label)
    assert [(c.name, c.before, c.after) for c in moved] == [("rocm", "7.0.0", "7.2")]
    assert package_changes(case, {"torch": "2.9.1"}, [RelevantFinding(
        finding=parse_findings("## 2026-03-02 — meta-llama/Llama-3.1-8B-Instruct on 1x MI300X: works\n\nfine.\n\n"
                               "- Packages: torch==2.9.1.0\n")[0], relevance=1.0)]) == []  # 2.9.1.0 is 2.9.1
