"""The LLM planner against a scripted OpenAI-compatible server on 127.0.0.1 (no other network).

Unit tests drive ``LLMPlanner.propose`` on a synthetic history; the end-to-end tests run ``hypoloop run``
against the lab with the planner's endpoint being the scripted server, which also checks every request
(model, response format, evidence in the context, no planted secret).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from clirun import run_cli as _hypoloop

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Change, Experiment, Timings
from agent.planning.catalog import load_catalog
from agent.planning.llm_client import RecordedChatClient
from agent.planning.llm_context import build_context, estimate_tokens
from agent.planning.llm_planner import (
    DECISION_SCHEMA,
    DecisionError,
    LLMPlanner,
    LLMPlannerConfig,
    parse_decision,
    planner_spec_from_options,
    usage_summary,
)
from agent.planning.planner import PlannerView, RelevantFinding, RulePlanner, make_planner, model_features
from agent.record.redact import Redactor, is_secret_name
from agent.record.transcript import Transcript, read_transcript
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import parse_help
from tools.knowledge import read_findings, relevance
from tools.signatures import load_signatures, scan_text

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
FINDINGS = REPO / "lab" / "worlds" / "glm5-nvfp4-sm120" / "FINDINGS.md"

HF_SECRET = "hf_secret123"
SK_SECRET = "sk-proj-PLANTED0123456789abcdefXYZ"
API_KEY = "sk-test-APIKEY0123456789abcdefghij"
SECRETS = (HF_SECRET, SK_SECRET, API_KEY, "PLANTED0123456789")


def _load_fake() -> ModuleType:
    name = "hypoloop_fake_openai"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).parent / "fakes" / "openai_server.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ScriptedOpenAI = _load_fake().ScriptedOpenAI

# A GLM-5 crash at the first decode as SGLang logs it (lab world glm5-nvfp4-sm120), with an OpenAI key
# planted in the printed server arguments.
CRASH_LOG = f"""\
[2026-02-20 10:00:00] Use nsa attention backend for DeepSeek with DSA.
[2026-02-20 10:00:00] Setting KV cache dtype to fp8_e4m3 for DeepSeek DSA on SM12 device.
[2026-02-20 10:00:00] Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, decode=flashmla_kv.
[2026-02-20 10:00:00] server_args=ServerArgs(api_key='{SK_SECRET}', model_path='zai-org/GLM-5-NVFP4', kv_cache_dtype='fp8_e4m3', attention_backend='nsa', tp_size=8)
[2026-02-20 10:00:01 TP0] Init torch distributed begin.
[2026-02-20 10:00:05 TP0] Init torch distributed ends. mem usage=1.21 GB
[2026-02-20 10:00:05 TP0] DeepGemm is enabled but the scale_fmt of checkpoint is not ue8m0. This might cause accuracy degradation on Blackwell.
[2026-02-20 10:00:05 TP0] Load weight begin. avail mem=94.38 GB
[2026-02-20 10:04:00 TP0] Load weight end. type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, avail mem=38.70 GB, mem usage=55.69 GB.
[2026-02-20 10:06:00] The server is fired up and ready to roll!
[2026-02-20 10:06:10 TP0] Prefill batch, #new-seq: 1, #new-token: 13, #cached-token: 0, token usage: 0.00
/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:112: _assert_async_cuda_kernel: block: [0,0,0], thread: [0,0,0] Assertion `probability tensor contains either `inf`, `nan` or element < 0` failed.
[2026-02-20 10:06:10 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 3186, in run_scheduler_process
RuntimeError: CUDA error: device-side assert triggered
[2026-02-20 10:06:10] Received sigquit from a child process. It usually means the child failed.
"""
NAN_LINE = 12  # line of probability_tensor_nan in CRASH_LOG


# ------------------------------------------------------------------------------------------ decisions


def flag(name: str, value: Any) -> dict[str, Any]:
    return {"kind": "flag", "name": name, "value": value}


def decide(
    change: dict[str, Any] | None = None,
    *,
    changes: list[dict[str, Any]] | None = None,
    tests: tuple[str, ...] = (),
    new: tuple[dict[str, Any], ...] = (),
    conclusion: str | None = None,
) -> dict[str, Any]:
    """A scripted answer step: one experiment (or ``changes``), or a conclusion."""
    exp: dict[str, Any] | None = None
    if conclusion is None:
        exp = {"change": change} if changes is None else {"changes": changes}
        exp.update(tests=list(tests), rationale="scripted")
    return {
        "json": {
            "reasoning": "scripted",
            "new_hypotheses": list(new),
            "notes": [],
            "action": "conclude" if conclusion else "experiment",
            "experiment": exp,
            "conclusion": conclusion,
        }
    }


KV_BF16 = decide(flag("--kv-cache-dtype", "bf16"), tests=("lowprec-kv-cache-attention-numerics",))
CUTLASS = decide(flag("--fp8-gemm-backend", "cutlass"), tests=("fp8-gemm-scale-format",))
TWO_CHANGES = decide(changes=[flag("--kv-cache-dtype", "bf16"), flag("--disable-cuda-graph", True)])
UNKNOWN_FLAG = decide(flag("--kv-cache-type", "bf16"))
ILLEGAL_CHOICE = decide(flag("--kv-cache-dtype", "fp9"))
SHELL_VALUE = decide(flag("--attention-backend", "triton;reboot"))
MALFORMED = {
    "content": 'Here is my plan: {"action": "experiment", "experiment": {"change": {"kind": "flag", "name": '
}
TIMEOUT = {"sleep": 2.5, **KV_BF16}


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture
def server() -> Iterator[Any]:
    with ScriptedOpenAI() as s:
        yield s


def _history(log: str = CRASH_LOG) -> tuple[PlannerView, Any]:
    """A view after the baseline run showed ``log``, and the flag catalog of the lab's SGLang 0.5.9."""
    flags = parse_help((DATA / "help_lab_grouped.txt").read_text(), source="fixture", version="0.5.9")
    case = Case.model_validate(
        {
            "name": "glm5",
            "model": {"path": "zai-org/GLM-5-NVFP4", "features": ["moe", "dsa", "nvfp4"]},
            "host": {"env": {"HF_TOKEN": HF_SECRET, "CUDA_HOME": "/usr/local/cuda"}},
            "baseline": {
                "flags": {"--tp-size": "8", "--trust-remote-code": True, "--quantization": "modelopt_fp4"}
            },
        }
    )
    fp = HostFingerprint(
        gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        gpu_count=8,
        compute_capability="12.0",
        memory_total_mib=97887,
        driver_version="580.95.05",
        sglang_version="0.5.9",
    )
    findings = [
        RelevantFinding(
            finding=f,
            relevance=relevance(
                f, model=case.model.path, features=model_features(case), gpu_name=fp.gpu_name
            ),
        )
        for f in read_findings(FINDINGS)
    ]
    exp = Experiment(
        id=Experiment.make_id(case.baseline, None, "baseline"),
        purpose="baseline",
        baseline=case.baseline,
        status="done",
    )
    matches, facts = scan_text(log, load_signatures())
    outcome = classify_outcome(
        RawEvidence(
            experiment_id=exp.id,
            status="observed",
            matches=matches,
            facts=facts,
            timings=Timings(host_seconds=500.0),
        )
    )
    view = PlannerView(
        case=case,
        fingerprint=fp,
        findings=findings,
        experiments=[exp],
        outcomes=[outcome],
        launches=1,
        host_seconds=500.0,
    )
    return view, flags


def _planner(server: Any, tmp_path: Path, **cfg: Any) -> tuple[LLMPlanner, Transcript]:
    _, flags = _history()
    tr = Transcript(tmp_path / "t.jsonl", "test-run")
    config = LLMPlannerConfig(model="scripted", base_url=server.base_url, **cfg)
    return LLMPlanner(load_catalog(), flags, config, rules=RulePlanner, transcript=tr), tr


def _events(path: Path, prefix: str = "llm.") -> list[dict[str, Any]]:
    return [e.model_dump() for e in read_transcript(path) if e.type.startswith(prefix)]


def _sent_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


# ------------------------------------------------------------------------------------------ redaction


def test_redactor_removes_planted_secrets_and_keeps_evidence() -> None:
    r = Redactor.for_env(
        {"HF_TOKEN": HF_SECRET, "TOKENIZERS_PARALLELISM": "false"}, include_process_env=False
    )
    text = (
        f"HF_TOKEN={HF_SECRET} server_args=ServerArgs(api_key='{SK_SECRET}', max_total_tokens=None, "
        "max_prefill_tokens=16384, kv_cache_dtype='fp8_e4m3') Authorization: Bearer abcdefgh12345678 "
        "--api-key s3cr3t-value --hf-token=hf_abcdefghijklmnopqrstuvwx password: hunter2hunter2 "
        "https://bob:pa55word@example.org/x #cached-token: 0 TOKENIZERS_PARALLELISM=false"
    )
    out = r(text)
    for secret in (
        HF_SECRET,
        SK_SECRET,
        "abcdefgh12345678",
        "s3cr3t-value",
        "hf_abcdef",
        "hunter2",
        "pa55word",
    ):
        assert secret not in out
    for kept in (
        "max_prefill_tokens=16384",
        "kv_cache_dtype='fp8_e4m3'",
        "#cached-token: 0",
        "TOKENIZERS_PARALLELISM=false",
    ):
        assert kept in out
    assert is_secret_name("AWS_SECRET_ACCESS_KEY") and is_secret_name("--hf-token")
    assert not is_secret_name("max_total_tokens") and not is_secret_name("tokenizer_path")


def test_redact_hosts_masks_names_and_ips_but_not_versions_or_times() -> None:
    r = Redactor(hosts=["gpu-box-7"], mask_hosts=True)
    out = r(
        "ssh to gpu-box-7 (10.1.2.3, fe80::1ff:fe23:4567:890a) node2.cluster.internal; "
        "SGLang 0.5.9, driver 580.95.05 at 04:48:03 on 127.0.0.1; gpu-box-70 stays"
    )
    assert (
        "gpu-box-7 " not in out
        and "10.1.2.3" not in out
        and "fe80::" not in out
        and "cluster.internal" not in out
    )
    assert "<host-1>" in out and "<ip-1>" in out
    for kept in ("0.5.9", "580.95.05", "04:48:03", "127.0.0.1", "gpu-box-70"):
        assert kept in out


# ------------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(KV_BF16["json"]),
        "```json\n" + json.dumps(KV_BF16["json"]) + "\n```",
        "<think>the {fp8} cache is suspect</think>\nPlan: " + json.dumps(KV_BF16["json"]) + " done.",
        json.dumps({"experiment": {"change": flag("--kv-cache-dtype", "bf16")}}),  # action inferred
    ],
)
def test_decision_is_read_from_json_fenced_or_prose_answers(text: str) -> None:
    d = parse_decision(text)
    assert d.action == "experiment" and d.experiment is not None
    assert [(c.name, c.value) for c in d.experiment.changes] == [("--kv-cache-dtype", "bf16")]


