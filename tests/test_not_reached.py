"""A setting whose subsystem's code first runs at a later start-up stage cannot have caused a failure before
that stage (knowledge/subsystems.toml ``runs_after_stage``): the output parsers are built once the model is
loading (SGLang 0.5.23 scheduler.py), so an assertion raised while the server's arguments are resolved is
no reason to revert them, unless the error names them (an argument check that refuses their value)."""

from __future__ import annotations

from pathlib import Path

from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change
from agent.planning.in_play import InPlay
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import parse_help
from tools.signatures import load_signatures

FLAGS = parse_help((Path(__file__).parent / "data" / "help_sglang_0.5.23.txt").read_text(), source="fixture",
                   version="0.5.23")
SITE = "/opt/.venv/lib/python3.12/site-packages"
ARGS = "[2026-12-04 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3.5-27B', reasoning_parser='qwen3')\n"
RESOLUTION = f"""Traceback (most recent call last):
  File "{SITE}/sglang/launch_server.py", line 29, in run_server
    server_args.resolve_once()
  File "{SITE}/sglang/srt/arg_groups/mamba_hook.py", line 120, in validate_mamba_extra_buffer
    assert is_platform_supported, (
AssertionError: extra_buffer requires platform support for Mamba cache state snapshots.
"""
LOADING = "[2026-12-04 10:00:01 TP0] Load weight begin. avail mem=70.00 GB\n"
NAMED = RESOLUTION.replace("extra_buffer requires platform support for Mamba cache state snapshots.",
                           "reasoning_parser 'qwen3' needs a tokenizer with a </think> token.")
REVERT = Change(kind="flag", name="--reasoning-parser", before="qwen3", after=None)


def _why(text: str) -> str | None:
    out = classify_outcome(RawEvidence.from_log("exp-1", text, load_signatures(), "x.log").model_copy(
        update={"status": "exited"}))
    play = InPlay(HostFingerprint(gpu_count=0, cpu_count=8), Baseline(flags={"--reasoning-parser": "qwen3"}), {},
                  FLAGS)
    return play.not_reached(REVERT, out)


def test_a_parser_is_no_suspect_of_a_failure_before_the_model_began_to_load() -> None:
    why = _why(ARGS + RESOLUTION)
    assert why is not None and "output_parsers" in why and "load" in why


def test_once_the_model_began_to_load_or_the_error_names_it_the_parser_stays_a_candidate() -> None:
    assert _why(ARGS + LOADING + RESOLUTION) is None
    assert _why(ARGS + NAMED) is None
