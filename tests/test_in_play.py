"""Only what is in play, and errors that name their remedy (issue 20, points 1 and 2).

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its error texts as its
source prints them (srt/utils/common.py ``get_device``; a missing package's ModuleNotFoundError), the
model's config.json read from disk through the real ``LocalHost``, and the rule planner with the
repository's knowledge.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import baseline_failed_with, fingerprint_with_model

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Experiment
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, Proposal, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from agent.run.nodes.intake import _read_model_and_cpus
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.host import LocalHost
from tools.model_config import checkpoint_facts
from tools.signatures import for_engine, load_signatures


def _sglang_signatures():
    """The signatures a run on SGLang reads (the runtime filters by the case's engine the same way)."""
    return for_engine(load_signatures(), "sglang")

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/venv/lib/python3.11/site-packages"

#: SGLang 0.5.23 on a host without an accelerator, launched with no --device (srt/utils/common.py:1124,
#: reached from arg_groups/serving_hook.py handle_missing_default_values).
NO_ACCELERATOR = f"""Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "{SITE}/sglang/launch_server.py", line 40, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "{SITE}/sglang/srt/arg_groups/serving_hook.py", line 652, in handle_missing_default_values
    device=get_device(),
  File "{SITE}/sglang/srt/utils/common.py", line 1124, in get_device
    raise RuntimeError(
RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.
"""

FLASHINFER_MISSING = f"""[2026-12-01 10:00:00] server_args={{'model_path': '/m/tiny', 'device': 'cpu', 'attention_backend': 'flashinfer'}}
[2026-12-01 10:00:03] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler = Scheduler(
  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 1951, in init_attention_backend
    self.attn_backend = self._get_attention_backend()
  File "{SITE}/sglang/srt/layers/attention/flashinfer_backend.py", line 50, in <module>
    from flashinfer import BatchDecodeWithPagedKVCacheWrapper
ModuleNotFoundError: No module named 'flashinfer'
"""

DENSE_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "num_attention_heads": 2,
    "num_key_value_heads": 1, "num_hidden_layers": 2, "max_position_embeddings": 512, "torch_dtype": "float32",
}
MOE = {**DENSE_LLAMA, "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8, "num_experts_per_tok": 2,
       "moe_intermediate_size": 64}
CPU_HOST = HostFingerprint(gpu_vendor="none", gpu_count=0, sglang_version="0.5.23", cpu_count=2)
GPU_HOST = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1,
                           compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")


def _fingerprint(tmp_path: Path, config: dict[str, object], fp: HostFingerprint,
                 name: str = "model") -> tuple[HostFingerprint, str]:
    """The fingerprint intake builds: the model's config.json read from disk through LocalHost."""
    return fingerprint_with_model(tmp_path, config, fp, name)


def _run(fp: HostFingerprint, flags: dict[str, object], log: str) -> tuple[RulePlanner, PlannerView, Proposal]:
    """A baseline launch that failed with ``log``, and the planner's next proposal."""
    return baseline_failed_with(fp, flags, log, FLAGS)


def _touched(exp: Experiment | None) -> str:
    assert exp is not None and exp.change is not None
    return exp.change.name


def test_the_model_config_is_read_from_the_host_where_the_model_path_points(tmp_path: Path) -> None:
    fp, _ = _fingerprint(tmp_path, MOE, CPU_HOST)
    assert fp.checkpoint["architecture"] == "Qwen3MoeForCausalLM"
    assert "num_experts" in fp.checkpoint["keys"].split()
    assert fp.checkpoint["max_position_embeddings"] == "512"
    assert fp.checkpoint_source and fp.checkpoint_source.endswith("config.json")
    # an empty value says the feature is absent, and quantization is read off its method
    facts = checkpoint_facts({"num_experts": 0, "quantization_config": {"quant_method": "fp8"}})
    assert "num_experts" not in facts["keys"].split() and "quant_method:fp8" in facts["keys"].split()


def test_bare_command_on_a_cpu_host_tries_the_cpu_device_first_and_nothing_out_of_play(tmp_path: Path) -> None:
    fp, model = _fingerprint(tmp_path, DENSE_LLAMA, CPU_HOST)
    _, _, prop = _run(fp, {"--model-path": model}, NO_ACCELERATOR)
    exp = prop.experiment
    assert exp is not None and exp.change is not None
    assert (exp.change.name, exp.change.after) == ("--device", "cpu")
    # the CUDA-graph backends the failing frames might suggest were weighed and skipped, with the reason
    skipped = [c["skipped"] for c in prop.considered if "skipped" in c]
    assert not any(c.get("change", "").startswith("--cuda-graph") for c in prop.considered)
    assert all("not in play" in s for s in skipped if "cuda-graph" in s)


