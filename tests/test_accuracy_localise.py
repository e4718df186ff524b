"""A blocker at graph capture, then a silent accuracy drop (issue 20, points 3, 4 and 8).

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), PyTorch's watchdog error as
ProcessGroupNCCL prints it on a HIP build, the model's config.json read from disk through the real
``LocalHost``, the repository's knowledge and the rule planner.
"""

from __future__ import annotations

from pathlib import Path

from test_in_play import FLAGS, _fingerprint, _run, _sglang_signatures

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change
from agent.planning.catalog import load_catalog
from agent.planning.in_play import InPlay
from agent.planning.planner import PlannerView, RulePlanner
from agent.planning.switches import broad_switch
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.probe_set import SET_PROBE_ID
from tools.probes import ProbeResult
from tools.signatures import scan_text

ROCM = HostFingerprint(gpu_vendor="amd", gpu_name="AMD Instinct MI300X", gpu_count=8, gpu_arch="gfx942",
                       memory_total_mib=196592, sglang_version="0.5.23")
CUDA = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=8,
                       compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")
FP8_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 128, "num_attention_heads": 2,
    "num_key_value_heads": 1, "num_hidden_layers": 2, "max_position_embeddings": 512, "torch_dtype": "bfloat16",
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}
DENSE = {k: v for k, v in FP8_MOE.items() if k not in ("quantization_config", "num_experts", "num_experts_per_tok",
                                                          "moe_intermediate_size")}
ARGS = "[2026-12-01 10:00:00] server_args=ServerArgs(model_path='/m/x', tp_size=8, quantization='fp8')\n"
#: PyTorch's ProcessGroupNCCL watchdog on a HIP build during decode-graph capture, then SGLang's launcher.
WATCHDOG = ARGS + """[2026-12-01 10:00:05] Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB
[rank0]:[E1201 10:00:07.318452 2291 ProcessGroupNCCL.cpp:2057] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: operation not permitted on an event last recorded in a capturing stream
Search for `hipErrorCapturedEvent' in https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more information.
terminate called after throwing an instance of 'c10::DistBackendError'
[2026-12-01 10:00:08] RuntimeError: Rank 0 scheduler died during initialization (exit code: -6). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer.
"""
SERVED = ARGS + "[2026-12-01 10:00:30] The server is fired up and ready to roll!\n"


def _planner(fp: HostFingerprint, env: dict[str, str] | None = None) -> tuple[RulePlanner, PlannerView]:
    case = Case.model_validate({"name": "c", "model": {"path": "/m/x"},
                                "baseline": {"flags": {"--model-path": "/m/x", "--tp-size": 8}, "env": env or {}}})
    case.baseline = Baseline(flags={FLAGS.resolve(k).name: v for k, v in case.baseline.flags.items()},
                             env=case.baseline.env)
    return RulePlanner(load_catalog(), FLAGS), PlannerView(case=case, fingerprint=fp)


def _launch(planner: RulePlanner, view: PlannerView, log: str, graded: bool | None = None) -> None:
    """Propose, run (its outcome is ``log``; ``graded``: the server answered and the probe set passed or
    not) and record the planner's next experiment."""
    exp = planner.propose(view, planner.history(view)).experiment
    assert exp is not None
    exp = exp.model_copy(update={"status": "done"})
    update: dict[str, object] = {"status": "crashed"}
    if graded is not None:
        probes = [ProbeResult(probe_id="chat", ok=True, status="ok", http_status=200, text="Paris", latency_s=1.0),
                  ProbeResult(probe_id=SET_PROBE_ID, ok=graded, status="ok" if graded else "wrong_answer",
                              http_status=200, text="accuracy 4/40", latency_s=9.0,
                              error=None if graded else "accuracy 4/40 = 0.100; expected 0.930: below it")]
        update = {"status": "ready", "probes": probes}
    raw = RawEvidence.from_log(exp.id, log, _sglang_signatures(), "x.log").model_copy(update=update)
    view.experiments.append(exp)
    view.outcomes.append(classify_outcome(raw))
    view.launches += 1


