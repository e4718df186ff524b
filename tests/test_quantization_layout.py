"""A failure in the code of a quantization method points at the quantization served (knowledge/subsystems.toml
``quantization``), a setting that defines what is served (knowledge/served.toml): dropping it is tried as a
workaround that changes the deployment, other quantizations are workarounds too (and the formats only a
checkpoint made in them can serve are no alternatives on these weights), words of that code implicate no
setting of another subsystem, and removing ``--device`` on a host whose only platform it names is no
candidate.

The logs are real: SGLang 0.5.23 on the real-engine bed (a 2-core CPU host, the tiny Llama) launched as
bench/real/sglang-fp8 does, 2026-12-02 (tests/data/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cpubed import DATA, FLAGS, bed_case, bed_host, crashed, generator_input

from agent.domain.models import Change
from agent.planning.catalog import load_catalog
from agent.planning.generators.component import ImplicatedComponentGenerator
from agent.planning.generators.settings import SettingsVsDefaultsGenerator, implicated_setting
from agent.planning.in_play import InPlay, subsystems_of_frame
from agent.planning.planner import PlannerView, RulePlanner

#: intake's host reading runs getconf on this host (a process): with the slow tests
pytestmark = pytest.mark.slow

#: launch 1 of bench/real/sglang-fp8: fp8's activation quantizer is a triton kernel, "0 active drivers"
NO_DRIVER = (DATA / "logs_0.5.23" / "fp8-triton-no-driver.log").read_text()
#: launch 2, with TRITON_DEFAULT_BACKEND=1: triton names the backends it has, none for the CPU
UNKNOWN_BACKEND = (DATA / "logs_0.5.23" / "fp8-triton-unknown-backend.log").read_text()
FLAGS_FP8 = {"--device": "cpu", "--max-total-tokens": 2048, "--quantization": "fp8"}






def test_the_fp8_kernels_are_the_quantization_subsystem_and_the_unquantized_gemm_is_not() -> None:
    out = crashed("exp-1", NO_DRIVER)
    frames = [f for tb in out.tracebacks for f in tb.frames if f.package == "sglang" and f.module]
    innermost = f"{frames[0].module}.{frames[0].function}"
    assert innermost == "sglang.kernels.ops.quantization.fp8_kernel._per_token_group_quant_8bit_raw"
    assert [s.id for s in subsystems_of_frame(innermost)] == ["quantization"]
    assert [s.id for s in subsystems_of_frame("sglang.srt.layers.quantization.fp8_utils.apply_fp8_linear")] == [
        "quantization"]
    # every unquantized model runs its layers through unquant.py: that is no quantization
    assert subsystems_of_frame("sglang.srt.layers.quantization.unquant.apply") == []
    assert subsystems_of_frame("sglang.srt.layers.linear.forward") == []


@pytest.mark.parametrize("log", ["no-driver", "unknown-backend"])
def test_a_failure_in_the_quantization_code_proposes_dropping_it_as_a_workaround(tmp_path: Path, log: str) -> None:
    # launch 1, and launch 2 on top of the triton variable the run adopted (the failure still surfaces there)
    fp, model = bed_host(tmp_path)
    case = bed_case("fp8", model, FLAGS_FP8)
    text, baseline = NO_DRIVER, case.baseline
    if log == "unknown-backend":
        text = UNKNOWN_BACKEND
        baseline = baseline.apply(Change(kind="env", name="TRITON_DEFAULT_BACKEND", before=None, after="1"))
    cands = {c.id: c for c in SettingsVsDefaultsGenerator().generate(generator_input(case, baseline, text, fp, "exp-1"))}
    quant = cands["revert:--quantization"]
    (iv,) = quant.interventions
    assert iv.values == [None] and iv.workaround and iv.cost == "high"
    assert any("quantization subsystem" in e.detail for e in quant.evidence)
    assert not implicated_setting(quant)
    # "token" in the kernel's name (per_token_group) is a quantization word, not the token budget's
    assert not implicated_setting(cands["revert:--max-total-tokens"])
    assert quant.weight > max(c.weight for k, c in cands.items() if k != "revert:--quantization")


def test_other_quantizations_are_workarounds_and_checkpoint_only_formats_no_alternative(tmp_path: Path) -> None:
    fp, model = bed_host(tmp_path)
    case = bed_case("fp8", model, FLAGS_FP8)
    cands = {c.id: c for c in ImplicatedComponentGenerator().generate(generator_input(case, case.baseline, NO_DRIVER, fp, "exp-1"))}
    ivs = cands["component:--quantization"].interventions
    values = {str(iv.values[0]) for iv in ivs}
    assert values and not values & {"awq", "awq_marlin", "gptq", "gptq_marlin", "moe_wna16"}
    assert all(iv.workaround and iv.cost == "high" for iv in ivs)


def test_removing_the_device_that_names_the_hosts_own_platform_is_no_candidate(tmp_path: Path) -> None:
    fp, model = bed_host(tmp_path)
    case = bed_case("fp8", model, FLAGS_FP8)
    drop = Change(kind="flag", name="--device", before="cpu", after=None)
    why = InPlay(fp, case.baseline, {}, FLAGS).why_not(drop)
    assert why is not None and "cpu" in why
    # on a GPU host --device cpu is not the host's platform: removing it is an ordinary reversion
    gpu, _ = bed_host(tmp_path, vendor="nvidia")
    assert InPlay(gpu, case.baseline, {}, FLAGS).why_not(drop) is None
    # and removing another setting stays allowed
    other = Change(kind="flag", name="--max-total-tokens", before="2048", after=None)
    assert InPlay(fp, case.baseline, {}, FLAGS).why_not(other) is None


def test_after_the_baseline_the_first_test_drops_the_quantization(tmp_path: Path) -> None:
    # no installed source is read here (the run reads triton's to propose TRITON_DEFAULT_BACKEND): among
    # the candidates the failure's frames give, dropping the quantization the failure surfaced in is tested
    # first, as the workaround it is
    fp, model = bed_host(tmp_path)
    case = bed_case("fp8", model, FLAGS_FP8)
    planner = RulePlanner(load_catalog(), FLAGS)
    view = PlannerView(case=case, fingerprint=fp)
    exp = planner.propose(view, planner.history(view)).experiment
    assert exp is not None and exp.purpose == "baseline"
    view.experiments.append(exp.model_copy(update={"status": "done"}))
    view.outcomes.append(crashed(exp.id, NO_DRIVER))
    view.launches += 1
    proposal = planner.propose(view, planner.history(view))
    exp = proposal.experiment
    assert exp is not None and exp.change is not None, proposal.conclude_reason
    assert (exp.change.name, exp.change.after) == ("--quantization", None)
