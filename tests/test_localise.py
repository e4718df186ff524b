"""Localise asynchronous device faults first (issue 20, point 3): an illegal memory access whose report
says "the stacktrace below might be incorrect" is launched once more with CUDA_LAUNCH_BLOCKING=1 before any
guess; the frames of that launch, not the surfaced one, choose the subsystem the next change is in; and the
localiser is never the fix.

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), the repository's knowledge
(signatures, symptom classes, knowledge/localisers.toml, subsystems) and the rule planner; the logs are
PyTorch's and SGLang's texts as a scheduler prints them (frames of sglang/srt/managers/schedule_batch.py,
layers/attention/flashattention_backend.py, sgl_kernel/flash_attn.py; PyTorch's suffix from
c10/cuda/CUDAMiscFunctions.cpp, absent once CUDA_LAUNCH_BLOCKING is set).
"""

from __future__ import annotations

from pathlib import Path

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.knowledge_dir import use_knowledge
from agent.domain.models import Experiment
from agent.planning.catalog import load_catalog
from agent.planning.in_play import load_subsystems
from agent.planning.localise import load_localisers, localiser_of
from agent.planning.planner import PlannerView, RulePlanner
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.probes import ProbeResult
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
SITE = "/usr/local/lib/python3.12/dist-packages"
H200 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H200", gpu_count=1, compute_capability="9.0",
                       memory_total_mib=143771, sglang_version="0.5.23")
MI300X = HostFingerprint(gpu_vendor="amd", gpu_name="AMD Instinct MI300X", gpu_count=1, gpu_arch="gfx942",
                         memory_total_mib=196592, sglang_version="0.5.23")
ARGS = "[2026-12-02 10:00:00] server_args=ServerArgs(model_path='/m/q', attention_backend='fa3', tp_size=1)\n"
HEAD = f"""[2026-12-02 10:01:00] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/sglang/srt/managers/scheduler.py", line 1160, in event_loop_overlap
    batch_result = self.run_batch(batch)
"""
ERROR = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
SUFFIX = ("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
          "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n")
#: Where the error was noticed: the scheduler's next synchronising call.
SURFACED = ARGS + HEAD + f"""  File "{SITE}/sglang/srt/managers/scheduler.py", line 2366, in run_batch
    model_worker_batch = batch.get_model_worker_batch()
  File "{SITE}/sglang/srt/managers/schedule_batch.py", line 1602, in get_model_worker_batch
    seq_lens_cpu = self.seq_lens.cpu()
""" + ERROR + SUFFIX
#: The same failure with every kernel launch synchronous: raised in the call that launched the kernel.
TRUE = ARGS + HEAD + f"""  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 2061, in forward_decode
    return self.model.forward(
  File "{SITE}/sglang/srt/layers/attention/flashattention_backend.py", line 1012, in forward_decode
    o = flash_attn_with_kvcache(
  File "{SITE}/sgl_kernel/flash_attn.py", line 260, in flash_attn_with_kvcache
    out, softmax_lse, *rest = torch.ops.sgl_kernel.fwd.default(
""" + ERROR
SERVED = "[2026-12-02 10:00:30] The server is fired up and ready to roll!\n"


def _view(fp: HostFingerprint, env: dict[str, str] | None = None) -> tuple[RulePlanner, PlannerView]:
    case = Case.model_validate({"name": "c", "model": {"path": "/m/q"},
                                "baseline": {"flags": {"--enable-hierarchical-cache": True}, "env": env or {}}})
    return RulePlanner(load_catalog(), FLAGS), PlannerView(case=case, fingerprint=fp)