def test_the_watchdog_abort_at_capture_is_recognised_in_its_cuda_and_hip_wordings() -> None:
    sigs = _sglang_signatures()
    for line in ("Process group watchdog thread terminated with exception: CUDA error: operation not permitted "
                 "when stream is capturing",
                 "CUDA error: operation not permitted on an event last recorded in a capturing stream",
                 "HIP error: hipErrorStreamCaptureUnsupported"):
        matches, _ = scan_text(line, sigs)
        assert "collective_watchdog_capture_abort" in {m.signature_id for m in matches}, line
    matches, _ = scan_text("Capture cuda graph begin. This can take up to several minutes.", sigs)
    assert "collective_watchdog_capture_abort" not in {m.signature_id for m in matches}


def test_the_watchdogs_documented_knob_is_tried_before_eager_decode() -> None:
    """A scheduler abort at capture from the watchdog polling a capturing stream: the first experiment is
    the runtime's documented setting (blocking wait), not eager decode; eager decode stays a workaround."""
    planner, view, prop = _run(ROCM, {"--model-path": "/m/x", "--tp-size": "8"}, WATCHDOG)
    assert "collective_watchdog_capture_abort" in view.outcomes[0].signature_ids()
    nxt = prop.experiment
    assert nxt is not None and nxt.change is not None
    assert (nxt.change.kind, nxt.change.name, nxt.change.after) == ("env", "TORCH_NCCL_BLOCKING_WAIT", "1")
    hyp = {h.id: h for h in planner.history(view).hypotheses}["collective-watchdog-polls-capturing-stream"]
    assert [iv.workaround for iv in hyp.interventions] == [False, True]


def test_a_silent_accuracy_drop_looks_first_at_the_checkpoints_quantized_gemm(tmp_path: Path) -> None:
    """Once the server answers fluently but wrong on an FP8 checkpoint, the FP8 GEMM backend (which computes
    every quantized layer and runs here) weighs more than a backend that merely ran (sampling), and the
    alternatives proposed for it run on this platform (no CUDA-only library on a ROCm host)."""
    fp, _ = _fingerprint(tmp_path, FP8_MOE, ROCM)
    planner, view = _planner(fp)
    _launch(planner, view, SERVED, graded=False)
    assert "accuracy_drop" in view.outcomes[-1].symptoms
    ledger = {h.id: h for h in planner.history(view).hypotheses}
    gemm, sampling = ledger["component:--fp8-gemm-backend"], ledger.get("component:--sampling-backend")
    assert sampling is None or gemm.posterior > sampling.posterior
    assert "component:--fp4-gemm-backend" not in ledger  # an FP8 checkpoint runs no FP4 GEMM
    play = InPlay(fp, view.case.baseline, {}, FLAGS)
    values = [v for iv in gemm.interventions for v in iv.values]
    runnable = [v for v in values if play.why_not(Change(kind="flag", name="--fp8-gemm-backend", after=v)) is None]
    assert runnable and runnable[0] == "triton"
    assert {"deep_gemm", "flashinfer_cutlass"} & set(values) <= set(values) - set(runnable)


def test_a_dense_unquantized_model_does_not_put_the_fp8_gemm_under_suspicion(tmp_path: Path) -> None:
    fp, _ = _fingerprint(tmp_path, DENSE, ROCM)
    play = InPlay(fp, Baseline(), {}, FLAGS)
    assert play.implicated_here("flag", "--fp8-gemm-backend", {"accuracy_drop"}) == []
    fp8, _ = _fingerprint(tmp_path, FP8_MOE, ROCM, name="fp8")
    hits = InPlay(fp8, Baseline(), {}, FLAGS).implicated_here("flag", "--fp8-gemm-backend", {"accuracy_drop"})
    assert [s.id for s, _ in hits] == ["fp8_gemm"]
    # an explicit quantization of another kind does not put it in play either
    assert InPlay(fp, Baseline(flags={"--quantization": "awq"}), {}, FLAGS).implicated_here(
        "flag", "--fp8-gemm-backend", {"accuracy_drop"}) == []


