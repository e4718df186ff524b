"""The engine's own argument check tells the user what to set, by the argparse dest ("Try to set
disable_overlap_schedule=True.", SGLang 0.5.23 srt/arg_groups/mamba_hook.py line 159; "Please set
pp_size=1", srt/models/sdar.py line 435): that setting is a first-class remedy, and no workaround."""

from __future__ import annotations

from pathlib import Path

from test_generators import H100, SITE, _case, _changes, _outcome

from agent.domain.case import Case
from agent.planning.generators import Candidate, GeneratorInput
from agent.planning.generators.remedies import RemediesGenerator
from tools.flags import parse_help

FLAGS = parse_help(
    (Path(__file__).parent / "data" / "help_sglang_0.5.23.txt").read_text(),
    source="fixture",
    version="0.5.23",
)

MAMBA = f"""Traceback (most recent call last):
  File "{SITE}/sglang/launch_server.py", line 29, in run_server
    server_args.resolve_once()
  File "{SITE}/sglang/srt/arg_groups/mamba_hook.py", line 159, in validate_mamba_no_buffer
    assert not disable_overlap_schedule_is_false, (
AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.
"""

PP = f"""Traceback (most recent call last):
  File "{SITE}/sglang/srt/models/sdar.py", line 435, in __init__
    raise ValueError(
ValueError: SDAR does not support pipeline parallelism yet. Please set pp_size=1
"""


def _generate(text: str, case: Case) -> list[Candidate]:
    out = _outcome(text)
    return RemediesGenerator().generate(
        GeneratorInput(
            case=case, baseline=case.baseline, reference=out, fingerprint=H100, flags=FLAGS, outcomes=[out]
        )
    )


def _remedies(text: str, flags: dict[str, object] | None = None) -> dict[str, list[tuple[str, object]]]:
    return {c.id: _changes(c) for c in _generate(text, _case(flags))}


def test_the_setting_an_argument_check_asks_for_is_a_remedy_and_no_workaround() -> None:
    cands = _generate(MAMBA, _case())
    named = [c for c in cands if ("--disable-overlap-schedule", True) in _changes(c)]
    assert named, [c.id for c in cands]
    assert not any(iv.workaround for c in named for iv in c.interventions)
    assert named[0].prior >= max(c.prior for c in cands)  # the engine's own instruction weighs most


def test_a_value_the_error_asks_for_is_that_value_of_the_flag() -> None:
    found = _remedies(PP, {"--pp-size": "2"})
    assert ("--pp-size", "1") in [ch for chs in found.values() for ch in chs], found


def test_a_word_after_to_is_no_value_of_a_number_flag() -> None:
    text = PP.replace("Please set pp_size=1", "Please set max_running_requests to reduce the memory it takes")
    found = _remedies(text, {"--max-running-requests": "64"})
    assert not any(name == "--max-running-requests" for chs in found.values() for name, _ in chs), found
