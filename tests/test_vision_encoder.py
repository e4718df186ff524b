"""A multimodal model's vision encoder is a subsystem in play of its own (issue 20, point 1).

An SGLang engineer reads the model's config.json: a ``vision_config`` means a vision tower runs beside the
language model, and its attention is ``VisionAttention``, whose implementation ``--mm-attention-backend``
chooses (SGLang 0.5.23 srt/layers/attention/vision.py ``_determine_attention_backend``: "server args
override > constructor arg > platform default"), never ``--attention-backend``. A failure raised in that
code implicates the encoder's backend, and the alternatives proposed are those built for the host's
platform (VisionAttention's ``QKV_BACKEND_IMPL`` classes refuse other platforms at construction).

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), its VisionAttention error
texts as its source raises them, the model's config.json read from disk through the real ``LocalHost``,
and the rule planner with the repository's knowledge. No model or world is named: the configs are made up.
"""

from __future__ import annotations

from pathlib import Path

from planner_steps import baseline_failed_with, fingerprint_with_model

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.catalog import load_catalog
from agent.planning.in_play import InPlay
from agent.planning.planner import PlannerView, Proposal, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/venv/lib/python3.12/site-packages"

#: A vision-language checkpoint: a language model and a vision tower (transformers' layout of such configs).
VISION_LANGUAGE = {
    "architectures": ["DemoVisionLanguageForConditionalGeneration"], "model_type": "demo_vl",
    "text_config": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                    "num_hidden_layers": 2, "max_position_embeddings": 4096},
    "vision_config": {"depth": 2, "hidden_size": 128, "num_heads": 4, "patch_size": 14},
    "torch_dtype": "bfloat16",
}
TEXT_ONLY = {"architectures": ["DemoForCausalLM"], "model_type": "demo", **VISION_LANGUAGE["text_config"]}  # type: ignore[dict-item]

CPU_HOST = HostFingerprint(gpu_vendor="none", gpu_count=0, sglang_version="0.5.23", cpu_count=2)
BLACKWELL = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA B200", gpu_count=1, compute_capability="10.0",
                            memory_total_mib=183359, sglang_version="0.5.23")

_LOADING = f"""[2026-12-01 10:00:03] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 1270, in load_model
    self.model = get_model(
  File "{SITE}/sglang/srt/model_loader/loader.py", line 840, in load_model
    model = _initialize_model(
"""

#: SGLang 0.5.23 vision.py: the tower asked for FlashAttention-3 on a host without CUDA.
FA3_ON_CPU = _LOADING + f"""  File "{SITE}/sglang/srt/layers/attention/vision.py", line 1170, in __init__
    self.qkv_backend = QKV_BACKEND_IMPL[qkv_backend](
  File "{SITE}/sglang/srt/layers/attention/vision.py", line 531, in __init__
    raise Exception("VisionFlash3Attention is only available for cuda or musa")
Exception: VisionFlash3Attention is only available for cuda or musa
"""

#: SGLang 0.5.23 vision.py _determine_attention_backend: FA3 asked for on a Blackwell GPU.
FA3_ON_BLACKWELL = _LOADING + f"""  File "{SITE}/sglang/srt/layers/attention/vision.py", line 1160, in __init__
    qkv_backend = self._determine_attention_backend(_passed_backend)
  File "{SITE}/sglang/srt/layers/attention/vision.py", line 1331, in _determine_attention_backend
    raise ValueError("The 'fa3' backend is not supported on Blackwell GPUs")
ValueError: The 'fa3' backend is not supported on Blackwell GPUs
"""

#: --mm-attention-backend's choices (0.5.23 srt/arg_groups/fields/mm.py) and the platforms each is built
#: for (vision.py: each QKV_BACKEND_IMPL class raises on another platform; Triton has no CPU driver).
RUNS_ON = {"sdpa": {"cpu", "cuda"}, "amx_attn": {"cpu"}, "fa3": {"cuda"}, "fa4": {"cuda"},
           "flashinfer_cudnn": {"cuda"}, "triton_attn": {"cuda"}, "aiter_attn": set(), "ascend_attn": set(),
           "xpu_attn": set()}


def _fingerprint(tmp_path: Path, config: dict[str, object], fp: HostFingerprint,
                 name: str = "model") -> tuple[HostFingerprint, str]:
    """The fingerprint intake builds: the model's config.json read from disk through LocalHost."""
    return fingerprint_with_model(tmp_path, config, fp, name)


def _next(fp: HostFingerprint, flags: dict[str, object], log: str) -> Proposal:
    """The planner's proposal after a baseline launch that failed with ``log``."""
    return baseline_failed_with(fp, flags, log, FLAGS)[2]


def _tried(prop: Proposal, name: str) -> list[str]:
    """The values of ``name`` the step weighed as candidates (not skipped), and the one proposed."""
    out = [c["change"] for c in prop.considered if "change" in c and c["change"].startswith(name)]
    exp = prop.experiment
    if exp is not None and exp.change is not None and exp.change.name == name:
        out.append(str(exp.change.after))
    return out