def test_malformed_answers_raise_decision_error() -> None:
    with pytest.raises(DecisionError, match="no JSON object"):
        parse_decision(MALFORMED["content"])
    with pytest.raises(DecisionError, match="schema"):
        parse_decision('{"action": "dance"}')


# ------------------------------------------------------------------------------------------ context


def test_context_carries_evidence_findings_and_flags_without_secrets() -> None:
    view, flags = _history()
    rules = RulePlanner(load_catalog(), flags)
    state = rules.history(view)
    raw = build_context(
        view,
        state,
        flags=flags,
        rule=rules.propose(view, state),
        notes={},
        budget_tokens=12000,
        cost_s=500,
        redact=lambda s: s,
    )
    assert HF_SECRET in raw.user and SK_SECRET in raw.user  # the test would prove nothing otherwise
    redactor = Redactor.for_env(view.case.host.env)
    ctx = build_context(
        view,
        state,
        flags=flags,
        rule=rules.propose(view, state),
        notes={},
        budget_tokens=12000,
        cost_s=500,
        redact=redactor,
    )
    for secret in SECRETS:
        assert secret not in ctx.user and secret not in ctx.system
    assert f"probability_tensor_nan [fatal, decode] L{NAN_LINE}:" in ctx.user
    assert "lowprec-kv-cache-attention-numerics" in ctx.user
    assert "Kimi-K2-Thinking-NVFP4" in ctx.user  # the known-good finding
    assert "--kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3,bf16,bfloat16,fp4_e2m1}" in ctx.user
    # Flags named by the hypotheses come before the rest of the catalog.
    assert ctx.user.index("--kv-cache-dtype {") < ctx.user.index("(other flags)")
    assert ctx.est_tokens <= 12000


