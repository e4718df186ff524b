"""A failure on the device is not the doing of settings whose code reads text on the host: the output
parsers (``--reasoning-parser``, ``--tool-call-parser``) reach the device only through a grammar, for
requests with tools or structured output (knowledge/subsystems.toml ``device_work_only_with``, from SGLang
0.5.23's parser and grammar code). So a ROCm hardware exception under plain requests never spends a launch
on reverting them, while the same fault under requests with tools, or a start-up error in the parser itself,
still does."""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import after_failed_launch, baseline_failed_with
from test_in_play import FLAGS, HSA, MI300X

from agent.domain.case import Case
from agent.domain.knowledge_dir import use_knowledge
from agent.domain.models import Baseline
from agent.planning.catalog import load_catalog
from agent.planning.in_play import SubsystemsError, load_subsystems
from agent.planning.planner import PlannerView, RulePlanner

PARSERS = {"--reasoning-parser", "--tool-call-parser"}
FLAGS_OF_CASE: dict[str, object] = {"--model-path": "/m/x", "--tp-size": "8", "--reasoning-parser": "qwen3",
                                    "--tool-call-parser": "qwen25"}

#: SGLang 0.5.23's scheduler dying at start-up in the reasoning parser's grammar wrapper
#: (constrained/base_grammar_backend.py create_grammar_backend -> ReasonerGrammarBackend): a host-side error.
PARSER_STARTUP = """[2026-12-01 10:00:00] server_args={'model_path': '/m/x', 'tp_size': 8, 'reasoning_parser': 'qwen3'}
[2026-12-01 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler = Scheduler(
  File "/venv/lib/python3.11/site-packages/sglang/srt/constrained/base_grammar_backend.py", line 452, in create_grammar_backend
    reasoning_parser = ReasoningParser(
ValueError: think_end_token '</think>' must encode to exactly one token for constrained reasoning
[2026-12-01 10:00:05] Received sigquit from a child process. It usually means the child failed.
"""


def _touched_parsers(view: PlannerView) -> set[str]:
    return {e.change.name for e in view.experiments if e.change is not None} & PARSERS


def test_a_device_fault_under_plain_requests_never_reverts_the_output_parsers() -> None:
    planner, view, prop = baseline_failed_with(MI300X, FLAGS_OF_CASE, HSA, FLAGS)
    assert "illegal_memory_access" in view.outcomes[0].symptoms
    ledger = {h.id for h in planner.history(view).hypotheses}
    assert {"revert:--reasoning-parser", "revert:--tool-call-parser"} <= ledger  # proposed, then set aside
    skipped = [str(c.get("skipped")) for c in prop.considered]
    assert any("--reasoning-parser configures output_parsers" in s and "on the device" in s for s in skipped)
    # the whole run, every launch failing the same way: no launch is spent on a parser
    for _ in range(8):
        if prop.experiment is None:
            break
        prop = after_failed_launch(planner, view, prop.experiment, HSA)
    assert view.launches > 2 and not _touched_parsers(view)


def test_the_same_fault_under_requests_with_tools_keeps_the_parsers_candidates() -> None:
    case = Case.model_validate({"name": "c", "model": {"path": "/m/x"}, "baseline": {"flags": FLAGS_OF_CASE},
                                "reproduce": {"concurrency": 4, "features": ["tools"]}})
    case.baseline = Baseline(flags={FLAGS.resolve(k).name: v for k, v in case.baseline.flags.items()})
    view = PlannerView(case=case, fingerprint=MI300X)
    planner = RulePlanner(load_catalog(), FLAGS)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None
    # the fault came under requests: the server had come up (its ready line), so every start-up stage ran
    serving = HSA.replace("\n", "\n[2026-12-01 10:00:05] The server is fired up and ready to roll!\n", 1)
    prop = after_failed_launch(planner, view, first, serving)
    changes = [str(c.get("change")) for c in prop.considered if "change" in c]
    assert any("--tool-call-parser" in c for c in changes)
    assert not any("output_parsers" in str(c.get("skipped")) for c in prop.considered)


def test_a_start_up_error_in_the_parser_itself_still_reverts_it_first() -> None:
    _, view, prop = baseline_failed_with(MI300X, FLAGS_OF_CASE, PARSER_STARTUP, FLAGS)
    assert not {"illegal_memory_access", "device_fault", "nan_inf"} & set(view.outcomes[0].symptoms)
    assert prop.experiment is not None and prop.experiment.change is not None
    assert prop.experiment.change.name == "--reasoning-parser"


def test_a_feature_the_load_shapes_do_not_know_is_a_one_line_error(tmp_path: Path) -> None:
    src = (Path(__file__).parents[1] / "knowledge" / "subsystems.toml").read_text()
    bad = src.replace('device_work_only_with = ["tools", "json_schema", "regex"]',
                      'device_work_only_with = ["tools", "video"]', 1)
    assert bad != src
    (tmp_path / "subsystems.toml").write_text(bad)
    with use_knowledge(tmp_path), pytest.raises(SubsystemsError) as exc:
        load_subsystems()
    msg = str(exc.value)
    assert "subsystems.toml" in msg and "device_work_only_with" in msg and "json_schema" in msg and "\n" not in msg
    assert "video" in msg  # the bad value is quoted
