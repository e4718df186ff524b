"""Reasoning from the evidence alone (issue 20, the empty-catalog ablation): with every file that maps a
symptom to a remedy emptied, the rule planner still reaches the change an engineer reads from the host:

- a start-up that goes silent after distributed init on several ranks: NCCL's peer-to-peer transport, which
  carries the first collectives then, is a suspect (knowledge/switches.toml ``stall_stages``), its other
  transport the test; not on one rank, not for a stall at a later stage, not on a platform NCCL is not read on;
- an error that names a tool a package runs (Triton's ``ptxas fatal``): the package's variable pointed at
  the host toolkit's copy, the toolkit's root read from the host's check_env (knowledge/toolchain.toml).

Real parts: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), the repository's knowledge
with its answer catalogs emptied as the bench empties them (``bench.run.empty_catalog_knowledge``), the
signatures, the analyse step and the rule planner; the logs are SGLang's own lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_localise import FLAGS, H200, MI300X, SITE

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.knowledge_dir import use_knowledge
from agent.domain.models import Experiment, Hypothesis
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, RulePlanner
from tools.fingerprint import HostFingerprint
from tools.probes import ProbeResult
from tools.signatures import for_engine, load_signatures

from agent.run.nodes.analyze import classify_outcome  # isort: skip

ARGS = "[2026-12-03 10:00:00] server_args=ServerArgs(model_path='/m/q', tp_size={tp})\n"
INIT = ("[2026-12-03 10:00:01 TP0] Init torch distributed begin.\n"
        "[2026-12-03 10:00:02 TP0] sglang is using nccl==2.27.7\n"
        "[2026-12-03 10:00:17 TP0] Init torch distributed ends. elapsed=15.00 s, mem usage=1.10 GB\n")
PTXAS = f"""[2026-12-03 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 2188, in init_device_graphs
    self.graph_runner = graph_runners[self.device](self)
  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 423, in __init__
    raise Exception(
Exception: Capture cuda graph failed: PTXAS error: Internal Triton PTX codegen error
`ptxas` stderr:
ptxas fatal   : Value 'sm_120' is not defined for option 'gpu-name'
"""
IMA = """[2026-12-03 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{site}/sglang/srt/managers/scheduler.py", line 6231, in run_scheduler_process
    scheduler.{loop}()
  File "{site}/sglang/srt/managers/scheduler.py", line 4614, in run_batch
    batch_result = self.model_worker.forward_batch_generation(
  File "{site}/sglang/srt/layers/attention/triton_backend.py", line 163, in forward_extend
    lens = seq_lens.tolist()
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
"""
RTX5090 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA GeForce RTX 5090", gpu_count=1,
                          compute_capability="12.0", memory_total_mib=32607, sglang_version="0.5.23",
                          check_env={"CUDA_HOME": "/opt/cuda-13.0", "NVCC": "Cuda compilation tools, release 13.0"})


@pytest.fixture
def empty(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The knowledge folder the bench's agent-empty method runs with, in force for the test."""
    from bench.run import empty_catalog_knowledge

    with use_knowledge(empty_catalog_knowledge(tmp_path)):
        assert load_catalog() == []
        yield


def _failed(fp: HostFingerprint, flags: dict[str, object], log: str, *, status: str = "crashed",
            facts: dict[str, str] | None = None, probes: list[ProbeResult] | None = None,
            env: dict[str, str] | None = None) -> tuple[RulePlanner, PlannerView, Experiment | None]:
    """The baseline ``flags``/``env`` launched on ``fp`` and ended as ``status`` with ``log`` (and the
    watcher's ``facts``, the ``probes``' answers); returns the planner, its view and its next experiment."""
    case = Case.model_validate({"name": "c", "model": {"path": "/m/q"}, "baseline": {"flags": flags, "env": env or {}}})
    planner, view = RulePlanner(load_catalog(), FLAGS), PlannerView(case=case, fingerprint=fp)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    raw = RawEvidence.from_log(first.id, log, for_engine(load_signatures(), "sglang"), "x.log")
    raw = raw.model_copy(update={"status": status, "facts": raw.facts | (facts or {}), "probes": probes or []})
    view.experiments.append(first.model_copy(update={"status": "done"}))
    view.outcomes.append(classify_outcome(raw))
    view.launches += 1
    return planner, view, planner.propose(view, planner.history(view)).experiment


def _ledger(planner: RulePlanner, view: PlannerView) -> dict[str, Hypothesis]:
    return {h.id: h for h in planner.history(view).hypotheses}


STALLED = {"stalled_after": "init_torch_distributed_end", "stall_stage": "load"}


def test_a_silent_stall_after_distributed_init_on_two_ranks_tests_nccls_other_transport(empty: None) -> None:
    fp = H200.model_copy(update={"gpu_count": 2})
    planner, view, nxt = _failed(fp, {"--tp-size": 2}, ARGS.format(tp=2) + INIT, status="stalled", facts=STALLED)
    assert view.outcomes[-1].stage == "timeout" and "hang" in view.outcomes[-1].symptoms
    assert nxt is not None and nxt.change is not None, "no change proposed for a silent multi-rank stall"
    assert (nxt.change.kind, nxt.change.name, nxt.change.after) == ("env", "NCCL_P2P_DISABLE", "1")
    h = _ledger(planner, view)["switch:nccl-p2p-transport"]
    assert "went silent" in h.rationale and "no error" in h.rationale


@pytest.mark.parametrize(("what", "fp", "tp", "facts"), [
    ("one rank: no collective runs", H200, 1, STALLED),
    ("a stall at capture: the collectives had worked", H200.model_copy(update={"gpu_count": 2}), 2,
     {"stalled_after": "capture_begin", "stall_stage": "capture"}),
    ("a ROCm host: not NCCL's variable there", MI300X.model_copy(update={"gpu_count": 2}), 2, STALLED),
])
def test_nccls_transport_is_no_suspect_where_it_does_not_run_then(
    empty: None, what: str, fp: HostFingerprint, tp: int, facts: dict[str, str]
) -> None:
    planner, view, _ = _failed(fp, {"--tp-size": tp}, ARGS.format(tp=tp) + INIT, status="stalled", facts=facts)
    assert "switch:nccl-p2p-transport" not in _ledger(planner, view), what


#: Silent from the server arguments on: no scheduler ever printed a line (the stall watcher's stage ``launch``).
BEFORE_SCHEDULERS = {"stalled_after": "server_args_line", "stall_stage": "launch"}


@pytest.mark.parametrize(("fp", "suspect"), [(H200.model_copy(update={"gpu_count": 2}), True),
                                             (MI300X.model_copy(update={"gpu_count": 2}), False)], ids=["cuda", "rocm"])
def test_a_stall_before_any_scheduler_line_tests_numa_binding_inside_the_process(
    empty: None, fp: HostFingerprint, suspect: bool
) -> None:
    """SGLang 0.5.23 starts each GPU rank's scheduler under a numactl wrapper on a host with several NUMA nodes
    (srt/utils/numa_utils.py configure_subprocess, SGLANG_NUMA_BIND_V2 on by default); a scheduler that never
    starts leaves the log silent right after the server arguments. The binding from inside the process is the
    test (sgl-project/sglang#40627: a hardened container); on ROCm the wrapper is not used."""
    planner, view, nxt = _failed(fp, {"--tp-size": 2}, ARGS.format(tp=2), status="stalled", facts=BEFORE_SCHEDULERS)
    assert ("switch:numa-bind-wrapper" in _ledger(planner, view)) is suspect
    if suspect:
        assert nxt is not None and nxt.change is not None
        assert (nxt.change.kind, nxt.change.name, nxt.change.after) == ("env", "SGLANG_NUMA_BIND_V2", "0")


READY = "[2026-12-03 10:00:30] The server is fired up and ready to roll!\n"


_SINGLE_OK = ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.3, text="Paris.")


@pytest.mark.parametrize(("probes", "suspect"), [
    ([ProbeResult(probe_id="chat", ok=False, status="timeout", latency_s=5.0, error="Request timed out.")], True),
    ([ProbeResult(probe_id="chat", ok=False, status="degenerate", latency_s=0.2, text="!!!!!!!!!!!!!!!!")], False),
    ([_SINGLE_OK, ProbeResult(probe_id="load:chat:x16", ok=False, status="timeout", latency_s=5.0)], False),
], ids=["unanswered", "answered-wrong", "lost-in-a-burst"])
def test_a_request_never_answered_on_a_ready_server_tests_the_normal_event_loop(
    empty: None, probes: list[ProbeResult], suspect: bool
) -> None:
    """A ready server accepts a request and never answers it, logging no error: every batch runs in the
    scheduler's event loop, the overlap one by default (SGLang 0.5.23 managers/scheduler.py
    _dispatch_event_loop_once), so the normal loop (--disable-overlap-schedule) is the test. A wrong answer
    was computed and returned: no loop stalled. Requests lost only in a burst, single ones answered: the loop
    ran every batch; what the burst adds is on the request path."""
    fp = H200.model_copy(update={"gpu_count": 2})
    planner, view, nxt = _failed(fp, {"--tp-size": 2}, ARGS.format(tp=2) + INIT + READY, status="ready", probes=probes)
    assert ("switch:overlap-event-loop" in _ledger(planner, view)) is suspect
    if suspect:
        assert nxt is not None and nxt.change is not None
        assert (nxt.change.kind, nxt.change.name, nxt.change.after) == ("flag", "--disable-overlap-schedule", True)


def test_an_error_naming_ptxas_points_triton_at_the_host_toolkits_copy(empty: None) -> None:
    planner, view, nxt = _failed(RTX5090, {"--attention-backend": "triton"}, ARGS.format(tp=1) + PTXAS)
    assert nxt is not None and nxt.change is not None
    # the toolkit's root is the one the host's check_env printed, not a guess
    assert (nxt.change.kind, nxt.change.name, nxt.change.after) == ("env", "TRITON_PTXAS_PATH", "/opt/cuda-13.0/bin/ptxas")
    h = _ledger(planner, view)["tool:triton-ptxas"]
    assert h.evidence[0].lines, "the hypothesis cites the log lines that name the tool"


def test_no_toolchain_test_without_the_tools_error_or_with_the_variable_already_set(empty: None) -> None:
    other = PTXAS[:PTXAS.index("Exception:")] + "Exception: Capture cuda graph failed: invalid argument\n"
    planner, view, _ = _failed(RTX5090, {"--attention-backend": "triton"}, ARGS.format(tp=1) + other)
    assert not any(i.startswith("tool:") for i in _ledger(planner, view))
    planner, view, _ = _failed(RTX5090, {"--attention-backend": "triton"}, ARGS.format(tp=1) + PTXAS,
                               env={"TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"})
    assert not any(i.startswith("tool:") for i in _ledger(planner, view))
