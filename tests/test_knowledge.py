"""Knowledge reader: FINDINGS.md sections, launch commands, outcomes, facts, features, relevance."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.flags import parse_help
from tools.knowledge import (
    Finding,
    KnowledgeError,
    flag_diff,
    gpu_names,
    infer_features,
    parse_findings,
    parse_launch_command,
    read_findings,
    relevance,
)

DATA = Path(__file__).parent / "data"
FINDINGS = DATA / "findings_rtxpro6000.md"
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"  # as nvidia-smi prints it


def _for_glm5(finding: Finding, gpu_name: str | None = RTX_PRO) -> float:
    """Relevance for the motivating case: GLM-5-NVFP4 (MoE, DSA, NVFP4)."""
    return relevance(
        finding, model="zai-org/GLM-5-NVFP4", features={"moe", "dsa", "nvfp4"}, gpu_name=gpu_name
    )


@pytest.fixture(scope="module")
def all_findings() -> list[Finding]:
    return read_findings(FINDINGS)


# --- sections -----------------------------------------------------------------------------------------


def test_reads_one_finding_per_dated_section(all_findings: list[Finding]) -> None:
    assert [f.date for f in all_findings] == ["2026-01-12", "2026-01-05", "2025-12-18", "2025-12-02"]
    assert all_findings[0].title == "2026-01-12 — Kimi-K2-Thinking-NVFP4 on 8x RTX PRO 6000: works"
    # "## Misc" has no date, command, model or GPU: not a finding. The "###" dated heading is its own finding.
    assert all(f.source == str(FINDINGS) for f in all_findings)
    assert not any(f.title == "Misc" for f in all_findings)


def test_working_command_of_a_fixed_section(all_findings: list[Finding]) -> None:
    kimi = all_findings[0]
    assert kimi.outcome == "works"
    assert kimi.model == "moonshotai/Kimi-K2-Thinking-NVFP4"
    assert kimi.hardware == "8x RTX PRO 6000" and kimi.gpus == ["RTX PRO 6000"]
    assert len(kimi.commands) == 2
    assert kimi.commands[0].comment == "crashes in capture, don't use:"
    # Flags come from the last command, the one labelled as working; host/port are not config.
    assert kimi.flags == {
        "--tp-size": "8",
        "--trust-remote-code": True,
        "--quantization": "modelopt_fp4",
        "--attention-backend": "flashinfer",
        "--mem-fraction-static": "0.85",
    }
    # `export` earlier in the block and the VAR=value prefix both count.
    assert kimi.env == {"NCCL_IB_DISABLE": "1", "SGL_ENABLE_JIT_DEEPGEMM": "0"}
    assert kimi.commands[1].argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert kimi.commands[1].argv[-4:] == ["--host", "0.0.0.0", "--port", "30000"]


def test_reads_effective_config_facts_from_json(all_findings: list[Finding]) -> None:
    assert all_findings[0].facts == {
        "kv_cache_dtype": "bf16",
        "attention_backend": "flashinfer",
        "moe_runner_backend": "flashinfer_cutlass",
        "mem_fraction_static": "0.85",
    }


def test_nested_dated_heading_inherits_host_gpu_and_fails(all_findings: list[Finding]) -> None:
    qwen = all_findings[1]
    assert qwen.title.startswith("2026-01-05 Qwen3-235B-A22B-FP8")
    assert qwen.outcome == "fails"  # "(unresolved)" in the heading
    assert qwen.hardware == "8x RTX PRO 6000"  # "same box": from the file's preamble
    (cmd,) = qwen.commands
    assert cmd.argv[0] == "python3"
    assert cmd.argv[-1] == "debug"  # stops before `2>&1 | tee qwen.log`
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "NCCL_DEBUG": "INFO"}
    assert qwen.flags == {"--tp": "8", "--ep-size": "8", "--log-level": "debug"}
    assert set(qwen.features) == {"moe", "fp8"}


def test_sglang_serve_prose_facts_and_month_name_date(all_findings: list[Finding]) -> None:
    ds = all_findings[2]
    assert ds.date == "2025-12-18"
    assert ds.outcome == "works"
    assert ds.hardware == "8x H200"
    assert ds.commands[0].argv[:2] == ["sglang", "serve"]
    assert ds.model == "deepseek-ai/DeepSeek-V3.2-Exp"
    assert ds.facts == {"kv_cache_dtype": "fp8_e4m3", "nsa_decode_backend": "flashmla_kv"}
    assert {"dsa", "moe", "mla"} <= set(ds.features)


def test_docker_wrapper_tilde_fence_and_fix_counts_as_works(all_findings: list[Finding]) -> None:
    llama = all_findings[3]
    assert llama.outcome == "works"  # "OOM ... Fixed by lowering it"
    assert llama.hardware == "4x L40S"
    assert llama.env == {"HF_TOKEN": "hf_xxx"}
    assert llama.flags["--mem-fraction-static"] == "0.85"
    assert llama.flags["--cuda-graph-max-bs"] == "32"
    assert "fp8" in llama.features and "moe" not in llama.features


# --- launch commands ----------------------------------------------------------------------------------


def test_parses_multiline_command_with_env_prefix_and_quotes() -> None:
    cmd = parse_launch_command(
        "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas\n"
        "NCCL_P2P_DISABLE=1 CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server \\\n"
        "  --model-path /models/GLM-5-NVFP4 \\\n"
        "  --tp 2 \\\n"
        "  --kv-cache-dtype=bf16 \\\n"
        "  --json-model-override-args '{\"num_nextn_predict_layers\": 0}' \\\n"
        "  --chunked-prefill-size -1 \\\n"
        "  --cuda-graph-bs 1 2 4 \\\n"
        "  --disable-cuda-graph   # temporary\n"
    )
    assert cmd is not None
    assert cmd.env == {
        "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
        "NCCL_P2P_DISABLE": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert cmd.model_path == "/models/GLM-5-NVFP4"
    assert cmd.flags == {
        "--tp": "2",
        "--kv-cache-dtype": "bf16",
        "--json-model-override-args": '{"num_nextn_predict_layers": 0}',
        "--chunked-prefill-size": "-1",
        "--cuda-graph-bs": "1 2 4",
        "--disable-cuda-graph": True,
    }
    assert cmd.argv[:3] == ["python3", "-m", "sglang.launch_server"]


def test_parses_prompt_env_wrapper_and_background_job() -> None:
    cmd = parse_launch_command(
        "$ env SGL_ENABLE_JIT_DEEPGEMM=0 nohup python -u -m sglang.launch_server --model M > log 2>&1 &"
    )
    assert cmd is not None
    assert cmd.env == {"SGL_ENABLE_JIT_DEEPGEMM": "0"}
    assert cmd.argv == ["python", "-u", "-m", "sglang.launch_server", "--model", "M"]
    assert cmd.model_path == "M" and cmd.flags == {}


def test_non_launch_text_is_not_a_command() -> None:
    assert parse_launch_command("nvidia-smi --query-gpu=name --format=csv") is None
    assert (
        parse_launch_command('File "/opt/venv/lib/python3.11/site-packages/sglang/launch_server.py"') is None
    )
    assert parse_launch_command("") is None


# --- outcome, facts, features -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("## 2026-01-01 GLM-5: works\nFirst crashed with NaN.\n", "works"),
        (
            "## GLM-5 NaN at first decode\nCrash at the first request. Fixed by `--kv-cache-dtype bf16`.\n",
            "works",
        ),
        ("## GLM-5\nFinally serving correctly. The first attempt crashed in capture.\n", "works"),
        (
            "## GLM-5 NaN\nTried flashinfer: same NaN. Tried triton: AssertionError. None of which fixed it.\n",
            "fails",
        ),
        (
            "## GLM-5 — fails (unresolved)\nFixed the OOM with a lower fraction, but decode still NaNs.\n",
            "fails",
        ),
        ("## GLM-5\nServing correctly for an hour, then it crashed under load.\n", "fails"),
        ("## GLM-5 on H200\nLeft it running over the weekend, no NaNs, no errors. Works.\n", "works"),
        ("## 2026-01-01 GLM-5 on H200\nJust the command for reference.\n", "unknown"),
    ],
)
def test_outcome_rules(section: str, expected: str) -> None:
    (finding,) = parse_findings(section)
    assert finding.outcome == expected


def test_facts_in_several_spellings() -> None:
    text = (
        "## 2026-01-02 GLM-5 on RTX PRO 6000\n"
        "server_args=ServerArgs(kv_cache_dtype='fp8_e4m3', attention_backend='nsa', mem_fraction_static=0.81)\n"
        "Setting NSA backend to flashmla_auto for prefill and flashmla_kv for decode for FP8 KV Cache.\n"
        '`"fp8_gemm_runner_backend": "deep_gemm"` and `moe_runner_backend: flashinfer_cutlass`\n'
        "On Kimi the KV cache resolved to bf16. nsa_prefill_backend=None\n"
    )
    (finding,) = parse_findings(text)
    assert finding.facts == {
        "kv_cache_dtype": "bf16",  # the later mention wins
        "attention_backend": "nsa",
        "mem_fraction_static": "0.81",
        "nsa_prefill_backend": "flashmla_auto",  # "=None" does not overwrite a value
        "nsa_decode_backend": "flashmla_kv",
        "fp8_gemm_backend": "deep_gemm",
        "moe_runner_backend": "flashinfer_cutlass",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("zai-org/GLM-5-NVFP4", {"moe", "dsa", "nvfp4"}),
        ("Kimi-K2-Thinking --quantization modelopt_fp4", {"moe", "mla", "nvfp4"}),
        ("a MoE with MLA, no DSA", {"moe", "mla"}),
        ("DeepSeek Sparse Attention model", {"dsa"}),
        ("--nsa-decode-backend flashmla_kv", {"dsa"}),
        ("Qwen/Qwen3-235B-A22B-FP8", {"moe", "fp8"}),
        ("--quantization w8a8_fp8 on a dense model", {"fp8", "dense"}),
        ("--kv-cache-dtype fp8_e4m3 --fp8-gemm-backend cutlass, FP8 KV cache", set()),
        ("meta-llama/Llama-3.3-70B-Instruct", {"dense"}),
        ("openai/gpt-oss-120b mxfp4", {"moe", "mxfp4"}),
    ],
)
def test_infer_features(text: str, expected: set[str]) -> None:
    assert infer_features(text) == expected


def test_gpu_names_from_nvidia_smi_and_shorthand() -> None:
    assert gpu_names(RTX_PRO) == ["RTX PRO 6000"]
    assert gpu_names("NVIDIA GeForce RTX 5090") == ["RTX 5090"]
    assert gpu_names("NVIDIA H200") == ["H200"]
    assert gpu_names("8x H20 and 2 x L40S, later a GB200 (not B200) and an L4") == [
        "H20",
        "L40S",
        "GB200",
        "B200",
        "L4",
    ]


# --- relevance ----------------------------------------------------------------------------------------


def test_relevance_orders_same_host_before_same_features_before_unrelated(
    all_findings: list[Finding],
) -> None:
    scores = {f.model: _for_glm5(f) for f in all_findings}
    kimi, qwen = scores["moonshotai/Kimi-K2-Thinking-NVFP4"], scores["Qwen/Qwen3-235B-A22B-FP8"]
    deepseek, llama = scores["deepseek-ai/DeepSeek-V3.2-Exp"], scores["meta-llama/Llama-3.3-70B-Instruct"]
    assert kimi > qwen > deepseek > llama
    assert all(0.0 <= s <= 1.0 for s in scores.values())


def test_relevance_weighs_hardware_most() -> None:
    same_gpu_other_model = parse_findings("## 2026-01-01 Llama-3.3-70B on 8x RTX PRO 6000: works\n")[0]
    other_gpu_same_features = parse_findings("## 2026-01-01 GLM-5-NVFP4 on 8x B200: works\n")[0]
    assert _for_glm5(same_gpu_other_model) > _for_glm5(other_gpu_same_features)
    # Same architecture (SM120) counts for something; another architecture or an unknown GPU for nothing.
    rtx5090 = _for_glm5(same_gpu_other_model, "NVIDIA GeForce RTX 5090")
    assert rtx5090 > _for_glm5(same_gpu_other_model, "NVIDIA H200") == _for_glm5(same_gpu_other_model, None)
    assert _for_glm5(other_gpu_same_features, "NVIDIA B200") == pytest.approx(1.0)


# --- flag diff ----------------------------------------------------------------------------------------


def test_flag_diff_against_failing_baseline_uses_canonical_names(all_findings: list[Finding]) -> None:
    catalog = parse_help((DATA / "help_sglang_0.5.9.txt").read_text())
    baseline = {"--tp-size": 8, "--trust-remote-code": True, "--quantization": "modelopt_fp4"}
    diffs = flag_diff(all_findings[0].flags, baseline, catalog=catalog)
    assert [(d.name, d.before, d.after) for d in diffs] == [
        ("--attention-backend", None, "flashinfer"),
        ("--mem-fraction-static", None, "0.85"),
    ]


# --- tolerance and errors -----------------------------------------------------------------------------


def test_undated_file_uses_level_two_sections_and_crlf() -> None:
    text = (
        "# Notes\r\nAll on 4x H100.\r\n\r\n## Llama 3 70B\r\nWorks:\r\n\r\n```\r\n"
        "python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-70B --tp 4\r\n```\r\n"
        "## Ideas\r\nTry speculative decoding some day.\r\n"
    )
    (finding,) = parse_findings(text, source="notes.md")
    assert finding.title == "Llama 3 70B"
    assert finding.date is None
    assert finding.hardware == "4x H100"
    assert finding.flags == {"--tp": "4"}
    assert finding.outcome == "works"


def test_file_without_headings_is_one_finding() -> None:
    (finding,) = parse_findings("GLM-5 on RTX PRO 6000 crashed with NaN at first decode.\n", source="x.md")
    assert finding.outcome == "fails" and finding.gpus == ["RTX PRO 6000"] and finding.model == "GLM-5"


def test_unreadable_files_raise_one_line_errors_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "FINDINGS.md"
    with pytest.raises(KnowledgeError) as err:
        read_findings(missing)
    assert str(missing) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(KnowledgeError, match="cannot read"):
        read_findings(tmp_path)  # a directory
    binary = tmp_path / "FINDINGS.md"
    binary.write_bytes(b"## 2026-01-01\n\xff\xfe\x00garbage")
    with pytest.raises(KnowledgeError, match=r"FINDINGS\.md: findings file is not UTF-8"):
        read_findings(binary)


def test_findings_round_trip_through_json(all_findings: list[Finding]) -> None:
    for finding in all_findings:
        assert Finding.model_validate_json(finding.model_dump_json()) == finding


def test_dated_subsections_under_model_headings_inherit_the_model() -> None:
    text = (
        "# Box notes\n8x RTX PRO 6000.\n\n"
        "## GLM-5-NVFP4\n\n"
        "### 2026-02-01: NaN at first decode\nCrashes with the defaults.\n\n"
        "### 2026-02-03: fixed\nWorks with bf16 KV cache.\n\n"
        "## Kimi-K2-Thinking\n\n### 2026-01-12 on H200\nserving correctly\n"
    )
    first, second, third = parse_findings(text)
    assert (first.model, first.outcome, first.hardware) == ("GLM-5-NVFP4", "fails", "8x RTX PRO 6000")
    assert (second.model, second.outcome) == ("GLM-5-NVFP4", "works")
    assert (third.model, third.hardware, third.outcome) == ("Kimi-K2-Thinking", "H200", "works")