def test_context_fits_a_small_budget_by_cutting_sections() -> None:
    view, flags = _history()
    rules = RulePlanner(load_catalog(), flags)
    state = rules.history(view)
    ctx = build_context(
        view,
        state,
        flags=flags,
        rule=rules.propose(view, state),
        notes={},
        budget_tokens=2500,
        cost_s=500,
        redact=lambda s: s,
    )
    assert ctx.est_tokens <= 2500
    assert any(s["cut"] for s in ctx.sections.values())
    assert "## Hypothesis ledger" in ctx.user and "left out to fit the context budget" in ctx.user


# ------------------------------------------------------------------------------------------ propose


def test_valid_proposal_is_accepted_with_model_hypothesis_and_request_is_well_formed(
    server: Any, tmp_path: Path
) -> None:
    new = {
        "id": "fp8-kv-sm120",
        "statement": "DSA decode misreads the fp8 KV cache on SM120",
        "component": "attention.dsa_decode",
        "prior": 0.3,
        "test": flag("--kv-cache-dtype", "bf16"),
        "decisive": True,
    }
    server.push(decide(flag("--kv-cache-dtype", "bf16"), tests=("fp8-kv-sm120",), new=(new,)))
    planner, tr = _planner(server, tmp_path)
    view, _ = _history()
    proposal = planner.propose(view, planner.history(view))
    exp = proposal.experiment
    assert exp is not None and exp.proposed_by == "llm"
    assert exp.change == Change(kind="flag", name="--kv-cache-dtype", before=None, after="bf16")
    assert {p.hypothesis_id: p.expect for p in exp.predictions}["model:fp8-kv-sm120"] == "fixed"
    body = server.requests[0]
    assert body["model"] == "scripted"
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == DECISION_SCHEMA
    assert "probability_tensor_nan" in _sent_text(body)
    # The model's hypothesis is in the ledger from now on, as a model hypothesis.
    ledger = {h.id: h for h in planner.history(view).hypotheses}
    assert ledger["model:fp8-kv-sm120"].source == "model"
    assert usage_summary(planner.spec())["model_hypotheses"] == ["model:fp8-kv-sm120"]  # type: ignore[index]
    types = [e["type"] for e in _events(tr.path)]
    assert types == ["llm.request", "llm.response", "llm.decision"]