def _launch(planner: RulePlanner, view: PlannerView, log: str, status: str = "crashed") -> Experiment:
    """Propose, run (its outcome is ``log``) and record the planner's next experiment; returns it."""
    exp = planner.propose(view, planner.history(view)).experiment
    assert exp is not None
    exp = exp.model_copy(update={"status": "done"})
    sigs = for_engine(load_signatures(), "sglang")
    probes = [ProbeResult(probe_id="chat", ok=True, status="ok", http_status=200, text="Paris", latency_s=1.5)]
    update: dict[str, object] = {"status": status} | ({"probes": probes} if status == "ready" else {})
    raw = RawEvidence.from_log(exp.id, log, sigs, "x.log").model_copy(update=update)
    view.experiments.append(exp)
    view.outcomes.append(classify_outcome(raw))
    view.launches += 1
    return exp


def _attention_flag(name: str) -> bool:
    sub = next(s for s in load_subsystems().subsystems if s.id == "attention")
    return sub.flags is not None and bool(sub.flags.search(name))


def test_an_asynchronous_fault_is_first_launched_again_with_synchronous_kernel_launches() -> None:
    planner, view = _view(H200)
    _launch(planner, view, SURFACED)
    prop = planner.propose(view, planner.history(view))
    exp = prop.experiment
    assert exp is not None and exp.change is not None
    assert (exp.change.kind, exp.change.name, exp.change.after) == ("env", "CUDA_LAUNCH_BLOCKING", "1")
    assert "localise first" in exp.rationale
    assert localiser_of(exp.change) is not None


def test_the_true_frames_choose_the_subsystem_of_the_next_change_and_are_ledger_evidence() -> None:
    planner, view = _view(H200)
    _launch(planner, view, SURFACED)
    localising = _launch(planner, view, TRUE)
    assert localising.change is not None and localising.change.name == "CUDA_LAUNCH_BLOCKING"
    state = planner.history(view)
    assert state.localised == ["attention"]
    assert state.baseline.env == {}  # never adopted: the next change is tested on what the user runs
    loc = next(h for h in state.hypotheses if h.id.startswith("localise:"))
    assert loc.status == "supported"
    assert any("flashattention_backend.forward_decode" in e.detail and "attention subsystem" in e.detail
               and "get_model_worker_batch" in e.detail for e in loc.evidence)
    # the general suspects of a load-only crash are weakened by the true frames, with the reason
    weakened = [h for h in state.hypotheses if any("changes nothing there" in e.detail for e in h.evidence)]
    assert weakened and not any(_attention_flag(iv.names[0]) for h in weakened for iv in h.interventions)
    nxt = planner.propose(view, state).experiment
    assert nxt is not None and nxt.change is not None and nxt.change.kind == "flag"
    assert _attention_flag(nxt.change.name), nxt.change.describe()


def test_the_same_frame_under_synchronous_launches_refutes_the_localiser_and_narrows_nothing() -> None:
    planner, view = _view(H200)
    _launch(planner, view, SURFACED)
    _launch(planner, view, SURFACED.replace(SUFFIX, ""))
    state = planner.history(view)
    assert state.localised == []
    assert next(h for h in state.hypotheses if h.id.startswith("localise:")).status == "refuted"


def test_a_localiser_after_which_the_server_serves_is_a_workaround_never_the_fix() -> None:
    from agent.planning.conclusion import conclusion_of

    planner, view = _view(H200)
    _launch(planner, view, SURFACED)
    _launch(planner, view, ARGS + SERVED, status="ready")
    state = planner.history(view)
    best = state.best_fix
    assert best is not None and best.change.name == "CUDA_LAUNCH_BLOCKING"
    assert best.workaround and best.cost == "high"
    confirm = _launch(planner, view, ARGS + SERVED, status="ready")
    assert confirm.purpose == "confirm"
    state = planner.history(view)
    ending = conclusion_of({
        "case": view.case.model_dump(mode="json"),
        "hypotheses": [h.model_dump(mode="json") for h in state.hypotheses],
        "experiments": [e.model_dump(mode="json") for e in view.experiments],
        "outcomes": [o.model_dump(mode="json") for o in view.outcomes],
    })
    assert ending.status != "isolated" and ending.root_cause is None
    assert "only a workaround" in ending.reason and "CUDA_LAUNCH_BLOCKING" in ending.reason


