"""Signatures: the data file loads, SGLang/CUDA/NCCL log texts match with line numbers and facts."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tools.signatures import (
    Signature,
    SignatureError,
    SignatureMatcher,
    _required_literal,
    load_signatures,
    scan_text,
)

# Log texts as listed in /work/shared/reference/sglang.md (SGLang 0.5.x), with SGLang's prefixes.
GLM5_LOG = """\
[2026-03-02 10:00:00] server_args=ServerArgs(model_path='zai-org/GLM-5-NVFP4', tp_size=8, kv_cache_dtype='auto', quantization='modelopt_fp4', mem_fraction_static=0.82, attention_backend='nsa', nsa_prefill_backend=None, nsa_decode_backend=None, fp8_gemm_runner_backend='auto', moe_runner_backend='auto')
[2026-03-02 10:00:00] Setting KV cache dtype to fp8_e4m3 for DeepSeek NSA.
[2026-03-02 10:00:00] Setting NSA backend to flashmla_auto for prefill and flashmla_kv for decode for FP8 KV Cache.
[2026-03-02 10:00:05 TP0] Init torch distributed begin.
[2026-03-02 10:00:07 TP0] Load weight begin. avail mem=94.12 GB
Loading safetensors checkpoint shards:  37% Completed | 30/80 [01:02<01:44,  2.09s/it]
[2026-03-02 10:05:00 TP0] DeepGemm is enabled but the scale_fmt of checkpoint is not ue8m0. This might cause accuracy degradation on Blackwell.
[2026-03-02 10:05:10 TP0] Load weight end. type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, avail mem=38.50 GB, mem usage=55.62 GB.
[2026-03-02 10:05:11 TP0] KV Cache is allocated. #tokens: 1048576, K size: 12.00 GB, V size: 12.00 GB
[2026-03-02 10:05:11 TP0] Memory pool end. avail mem=12.40 GB
[2026-03-02 10:05:12 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=12.30 GB
[2026-03-02 10:06:10 TP0] Capture cuda graph end. Time elapsed: 58.21 s. mem usage=1.20 GB. avail mem=11.10 GB.
[2026-03-02 10:06:11 TP0] max_total_num_tokens=1048576, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=256, context_len=202752, available_gpu_mem=11.05 GB
[2026-03-02 10:06:12] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-03-02 10:06:20] The server is fired up and ready to roll!
[2026-03-02 10:07:00 TP0] Prefill batch. #new-seq: 1, #new-token: 12, #cached-token: 0, token usage: 0.00
[2026-03-02 10:07:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2700, in run_scheduler_process
    scheduler.event_loop_overlap()
RuntimeError: CUDA error: device-side assert triggered
RuntimeError: probability tensor contains either `inf`, `nan` or element < 0
[2026-03-02 10:07:01] Received sigquit from a child process. It usually means the child failed.
"""


@pytest.fixture(scope="module")
def sigs() -> list[Signature]:
    return load_signatures()


def test_default_file_loads_with_meaning_and_source_for_every_entry(sigs: list[Signature]) -> None:
    assert len(sigs) >= 40
    ids = [s.id for s in sigs]
    assert len(ids) == len(set(ids))
    for s in sigs:
        assert s.meaning.strip() and s.source.strip(), s.id
        re.compile(s.pattern)
    required = {
        "server_ready",
        "uvicorn_running",
        "load_weight_begin",
        "load_weight_end",
        "kv_cache_allocated",
        "cuda_graph_capture_begin",
        "cuda_graph_capture_end",
        "cuda_graph_capture_failed",
        "probability_tensor_nan",
        "device_side_assert",
        "scheduler_exception",
        "sigquit_from_child",
        "cuda_out_of_memory",
        "not_enough_memory_kv",
        "nccl_error",
        "assertion_error_bare",
        "unsupported_architecture",
        "deepgemm_scale_fmt_warning",
        "kv_cache_dtype_auto_set",
        "nsa_backend_auto_set",
        "argparse_unrecognized_arguments",
        "argparse_bad_argument",
        "python_traceback",
        "runtime_error",
    }
    assert required <= set(ids)


def test_glm5_log_matches_with_line_numbers_and_facts(sigs: list[Signature]) -> None:
    matches, facts = scan_text(GLM5_LOG, sigs)
    by_id = {m.signature_id: m for m in matches}
    assert by_id["kv_cache_dtype_auto_set"].line_numbers == [2]
    assert by_id["nsa_backend_auto_set"].line_numbers == [3]
    assert by_id["deepgemm_scale_fmt_warning"].line_numbers == [7]
    assert by_id["deepgemm_scale_fmt_warning"].kind == "warning"
    assert by_id["load_weight_end"].line_numbers == [8]
    assert by_id["cuda_graph_capture_end"].line_numbers == [12]
    assert by_id["server_ready"].line_numbers == [15] and by_id["server_ready"].kind == "ready"
    assert by_id["scheduler_exception"].line_numbers == [17]
    assert by_id["python_traceback"].line_numbers == [17]
    assert by_id["device_side_assert"].line_numbers == [20]
    assert by_id["probability_tensor_nan"].line_numbers == [21]
    assert by_id["runtime_error"].line_numbers == [20, 21]
    assert by_id["sigquit_from_child"].line_numbers == [22]
    assert {m.signature_id for m in matches if m.kind == "fatal"} == {
        "scheduler_exception",
        "device_side_assert",
        "probability_tensor_nan",
        "sigquit_from_child",
    }
    # order of first appearance
    order = [m.signature_id for m in matches]
    assert (
        order.index("kv_cache_dtype_auto_set")
        < order.index("server_ready")
        < order.index("sigquit_from_child")
    )
    assert by_id["probability_tensor_nan"].first_line.startswith("RuntimeError: probability tensor")

    assert facts["kv_cache_dtype"] == "fp8_e4m3"  # 'auto' in server_args is not a fact; the auto-set line is
    assert facts["nsa_prefill_backend"] == "flashmla_auto"
    assert facts["nsa_decode_backend"] == "flashmla_kv"
    assert facts["model_sparse_attention"] == "true"
    assert facts["fp8_gemm_backend"] == "deep_gemm"
    assert facts["attention_backend"] == "nsa"
    assert facts["mem_fraction_static"] == "0.82"
    assert facts["max_total_num_tokens"] == "1048576"
    assert facts["cuda_graph_capture_s"] == "58.21"
    assert facts["avail_mem_gb"] == "11.05"  # last value wins
    assert "moe_runner_backend" not in facts  # 'auto' is not an effective value


def test_server_args_line_gives_effective_values(sigs: list[Signature]) -> None:
    line = (
        "server_args=ServerArgs(model_path='m', kv_cache_dtype='fp8_e4m3', prefill_attention_backend='fa3', "
        "attention_backend='flashinfer', nsa_prefill_backend='flashmla_sparse', nsa_decode_backend='flashmla_kv', "
        "fp8_gemm_runner_backend='cutlass', moe_runner_backend='flashinfer_trtllm', mem_fraction_static=0.9)"
    )
    _, facts = scan_text(line, sigs)
    assert facts == {
        "kv_cache_dtype": "fp8_e4m3",
        "attention_backend": "flashinfer",
        "nsa_prefill_backend": "flashmla_sparse",
        "nsa_decode_backend": "flashmla_kv",
        "fp8_gemm_backend": "cutlass",
        "moe_runner_backend": "flashinfer_trtllm",
        "mem_fraction_static": "0.9",
    }
    _, facts = scan_text(
        "server_args=ServerArgs(dsa_prefill_backend='tilelang', dsa_decode_backend='tilelang')", sigs
    )
    assert facts == {"nsa_prefill_backend": "tilelang", "nsa_decode_backend": "tilelang"}


def test_a_long_fact_line_is_kept_around_its_match_and_an_error_line_whole(sigs: list[Signature]) -> None:
    # Real server-args lines run to ~10,000 characters and a dozen fact signatures match each; every match
    # once kept the whole line in each outcome and checkpoint.
    filler = ", ".join(f"option_{i}=None" for i in range(600))
    line = f"server_args=ServerArgs(model_path='m', {filler}, attention_backend='flashinfer', {filler})"
    matches, facts = scan_text(line, sigs)
    assert facts["attention_backend"] == "flashinfer"  # read from the whole line
    kept = next(m for m in matches if m.facts.get("attention_backend"))
    assert "attention_backend='flashinfer'" in kept.first_line and kept.first_line.startswith("…")
    assert len(kept.first_line) < 1000 < len(line)
    error = "RuntimeError: " + "x" * 3000 + " CUDA error: an illegal memory access was encountered"
    hits, _ = scan_text(error, sigs)
    assert any(m.kind in ("fatal", "error") and m.first_line == error for m in hits)


@pytest.mark.parametrize(
    "line, dtype, prefill, decode",
    [
        (
            "Setting NSA backend to flashmla_auto for prefill and flashmla_kv for decode for FP8 KV Cache.",
            None,
            "flashmla_auto",
            "flashmla_kv",
        ),
        (
            "WARNING server_args.py: Set NSA backends for bfloat16 KV Cache: prefill=tilelang, decode=tilelang.",
            None,
            "tilelang",
            "tilelang",
        ),
        ("Set DSA backends for fp8_e4m3 KV Cache: prefill=trtllm, decode=trtllm.", None, "trtllm", "trtllm"),
        ("Setting KV cache dtype to bfloat16 for DeepSeek DSA on SM12 device.", "bfloat16", None, None),
        (
            "[2026-01-01 00:00:00] Setting KV cache dtype to fp8_e4m3 for DeepseekV4ForCausalLM.",
            "fp8_e4m3",
            None,
            None,
        ),
    ],
)
def test_auto_resolution_wording_variants(
    sigs: list[Signature], line: str, dtype: str | None, prefill: str | None, decode: str | None
) -> None:
    _, facts = scan_text(line, sigs)
    assert facts.get("kv_cache_dtype") == dtype
    assert facts.get("nsa_prefill_backend") == prefill
    assert facts.get("nsa_decode_backend") == decode


@pytest.mark.parametrize(
    "line, sig_id, kind",
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "cuda_out_of_memory",
            "fatal",
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.88",
            "not_enough_memory_kv",
            "fatal",
        ),
        ("Exception: Capture cuda graph failed: CUDA out of memory", "cuda_graph_capture_failed", "fatal"),
        ("RuntimeError: NCCL error: unhandled system error", "nccl_error", "fatal"),
        ("AssertionError", "assertion_error_bare", "fatal"),
        ("[2026-01-01 00:00:00 TP3] AssertionError", "assertion_error_bare", "fatal"),
        ("RuntimeError: Unsupported architecture", "unsupported_architecture", "error"),
        (
            "ptxas fatal   : Value 'sm_120' is not defined for option 'gpu-name'",
            "ptxas_unknown_gpu_arch",
            "error",
        ),
        (
            "launch_server.py: error: unrecognized arguments: --nsa-decode-backnd x",
            "argparse_unrecognized_arguments",
            "fatal",
        ),
        (
            "launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp4' (choose from 'auto', 'bf16')",
            "argparse_bad_argument",
            "fatal",
        ),
        ("Traceback (most recent call last):", "python_traceback", "error"),
        ("Initialization failed. warmup error: Traceback (most recent call last):", "warmup_failed", "fatal"),
        ("OSError: [Errno 98] Address already in use", "port_in_use", "fatal"),  # vLLM 0.32.0
        (
            # a model path that is no folder on the host, as SGLang 0.5.23 and vLLM 0.32.0 both end
            "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
            "'namespace/repo_name': '/nonexistent/tiny-llama'. Use `repo_type` argument if needed.",
            "model_path_not_found",
            "fatal",
        ),
        (
            "[2026-12-02 13:24:36] ERROR:    [Errno 98] error while attempting to bind on address "
            "('127.0.0.1', 30000): address already in use",  # SGLang 0.5.23 (uvicorn)
            "port_in_use",
            "fatal",
        ),
        (
            "RuntimeError: The size of tensor a (3072) must match the size of tensor b (6144) at non-singleton dimension 0",
            "shape_mismatch",
            "error",
        ),
        # PyTorch on ROCm, a kernel with no code object for the GPU's gfx target
        ("torch.AcceleratorError: HIP error: invalid device function", "invalid_device_function", "fatal"),
    ],
)
def test_error_lines_match_their_signature(sigs: list[Signature], line: str, sig_id: str, kind: str) -> None:
    matches, _ = scan_text(line, sigs)
    by_id = {m.signature_id: m for m in matches}
    assert sig_id in by_id, [m.signature_id for m in matches]
    assert by_id[sig_id].kind == kind
    assert by_id[sig_id].line_numbers == [1]


def test_message_assertion_is_not_the_bare_one(sigs: list[Signature]) -> None:
    matches, _ = scan_text("AssertionError: page size must be 64", sigs)
    assert [m.signature_id for m in matches] == ["assertion_error"]


def test_not_enough_memory_reports_the_fraction(sigs: list[Signature]) -> None:
    _, facts = scan_text(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.88",
        sigs,
    )
    assert facts["mem_fraction_static"] == "0.88"


def test_feed_returns_new_hits_and_matches_aggregate(sigs: list[Signature]) -> None:
    m = SignatureMatcher(sigs)
    assert m.feed(1, "nothing interesting") == []
    hits = m.feed(2, "Load weight begin. avail mem=80.00 GB")
    assert [(h.signature_id, h.line_numbers, h.facts) for h in hits] == [
        ("load_weight_begin", [2], {"avail_mem_gb": "80.00", "pre_load_avail_mem_gb": "80.00"})
    ]
    m.feed(3, "Load weight begin. avail mem=79.00 GB")
    agg = {x.signature_id: x for x in m.matches()}["load_weight_begin"]
    assert agg.line_numbers == [2, 3]
    assert agg.first_line == "Load weight begin. avail mem=80.00 GB"
    assert agg.facts == {"avail_mem_gb": "79.00", "pre_load_avail_mem_gb": "79.00"}
    assert m.facts() == {"avail_mem_gb": "79.00", "pre_load_avail_mem_gb": "79.00"}


def test_optional_groups_that_did_not_match_set_no_fact(sigs: list[Signature]) -> None:
    _, facts = scan_text("Load weight end. avail mem=40.00 GB", sigs)
    assert facts == {"avail_mem_gb": "40.00"}


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "sigs.toml"
    p.write_text(body)
    return p


ENTRY = """
[[signature]]
id = "{id}"
pattern = '''{pattern}'''
severity = "info"
kind = "progress"
stage = "load"
meaning = "m"
source = "s"
{extra}
"""


def test_load_errors_name_file_entry_and_field(tmp_path: Path) -> None:
    p = _write(tmp_path, ENTRY.format(id="bad_regex", pattern="(unclosed", extra=""))
    with pytest.raises(SignatureError) as err:
        load_signatures(p)
    assert str(p) in str(err.value) and "#1 (bad_regex)" in str(err.value) and "regex" in str(err.value)

    p = _write(tmp_path, ENTRY.format(id="no_group", pattern="x=(\\d+)", extra='facts = { v = "{value}" }'))
    with pytest.raises(SignatureError, match=r"facts\.v uses \{value\}"):
        load_signatures(p)

    p = _write(tmp_path, ENTRY.format(id="bad_kind", pattern="x", extra="").replace('"progress"', '"boom"'))
    with pytest.raises(SignatureError, match="field kind"):
        load_signatures(p)

    p = _write(tmp_path, ENTRY.format(id="dup", pattern="x", extra="") * 2)
    with pytest.raises(SignatureError, match="already defined"):
        load_signatures(p)

    p = _write(tmp_path, "[[signature]\nid=")
    with pytest.raises(SignatureError, match="not a TOML file"):
        load_signatures(p)


def test_directory_of_signature_files_loads_all(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(ENTRY.format(id="a", pattern="alpha", extra=""))
    (tmp_path / "b.toml").write_text(ENTRY.format(id="b", pattern="beta", extra='facts = { lit = "yes" }'))
    sigs = load_signatures(tmp_path)
    assert [s.id for s in sigs] == ["a", "b"]
    assert scan_text("beta", sigs)[1] == {"lit": "yes"}


def test_prefilter_never_changes_what_matches(sigs: list[Signature]) -> None:
    lines = GLM5_LOG.splitlines() + [
        "AssertionError",
        "Set DSA backends for fp8_e4m3 KV Cache: prefill=trtllm, decode=trtllm.",
        "CUDA error: out of memory",
        "nothing",
    ]
    fast = SignatureMatcher(sigs)
    for i, line in enumerate(lines, 1):
        fast.feed(i, line)
    naive = {(s.id, i) for s in sigs for i, line in enumerate(lines, 1) if re.search(s.pattern, line)}
    got = {(m.signature_id, n) for m in fast.matches() for n in m.line_numbers}
    assert got == naive
    assert _required_literal("(?i)ready") is None
    assert _required_literal("a|bcd") is None
    assert _required_literal(r"Load weight end\..*x") == "Load weight end."


def test_matching_is_cheap_per_line(sigs: list[Signature]) -> None:
    lines = GLM5_LOG.splitlines() * 500  # ~11k lines
    m = SignatureMatcher(sigs)
    start = time.perf_counter()
    for i, line in enumerate(lines, 1):
        m.feed(i, line)
    per_line_us = (time.perf_counter() - start) / len(lines) * 1e6
    print(f"signature matching: {per_line_us:.1f} us/line over {len(sigs)} signatures")
    assert per_line_us < 1000
