"""The user's own deliberate setting in the failing path, and a check the error offers to bypass (issue 20,
points 5, 7 and 8).

An engineer reading a ROCm log in which the engine says the user's variable took effect ("aiter mla gluon is
disabled manually.", SGLang 0.5.23 srt/layers/attention/aiter_mla_gluon.py) and the process then dies of
SIGABRT right after a kernel library printed why (``[AITER] .../asm_mla.cu:193 get_heuristic_kernel_mla:
cannot get heuristic kernel! ...``, then CPython's ``Fatal Python error: Aborted``; the command and the
message of sgl-project/sglang#37438) asks first whether the user's own setting that chose that path is what
breaks: reverting it is the first test, with the hypothesis catalog and without it (the bench's ablation).
Without the engine's line the variable is one of many and is not singled out; the engine's echo of every
argument (``server_args=...``) is no such line.

An error that offers a variable "to bypass this check" (FlashInfer's version check, flashinfer/__init__.py as
quoted in flashinfer-ai/flashinfer#4781) offers a workaround whatever the variable is called; and when no
setting repairs it, the ending names the distribution the error spells (``flashinfer-cubin``), not only the
import package its frames run in.

Real parts: SGLang 0.5.23's ``--help`` (tests/data), the repository's knowledge, the outcome classifier, the
rule planner and the conclusion's blame; the logs are SGLang's formats with the reports' own lines.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from planner_steps import after_failed_launch, empty_catalog

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Change, Conclusion, LogLine
from agent.planning.blame import blamed
from agent.planning.catalog import load_catalog
from agent.planning.generators import GeneratorInput
from agent.planning.generators.remedies import RemediesGenerator
from agent.planning.planner import PlannerView, RulePlanner
from agent.planning.quoted import failing_lines, last_words
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.signatures import for_engine, load_signatures

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
ROCM = HostFingerprint(gpu_vendor="amd", gpu_arch="gfx950", gpu_name="AMD Instinct MI355X", gpu_count=8,
                       sglang_version="0.5.23", engine="sglang", engine_version="0.5.23")
GB10 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA GB10", gpu_count=1, compute_capability="12.1",
                       sglang_version="0.5.23", engine="sglang", engine_version="0.5.23",
                       installed={"torch": "2.14.1", "sglang": "0.5.23", "flashinfer-python": "0.7.2",
                                  "flashinfer-cubin": "0.6.13"})

FLAGS_SET = {"--tp-size": 8, "--prefill-attention-backend": "aiter", "--decode-attention-backend": "aiter",
             "--dtype": "bfloat16", "--kv-cache-dtype": "fp8_e4m3", "--cuda-graph-max-bs-decode": 32,
             "--mem-fraction-static": 0.85}
ENV_SET = {"SGLANG_AITER_MLA_GLUON": "0", "SGLANG_USE_AITER": "1", "SGLANG_AITER_K3_OPT": "1",
           "AITER_FLYDSL_FORCE": "1"}
SAID = "[2026-12-03 16:07:36 TP0] aiter mla gluon is disabled manually.\n"
ARGS = ("[2026-12-03 16:07:36] server_args={'model_path': '/m', 'tp_size': 8, 'dtype': 'bfloat16', "
        "'kv_cache_dtype': 'fp8_e4m3', 'prefill_attention_backend': 'aiter', 'decode_attention_backend': 'aiter', "
        "'mem_fraction_static': 0.85, 'cuda_graph_max_bs_decode': 32}\n")
ABORT = """[2026-12-03 16:16:54 TP0] Load weight end. elapsed=510.37 s, type=KimiK3ForCausalLM, avail mem=209.98 GB, mem usage=75.00 GB.
[2026-12-03 16:17:04 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=43.20 GB
[AITER] /sgl-workspace/aiter/aiter_meta/csrc/py_itfs_cu/asm_mla.cu:193 get_heuristic_kernel_mla:
    cannot get heuristic kernel! q_type:bf16 kv_type:fp8 gqa:16 ps:0 prefill:0
    causal:1 qseqlen:1 lse:0 cprr:0
Fatal Python error: Aborted

Thread 0x00007f3a2b7fe646 (most recent call first):
  <no Python frame>

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
[2026-12-03 16:17:05] RuntimeError: Rank 0 scheduler died during initialization (exit code: -6). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.
"""



def _first_test(log: str, env: dict[str, str] | None = None) -> Change:
    """The change the planner tests first after the case's baseline failed with ``log`` on the ROCm host."""
    case = Case.model_validate({
        "name": "c", "description": "The server loads the weights, then dies with 'Fatal Python error: Aborted'.",
        "model": {"path": "/m"}, "baseline": {"flags": FLAGS_SET, "env": ENV_SET if env is None else env},
        "intent": {"keep": ["--kv-cache-dtype"]}})
    view = PlannerView(case=case, fingerprint=ROCM)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    exp = after_failed_launch(planner, view, first, log).experiment
    assert exp is not None and exp.change is not None
    return exp.change


@pytest.mark.parametrize("ablation", [False, True], ids=["catalog", "empty-catalog"])
def test_the_users_setting_the_engine_says_took_effect_and_the_abort_names_is_reverted_first(
        tmp_path: Path, ablation: bool) -> None:
    with empty_catalog(tmp_path) if ablation else nullcontext():
        change = _first_test(ARGS + SAID + ABORT)
    assert (change.kind, change.name, change.after) == ("env", "SGLANG_AITER_MLA_GLUON", None), change


def test_without_the_engines_line_the_variable_is_not_singled_out() -> None:
    """The same abort, but the engine never said the variable took effect (nor does its echo of the
    arguments count): the variable is one of the user's many settings, not the first suspect."""
    change = _first_test(ARGS + ABORT)
    assert change.name != "SGLANG_AITER_MLA_GLUON", change


def test_what_a_process_printed_before_faulthandler_states_its_failure() -> None:
    """The kernel library's lines right before ``Fatal Python error: Aborted`` (no logger header) are part
    of the failure's statement; the logger's records before them are not."""
    raw = RawEvidence.from_log("exp-1", SAID + ABORT, for_engine(load_signatures(), "sglang"), "x.log")
    outcome = classify_outcome(raw.model_copy(update={"status": "crashed"}))
    words = [ll.text for ll in last_words(outcome.log)]
    assert words[0].startswith("[AITER] ") and "cannot get heuristic kernel!" in words[1]
    assert words[-1] == "Fatal Python error: Aborted" and len(words) == 4
    stated = " ".join(ll.text for ll in failing_lines(outcome))
    assert "get_heuristic_kernel_mla" in stated and "Capture target decode" not in stated
    assert last_words([LogLine(line=1, text="[2026-12-03 16:17:04 TP0] Capture begin.")]) == []


MISMATCH = """Traceback (most recent call last):
  File "/home/spark/.venv/lib/python3.12/site-packages/sglang/launch_server.py", line 65, in run_server
    from sglang.srt.entrypoints.http_server import launch_server
  File "/home/spark/.venv/lib/python3.12/site-packages/sglang/srt/layers/layernorm.py", line 63, in <module>
    import flashinfer.norm
  File "/home/spark/.venv/lib/python3.12/site-packages/flashinfer/__init__.py", line 19, in _check_cubin_version
    raise RuntimeError(
RuntimeError: flashinfer-cubin version (0.6.13) does not match flashinfer version (0.7.2). Please install the same version of both packages. Set {var}=1 to bypass this check.
"""


@pytest.mark.parametrize("var", ["FLASHINFER_DISABLE_VERSION_CHECK", "FLASHINFER_NO_VERSION_GATE"])
def test_a_variable_the_error_offers_to_bypass_its_check_is_a_workaround(var: str) -> None:
    """Named like a switch-off or not, a variable the error's own sentence offers "to bypass this check"
    silences the check instead of repairing what it caught."""
    raw = RawEvidence.from_log("exp-1", MISMATCH.format(var=var), for_engine(load_signatures(), "sglang"), "x.log")
    outcome = classify_outcome(raw.model_copy(update={"status": "exited"}))
    case = Case.model_validate({"name": "c", "model": {"path": "/m"}, "baseline": {"flags": {}}})
    hyps = RemediesGenerator().generate(GeneratorInput(case=case, baseline=case.baseline, reference=outcome,
                                                       fingerprint=GB10, flags=FLAGS))
    ivs = [iv for h in hyps for iv in h.interventions if var in iv.names]
    assert ivs and all(iv.workaround for iv in ivs), hyps


def test_the_ending_names_the_distribution_the_error_spells() -> None:
    """No setting repaired the mismatch (only the bypass served): the not_isolated ending names
    flashinfer-cubin, the distribution the error spells, before the import package its frames run in."""
    raw = RawEvidence.from_log("exp-1", MISMATCH.format(var="FLASHINFER_DISABLE_VERSION_CHECK"),
                               for_engine(load_signatures(), "sglang"), "x.log")
    outcome = classify_outcome(raw.model_copy(update={"status": "exited"}))
    state: dict[str, Any] = {
        "case": {"name": "c", "model": {"path": "/m"}, "baseline": {"flags": {}, "env": {}},
                 "description": "It dies at start since we upgraded."},
        "fingerprint": GB10.model_dump(mode="json"),
        "outcomes": [outcome.model_dump(mode="json")],
    }
    c = blamed(Conclusion(status="not_isolated", reason="only a workaround avoided the failure",
                          implicated={"component": "layers.layernorm", "experiment_id": "exp-1"}), state)
    assert c.implicated["package"] == "flashinfer-cubin", c.implicated
    assert "the error names flashinfer-cubin" in c.reason