def test_invalid_proposals_are_refused_with_reasons_then_the_rule_planner_decides(
    server: Any, tmp_path: Path
) -> None:
    server.push(TWO_CHANGES, SHELL_VALUE, MALFORMED)
    planner, tr = _planner(server, tmp_path)
    view, _ = _history()
    proposal = planner.propose(view, planner.history(view))
    assert proposal.experiment is not None and proposal.experiment.proposed_by == "rules"
    assert proposal.experiment.change is not None and proposal.experiment.change.name == "--kv-cache-dtype"
    evs = _events(tr.path)
    invalid = [e["data"]["reason"] for e in evs if e["type"] == "llm.invalid"]
    assert "exactly one variable" in invalid[0] and "changes 2" in invalid[0]
    assert "contains ';'" in invalid[1]
    assert "no JSON object" in invalid[2]
    assert [e for e in evs if e["type"] == "llm.fallback"][0]["data"]["attempts"] == 3
    # Each retry carries the refusal back to the model.
    assert "Refused, not executed" in server.requests[1]["messages"][-1]["content"]
    assert "exactly one variable" in server.requests[1]["messages"][-1]["content"]
    assert len(server.requests) == 3


def test_timeout_is_an_attempt_and_the_retry_succeeds(server: Any, tmp_path: Path) -> None:
    server.push(TIMEOUT, KV_BF16)
    planner, tr = _planner(server, tmp_path, timeout_s=0.5)
    view, _ = _history()
    proposal = planner.propose(view, planner.history(view))
    assert proposal.experiment is not None and proposal.experiment.proposed_by == "llm"
    err = [e["data"] for e in _events(tr.path) if e["type"] == "llm.error"]
    assert err and err[0]["kind"] == "timeout"


def test_endpoint_without_json_schema_gets_json_object(server: Any, tmp_path: Path) -> None:
    server.push(
        {"status": 400, "error": "response_format json_schema is not supported", "param": "response_format"},
        KV_BF16,
    )
    planner, tr = _planner(server, tmp_path, retries=0)
    view, _ = _history()
    assert planner.propose(view, planner.history(view)).experiment is not None
    assert server.requests[1]["response_format"] == {"type": "json_object"}
    assert planner.spec()["memory"]["response_format"] == "json_object"