def test_no_localiser_when_the_report_is_already_true_or_the_setting_is_for_another_platform() -> None:
    for fp, env, log in [
        (H200, {}, SURFACED.replace(SUFFIX, "")),  # PyTorch does not say the stack may be wrong
        (H200, {"CUDA_LAUNCH_BLOCKING": "1"}, SURFACED),  # already synchronous: the stack in hand is true
        (MI300X, {}, SURFACED),  # a CUDA setting on a ROCm host
        # NaN reached the sampler's assert through values: a synchronous stack names the same call
        (H200, {}, SURFACED.replace(ERROR, "RuntimeError: CUDA error: device-side assert triggered\n").replace(
            "    seq_lens_cpu = self.seq_lens.cpu()\n",
            "    seq_lens_cpu = self.seq_lens.cpu()\n[2026-12-02 10:01:00] probability tensor contains either "
            "`inf`, `nan` or element < 0\n")),
    ]:
        planner, view = _view(fp, env)
        _launch(planner, view, log)
        state = planner.history(view)
        assert not any(h.id.startswith("localise:") for h in state.hypotheses), (fp.gpu_vendor, env)
        exp = planner.propose(view, state).experiment
        assert exp is None or exp.change is None or exp.change.name != "CUDA_LAUNCH_BLOCKING"


def test_the_empty_catalog_ablation_keeps_the_localisers_and_still_localises(tmp_path: Path) -> None:
    """localisers.toml maps no symptom to a remedy (a localiser never fixes), so the ablation keeps it, as
    it keeps the signatures; the answer files are emptied."""
    from bench.run import ANSWER_FILES, empty_catalog_knowledge

    assert "localisers.toml" not in ANSWER_FILES
    folder = empty_catalog_knowledge(tmp_path)
    with use_knowledge(folder):
        assert load_localisers()
        assert load_catalog() == []
        planner, view = _view(H200)
        _launch(planner, view, SURFACED)
        state = planner.history(view)
        assert not any(h.id.startswith("symptom:") for h in state.hypotheses)
        exp = planner.propose(view, state).experiment
        assert exp is not None and exp.change is not None and exp.change.name == "CUDA_LAUNCH_BLOCKING"


#: CUDA's texts for the other asynchronous kernel faults, as PyTorch prints them (cudaGetErrorString of
#: cudaErrorIllegalInstruction, cudaErrorMisalignedAddress, cudaErrorLaunchFailure; CUDA Runtime API).
OTHER_FAULTS = ("an illegal instruction was encountered", "misaligned address", "unspecified launch failure")


def test_other_asynchronous_kernel_faults_are_localised_first_too() -> None:
    """An illegal instruction, a misaligned address and an unspecified launch failure surface as an illegal
    memory access does, at the next synchronising call with PyTorch's "might be incorrect" suffix: each is a
    device fault and the first experiment is the synchronous relaunch; without the suffix (the report is
    already true) the localiser is not proposed."""
    for text in OTHER_FAULTS:
        planner, view = _view(H200)
        _launch(planner, view, SURFACED.replace(ERROR, f"torch.AcceleratorError: CUDA error: {text}\n"))
        assert "device_fault" in view.outcomes[0].symptoms, (text, view.outcomes[0].symptoms)
        exp = planner.propose(view, planner.history(view)).experiment
        assert exp is not None and exp.change is not None
        assert (exp.change.name, exp.change.after) == ("CUDA_LAUNCH_BLOCKING", "1"), (text, exp.change.describe())
    planner, view = _view(H200)
    _launch(planner, view, SURFACED.replace(ERROR, f"torch.AcceleratorError: CUDA error: {OTHER_FAULTS[0]}\n")
            .replace(SUFFIX, ""))
    exp = planner.propose(view, planner.history(view)).experiment
    assert exp is not None and exp.change is not None and exp.change.name != "CUDA_LAUNCH_BLOCKING"
