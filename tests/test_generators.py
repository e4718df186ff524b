"""Candidate generators, each on its own: evidence in (SGLang log text, host facts, the real 0.5.9
``--help``), candidates out. Log texts are SGLang 0.5.x's (tracebacks as CPython prints them)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import agent.planning.generators as generators_pkg
from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Outcome, RelevantFinding
from agent.planning.catalog import load_catalog
from agent.planning.generators import Candidate, CandidateGenerator, GeneratorInput
from agent.planning.generators.catalog import CatalogGenerator
from agent.planning.generators.component import ImplicatedComponentGenerator
from agent.planning.generators.evidence import (
    excerpt_of_text,
    parse_server_args,
    parse_tracebacks,
)
from agent.planning.generators.findings import KnownGoodDiffGenerator
from agent.planning.generators.load import LoadGenerator
from agent.planning.generators.registry import REGISTRY
from agent.planning.generators.remedies import RemediesGenerator
from agent.planning.generators.settings import SettingsVsDefaultsGenerator, implicated_setting
from agent.planning.generators.symptoms import SymptomClassGenerator
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.knowledge import Finding
from tools.probes import ProbeResult
from tools.signatures import load_signatures

DATA = Path(__file__).parent / "data"
SIGS = load_signatures()
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.9.txt").read_text(), source="fixture", version="0.5.9")
H100 = HostFingerprint(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=2, compute_capability="9.0",
                       memory_total_mib=81559, sglang_version="0.5.9")
SITE = "/usr/local/lib/python3.12/dist-packages"

ATTENTION_ASSERT = f"""[2026-01-02 03:04:05] server_args=ServerArgs(model_path='org/M', tp_size=1, attention_backend='triton', kv_cache_dtype='fp8_e4m3', moe_runner_backend='auto')
[2026-01-02 03:04:06 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=20.00 GB, mem usage=50.00 GB.
[2026-01-02 03:04:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler = Scheduler(
                ^^^^^^^^^^
  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 1951, in init_attention_backend
    self.attn_backend = self._get_attention_backend()
  File "{SITE}/sglang/srt/layers/attention/triton_backend.py", line 97, in __init__
    self.token_to_kv_pool.get_value_buffer(0).shape[-1]
  File "{SITE}/sglang/srt/mem_cache/memory_pool.py", line 1498, in get_value_buffer
    assert not self.nsa_kv_cache_store_fp8
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AssertionError
[2026-01-02 03:04:07] Received sigquit from a child process. It usually means the child failed.
"""

CAPTURE_OOM = f"""[2026-01-02 03:04:05 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.10 GB
[2026-01-02 03:04:09 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 423, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose
"""

KV_ROOM = """[2026-01-02 03:04:05 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=12.25 GB, mem usage=125.65 GB.
[2026-01-02 03:04:06 TP0] ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. Increase --mem-fraction-static (at least 0.9113 is needed for a minimal KV cache).
"""

CONTEXT_LEN = f"""Traceback (most recent call last):
  File "{SITE}/sglang/srt/configs/model_config.py", line 220, in __init__
    raise ValueError(
ValueError: User-specified context_length (65536) is greater than the derived context_length (40960). To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
"""

IMPORT_ERROR = f"""Traceback (most recent call last):
  File "{SITE}/sglang/srt/layers/attention/merge_state.py", line 6, in <module>
    from sgl_kernel import merge_state_v2
  File "{SITE}/sgl_kernel/__init__.py", line 5, in <module>
    common_ops = _load_architecture_specific_ops()
  File "{SITE}/sgl_kernel/load_utils.py", line 188, in _load_architecture_specific_ops
    raise ImportError(error_msg)
ImportError: {SITE}/sgl_kernel/sm90/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEab
"""


def _case(flags: dict[str, object] | None = None, env: dict[str, str] | None = None, **extra: object) -> Case:
    return Case.model_validate(
        {"name": "c", "model": {"path": "org/M"}, "baseline": {"flags": flags or {}, "env": env or {}}, **extra}
    )


def _outcome(text: str, *, status: str = "crashed", probes: list[ProbeResult] | None = None,
             facts: dict[str, str] | None = None) -> Outcome:
    raw = RawEvidence.from_log("exp-1", text, SIGS, "x.log").model_copy(
        update={"status": status, "probes": probes or []}
    )
    raw.facts.update(facts or {})
    return classify_outcome(raw)


def _input(text: str, case: Case, **kw: object) -> GeneratorInput:
    out = kw.pop("outcome", None) or _outcome(text)
    assert isinstance(out, Outcome)
    return GeneratorInput(
        case=case,
        baseline=case.baseline,
        reference=out,
        fingerprint=H100,
        flags=FLAGS,
        catalog=kw.pop("catalog", []),  # type: ignore[arg-type]
        outcomes=[out],
        **kw,  # type: ignore[arg-type]
    )


def _ids(cands: list[Candidate]) -> set[str]:
    return {c.id for c in cands}


def _changes(c: Candidate) -> list[tuple[str, object]]:
    return [(iv.names[0], iv.values[0] if iv.values else None) for iv in c.interventions]


# ----- evidence ----------------------------------------------------------------------------------------


def test_traceback_frames_name_their_package_and_module() -> None:
    tbs = parse_tracebacks(excerpt_of_text(IMPORT_ERROR))
    assert len(tbs) == 1
    tb = tbs[0]
    assert tb.exception == "ImportError"
    # one frame model (tools.tracebacks) for the agent and the tools: innermost first
    assert [f.package for f in tb.frames] == ["sgl_kernel", "sgl_kernel", "sglang"]
    assert tb.frames[-1].module == "sglang.srt.layers.attention.merge_state"
    assert tb.innermost is tb.frames[0] and tb.innermost.function == "_load_architecture_specific_ops"
    assert tb.frames[-1].code == "from sgl_kernel import merge_state_v2"


def test_server_args_line_gives_every_effective_setting() -> None:
    args = parse_server_args(ATTENTION_ASSERT.splitlines()[0])
    assert args["attention_backend"] == "triton" and args["kv_cache_dtype"] == "fp8_e4m3"
    assert args["model_path"] == "org/M"


def test_symptom_classes_of_typical_failures() -> None:
    assert "oom_capture" in _outcome(CAPTURE_OOM).symptoms
    assert "oom_kv_pool" in _outcome(KV_ROOM).symptoms
    assert "import_error" in _outcome(IMPORT_ERROR).symptoms
    garbage = _outcome("[t] The server is fired up and ready to roll!\n", status="ready", probes=[
        ProbeResult(probe_id="chat", ok=False, status="degenerate", text="!!!!!!!!", latency_s=0.1)])
    assert "garbage_output" in garbage.symptoms and "nan_inf" not in garbage.symptoms
    burst = _outcome("[t] The server is fired up and ready to roll!\n", status="ready", probes=[
        ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1),
        ProbeResult(probe_id="load:chat:x8", ok=True, status="ok", latency_s=0.1),
        ProbeResult(probe_id="load:chat:x32", ok=False, status="connection_error", latency_s=0.1)])
    assert "load_only" in burst.symptoms and burst.concurrency == 32


def test_log_excerpt_keeps_the_traceback_and_solutions_but_not_every_progress_line() -> None:
    noise = "".join(f"[t TP0] Capturing batches (bs={i} avail_mem=3.00 GB): 10%|█ | 1/36\n" for i in range(2000))
    kept = excerpt_of_text(noise + CAPTURE_OOM)
    texts = [ll.text for ll in kept]
    assert any("Possible solutions" in t for t in texts)
    assert any("--disable-cuda-graph" in t for t in texts)
    assert len(kept) < 200


# ----- one test per generator ------------------------------------------------------------------------


def test_catalog_generator_triggers_on_a_symptom_class_not_only_a_line() -> None:
    """Garbage text with no NaN line is weighed like NaN numerics: the NaN causes apply to it."""
    out = _outcome("[t] The server is fired up and ready to roll!\n", status="ready", probes=[
        ProbeResult(probe_id="chat", ok=False, status="wrong_answer", text="qz qz qz", latency_s=0.1)],
        facts={"kv_cache_dtype": "fp8_e4m3"})
    cands = CatalogGenerator().generate(_input("", _case(), outcome=out, catalog=load_catalog()))
    assert "lowprec-kv-cache-attention-numerics" in _ids(cands)


def test_a_graded_accuracy_drop_is_its_own_class_and_no_hypothesis_says_nan() -> None:
    """Every answer read fine one by one, only the graded probe set's count fell below the expected
    accuracy: that is an accuracy drop, and the low-precision KV-cache causes apply to it worded as
    fewer right answers, not as NaN/Inf or meaningless text."""
    out = _outcome("[t] The server is fired up and ready to roll!\n", status="ready", probes=[
        ProbeResult(probe_id="chat", ok=True, status="ok", text="Paris", latency_s=0.1),
        ProbeResult(probe_id="probe-set", ok=False, status="wrong_answer", latency_s=1.0,
                    text="probe set: accuracy 30/40 = 0.750; expected 0.950: below it with 95% confidence")],
        facts={"kv_cache_dtype": "fp8_e4m3"})
    assert "accuracy_drop" in out.symptoms
    assert not {"garbage_output", "nan_inf"} & set(out.symptoms)
    inp = _input("", _case({"--kv-cache-dtype": "fp8_e4m3"}), outcome=out, catalog=load_catalog())
    cands = CatalogGenerator().generate(inp) + SymptomClassGenerator().generate(inp)
    ids = _ids(cands)
    assert {"lowprec-kv-cache-attention-numerics", "symptom:lowprec-kv-cache"} <= ids
    for c in cands:
        assert "nan" not in c.statement.lower() and "meaningless" not in c.statement, c.statement
    kv = next(c for c in cands if c.id == "lowprec-kv-cache-attention-numerics")
    assert "fewer are right" in kv.statement and "fp8_e4m3" in kv.statement


def test_nan_is_read_as_a_whole_token_not_inside_a_word() -> None:
    """An exception whose words only contain the letters (``maintenance``, ``info``) is no NaN/Inf."""
    plain = _outcome("[t] Traceback (most recent call last):\n  File \"/x/sglang/srt/a.py\", line 1, in f\n"
                     "RuntimeError: scheduler maintenance failed; see info above\n")
    assert "nan_inf" not in plain.symptoms
    nan = _outcome("[t] Traceback (most recent call last):\n  File \"/x/sglang/srt/a.py\", line 1, in f\n"
                   "RuntimeError: found NaNs in logits\n")
    assert "nan_inf" in nan.symptoms


def test_symptom_generator_points_a_silent_multi_gpu_start_at_the_peer_path() -> None:
    out = _outcome("[t TP0] Init torch distributed ends. mem usage=0.5 GB\n", status="stalled",
                   facts={"tp_size": "2", "stall_stage": "load", "stalled_after": "init_torch_distributed_end"})
    cands = SymptomClassGenerator().generate(_input("", _case({"--tp-size": 2}), outcome=out))
    hang = next(c for c in cands if c.id == "symptom:multi-gpu-path-hang")
    assert ("NCCL_P2P_DISABLE", "1") in _changes(hang)


def test_component_generator_offers_every_legal_alternative_of_the_implicated_backend() -> None:
    cands = ImplicatedComponentGenerator().generate(_input(ATTENTION_ASSERT, _case({"--attention-backend": "triton"})))
    att = next(c for c in cands if c.id == "component:--attention-backend")
    values = [v for _, v in _changes(att)]
    spec = FLAGS.resolve("--attention-backend")
    assert spec.choices is not None
    # every choice but the current one, without other vendors' (AMD, Intel, Ascend) implementations
    assert "triton" not in values
    assert {"torch_native", "flashinfer", "fa3", "flex_attention"} <= set(values)
    assert not {"aiter", "wave", "intel_amx", "ascend", "intel_xpu"} & set(values)
    assert values[0] == "torch_native"  # portable, JIT-compiled implementations first
    assert any("explicitly" in t for t in att.triggers)
    # The frames also name the KV pool: the KV-cache dtype that SGLang resolved is implicated too
    assert "component:--kv-cache-dtype" in _ids(cands)
    # Why, in whole words (not word stems such as "attent")
    texts = " ".join([att.statement, att.rationale, *att.triggers, *(e.detail for e in att.evidence)])
    named = re.findall(r"names the failing component \(([^)]*)\)", texts)
    assert named and all(w in ("attention",) or len(w) > 3 for w in ", ".join(named).split(", "))
    assert "attent)" not in texts and "attent," not in texts


def test_component_generator_tries_the_choices_the_error_names_first() -> None:
    text = f"""Traceback (most recent call last):
  File "{SITE}/sglang/srt/server_args.py", line 1345, in _handle_model_specific_adjustments
    assert self.attention_backend in
AssertionError: GptOssForCausalLM requires one of ['triton', 'trtllm_mha', 'fa3', 'fa4', 'ascend'] attention backend, but got the following backends
"""
    cands = ImplicatedComponentGenerator().generate(_input(text, _case({"--attention-backend": "flashinfer"})))
    att = next(c for c in cands if c.id == "component:--attention-backend")
    assert [v for _, v in _changes(att)][:4] == ["triton", "trtllm_mha", "fa3", "fa4"]


def test_remedies_generator_reads_the_value_the_error_asks_for() -> None:
    case = _case({"--mem-fraction-static": "0.88"})
    cands = RemediesGenerator().generate(_input(KV_ROOM, case))
    (raise_,) = [c for c in cands if c.interventions[0].names == ["--mem-fraction-static"]]
    assert raise_.interventions[0].values == ["0.92"] and raise_.interventions[0].decisive


def test_remedies_generator_reads_sglang_possible_solutions_list() -> None:
    cands = RemediesGenerator().generate(_input(CAPTURE_OOM, _case({"--enable-torch-compile": True})))
    by_flag = {n: c.interventions[0] for c in cands for n in c.interventions[0].names}
    assert all(c.support == 0.0 for c in cands)  # listed solutions corroborate causes proposing them
    assert by_flag["--mem-fraction-static"].derive == "mem_fraction_for_graph_capture"
    assert by_flag["--mem-fraction-static"].values == ["0.8", "0.7"]
    assert by_flag["--cuda-graph-max-bs"].values == ["16"]
    graphs = by_flag["--disable-cuda-graph"]
    assert graphs.workaround and graphs.cost == "high"  # "(Not recommended. Huge performance loss)"
    assert by_flag["--enable-torch-compile"].values == [None]  # "by not using": remove it
    # a flag the baseline does not set is not removed
    cands = RemediesGenerator().generate(_input(CAPTURE_OOM, _case()))
    assert "--enable-torch-compile" not in {n for c in cands for n in c.interventions[0].names}


def _torch_oom(tried: str, free: str, unused: str) -> str:
    return (
        f"[2026-01-02 03:04:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 423, in __init__\n'
        "    raise Exception(\n"
        f"Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total "
        f"capacity of 79.10 GiB of which {free} is free. Including non-PyTorch memory, this process has 78.60 GiB "
        f"memory in use. Of the allocated memory 76.90 GiB is allocated by PyTorch, and {unused} is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )


def test_remedies_generator_weighs_a_conditional_remedy_by_the_texts_own_figures() -> None:
    """PyTorch offers expandable segments "if reserved but unallocated memory is large": when the free
    memory and the reserved-but-unallocated memory together cannot hold the request, no arrangement of
    the segments serves it, so the remedy is not proposed; when they can, it is."""
    env_of = lambda text: [  # noqa: E731
        c for c in RemediesGenerator().generate(_input(text, _case())) if c.interventions[0].kind == "env"
    ]
    assert env_of(_torch_oom("1.75 GiB", "512.00 MiB", "312.55 MiB")) == []
    (frag,) = env_of(_torch_oom("1.75 GiB", "512.00 MiB", "2.10 GiB"))
    assert frag.interventions[0].names == ["PYTORCH_CUDA_ALLOC_CONF"]
    assert frag.interventions[0].values == ["expandable_segments:True"]


def test_remedies_generator_marks_a_safety_override_variable_a_workaround() -> None:
    cands = RemediesGenerator().generate(_input(CONTEXT_LEN, _case({"--context-length": 65536})))
    env = next(c for c in cands if c.interventions[0].kind == "env")
    iv = env.interventions[0]
    assert (iv.names, iv.values, iv.workaround) == (["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"], ["1"], True)


def test_settings_generator_reverts_each_explicit_setting_but_not_what_is_served() -> None:
    case = _case({"--tp-size": 2, "--trust-remote-code": True, "--context-length": 65536,
                  "--quantization": "w8a8_fp8"}, env={"http_proxy": "http://proxy:3128"})
    cands = SettingsVsDefaultsGenerator().generate(_input(CONTEXT_LEN, case))
    assert _ids(cands) == {"revert:--context-length", "revert:--quantization", "revert:http_proxy"}
    assert all(_changes(c)[0][1] is None for c in cands)
    by = {c.id: c.weight for c in cands}
    # the error speaks of the context length: that setting is the likelier suspect
    assert by["revert:--context-length"] > by["revert:--quantization"]
    # removing --context-length or --quantization lets SGLang read them off the checkpoint (the same
    # model): ordinary candidates; the parallel layout is never reverted (knowledge/served.toml); a
    # setting the user says they need is reverted only as a workaround that changes the deployment
    assert not any(c.interventions[0].workaround for c in cands)
    kept = _case({"--context-length": 65536}, intent={"keep": ["--context-length"]})
    (c,) = SettingsVsDefaultsGenerator().generate(_input(CONTEXT_LEN, kept))
    assert c.interventions[0].workaround and c.interventions[0].cost == "high"


def test_known_good_diff_generator_turns_an_effective_config_difference_into_its_flag() -> None:
    good = Finding(source="F.md", title="K2 works", outcome="works", flags={"--attention-backend": "flashinfer"},
                   facts={"kv_cache_dtype": "bf16"})
    inp = _input(ATTENTION_ASSERT, _case({"--attention-backend": "triton"}),
                 findings=[RelevantFinding(finding=good, relevance=0.8)])
    cands = KnownGoodDiffGenerator().generate(inp)
    assert {c.id for c in cands} == {"finding:--attention-backend=flashinfer", "finding:kv_cache_dtype=bf16"}
    kv = next(c for c in cands if c.id == "finding:kv_cache_dtype=bf16")
    assert _changes(kv) == [("--kv-cache-dtype", "bf16")] and kv.support == pytest.approx(0.8)
    low = [RelevantFinding(finding=good, relevance=0.3)]
    assert KnownGoodDiffGenerator().generate(_input(ATTENTION_ASSERT, _case(), findings=low)) == []


def test_load_generator_caps_the_batch_below_the_failing_burst() -> None:
    out = _outcome("[t] The server is fired up and ready to roll!\n", status="ready", probes=[
        ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1),
        ProbeResult(probe_id="load:chat:x8", ok=True, status="ok", latency_s=0.1),
        ProbeResult(probe_id="load:chat:x32", ok=False, status="connection_error", latency_s=0.1)])
    cands = LoadGenerator().generate(_input("", _case(), outcome=out))
    cap = next(c for c in cands if c.id == "load:--max-running-requests")
    assert _changes(cap) == [("--max-running-requests", "8")]  # the largest burst that passed
    assert cap.interventions[0].workaround
    single = _outcome("[t] ready to roll!\n", status="ready",
                      probes=[ProbeResult(probe_id="chat", ok=False, status="connection_error", latency_s=0.1)])
    assert LoadGenerator().generate(_input("", _case(), outcome=single)) == []


def test_a_batch_only_feature_the_user_turned_on_is_turned_back_off_ahead_of_default_features() -> None:
    """Only a burst fails and the baseline opts into mixing prefills into decode batches
    (--enable-mixed-chunk, off by default in SGLang): turning it back off is a suspect, as likely as a
    backend the user chose, and no workaround (it is SGLang's default)."""
    out = _outcome("[t] The server is fired up and ready to roll!\n", status="ready", probes=[
        ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1),
        ProbeResult(probe_id="load:chat:x32", ok=False, status="connection_error", latency_s=0.1)])
    cands = LoadGenerator().generate(_input("", _case({"--enable-mixed-chunk": True}), outcome=out))
    mine = next(c for c in cands if c.id == "load:--enable-mixed-chunk")
    assert _changes(mine) == [("--enable-mixed-chunk", False)] and not mine.interventions[0].workaround  # removed
    assert all(mine.weight > c.weight for c in cands if c is not mine)
    # not turned on by the user: no such suspect
    assert not any(c.id == "load:--enable-mixed-chunk" for c in LoadGenerator().generate(_input("", _case(), outcome=out)))


# ----- the registry ------------------------------------------------------------------------------------


def test_every_generator_module_is_registered_and_follows_the_protocol() -> None:
    names: set[str] = set()
    for mod in pkgutil.iter_modules(generators_pkg.__path__):
        module = importlib.import_module(f"agent.planning.generators.{mod.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and hasattr(cls, "generate") and hasattr(cls, "name"):
                names.add(cls.__name__)
    assert names == {cls.__name__ for cls in REGISTRY}
    for cls in REGISTRY:
        gen = cls()
        assert isinstance(gen, CandidateGenerator)
    assert len({cls().name for cls in REGISTRY}) == len(REGISTRY)


def test_generators_find_nothing_in_a_run_that_served() -> None:
    out = _outcome("[t] The server is fired up and ready to roll!\n", status="ready",
                   probes=[ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1)])
    inp = _input("", _case({"--attention-backend": "triton"}), outcome=out, catalog=load_catalog())
    assert [c.id for cls in REGISTRY for c in cls().generate(inp)] == []


def test_component_statement_names_the_default_when_the_value_is_unknown() -> None:
    """A selecting flag the baseline leaves unset and the log never reports: the hypothesis says SGLang
    chooses it at startup, not '(None)'; a known value is named as it is."""
    cands = ImplicatedComponentGenerator().generate(_input(IMPORT_ERROR, _case()))
    statements = {c.id: c.statement for c in cands if c.id.startswith("component:--")}
    assert "component:--attention-backend" in statements, statements
    for cid, text in statements.items():
        assert "None" not in text, f"{cid}: {text}"
    assert "selects (its default, chosen by SGLang at startup) fails" in statements["component:--attention-backend"]
    known = ImplicatedComponentGenerator().generate(_input(ATTENTION_ASSERT, _case({"--attention-backend": "triton"})))
    att = next(c for c in known if c.id == "component:--attention-backend")
    assert "--attention-backend selects (triton) fails" in att.statement


def test_known_good_diff_generator_merges_a_flag_and_its_own_fact_into_one_hypothesis() -> None:
    good = Finding(source="F.md", title="K2 works", outcome="works", flags={"--attention-backend": "flashinfer"},
                   facts={"attention_backend": "flashinfer"})
    inp = _input(ATTENTION_ASSERT, _case({"--attention-backend": "triton"}),
                 findings=[RelevantFinding(finding=good, relevance=0.8)])
    inp.evidence.facts["attention_backend"] = "triton"
    cands = KnownGoodDiffGenerator().generate(inp)
    ids = [c.id for c in cands if "attention" in c.id]
    assert ids == ["finding:--attention-backend=flashinfer"], ids
    (one,) = [c for c in cands if c.id == ids[0]]
    assert len(one.evidence) == 2  # the flag difference and the effective-config difference


# ----- changed packages --------------------------------------------------------------------------------


def test_a_changed_package_the_failing_frames_run_in_weighs_more_than_one_that_only_changed() -> None:
    from agent.planning.generators.changed import ChangedPackageGenerator

    tb = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/sglang/srt/layers/sampler.py", line 31, in <module>\n'
        "    from flashinfer.sampling import top_k\n"
        '  File "/usr/lib/python3/dist-packages/flashinfer/sampling.py", line 9, in <module>\n'
        "    import triton\n"
        '  File "/usr/lib/python3/dist-packages/triton/__init__.py", line 8, in <module>\n'
        "    from .runtime import x\n"
        "ImportError: cannot import name 'x' from 'triton.runtime'\n"
    )
    case = _case(description="after pip install -U triton and transformers this morning it fails to start")
    fp = H100.model_copy(update={"installed": {"triton": "3.5.1", "transformers": "4.57.1", "flashinfer-python": "0.6.3"}})
    inp = _input(tb, case)
    cands = {c.id: c for c in ChangedPackageGenerator().generate(inp.model_copy(update={"fingerprint": fp}))}
    assert set(cands) == {"package:triton", "package:transformers"}
    assert cands["package:triton"].weight > cands["package:transformers"].weight
    assert not cands["package:triton"].interventions and cands["package:triton"].package == "triton"
    bare = H100.model_copy(update={"installed": {}})  # the host's packages unknown: nothing is guessed
    assert ChangedPackageGenerator().generate(inp.model_copy(update={"fingerprint": bare})) == []


SPEC_TRACEBACK = """[t TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 3875, in run_scheduler_process
    scheduler.run_event_loop()
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2204, in run_batch
    batch_result = self.model_worker.forward_batch_generation(model_worker_batch)
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/speculative/eagle_worker_v2.py", line 541, in _draft_extend_for_decode
    logits_output = self.draft_runner.forward(forward_batch).logits_output
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/models/llama_eagle3.py", line 88, in forward
    hidden_states = torch.cat([embeds, hidden_states], dim=-1)
RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 6 but got size 8 for tensor number 1 in the list.
"""


def test_a_variable_whose_every_word_the_failing_frames_spell_is_implicated() -> None:
    case = _case({"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": 5},
                 env={"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_DRAFT_CACHE_LIMIT": "64"})
    cands = {c.id: c for c in SettingsVsDefaultsGenerator().generate(_input(SPEC_TRACEBACK, case))}
    spelt = cands["revert:SGLANG_ENABLE_SPEC_V2"]
    assert any("spell every word of SGLANG_ENABLE_SPEC_V2" in e.detail for e in spelt.evidence)
    # one shared word (draft) is not evidence: the rest of the variable's name is not in the failing code
    other = cands["revert:SGLANG_DRAFT_CACHE_LIMIT"]
    assert not any("spell" in e.detail for e in other.evidence)
    assert implicated_setting(spelt) and not implicated_setting(other)
    # when the user's other settings name every frame word it names (a speculative flag, a second *_V2
    # variable), the frames single out neither
    twice = _case({"--speculative-num-steps": 5},
                  env={"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "1"})
    cands = {c.id: c for c in SettingsVsDefaultsGenerator().generate(_input(SPEC_TRACEBACK, twice))}
    assert not any("spell" in e.detail for c in cands.values() for e in c.evidence)