def test_an_error_naming_a_flags_choices_gives_the_value_that_fits_this_host(tmp_path: Path) -> None:
    # the same error on a host with an NVIDIA GPU names --device too, with the value for that platform
    fp, model = _fingerprint(tmp_path, DENSE_LLAMA, GPU_HOST)
    planner, view, _ = _run(fp, {"--model-path": model}, NO_ACCELERATOR)
    ledger = {h.id: h for h in planner.history(view).hypotheses}
    assert ledger["remedy:--device=cuda"].interventions[0].values == ["cuda"]
    assert "remedy:--device=cpu" not in ledger


def test_a_package_the_users_own_setting_needs_is_missing_so_that_setting_is_reverted_first(tmp_path: Path) -> None:
    fp, model = _fingerprint(tmp_path, DENSE_LLAMA, CPU_HOST)
    planner, view, prop = _run(
        fp, {"--model-path": model, "--device": "cpu", "--attention-backend": "flashinfer"}, FLASHINFER_MISSING
    )
    exp = prop.experiment
    assert exp is not None and exp.change is not None, prop.conclude_reason
    assert (exp.change.name, exp.change.before, exp.change.after) == ("--attention-backend", "flashinfer", None)


def test_moe_settings_are_not_candidates_on_a_dense_model_but_are_on_an_moe_one(tmp_path: Path) -> None:
    dense, model = _fingerprint(tmp_path, DENSE_LLAMA, GPU_HOST, "dense")
    moe, model2 = _fingerprint(tmp_path, MOE, GPU_HOST, "moe")
    log = FLASHINFER_MISSING.replace("flashinfer", "moe_kernels").replace("attention_backend", "x")
    log = log.replace("layers/attention/moe_kernels_backend.py", "layers/moe/fused_moe_triton/layer.py")

    def moe_candidates(fp: HostFingerprint, path: str) -> tuple[list[str], list[str]]:
        """MoE settings skipped as not in play, and MoE settings among the candidates or the ledger's
        interventions (a choice of a subsystem out of play is no hypothesis at all)."""
        planner, view, prop = _run(fp, {"--model-path": path}, log)
        skipped = [c["skipped"] for c in prop.considered if "skipped" in c and "configures moe" in c["skipped"]]
        named = [n for h in planner.history(view).hypotheses for iv in h.interventions for n in iv.names
                 if n.startswith("--moe-") and iv.values != [None]]
        return skipped, named

    skipped, named = moe_candidates(dense, model)
    assert not named, f"a dense model's MoE settings are no candidates (not in play): {named}"
    skipped, named = moe_candidates(moe, model2)
    assert not skipped and named, "on an MoE model the failing MoE layer's settings are candidates"


def test_an_unreadable_model_config_skips_nothing_on_a_guess(tmp_path: Path) -> None:
    fp = CPU_HOST.model_copy(deep=True)
    case = Case.model_validate({"name": "c", "model": {"path": str(tmp_path / "absent")}})
    _read_model_and_cpus(LocalHost(), case, fp)
    assert fp.checkpoint == {} and fp.checkpoint_source
    from agent.domain.models import Change
    from agent.planning.in_play import InPlay

    ip = InPlay(GPU_HOST, Baseline(), {}, FLAGS)
    assert ip.why_not(Change(kind="flag", name="--moe-runner-backend", after="triton")) is None