def test_token_budget_stops_requests_and_falls_back(server: Any, tmp_path: Path) -> None:
    planner, tr = _planner(server, tmp_path, token_budget=3000)
    view, _ = _history()
    proposal = planner.propose(view, planner.history(view))
    assert proposal.experiment is not None and proposal.experiment.proposed_by == "rules"
    assert server.requests == []
    fallback = [e["data"] for e in _events(tr.path) if e["type"] == "llm.fallback"][0]
    assert "token budget" in fallback["reason"]


def test_a_rejected_change_is_refused(server: Any, tmp_path: Path) -> None:
    from agent.domain.models import Rejection

    server.push(KV_BF16, CUTLASS)
    planner, tr = _planner(server, tmp_path)
    view, _ = _history()
    change = Change(kind="flag", name="--kv-cache-dtype", after="bf16")
    view.rejections = [
        Rejection(
            experiment_id=Experiment.make_id(view.case.baseline, change, "test"),
            change_key=change.key(),
            change=change,
            reason="no memory for a bf16 cache",
        )
    ]
    proposal = planner.propose(view, planner.history(view))
    assert proposal.experiment is not None and proposal.experiment.change is not None
    assert proposal.experiment.change.name == "--fp8-gemm-backend"
    reason = [e["data"]["reason"] for e in _events(tr.path) if e["type"] == "llm.invalid"][0]
    assert "rejected" in reason and "no memory for a bf16 cache" in reason


def test_recorded_answers_redecide_the_same_way_offline(server: Any, tmp_path: Path) -> None:
    server.push(TWO_CHANGES, KV_BF16)
    planner, tr = _planner(server, tmp_path)
    view, flags = _history()
    first = planner.propose(view, planner.history(view))
    tr.close()
    server.stop()  # no network from here on
    events = list(read_transcript(tr.path))
    replay = LLMPlanner.from_recorded(events, catalog=load_catalog(), flags=flags, rules=RulePlanner)
    again = replay.propose(view, replay.history(view))
    assert again.experiment is not None and first.experiment is not None
    assert again.experiment.id == first.experiment.id
    assert isinstance(replay._client, RecordedChatClient) and replay._client.remaining == 0
    # Recorded answers used up: the next open step falls back to the rules, no request is made.
    view2, _ = _history()
    assert replay.propose(view2, replay.history(view2)).experiment is not None
    assert replay.memory.usage.fallbacks == 1


def test_procedural_steps_make_no_request(server: Any, tmp_path: Path) -> None:
    planner, tr = _planner(server, tmp_path)
    view, _ = _history()
    view.experiments, view.outcomes, view.launches = [], [], 0
    proposal = planner.propose(view, planner.history(view))
    assert proposal.experiment is not None and proposal.experiment.purpose == "baseline"
    assert server.requests == []


def test_planner_options_and_spec() -> None:
    assert isinstance(make_planner(None, [], None), RulePlanner)
    with pytest.raises(ValueError, match="--model"):
        planner_spec_from_options("llm", model=None, base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="only used with --planner llm"):
        planner_spec_from_options("rules", model="x")
    with pytest.raises(ValueError, match="NO_SUCH_KEY_VAR"):
        planner_spec_from_options(
            "llm", model="x", base_url="http://127.0.0.1:1/v1", api_key_env="NO_SUCH_KEY_VAR"
        )
    spec = planner_spec_from_options("llm", model="m", base_url="http://127.0.0.1:1/v1", context_tokens=4000)
    assert spec is not None and json.loads(json.dumps(spec)) == spec  # JSON-plain for the checkpoint
    planner = make_planner(spec, [], None)
    assert isinstance(planner, LLMPlanner) and planner.config.context_tokens == 4000
    assert estimate_tokens("x" * 400) == 100


# ------------------------------------------------------------------------------------------ end to end






def _planted_case(tmp_path: Path) -> Path:
    """The lab's GLM-5 case with its crash log already observed, HF_TOKEN in the host env and an OpenAI
    key in the log."""
    (tmp_path / "crash.log").write_text(CRASH_LOG)
    path = tmp_path / "case.toml"
    path.write_text(
        f"""\
name = "glm5-planted-secrets"
knowledge = ["{FINDINGS}"]
observed_log = "crash.log"

[host]
target = "local"
env = {{ HYPOLOOP_LAB_WORLD = "glm5-nvfp4-sm120", HF_TOKEN = "{HF_SECRET}" }}

[launcher]
argv = ["{{python}}", "-m", "lab.launch_server"]
version_argv = ["{{python}}", "-m", "lab.launch_server", "--version"]
gpu_query_argv = ["{{python}}", "-m", "lab.nvidia_smi"]

[model]
path = "zai-org/GLM-5-NVFP4"
features = ["moe", "dsa", "nvfp4"]

[baseline]
flags = {{ "--tp-size" = 8, "--trust-remote-code" = true, "--quantization" = "modelopt_fp4" }}
"""
    )
    return path