def test_gemm_and_sampling_backends_of_another_platform_are_not_candidates() -> None:
    rocm, cuda = InPlay(ROCM, Baseline(), {}, FLAGS), InPlay(CUDA, Baseline(), {}, FLAGS)
    for value in ("deep_gemm", "flashinfer_trtllm", "cutlass"):
        change = Change(kind="flag", name="--fp8-gemm-backend", after=value)
        assert "platform (rocm)" in str(rocm.why_not(change)) and cuda.why_not(change) is None
    assert rocm.why_not(Change(kind="flag", name="--fp8-gemm-backend", after="aiter")) is None
    assert "platform (cuda)" in str(cuda.why_not(Change(kind="flag", name="--moe-runner-backend", after="aiter")))
    for value in ("ascend", "intel_xpu"):
        assert rocm.why_not(Change(kind="flag", name="--sampling-backend", after=value)) is not None
    assert rocm.why_not(Change(kind="flag", name="--sampling-backend", after="pytorch")) is None


def test_dropping_a_default_off_kernel_library_setting_is_a_broad_switch_off() -> None:
    """SGLANG_USE_AITER is off unless set: reverting a baseline's SGLANG_USE_AITER=1 turns every AITER kernel
    off, as setting it to 0 does (a workaround, knowledge/switches.toml [[broad]] unset_is_off). Dropping a
    flag whose default keeps the subsystem (the custom all-reduce on) is not."""
    assert broad_switch(Change(kind="env", name="SGLANG_USE_AITER", before="1", after=None)) is not None
    assert broad_switch(Change(kind="env", name="SGLANG_USE_AITER", before="1", after="0")) is not None
    assert broad_switch(Change(kind="env", name="SGLANG_USE_AITER", before=None, after="1")) is None
    assert broad_switch(Change(kind="flag", name="--disable-custom-all-reduce", before=True, after=None)) is None


def test_wrong_answers_on_several_ranks_suspect_the_custom_all_reduce_that_sums_them(tmp_path: Path) -> None:
    """A silent accuracy drop at tensor parallel 8 names no place: the custom all-reduce the platform
    selects by default sums every layer's partial results (knowledge/switches.toml ``computes``), so its
    other implementation is a test, before the whole custom all-reduce is taken out (a workaround). NCCL's
    transport moves bytes and computes nothing: no suspect of wrong numbers."""
    for host, switch, env, other in ((ROCM, "switch:hip-custom-all-reduce", "SGLANG_USE_AITER_AR", "0"),
                                     (CUDA, "switch:cuda-custom-all-reduce-v2", "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
                                      "0")):
        fp, _ = _fingerprint(tmp_path / host.gpu_vendor, DENSE, host)
        planner, view = _planner(fp)
        _launch(planner, view, SERVED, graded=False)
        ledger = {h.id: h for h in planner.history(view).hypotheses}
        assert switch in ledger, sorted(ledger)
        first, *rest = ledger[switch].interventions
        assert (first.kind, first.names, first.values, first.workaround) == ("env", [env], [other], False)
        assert [iv.workaround for iv in rest] == [True]
        assert "switch:nccl-p2p-transport" not in ledger


def test_wrong_answers_on_one_rank_do_not_suspect_an_all_reduce(tmp_path: Path) -> None:
    """With one rank no all-reduce runs (the gpu_collectives subsystem is not in play)."""
    fp, _ = _fingerprint(tmp_path, DENSE, ROCM)
    case = Case.model_validate({"name": "c", "model": {"path": "/m/x"},
                                "baseline": {"flags": {"--model-path": "/m/x", "--tp-size": 1}}})
    case.baseline = Baseline(flags={FLAGS.resolve(k).name: v for k, v in case.baseline.flags.items()})
    planner, view = RulePlanner(load_catalog(), FLAGS), PlannerView(case=case, fingerprint=fp)
    _launch(planner, view, SERVED.replace("tp_size=8", "tp_size=1"), graded=False)
    assert "accuracy_drop" in view.outcomes[-1].symptoms
    assert not [h.id for h in planner.history(view).hypotheses if h.id.startswith("switch:")]