def test_a_sentence_full_stop_is_not_part_of_a_value_the_error_names() -> None:
    from agent.planning.generators import GeneratorInput
    from agent.planning.generators.remedies import remedies_in

    log = ("ValueError: User-specified context_length (4096) is greater than the derived context_length (512). "
           "To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1.\n")
    raw = RawEvidence.from_log("e", log, _sglang_signatures(), "x.log").model_copy(update={"status": "crashed"})
    out = classify_outcome(raw)
    case = Case.model_validate({"name": "c", "model": {"path": "m"}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out,
                         fingerprint=CPU_HOST, flags=FLAGS)
    values = {iv.names[0]: iv.values for _, iv, *_ in remedies_in(inp) if iv.kind == "env"}
    assert values["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == ["1"]


# ----- progress is a later stage or the failure gone (point 4) -----------------------------------------

QUANT = ("Traceback (most recent call last):\n"
         f'  File "{SITE}/sglang/srt/configs/model_config.py", line 700, in _verify_quantization\n'
         "    raise ValueError(\n"
         "ValueError: Quantization method specified in the model config (fp8) does not match the quantization "
         "method specified in the `quantization` argument ({q}).\n")
NEXT = ("Traceback (most recent call last):\n"
        f'  File "{SITE}/sglang/srt/server_args.py", line 1200, in _handle_attention_backend\n'
        "    raise AssertionError(\n"
        "AssertionError: triton or trtllm_mha backend are the only supported backends for hybrid GDN models\n")


def _test_run(planner: RulePlanner, view: PlannerView, change_name: str, after: str, log: str) -> None:
    from agent.domain.models import Change

    base = planner.history(view).baseline
    change = Change(kind="flag", name=change_name, before=base.flags.get(change_name), after=after)
    exp = Experiment(id=Experiment.make_id(base, change, "test"), purpose="test", baseline=base, change=change,
                     status="done")
    raw = RawEvidence.from_log(exp.id, log, _sglang_signatures(), "x.log").model_copy(update={"status": "crashed"})
    view.experiments.append(exp)
    view.outcomes.append(classify_outcome(raw))
    view.launches += 1


def test_the_error_names_the_value_in_force_and_the_checkpoints_so_the_other_is_proposed() -> None:
    fp = GPU_HOST
    _, _, prop = _run(fp, {"--model-path": "/m/x", "--quantization": "w8a8_fp8"}, QUANT.format(q="w8a8_fp8"))
    assert prop.experiment is not None and prop.experiment.change is not None
    assert (prop.experiment.change.name, prop.experiment.change.after) == ("--quantization", "fp8")


def test_the_same_error_with_another_value_is_not_progress_but_another_error_is() -> None:
    planner, view, _ = _run(GPU_HOST, {"--model-path": "/m/x", "--quantization": "w8a8_fp8"}, QUANT.format(q="w8a8_fp8"))
    _test_run(planner, view, "--quantization", "awq", QUANT.format(q="awq"))
    st = planner.history(view)
    assert st.baseline.flags["--quantization"] == "w8a8_fp8" and not st.adoptions  # not adopted
    _test_run(planner, view, "--quantization", "fp8", NEXT)
    st = planner.history(view)
    assert st.baseline.flags["--quantization"] == "fp8" and len(st.adoptions) == 1  # past a blocker


def test_gpu_kernel_choices_are_not_candidates_on_a_cpu_host() -> None:
    """On a CPU host the attention backend's alternatives are the CPU ones: Triton has no CPU driver,
    FlashInfer is CUDA code (knowledge/subsystems.toml [[implementation]])."""
    from agent.domain.models import Change
    from agent.planning.in_play import InPlay

    cpu = InPlay(CPU_HOST, Baseline(flags={"--device": "cpu"}), {}, FLAGS)
    gpu = InPlay(GPU_HOST, Baseline(), {}, FLAGS)
    for value in ("triton", "flashinfer", "fa3"):
        change = Change(kind="flag", name="--attention-backend", before="intel_amx", after=value)
        assert cpu.why_not(change) is not None and "platform (cpu)" in str(cpu.why_not(change))
        assert gpu.why_not(change) is None
    assert cpu.why_not(Change(kind="flag", name="--attention-backend", before="intel_amx", after="torch_native")) is None


def test_attention_backends_of_another_platform_are_not_candidates_on_a_rocm_host() -> None:
    """SGLang groups --attention-backend's choices by the hardware they run on (0.5.23 choices.py): on an
    AMD host the NVIDIA-specific ones (FlashInfer, FlashAttention, TensorRT-LLM) and the other platforms'
    (Intel AMX, Ascend, Intel XPU) cannot run; the common ones and AMD's own can. On an NVIDIA host AMD's
    cannot (knowledge/subsystems.toml [[implementation]])."""
    from agent.domain.models import Change
    from agent.planning.in_play import InPlay

    rocm = InPlay(MI300X, Baseline(), {}, FLAGS)
    cuda = InPlay(GPU_HOST, Baseline(), {}, FLAGS)
    for value in ("flashinfer", "fa3", "trtllm_mha", "intel_amx", "ascend", "intel_xpu"):
        change = Change(kind="flag", name="--decode-attention-backend", before=None, after=value)
        assert "platform (rocm)" in str(rocm.why_not(change)), value
    for value in ("triton", "torch_native", "flex_attention", "aiter", "wave"):
        assert rocm.why_not(Change(kind="flag", name="--attention-backend", before=None, after=value)) is None
    assert cuda.why_not(Change(kind="flag", name="--attention-backend", before=None, after="fa3")) is None
    assert "platform (cuda)" in str(cuda.why_not(Change(kind="flag", name="--attention-backend", before=None,
                                                        after="aiter")))


# ----- asynchronous device faults, ROCm too (points 3 and 8) -------------------------------------------

#: A ROCm hardware exception as the ROCm runtime prints it on every rank (rocdevice.cpp), then SGLang's
#: scheduler death; the server args say TP 8 on an AMD host.
HSA = """[2026-12-01 10:00:00] server_args={'model_path': '/m/x', 'tp_size': 8, 'attention_backend': 'aiter'}
:0:rocdevice.cpp            :3020: 8243150981 us:  Callback: Queue 0x7f2a4c600000 Aborting with error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016
[2026-12-01 10:00:09] Rank 0 scheduler is dead. Please check if there are relevant logs.
[2026-12-01 10:00:09] Received sigquit from a child process. It usually means the child failed.
"""
MI300X = HostFingerprint(gpu_vendor="amd", gpu_name="AMD Instinct MI300X", gpu_count=8, gpu_arch="gfx942",
                         memory_total_mib=196592, sglang_version="0.5.23")


def test_a_rocm_hardware_exception_is_localised_first_and_a_working_localiser_is_a_workaround() -> None:

    planner, view, prop = _run(MI300X, {"--model-path": "/m/x", "--tp-size": "8"}, HSA)
    assert "illegal_memory_access" in view.outcomes[0].symptoms
    exp = prop.experiment
    assert exp is not None and exp.change is not None
    # a localiser that takes a whole subsystem out, not a guess among MoE or attention kernels
    ledger = {h.id: h for h in planner.history(view).hypotheses}
    localisers = {iv.names[0] for h in ledger.values() if h.id.startswith("symptom:async-fault")
                  for iv in h.interventions}
    assert exp.change.name in localisers | {FLAGS.resolve_role(["--disable-decode-cuda-graph"]).name}  # type: ignore[union-attr]
    assert all(iv.workaround for h in ledger.values() if h.id.startswith("symptom:async-fault")
               for iv in h.interventions)


#: SGLang 0.5.23 on a Radeon host: the attention backend it chose for ROCm by itself (arg_groups/overrides.py
#: _attention_backend_default), then PyTorch's HIP error at the first prefill in that backend's kernels.
def _no_code_object(backend: str, package: str) -> str:
    return f"""[2026-12-01 10:00:00] Attention backend not specified. Use {backend} backend by default.
[2026-12-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 1154, in event_loop_overlap
    batch_result = self.run_batch(batch)
  File "{SITE}/sglang/srt/layers/attention/{backend}_backend.py", line 1507, in forward_extend
    o = prefill(q, k, v)
  File "{SITE}/{package}/ops/mha.py", line 2632, in prefill
    return _prefill(q, k, v)
torch.AcceleratorError: HIP error: invalid device function
HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
"""


RADEON = HostFingerprint(gpu_vendor="amd", gpu_name="AMD Radeon AI PRO R9700", gpu_count=1, gpu_arch="gfx1201",
                         memory_total_mib=32624, sglang_version="0.5.23")


def _attention_workarounds(flags: dict[str, object], log: str) -> dict[str, bool]:
    planner, view, _ = _run(RADEON, flags, log)
    h = next(h for h in planner.history(view).hypotheses if h.id == "component:--attention-backend")
    return {str(iv.values[0]): iv.workaround for iv in h.interventions}


def test_an_implementation_sglang_chose_with_no_kernels_for_this_gpu_is_replaced_as_the_fix() -> None:
    """HIP's "invalid device function" (no code object for the GPU's gfx target) in the backend SGLang chose
    for the platform by itself: another backend that runs here repairs the configuration, not a
    workaround. The same backend chosen by the user is the user's intent: replacing it is a workaround.
    A just-in-time backend (Triton) with an architecture error points at its toolchain: a workaround too."""
    log = _no_code_object("aiter", "aiter")
    assert "unsupported_arch" in classify_outcome(RawEvidence.from_log("e", log, _sglang_signatures(), "x.log")).symptoms
    auto = _attention_workarounds({"--model-path": "/m/x"}, log)
    assert auto and auto.get("triton") is False and not any(auto.values()), auto
    users = _attention_workarounds({"--model-path": "/m/x", "--attention-backend": "aiter"}, log)
    assert users.get("triton") is True, users
    jit = _attention_workarounds({"--model-path": "/m/x"}, _no_code_object("triton", "triton"))
    assert jit and all(jit.values()), jit


def test_notes_that_name_a_file_for_a_feature_that_is_on_fill_its_unset_path_setting() -> None:
    from agent.domain.models import RelevantFinding
    from agent.planning.generators import GeneratorInput
    from agent.planning.generators.findings import KnownGoodDiffGenerator
    from tools.knowledge import Finding

    notes = Finding(source="FINDINGS.md", title="Notes on this box", outcome="unknown",
                    text="- trained an EAGLE3 draft head with SpecForge; the checkpoint is in `/models/m-eagle3`.\n"
                         "- the tokenizer cache lives in `/data/cache`.")
    log = ("Traceback (most recent call last):\n"
           f'  File "{SITE}/sglang/srt/speculative/eagle_worker.py", line 120, in __init__\n'
           "    self.draft_model_runner.model.set_embed(embed)\n"
           "AttributeError: 'Qwen2ForCausalLM' object has no attribute 'set_embed'\n")
    raw = RawEvidence.from_log("e", log, _sglang_signatures(), "x.log").model_copy(update={"status": "crashed"})
    out = classify_outcome(raw)

    def paths(flags: dict[str, str]) -> set[str]:
        case = Case.model_validate({"name": "c", "model": {"path": "m"}, "baseline": {"flags": flags}})
        inp = GeneratorInput(case=case, baseline=case.baseline, reference=out,
                             fingerprint=GPU_HOST, flags=FLAGS, findings=[RelevantFinding(finding=notes, relevance=0.3)])
        return {c.id for c in KnownGoodDiffGenerator().generate(inp)}

    assert paths({"--speculative-algorithm": "EAGLE3"}) == {"finding:--speculative-draft-model-path=/models/m-eagle3"}
    assert paths({}) == set()  # speculative decoding off: its draft path is not in play


def test_the_servers_own_shutdown_after_passing_probes_is_not_a_failure() -> None:
    """Real SGLang 0.5.23 on this host, stopped by hypoloop after every probe passed: its detokenizer
    dies of the SIGTERM and SGLang triggers a SIGQUIT (lines as logged on 2026-12-02). A confirmation
    read that as a crash and refuted the fix."""
    from tools.probes import ProbeResult

    log = """[2026-12-02 02:22:52] The server is fired up and ready to roll!
[2026-12-02 02:22:57] INFO:     127.0.0.1:57716 - "POST /generate HTTP/1.1" 200 OK
[2026-12-02 02:22:57] SIGTERM received. signum=None frame=None. Draining requests and shutting down...
[2026-12-02 02:22:58] Subprocess detokenizer (pid=22620) crashed with exit code -15. Triggering SIGQUIT for cleanup...
[2026-12-02 02:22:58] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
[2026-12-02 02:23:03] kill_process_tree called: parent_pid=21801, include_parent=True, pid=21801
"""
    probes = [ProbeResult(probe_id="chat", ok=True, status="ok", http_status=200, text="Paris", latency_s=1.5)]
    raw = RawEvidence.from_log("e", log, _sglang_signatures(), "x.log").model_copy(update={"status": "ready", "probes": probes})
    assert classify_outcome(raw).stage == "ok"
    # the same lines before the server was asked to stop are a crash
    early = log.replace("[2026-12-02 02:22:57] SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n", "")
    failed = [ProbeResult(probe_id="chat", ok=False, status="connection_error", latency_s=1.5)]
    raw = RawEvidence.from_log("e", early, _sglang_signatures(), "x.log").model_copy(update={"status": "ready", "probes": failed})
    assert classify_outcome(raw).stage == "request_failed"


# ----- the subsystem the innermost SGLang frame is in ------------------------------------------------

#: An asynchronous device fault that surfaced inside the hierarchical cache's own code (SGLang 0.5.9
#: srt/mem_cache/hiradix_cache.py writing_check polls the GPU->host copy events).
HICACHE_FAULT = f"""[t] server_args=ServerArgs(model_path='m', enable_hierarchical_cache=True, hicache_ratio=2.0, \
hicache_write_policy='write_through', hicache_io_backend='kernel', hicache_mem_layout='layer_first', \
hicache_storage_backend=None, kv_cache_dtype='auto', attention_backend='fa3')
[t TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/sglang/srt/managers/scheduler.py", line 2010, in _get_new_batch_prefill_raw
    self.tree_cache.check_hicache_events()
  File "{SITE}/sglang/srt/mem_cache/hiradix_cache.py", line 682, in writing_check
    finish_event.query()
  File "{SITE}/torch/cuda/streams.py", line 225, in query
    return super().query()
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
"""


def test_a_fault_in_a_subsystems_own_code_points_at_the_implementation_it_ran_among_many_similar_flags() -> None:
    # The real 0.5.9 --help has a dozen hicache-* flags and many *-cache* ones, so the words of the frame
    # alone implicate none of them strongly; the frame's module is the hierarchical cache's code
    # (knowledge/subsystems.toml `modules`), so its flags lead, the copy-kernel backend it ran first.
    from agent.planning.generators import GeneratorInput
    from agent.planning.generators.component import ImplicatedComponentGenerator

    flags = parse_help((DATA / "help_sglang_0.5.9_full.txt").read_text(), source="fixture", version="0.5.9")
    raw = RawEvidence.from_log("e", HICACHE_FAULT, load_signatures(), "x.log").model_copy(update={"status": "crashed"})
    out = classify_outcome(raw)
    case = Case.model_validate({"name": "c", "model": {"path": "m"}, "baseline": {
        "flags": {"--enable-hierarchical-cache": True, "--hicache-ratio": 2}}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out,
                         fingerprint=GPU_HOST, flags=flags)
    cands = sorted(ImplicatedComponentGenerator().generate(inp), key=lambda c: -c.weight)
    assert cands and cands[0].id == "component:--hicache-io-backend", [(c.id, round(c.weight, 3)) for c in cands[:5]]
    assert any("hiradix_cache.writing_check" in e.detail for e in cands[0].evidence)
    # a flag of another subsystem the frame's words happen to share ("cache") ranks below every hicache one
    hicache = [c.weight for c in cands if c.id.startswith("component:--hicache-")]
    assert all(c.weight < min(hicache) for c in cands if c.id == "component:--kv-cache-dtype")



def test_the_file_the_notes_name_for_an_unset_path_is_tried_before_the_users_own_settings_are_reverted() -> None:
    """The unset path is the claimed cause, so the notes' file in it must fix the failure (a decisive
    test): it goes before reverting the user's deliberate speculative settings, which the same failure
    only may implicate."""
    from agent.domain.models import RelevantFinding
    from tools.knowledge import Finding

    notes = Finding(source="FINDINGS.md", title="Notes on this box", outcome="unknown",
                    text="- trained an EAGLE3 draft head with SpecForge; the checkpoint is in `/models/m-eagle3`.\n"
                         "- speculative settings we benchmarked offline: steps 3, topk 1, 4 draft tokens.")
    log = ("Traceback (most recent call last):\n"
           f'  File "{SITE}/sglang/srt/speculative/eagle_worker.py", line 120, in __init__\n'
           "    self.draft_model_runner.model.set_embed(embed)\n"
           "AttributeError: 'Qwen2ForCausalLM' object has no attribute 'set_embed'\n")
    flags = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": 3, "--speculative-eagle-topk": 1,
             "--speculative-num-draft-tokens": 4}
    case = Case.model_validate({"name": "c", "model": {"path": "m"}, "baseline": {"flags": flags}})
    view = PlannerView(case=case, fingerprint=GPU_HOST, findings=[RelevantFinding(finding=notes, relevance=0.3)])
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None
    first = first.model_copy(update={"status": "done"})
    raw = RawEvidence.from_log(first.id, log, _sglang_signatures(), "x.log").model_copy(update={"status": "crashed"})
    view.experiments.append(first)
    view.outcomes.append(classify_outcome(raw))
    view.launches = 1
    nxt = planner.propose(view, planner.history(view)).experiment
    assert nxt is not None and nxt.change is not None
    assert (nxt.change.name, nxt.change.after) == ("--speculative-draft-model-path", "/models/m-eagle3")


def test_a_symptom_class_subsystems_toml_does_not_know_is_one_line_naming_the_field(tmp_path: Path) -> None:
    """``implicated_by`` names symptom classes the failure reader computes; a typo would silently implicate
    nothing, so it stops the run with one line naming the file, the entry and the field."""
    from agent.planning.in_play import SubsystemsError, load_subsystems

    bad = tmp_path / "subsystems.toml"
    bad.write_text('[[subsystem]]\nid = "s"\nflags = "^--x$"\nimplicated_by = ["illegal_memory_acess"]\n')
    with pytest.raises(SubsystemsError) as err:
        load_subsystems(bad)
    assert "subsystem #1: implicated_by" in str(err.value) and "illegal_memory_acess" in str(err.value)
    assert "\n" not in str(err.value)
    good = tmp_path / "good.toml"
    good.write_text('[[subsystem]]\nid = "s"\nflags = "^--x$"\nimplicated_by = ["illegal_memory_access"]\n')
    assert load_subsystems(good).subsystems[0].implicated_by == {"illegal_memory_access"}


def test_an_option_of_another_choice_of_a_selector_is_not_in_play() -> None:
    """SGLang reads --speculative-ngram-* only when --speculative-algorithm is NGRAM (0.5.23 spec_info.py
    handle_server_args, knowledge/subsystems.toml [[choice_option]]): under EAGLE3 such a change cannot matter
    and the reason names both choices; the EAGLE options stay in play, and under NGRAM (any case) so do the
    NGRAM ones."""
    from agent.domain.models import Change
    from agent.planning.in_play import InPlay

    ngram = Change(kind="flag", name="--speculative-ngram-match-type", before=None, after="PROB")
    topk = Change(kind="flag", name="--speculative-eagle-topk", before="4", after="1")
    eagle3 = InPlay(GPU_HOST, Baseline(flags={"--speculative-algorithm": "EAGLE3"}), {}, FLAGS)
    why = eagle3.why_not(ngram)
    assert why is not None and "NGRAM" in why and "EAGLE3" in why, why
    assert eagle3.why_not(topk) is None
    assert eagle3.why_not(Change(kind="flag", name="--speculative-dflash-block-size", before=None, after="8"))
    assert eagle3.why_not(Change(kind="flag", name="--speculative-ngram-match-type", before="BFS", after=None)) is None
    for algo in ("NGRAM", "ngram"):
        assert InPlay(GPU_HOST, Baseline(flags={"--speculative-algorithm": algo}), {}, FLAGS).why_not(ngram) is None
    # the printed settings say which algorithm SGLang resolved when the command did not
    printed = InPlay(GPU_HOST, Baseline(), {"speculative_algorithm": "EAGLE"}, FLAGS)
    assert printed.why_not(ngram) is not None
    assert InPlay(GPU_HOST, Baseline(), {}, FLAGS).why_not(ngram) is not None  # speculative decoding is off


def test_the_mxfp4_moe_precision_is_in_play_only_for_an_mxfp4_model(tmp_path: Path) -> None:
    """FlashInfer's MXFP4 MoE precision is read only by SGLang's MXFP4 quantization code: on an FP8 MoE
    checkpoint changing it changes nothing; on an MXFP4 one it is a candidate (the config.json read from disk)."""
    from agent.domain.models import Change
    from agent.planning.in_play import InPlay

    change = Change(kind="flag", name="--flashinfer-mxfp4-moe-precision", after="bf16")
    fp8 = {**MOE, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    mxfp4 = {**MOE, "quantization_config": {"quant_method": "mxfp4"}}
    seen = {}
    for name, config in (("fp8", fp8), ("mxfp4", mxfp4)):
        fp, path = _fingerprint(tmp_path, config, GPU_HOST, name)
        seen[name] = InPlay(fp, Baseline(flags={"--model-path": path}), {}, FLAGS).why_not(change)
    assert seen["fp8"] is not None and "MXFP4" in seen["fp8"], seen
    assert seen["mxfp4"] is None, seen
    flags = {"--model-path": "/m/x", "--quantization": "mxfp4"}
    assert InPlay(GPU_HOST.model_copy(update={"checkpoint": {}}), Baseline(flags=flags), {}, FLAGS).why_not(change) is None


def test_the_data_parallel_routing_is_in_play_only_with_replicas_or_pd_disaggregation() -> None:
    """SGLang 0.5.23's --load-balance-method spreads requests over data-parallel replicas (or follows a PD
    prefill server's bootstrap room): with one replica and no disaggregation it picks among replicas that do
    not exist, so changing it is no candidate (knowledge/subsystems.toml ``data_parallel_routing``)."""
    from agent.domain.models import Change
    from agent.planning.in_play import InPlay

    change = Change(kind="flag", name="--load-balance-method", after="round_robin")
    assert "not in play" in (InPlay(GPU_HOST, Baseline(), {}, FLAGS).why_not(change) or "")
    assert InPlay(GPU_HOST, Baseline(flags={"--dp-size": "2"}), {}, FLAGS).why_not(change) is None
    assert InPlay(GPU_HOST, Baseline(flags={"--disaggregation-mode": "prefill"}), {}, FLAGS).why_not(change) is None


#: SGLang 0.5.23 at TP=8 on 8 NVIDIA GPUs: the fused all-reduce + RMSNorm it enabled on its own faults inside
#: FlashInfer's communication kernels (srt/layers/flashinfer_comm_fusion.py calling flashinfer/comm/allreduce.py;
#: sgl-project/sglang#29485), while SGLang also resolved FlashInfer as the sampling backend.
FUSED_ALLREDUCE_FAULT = f"""[t] server_args={{'model_path': 'm', 'tp_size': 8, 'sampling_backend': 'flashinfer', \
'flashinfer_allreduce_fusion_backend': None, 'enable_flashinfer_allreduce_fusion': False, 'dcp_size': 1}}
[t] Auto-enabling FlashInfer AllReduce Fusion (auto) for GlmMoeDsaForCausalLM
[t TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6368, in run_scheduler_process
    scheduler.run_event_loop()
  File "{SITE}/sglang/srt/layers/layernorm.py", line 248, in _forward_with_allreduce_fusion
    fused_result = flashinfer_allreduce_residual_rmsnorm(
  File "{SITE}/sglang/srt/layers/flashinfer_comm_fusion.py", line 921, in flashinfer_allreduce_residual_rmsnorm
    _flashinfer_comm.allreduce_fusion(**kwargs)
  File "{SITE}/flashinfer/comm/allreduce.py", line 909, in allreduce_fusion
    norm_result, residual_result = trtllm_mnnvl_fused_allreduce_add_rmsnorm(
  File "{SITE}/flashinfer/comm/trtllm_mnnvl_ar.py", line 501, in trtllm_mnnvl_fused_allreduce_add_rmsnorm
    module.trtllm_mnnvl_allreduce_fusion(
RuntimeError: Check failed: (status == cudaSuccess) is false: trtllm_mnnvl_allreduce_fusion failed with error code an illegal memory access was encountered
"""


def test_a_fault_in_the_fused_all_reduce_points_at_its_backend_not_at_another_user_of_the_same_package() -> None:
    """FlashInfer serves sampling, attention and the fused all-reduce: frames that enter it from the
    collectives' code (knowledge/subsystems.toml ``gpu_collectives`` ``modules``) implicate the fusion's
    backend first; the sampling backend, whose value is merely the same package, comes after. Flags of what
    is not in play (AITER's fusion on a CUDA host, the decode-context-parallel backend at --dcp-size 1) are
    no candidates, and the deprecated --enable-flashinfer-allreduce-fusion, off while SGLang enabled the
    fusion itself, does not make the fusion's backend inert."""
    from agent.domain.models import Change
    from agent.planning.generators import GeneratorInput
    from agent.planning.generators.component import ImplicatedComponentGenerator
    from agent.planning.in_play import InPlay

    fp = GPU_HOST.model_copy(update={"gpu_count": 8})
    raw = RawEvidence.from_log("e", FUSED_ALLREDUCE_FAULT, _sglang_signatures(), "x.log")
    out = classify_outcome(raw.model_copy(update={"status": "crashed"}))
    case = Case.model_validate({"name": "c", "model": {"path": "m"}, "baseline": {"flags": {"--tp-size": 8}}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out, fingerprint=fp, flags=FLAGS)
    weight = {c.id: c.weight for c in ImplicatedComponentGenerator().generate(inp)}
    fusion, sampling = weight["component:--flashinfer-allreduce-fusion-backend"], weight.get("component:--sampling-backend", 0.0)
    assert fusion > sampling, sorted(weight.items(), key=lambda kv: -kv[1])[:6]
    here = InPlay(fp, case.baseline, {}, FLAGS)
    assert "not in play" in (here.why_not(Change(kind="flag", name="--disable-aiter-allreduce-fusion-in-decode", after=True)) or "")
    assert "not in play" in (here.why_not(Change(kind="flag", name="--dcp-comm-backend", after="a2a")) or "")
    assert InPlay(fp, Baseline(flags={"--tp-size": "8", "--dcp-size": "2"}), {}, FLAGS).why_not(
        Change(kind="flag", name="--dcp-comm-backend", after="a2a")) is None
    assert FLAGS.feature_switch("--flashinfer-allreduce-fusion-backend") is None
    assert FLAGS.feature_switch("--hicache-io-backend") is not None  # a live --enable-X switch still is one


#: SGLang 0.5.23 launched with a model id the hub does not know (transformers' utils/hub.py cached_files).
NO_SUCH_MODEL = f"""[t] server_args={{'model_path': 'org/NoSuchModel', 'sampling_defaults': 'model'}}
Traceback (most recent call last):
  File "{SITE}/sglang/launch_server.py", line 32, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "{SITE}/transformers/utils/hub.py", line 479, in cached_files
    raise EnvironmentError(
OSError: org/NoSuchModel is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'
"""


def test_an_error_about_the_model_does_not_blame_a_choice_named_model() -> None:
    """``--sampling-defaults model`` (the checkpoint's own generation config) is no implementation an error
    about the model's files names: a wrong model id implicates no sampling choice."""
    from agent.planning.generators import GeneratorInput
    from agent.planning.generators.component import ImplicatedComponentGenerator

    raw = RawEvidence.from_log("e", NO_SUCH_MODEL, _sglang_signatures(), "x.log")
    out = classify_outcome(raw.model_copy(update={"status": "crashed"}))
    case = Case.model_validate({"name": "c", "model": {"path": "org/NoSuchModel"}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out, fingerprint=GPU_HOST, flags=FLAGS)
    ids = {c.id for c in ImplicatedComponentGenerator().generate(inp)}
    assert "component:--sampling-defaults" not in ids, ids