def test_a_vision_tower_failure_on_a_cpu_host_proposes_a_cpu_vision_backend(tmp_path: Path) -> None:
    """The tower asked for a CUDA-only backend on a CPU host: the first change gives the encoder an
    implementation built for CPUs, and no candidate is one built for another platform."""
    fp, model = _fingerprint(tmp_path, VISION_LANGUAGE, CPU_HOST)
    prop = _next(fp, {"--model-path": model, "--device": "cpu"}, FA3_ON_CPU)
    exp = prop.experiment
    assert exp is not None and exp.change is not None, prop.conclude_reason
    assert exp.change.name == "--mm-attention-backend", exp.change
    assert "cpu" in RUNS_ON[str(exp.change.after)], exp.change
    weighed = " ".join(_tried(prop, "--mm-attention-backend"))
    assert not [v for v, where in RUNS_ON.items() if "cpu" not in where and f"→ {v}" in weighed], weighed


def test_the_users_text_attention_backend_is_not_what_the_vision_tower_refused(tmp_path: Path) -> None:
    """The user pinned the language model's --attention-backend fa3 and the vision tower's code refused
    fa3 on Blackwell. The value the error names is a choice of the encoder's own backend flag: the
    first change is the encoder's backend (one built for CUDA, not the refused fa3), not the user's pin."""
    fp, model = _fingerprint(tmp_path, VISION_LANGUAGE, BLACKWELL)
    prop = _next(fp, {"--model-path": model, "--attention-backend": "fa3"}, FA3_ON_BLACKWELL)
    exp = prop.experiment
    assert exp is not None and exp.change is not None, prop.conclude_reason
    assert exp.change.name == "--mm-attention-backend", exp.change
    assert exp.change.after != "fa3" and "cuda" in RUNS_ON[str(exp.change.after)], exp.change


def test_the_vision_encoder_is_in_play_only_when_the_config_has_a_vision_tower(tmp_path: Path) -> None:
    """Read from the host's config.json: a text-only model runs no encoder, so its backend cannot matter;
    with a vision tower it is in play, with the values built for the host's platform."""
    change = Change(kind="flag", name="--mm-attention-backend", before=None, after="sdpa")
    text, _ = _fingerprint(tmp_path / "text", TEXT_ONLY, CPU_HOST)
    vision, _ = _fingerprint(tmp_path / "vision", VISION_LANGUAGE, CPU_HOST)
    cpu = Baseline(flags={"--device": "cpu"})
    assert "not in play" in (InPlay(text, cpu, {}, FLAGS).why_not(change) or "")
    play = InPlay(vision, cpu, {}, FLAGS)
    for value, where in RUNS_ON.items():
        why = play.why_not(change.model_copy(update={"after": value}))
        assert (why is None) == ("cpu" in where), (value, why)


#: SGLang 0.5.23 layers/attention/attention_registry.py create_flashattention_v3_backend, reached once the
#: weights are loaded and the KV pool is allocated: the language model's FA3 backend on SM100.
TEXT_FA3_ON_BLACKWELL = f"""[2026-12-01 10:00:05] Load weight end. elapsed=212.55 s, type=Demo, avail mem=97.06 GB, mem usage=80.00 GB.
[2026-12-01 10:00:06] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1840311, K size: 35.10 GB, V size: 35.10 GB
[2026-12-01 10:00:07] Memory pool end. avail mem=26.86 GB
[2026-12-01 10:00:07] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 1122, in init_attention_backends
    backends = build_attention_backends(model_runner=self)
  File "{SITE}/sglang/srt/layers/attention/attention_registry.py", line 243, in create_flashattention_v3_backend
    assert (major == 8 and not runner.use_mla_backend) or major == 9, (
AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`.
"""


def test_a_change_refuted_on_an_earlier_blocker_is_tested_again_when_the_next_blocker_implicates_it(
        tmp_path: Path) -> None:
    """Removing the user's --attention-backend fa3 was launched while the vision tower still failed first:
    that launch never got as far as the text attention. Once the encoder's backend moved the failure past
    the weights and the text attention's own code refuses fa3, the revert is open again, not left refuted
    by a launch that could not have shown it."""
    fp, model = _fingerprint(tmp_path, VISION_LANGUAGE, BLACKWELL)
    case = Case.model_validate({"name": "c", "model": {"path": model},
                                "baseline": {"flags": {"--model-path": model, "--attention-backend": "fa3"}}})
    view = PlannerView(case=case, fingerprint=fp)
    planner = RulePlanner(load_catalog(), FLAGS)
    base = case.baseline
    sigs = for_engine(load_signatures(), "sglang")
    revert = Change(kind="flag", name="--attention-backend", before="fa3", after=None)
    encoder = Change(kind="flag", name="--mm-attention-backend", before=None, after="sdpa")
    for purpose, change, log in (("baseline", None, FA3_ON_BLACKWELL), ("test", revert, FA3_ON_BLACKWELL),
                                 ("test", encoder, TEXT_FA3_ON_BLACKWELL)):
        exp = Experiment(id=Experiment.make_id(base, change, purpose), purpose=purpose,  # type: ignore[arg-type]
                         baseline=base, change=change, status="done")
        raw = RawEvidence.from_log(exp.id, log, sigs, "x.log").model_copy(update={"status": "crashed"})
        view.experiments.append(exp)
        view.outcomes.append(classify_outcome(raw))
        view.launches += 1
        if purpose == "baseline":
            assert planner.history(view).hypotheses, "the baseline's failure gives hypotheses"
    state = planner.history(view)
    assert state.baseline.flags.get("--mm-attention-backend") == "sdpa", state.baseline  # adopted: past a blocker
    reverted = next(h for h in state.hypotheses if h.id == "revert:--attention-backend")
    assert reverted.status == "open", [e.detail for e in reverted.evidence]
    exp = planner.propose(view, state).experiment
    assert exp is not None and exp.change is not None and exp.change.name == "--attention-backend", exp
