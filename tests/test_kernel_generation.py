"""A kernel that needs another GPU generation (issue 20, points 1 and 7): the kernel's own check names the
generation it runs on (DeepGEMM's ``arch_major == 10``, "requires sm_90a or newer", "not supported on
sm_89"), compared with the host's compute capability. No tuning of that kernel helps; only a change that
stops it from being used can (another implementation of the subsystem that calls it, or turning it off);
every other candidate is skipped with that reason, and the ending names the package and the generation.

Parsing: the ``kernel.arch`` signatures of knowledge/signatures.toml and ``agent.planning.generation``.
End to end on the lab (real CLI, graph, planner and lab servers): the development world modelled on
sgl-project/sglang#35557 (SM100-only MXFP4 MegaMoE under expert parallelism on H100s: no setting keeps the
deployment) and a test world where another MoE runner routes around an SM100-only DeepGEMM kernel.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import changes_tested, lab_bench_env, run_auto, transcript_events

from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change
from agent.planning.generation import ArchRule, arch_rules, host_meets, wrong_generation
from agent.planning.in_play import InPlay, load_subsystems
from agent.run.nodes.analyze import classify_outcome
from bench.methods import run_agent
from bench.run import empty_catalog_knowledge
from bench.worlds import discover
from tools.fingerprint import HostFingerprint
from tools.signatures import load_signatures, scan_text

TIME_SCALE = "0.002"
TEST_WORLDS = Path(__file__).parent / "data" / "worlds"

_MEGAMOE_LOG = '''[2026-08-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3208, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py", line 212, in capture_decode_graph
    graph_runner.capture()
  File "/sgl-workspace/sglang/python/sglang/srt/layers/moe/megamoe/deep_gemm_megamoe.py", line 301, in forward
    deep_gemm.fp8_fp4_mega_moe(
RuntimeError: Capture cuda graph failed: Assertion error (/deepgemm/csrc/apis/../utils/layout.hpp:57): ab.scalar_type() == kPackedFP4 and arch_major == 10
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)
[2026-08-01 10:00:01] Rank 0 scheduler died during initialization (exit code: -6).
'''


# ----- parsing ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "cc", "meets"),
    [
        ("RuntimeError: Assertion error (layout.hpp:57): ab.scalar_type() == kPackedFP4 and arch_major == 10",
         "9.0", False),
        ("RuntimeError: Assertion error (layout.hpp:57): ab.scalar_type() == kPackedFP4 and arch_major == 10",
         "10.0", True),
        ("RuntimeError: Assertion error (x.hpp:1): arch_major == 10 or (arch_major == 12 and is_fp4)", "12.0", True),
        ("RuntimeError: Assertion error (x.hpp:1): arch_major == 10 or (arch_major == 12 and is_fp4)", "9.0", False),
        ("RuntimeError: FlashMLA requires sm_90a or newer", "8.9", False),
        ("RuntimeError: FlashMLA requires sm_90a or newer", "10.0", True),
        ("ValueError: this kernel requires compute capability 10.0", "9.0", False),
        ("RuntimeError: sm_100a required for this op", "10.3", True),
        ("RuntimeError: sm_100a required for this op", "12.0", False),
        ("RuntimeError: HPC attention requires compute capability >= SM90.", "8.9", False),
        ("ValueError: FP8 is not supported on sm80 (Ampere).", "8.0", False),
        ("NotImplementedError: fp8 block GEMM is not supported on sm_89", "8.9", False),
        ("NotImplementedError: fp8 block GEMM is not supported on sm_89", "9.0", True),
    ],
)
def test_a_kernels_generation_check_is_read_and_compared_with_the_host(line: str, cc: str, meets: bool) -> None:
    """The signatures set the requirement as a fact; the host meets it or not by its compute capability."""
    _, facts = scan_text(line, load_signatures())
    rules = arch_rules(facts.get("kernel_arch_needs") or facts.get("kernel_arch_needs_sm") or "",
                       facts.get("kernel_arch_refuses", ""))
    assert rules, facts
    assert host_meets(rules, cc) is meets


def test_text_without_a_generation_sets_no_requirement() -> None:
    """A count of GPUs, a plain "Unsupported architecture" (no generation named) or an unknown host is no
    comparison."""
    _, facts = scan_text("ValueError: the server requires 2 GPUs\nRuntimeError: Unsupported architecture",
                         load_signatures())
    assert not {k for k in facts if k.startswith("kernel_arch")}
    assert host_meets([ArchRule("==", 10)], None) is None
    assert host_meets([], "9.0") is None


def test_a_warning_that_names_a_generation_is_not_the_failure() -> None:
    """A fallback warning ("requires sm_90a or newer; falling back") on a host that fails for another reason
    sets no requirement to compare."""
    log = ("[2026-08-01 10:00:00] WARNING flashmla_backend.py:40: FlashMLA requires sm_90a or newer; falling back to triton\n"
           "[2026-08-01 10:00:01] ValueError: --max-model-len 300000 is longer than the model's 131072\n")
    outcome = classify_outcome(RawEvidence.from_log("exp-1", log, load_signatures(), "x.log"))
    assert outcome.facts.get("kernel_arch_needs") == "sm_90a or newer"
    assert wrong_generation(outcome, HostFingerprint(gpu_vendor="nvidia", compute_capability="8.9")) is None


def _megamoe_outcome(cc: str) -> tuple[object, HostFingerprint]:
    ev = RawEvidence.from_log("exp-1", _MEGAMOE_LOG, load_signatures(), "x.log")
    return classify_outcome(ev), HostFingerprint(gpu_vendor="nvidia", compute_capability=cc)


def test_the_failing_kernel_names_its_package_and_the_subsystem_that_called_it() -> None:
    outcome, fp = _megamoe_outcome("9.0")
    wrong = wrong_generation(outcome, fp)  # type: ignore[arg-type]
    assert wrong is not None
    assert wrong.package == "deep_gemm"
    assert [s.id for s in wrong.subsystems] == ["moe"]
    assert "compute capability 10.x" in wrong.statement() and "9.0" in wrong.statement()
    outcome, fp = _megamoe_outcome("10.0")
    assert wrong_generation(outcome, fp) is None  # type: ignore[arg-type]


def test_only_changes_that_can_stop_the_kernel_from_being_used_are_candidates() -> None:
    """Tuning of the same kernel (graph sizes, memory fraction, graphs off, a mode of the same
    implementation, another package's switch) is skipped with the reason; another implementation of the
    subsystem that called it, turning it off or removing the user's setting of it is kept."""
    outcome, fp = _megamoe_outcome("9.0")
    wrong = wrong_generation(outcome, fp)  # type: ignore[arg-type]
    assert wrong is not None
    base = Baseline(flags={"--tp-size": "4", "--ep-size": "4", "--moe-a2a-backend": "deepep"})
    play = InPlay(fp, base, {"moe_runner_backend": "auto"}, None, load_subsystems())

    def change(name: str, after: object, kind: str = "flag") -> Change:
        return Change(kind=kind, name=name, before=base.flags.get(name), after=after)  # type: ignore[arg-type]

    skipped = [change("--cuda-graph-max-bs-decode", "16"), change("--mem-fraction-static", "0.7"),
               change("--cuda-graph-backend-decode", "disabled"), change("--deepep-mode", "low_latency"),
               change("--disable-flashinfer-cutlass-moe-fp4-allgather", True), change("--elastic-ep-backend", "mooncake"),
               change("--enable-dp-attention", None), change("CUDA_LAUNCH_BLOCKING", "1", "env")]
    for c in skipped:
        why = wrong.why_not(c, play)
        assert why is not None and "leaves the failing kernel in use" in why and "deep_gemm" in why, c
    kept = [change("--moe-a2a-backend", None), change("--moe-a2a-backend", "none"),
            change("--moe-runner-backend", "triton"), change("--ep-size", None),
            change("SGLANG_DEEP_GEMM_DISABLE", "1", "env"), change("SGLANG_ENABLE_JIT_DEEPGEMM", "0", "env")]
    for c in kept:
        assert wrong.why_not(c, play) is None, c
    # once a setting was changed and the same kernel still failed, its other values are not tried
    tried = [(change("--moe-a2a-backend", None), outcome)]
    assert wrong.same_kernel(change("--moe-a2a-backend", "flashinfer"), tried)  # type: ignore[list-item]
    assert wrong.same_kernel(change("--moe-runner-backend", "triton"), tried) is None  # type: ignore[list-item]


# ----- end to end on the lab ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with lab_bench_env(tmp_path_factory.mktemp("arch-worlds"), TIME_SCALE) as root:
        yield root



def _moe_flag(name: str) -> bool:
    (moe,) = [s for s in load_subsystems().subsystems if s.id == "moe"]
    return moe.flags is not None and bool(moe.flags.search(name))


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_kernel_no_setting_runs_on_this_gpu_ends_naming_the_package_and_the_generation(
        catalog: str, bench_env: Path) -> None:
    """The development world of an SM100-only MXFP4 MegaMoE kernel under expert parallelism on H100s:
    every launched change stops the MoE code that calls the kernel from being used (a setting of that
    subsystem removed, or another implementation of it), never a tuning of the capture the error's
    "Possible solutions" list; the run ends not_isolated naming deep_gemm, the generation it needs and
    this GPU's."""
    (world,) = discover(["dsv4-flash-h100x4-ep"])
    os.environ["HYPOLOOP_LAB_STATE"] = str(bench_env / f"lab-state-dsv4-{catalog}")
    knowledge = empty_catalog_knowledge(bench_env) if catalog == "empty" else None
    result = run_agent(world, transcripts=bench_env / f"tr-dsv4-{catalog}", seed="7", knowledge=knowledge)
    assert result.correct and not result.wrong_isolated, f"{result.status}, {result.found}"
    events = transcript_events(Path(result.extra["transcript"]))
    tested = changes_tested(events)
    assert tested
    for ch in tested:
        assert _moe_flag(ch["name"]) and (ch["after"] is None or ch["name"].endswith("-backend")), ch
    (ending,) = [e["data"] for e in events if e["type"] == "conclusion"]
    assert ending["status"] == "not_isolated"
    assert "deep_gemm" in ending["implicated"]["component"], ending["implicated"]
    assert re.search(r"deep_gemm.*needs compute capability 10\.x.*this GPU is compute capability 9\.0",
                     ending["reason"]), ending["reason"]


def test_another_implementation_routes_around_a_kernel_of_another_generation(tmp_path: Path) -> None:
    """A test world where SGLang's own MoE runner calls an SM100-only DeepGEMM kernel on a Hopper GPU at
    CUDA-graph capture: the run isolates another MoE runner, and no launch tries the capture's "Possible
    solutions" (memory fraction, smaller or no decode graphs), which leave the kernel in use."""
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "kernel-needs-newer-gpu"\n'
        'description = "an FP8 MoE model at TP=2 on H100s: the scheduler dies during CUDA graph capture"\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{TEST_WORLDS / "kernel-needs-newer-gpu" / "world.toml"}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        '[model]\npath = "org/Small-MoE-FP8"\n'
        '[baseline]\nflags = { "--tp-size" = 2 }\n[budget]\nexperiments = 8\n'
    )
    result, events = run_auto(tmp_path, case, HYPOLOOP_LAB_TIME_SCALE=TIME_SCALE, HYPOLOOP_LAB_SEED="t",
                              HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))
    assert result["status"] == "isolated", result.get("reason")
    fix = result["root_cause"]["fix"]
    assert fix["name"] == "--moe-runner-backend" and fix["after"] not in ("auto", "deep_gemm"), fix
    for ch in changes_tested(events):
        assert not re.search(r"cuda-graph|mem-fraction", ch["name"]), ch