def _check_requests(server: Any) -> None:
    """What every request must look like: the model, structured outputs, the evidence, no secret."""
    assert server.requests
    for body in server.requests:
        assert body["model"] == "scripted"
        assert body["response_format"]["type"] == "json_schema"
        sent = json.dumps({k: v for k, v in body.items() if k != "_headers"})
        for secret in SECRETS:
            assert secret not in sent
        text = _sent_text(body)
        assert f"probability_tensor_nan [fatal, decode] L{NAN_LINE}:" in text
        assert body["_headers"]["authorization"] == f"Bearer {API_KEY}"


def _launched_changes(events: list[dict[str, Any]]) -> list[list[str]]:
    return [
        e["data"]["argv"]
        for e in events
        if e["type"] == "tool.call" and e["data"].get("tool") == "launch_server"
    ]


def test_run_refuses_every_misbehaviour_and_still_isolates_the_fix(server: Any, tmp_path: Path) -> None:
    # Step 1: two changes, malformed JSON, then a legal test (it does not fix: NaN persists).
    # Step 2: a repeat of that refuted experiment, an illegal choice, an unknown flag -> rule fallback.
    server.push(TWO_CHANGES, MALFORMED, CUTLASS, CUTLASS, ILLEGAL_CHOICE, UNKNOWN_FLAG)
    case = _planted_case(tmp_path)
    r = _hypoloop(
        tmp_path,
        "run",
        str(case),
        "--auto",
        "--json",
        "--transcript-dir",
        "tr",
        "--planner",
        "llm",
        "--model",
        "scripted",
        "--base-url",
        server.base_url,
        OPENAI_API_KEY=API_KEY,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "isolated"
    assert (result["root_cause"]["fix"]["name"], result["root_cause"]["fix"]["after"]) == (
        "--kv-cache-dtype",
        "bf16",
    )
    assert result["llm_usage"]["requests"] == 6 and result["llm_usage"]["fallbacks"] == 1
    assert result["llm_usage"]["refused"] == 5 and result["llm_usage"]["accepted"] == 1
    assert "LLM planner (scripted): 6 requests" in r.stderr
    _check_requests(server)
    events = [e.model_dump() for e in read_transcript(tmp_path / result["transcript"])]
    reasons = [e["data"]["reason"] for e in events if e["type"] == "llm.invalid"]
    assert len(reasons) == 5
    assert "exactly one variable" in reasons[0]
    assert "no JSON object" in reasons[1]
    assert "already run" in reasons[2]
    assert "fp9" in reasons[3] and "is not one of" in reasons[3]
    assert "--kv-cache-type" in reasons[4] and "unknown flag" in reasons[4]
    assert sum(e["type"] == "llm.fallback" for e in events) == 1
    # Only the accepted test, the fallback's fix and its confirmation were launched.
    launched = _launched_changes(events)
    assert len(launched) == 3
    assert "cutlass" in launched[0] and "bf16" in launched[1] and "bf16" in launched[2]
    assert not any("fp9" in a or "--kv-cache-type" in a or "--disable-cuda-graph" in a for a in launched)
    proposed = {
        e["data"]["id"]: e["data"]["proposed_by"] for e in events if e["type"] == "experiment.proposed"
    }
    assert list(proposed.values()) == ["llm", "rules", "rules"]
    refuted = [e["data"]["id"] for e in events if e["type"] == "hypothesis.refuted"]
    assert "fp8-gemm-scale-format" in refuted
    # The secrets are not in what the transcript says was sent either.
    for e in events:
        if e["type"] == "llm.request":
            assert not any(s in json.dumps(e["data"]) for s in SECRETS)
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert conclusion["llm_usage"]["total_tokens"] > 0


def test_resumed_run_keeps_the_llm_planner_after_shell_text_and_a_timeout(
    server: Any, tmp_path: Path
) -> None:
    # Step 1: a value with a shell metacharacter, a timeout, then a legal test; the run waits for approval.
    server.push(SHELL_VALUE, TIMEOUT, CUTLASS)
    case = _planted_case(tmp_path)
    r = _hypoloop(
        tmp_path,
        "run",
        str(case),
        "--json",
        "--transcript-dir",
        "tr",
        "--planner",
        "llm",
        "--model",
        "scripted",
        "--base-url",
        server.base_url,
        "--llm-timeout",
        "1",
        OPENAI_API_KEY=API_KEY,
    )
    assert r.returncode == 3, r.stderr[-3000:]
    waiting = json.loads(r.stdout.strip().splitlines()[-1])
    assert waiting["pending"]["change"]["name"] == "--fp8-gemm-backend"
    assert len(server.requests) == 3
    # Another process answers; the next step is the model's again (planner kind and memory checkpointed).
    server.push(KV_BF16)
    r2 = _hypoloop(
        tmp_path,
        "resume",
        waiting["run_id"],
        "--decision",
        "approve",
        "--auto",
        "--json",
        OPENAI_API_KEY=API_KEY,
    )
    assert r2.returncode == 0, r2.stderr[-3000:]
    result = json.loads(r2.stdout.strip().splitlines()[-1])
    assert result["status"] == "isolated"
    assert result["root_cause"]["fix"]["name"] == "--kv-cache-dtype"
    assert len(server.requests) == 4
    assert result["llm_usage"]["requests"] == 4 and result["llm_usage"]["accepted"] == 2
    _check_requests(server)
    events = [
        e.model_dump()
        for e in read_transcript(
            Path(waiting["transcript"])
            if Path(waiting["transcript"]).is_absolute()
            else tmp_path / waiting["transcript"]
        )
    ]
    reasons = [e["data"]["reason"] for e in events if e["type"] == "llm.invalid"]
    assert len(reasons) == 1 and "contains ';'" in reasons[0]
    errors = [e["data"] for e in events if e["type"] == "llm.error"]
    assert [e["kind"] for e in errors] == ["timeout"]
    proposed = [e["data"]["proposed_by"] for e in events if e["type"] == "experiment.proposed"]
    assert proposed == ["llm", "llm", "rules"]  # the confirmation run is procedural


def test_scripted_model_reaches_the_rule_planners_conclusion_on_the_lab(server: Any, tmp_path: Path) -> None:
    server.push(KV_BF16)
    r = _hypoloop(
        tmp_path,
        "run",
        "lab:glm5-nvfp4-sm120",
        "--auto",
        "--json",
        "--transcript-dir",
        "tr",
        "--planner",
        "llm",
        "--model",
        "scripted",
        "--base-url",
        server.base_url,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "isolated"
    fix = result["root_cause"]["fix"]
    assert (fix["kind"], fix["name"], fix["after"]) == ("flag", "--kv-cache-dtype", "bf16")
    assert result["root_cause"]["component"] == "attention.dsa_decode"
    assert result["launches"] == 3
    assert len(server.requests) == 1 and server.requests[0]["model"] == "scripted"
    sent = _sent_text(server.requests[0])
    assert "probability_tensor_nan" in sent
    # The model sees the traceback as the log printed it, with line numbers ...
    assert "## Tracebacks and log tail" in sent
    assert re.search(r'L\d+:\s+File ".*/sglang/srt/', sent)
    # ... but never the lab world's or the case's name (a world's name may encode its answer), nor the
    # lab's variables.
    whole = json.dumps({k: v for k, v in server.requests[0].items() if k != "_headers"})
    assert "glm5-nvfp4-sm120" not in whole
    assert "HYPOLOOP_LAB" not in whole


def test_secret_assignment_inside_an_error_message_is_redacted() -> None:
    from agent.record.redact import Redactor

    redact = Redactor.for_env({}, include_process_env=False)
    assert "hf_logplanted" not in redact("RuntimeError: HF_TOKEN=hf_logplantedtoken2 while loading")
    assert "s3cr3tvalue9" not in redact("ValueError: password=s3cr3tvalue9")
    assert redact("kv_cache_dtype=fp8_e4m3") == "kv_cache_dtype=fp8_e4m3"


def test_the_answer_schema_and_the_prompt_come_from_the_decision_model() -> None:
    """One source for what the model is asked to write: the response format's JSON schema is generated
    from LLMDecision (strict: every field required, nothing else allowed) and the system prompt shows
    every field of it; an answer written to the schema reads back into the same decision."""
    from agent.planning.llm_answer import LLMDecision, strict_schema
    from agent.planning.llm_context import SYSTEM_PROMPT

    assert strict_schema(LLMDecision) == DECISION_SCHEMA
    assert set(DECISION_SCHEMA["required"]) == set(LLMDecision.model_fields)

    def objects(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if "properties" in node:
                yield node
            for v in node.values():
                yield from objects(v)
        elif isinstance(node, list):
            for v in node:
                yield from objects(v)

    for obj in objects(DECISION_SCHEMA):
        assert obj["additionalProperties"] is False and obj["required"] == list(obj["properties"])
        for name in obj["properties"]:
            assert f'"{name}":' in SYSTEM_PROMPT, name
    change = {"kind": "flag", "name": "--kv-cache-dtype", "value": "bfloat16"}
    answer = {
        "reasoning": "NaN at the first decode with an FP8 KV cache",
        "new_hypotheses": [
            {"id": "kv", "statement": "FP8 KV", "component": "kv_cache.dtype", "prior": 0.3, "test": change,
             "decisive": True}
        ],
        "notes": [{"id": "x", "assessment": "less likely"}],
        "action": "experiment",
        "experiment": {"change": change, "tests": ["kv"], "rationale": "cheap and decisive"},
        "conclusion": None,
    }
    decision = parse_decision(json.dumps(answer))
    assert decision.experiment is not None
    assert [c.model_dump() for c in decision.experiment.changes] == [change]
    assert decision.new_hypotheses[0].test is not None and decision.new_hypotheses[0].test.name == "--kv-cache-dtype"


def test_a_proposal_that_leaves_the_baseline_as_it_is_is_refused_and_never_launched(
    server: Any, tmp_path: Path
) -> None:
    """The model proposes the baseline's own value in another spelling (0.850 for 0.85): the launch would
    be the baseline's and test nothing. The guard every proposal passes refuses it; the next answer runs."""
    case = _planted_case(tmp_path)
    text = case.read_text()
    case.write_text(text.replace('"--quantization" = "modelopt_fp4" }',
                                 '"--quantization" = "modelopt_fp4", "--mem-fraction-static" = "0.85" }'))
    server.push(decide(flag("--mem-fraction-static", "0.850"), tests=("fp8-gemm-scale-format",)), KV_BF16)
    r = _hypoloop(
        tmp_path, "run", str(case), "--auto", "--json", "--transcript-dir", "tr", "--planner", "llm",
        "--model", "scripted", "--base-url", server.base_url, OPENAI_API_KEY=API_KEY,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    events = [e.model_dump() for e in read_transcript(tmp_path / result["transcript"])]
    reasons = [e["data"]["reason"] for e in events if e["type"] == "llm.invalid"]
    assert reasons and "changes nothing: the baseline already has it" in reasons[0], reasons
    assert not any("0.850" in " ".join(argv) for argv in _launched_changes(events))
    assert result["status"] == "isolated" and result["root_cause"]["fix"]["after"] == "bf16"


def test_the_approval_screen_always_lists_the_leading_hypothesis(server: Any, tmp_path: Path) -> None:
    """An experiment that tests three or more hypotheses other than the leading one filled the screen's
    three rows with them, and the leader (what a person weighs the experiment against) was not shown."""
    # turning CUDA graphs off tests every graph-replay hypothesis, and not the leading one (the KV cache)
    server.push(decide(flag("--disable-cuda-graph", True), tests=("cuda-graph-replay-numerics",)))
    case = _planted_case(tmp_path)
    r = _hypoloop(
        tmp_path, "run", str(case), "--transcript-dir", "tr", "--planner", "llm", "--model", "scripted",
        "--base-url", server.base_url, OPENAI_API_KEY=API_KEY,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr[-3000:]  # no terminal: the test of the model's change waits
    (waiting,) = json.loads(_hypoloop(tmp_path, "runs", "--json").stdout)
    pending = waiting["pending"]
    lead = max(pending["hypotheses"], key=lambda h: h["posterior"])
    tested = [h for h in pending["hypotheses"] if h["predicts"] != "persists"]
    assert lead["predicts"] == "persists" and len(tested) >= 3  # the case the screen got wrong
    panel = r.stdout[r.stdout.index("approve experiment"):]
    table = panel[: panel.index("more: hypoloop show")]
    assert lead["id"] in table, table
    # three rows: the three likeliest (those it tests are named on the purpose line whatever their p)
    likeliest = sorted(pending["hypotheses"], key=lambda h: -h["posterior"])[:3]
    assert all(h["id"] in table for h in likeliest), table
