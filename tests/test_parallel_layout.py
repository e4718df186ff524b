"""A failure in the code that splits the weights across tensor-parallel ranks points at the parallel
layout (knowledge/subsystems.toml ``tensor_parallel``), a setting that defines what is served
(knowledge/served.toml): one rank is tried as a workaround that changes the deployment, the candidates
that change nothing in that code weigh less, and the ending names the layout.

The logs are real: SGLang 0.5.23 on the real-engine bed (a 2-core CPU host, the tiny Llama with 2 attention
heads and 1 KV head) launched as bench/real/sglang-tp2 does, 2026-12-02 (tests/data/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cpubed import DATA, FLAGS, bed_case, bed_host, crashed, generator_input

from agent.domain.models import Change, Hypothesis
from agent.planning.catalog import load_catalog
from agent.planning.generators.registry import default_generators
from agent.planning.generators.settings import SettingsVsDefaultsGenerator, implicated_setting
from agent.planning.in_play import subsystems_of_frame
from agent.planning.ledger import LedgerBook
from agent.planning.planner import PlannerView, RulePlanner
from tools.tracebacks import missing_import

#: intake's host reading runs getconf on this host (a process): with the slow tests
pytestmark = pytest.mark.slow

#: launch 1 of bench/real/sglang-tp2: the thread-binding assertion (2 ranks, 1 NUMA node)
NO_BIND = (DATA / "logs_0.5.23" / "tp2-no-bind.log").read_text()
#: launch 2, with SGLANG_CPU_OMP_THREADS_BIND=0|1: rank 1 cannot take its half of the single KV head
WEIGHT_LOADER = (DATA / "logs_0.5.23" / "tp2-weight-loader.log").read_text()
FLAGS_TP2 = {"--device": "cpu", "--max-total-tokens": 2048, "--tp-size": 2}
BIND = Change(kind="env", name="SGLANG_CPU_OMP_THREADS_BIND", before=None, after="0|1")






def _two_launches(tmp_path: Path) -> tuple[RulePlanner, PlannerView]:
    """The run after its first two launches, as bench/real/sglang-tp2 went: the baseline, then the bind
    variable its error names (the failure moved on to the weights)."""
    fp, model = bed_host(tmp_path)
    case = bed_case("tp2", model, FLAGS_TP2)
    planner = RulePlanner(load_catalog(), FLAGS)
    view = PlannerView(case=case, fingerprint=fp)
    for log, proposal in ((NO_BIND, "baseline"), (WEIGHT_LOADER, "test")):
        exp = planner.propose(view, planner.history(view)).experiment
        assert exp is not None and exp.purpose == proposal
        if proposal == "test":
            assert exp.change is not None and exp.change.key() == BIND.key(), exp.change
        view.experiments.append(exp.model_copy(update={"status": "done"}))
        view.outcomes.append(crashed(exp.id, log))
        view.launches += 1
    return planner, view


def test_the_weight_loaders_sharding_code_is_the_tensor_parallel_subsystem() -> None:
    out = crashed("exp-2", WEIGHT_LOADER)
    frames = [f for tb in out.tracebacks for f in tb.frames if f.package == "sglang" and f.module]
    innermost = f"{frames[0].module}.{frames[0].function}"
    assert innermost == "sglang.srt.layers.linear.weight_loader"
    assert [s.id for s in subsystems_of_frame(innermost)] == ["tensor_parallel"]
    # the code that runs every layer's forward pass is not the sharding code
    assert subsystems_of_frame("sglang.srt.layers.linear.forward") == []


def test_a_failure_in_the_sharding_code_proposes_one_rank_as_a_workaround_that_changes_the_deployment(
    tmp_path: Path,
) -> None:
    fp, model = bed_host(tmp_path)
    case = bed_case("tp2", model, FLAGS_TP2)
    bound = case.baseline.apply(BIND)
    cands = {c.id: c for c in SettingsVsDefaultsGenerator().generate(generator_input(case, bound, WEIGHT_LOADER, fp, "exp-2"))}
    layout = cands["revert:--tp-size"]
    (iv,) = layout.interventions
    assert iv.values == [None] and iv.workaround and iv.cost == "high"
    assert any("tensor_parallel" in e.detail for e in layout.evidence)
    # never the user's own setting to revert before a workaround is reported: it is the workaround
    assert not implicated_setting(layout)
    assert layout.weight > max(c.weight for k, c in cands.items() if k != "revert:--tp-size")


def test_the_parallel_layout_is_not_reverted_when_the_failure_surfaced_elsewhere(tmp_path: Path) -> None:
    # launch 1 failed in the thread binding (srt/utils/numa_utils.py), not in the sharding code: the
    # layout is what is served, not a cause to test there (the error's own remedies name the binding)
    fp, model = bed_host(tmp_path)
    case = bed_case("tp2", model, FLAGS_TP2)
    cands = SettingsVsDefaultsGenerator().generate(generator_input(case, case.baseline, NO_BIND, fp, "exp-2"))
    assert "revert:--tp-size" not in {c.id for c in cands}


def test_candidates_that_change_nothing_in_the_sharding_code_weigh_less(tmp_path: Path) -> None:
    fp, model = bed_host(tmp_path)
    case = bed_case("tp2", model, FLAGS_TP2)
    bound = case.baseline.apply(BIND)
    book = LedgerBook(FLAGS, [], default_generators())
    view = PlannerView(case=case, fingerprint=fp)
    ledger: dict[str, Hypothesis] = {}
    weights: dict[str, float] = {}
    book.create(view, crashed("exp-2", WEIGHT_LOADER), ledger, weights, bound)
    weakened = {h.id for h in ledger.values()
                if any(e.effect == "weakens" and "tensor_parallel subsystem" in e.detail for e in h.evidence)}
    assert "revert:--tp-size" in ledger and "revert:--tp-size" not in weakened
    assert "revert:--max-total-tokens" in weakened
    # what the error text itself names is read as it is (a remedy a warning states)
    assert not any(ledger[h].generator == "remedies" for h in weakened)


def test_after_the_binding_moved_the_failure_to_the_weights_the_next_launch_is_one_rank(tmp_path: Path) -> None:
    planner, view = _two_launches(tmp_path)
    state = planner.history(view)
    proposal = planner.propose(view, state)
    exp = proposal.experiment
    assert exp is not None and exp.change is not None, proposal.conclude_reason
    assert (exp.change.name, exp.change.after) == ("--tp-size", None)
    # on top of the binding the run adopted: the user's TP 2 is the last thing given up
    assert exp.baseline.env.get("SGLANG_CPU_OMP_THREADS_BIND") == "0|1"


def test_a_warnings_failed_import_is_not_the_failure_when_the_fatal_traceback_is_elsewhere() -> None:
    # the log names causal_conv1d_fn of the mamba module in a notice on every start; the failure is the
    # weight loader's RuntimeError
    assert "cannot import name 'causal_conv1d_fn'" in WEIGHT_LOADER
    assert missing_import(WEIGHT_LOADER) is None
    # said without SGLang's "Ignore import error" words, a warning that names a module the fatal
    # traceback never runs in is still not the failure ...
    plain = WEIGHT_LOADER.replace("Ignore import error when loading sglang.srt.models.falcon_mamba: ", "")
    assert "] cannot import name 'causal_conv1d_fn'" in plain
    assert missing_import(plain) is None
    # ... while one naming the module the failing frame runs in is
    inside = plain.replace("'sglang.srt.layers.attention.mamba.mamba'", "'sglang.srt.layers.linear'")
    found = missing_import(inside)
    assert found is not None and found.module == "sglang.srt.layers.linear.causal_conv1d_fn"
