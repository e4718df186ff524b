"""Shared step of the in-process planner tests: an experiment launched and failing with a real log text, and
the planner's next proposal (the graph's launch, analyse and design nodes without a host)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.knowledge_dir import use_knowledge
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.catalog import load_catalog
from agent.planning.planner import RulePlanner
from agent.planning.view import PlannerView, Proposal
from agent.run.nodes.analyze import classify_outcome
from agent.run.nodes.intake import _read_model_and_cpus
from bench.run import empty_catalog_knowledge
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, parse_help
from tools.host import LocalHost
from tools.probes import ProbeResult
from tools.signatures import for_engine, load_signatures

#: SGLang 0.5.23's own ``--help`` (tests/data/help_sglang_0.5.23.txt), read as the planner reads a host's.
SGLANG_0_5_23_FLAGS: FlagCatalog = parse_help((Path(__file__).parent / "data" / "help_sglang_0.5.23.txt").read_text(),
                                              source="fixture", version="0.5.23")

_SITE = "/usr/local/lib/python3.12/dist-packages"


def ready_with_backend(backend: str) -> str:
    """SGLang's ``server_args`` line with ``attention_backend`` = ``backend``, then its ready line."""
    return (f"[2026-12-01 09:59:00] server_args=ServerArgs(model_path='/m/model', attention_backend='{backend}', "
            "tp_size=1)\n[2026-12-01 10:00:00] The server is fired up and ready to roll!\n")


#: A ready server whose scheduler crashes in the triton attention backend's decode (srt/managers/scheduler.py
#: exception as SGLang 0.5.23 logs it), its ``server_args`` line saying ``attention_backend='triton'``.
TRITON_DECODE_CRASH = ready_with_backend("triton") + f"""[2026-12-01 10:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{_SITE}/sglang/srt/layers/attention/triton_backend.py", line 612, in forward_decode
    assert self.kv_indptr is not None
AssertionError
[2026-12-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""


def after_failed_launch(
    planner: RulePlanner, view: PlannerView, exp: Experiment, text: str, engine: str = "sglang"
) -> Proposal:
    """Record ``exp`` as launched and crashed with the log ``text`` (read with ``engine``'s signatures) in
    ``view``, count the launch, and return ``planner``'s next proposal."""
    raw = RawEvidence.from_log(exp.id, text, for_engine(load_signatures(), engine), "x.log")
    view.experiments.append(exp.model_copy(update={"status": "done"}))
    view.outcomes.append(classify_outcome(raw.model_copy(update={"status": "crashed"})))
    view.launches += 1
    return planner.propose(view, planner.history(view))


def after_served_launch(planner: RulePlanner, view: PlannerView, exp: Experiment, text: str) -> Proposal:
    """Record ``exp`` as launched and served (its probe answered) with the SGLang log ``text`` in ``view``,
    count the launch, and return ``planner``'s next proposal."""
    raw = RawEvidence.from_log(exp.id, text, for_engine(load_signatures(), "sglang"), "x.log")
    probes = [ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1)]
    view.experiments.append(exp.model_copy(update={"status": "done"}))
    view.outcomes.append(classify_outcome(raw.model_copy(update={"status": "ready", "probes": probes})))
    view.launches += 1
    return planner.propose(view, planner.history(view))


def baseline_failed_with(
    fp: HostFingerprint, flags: dict[str, object], log: str, catalog: FlagCatalog, description: str = ""
) -> tuple[RulePlanner, PlannerView, Proposal]:
    """A case with the baseline ``flags`` (spelt as ``catalog`` resolves them; ``--model-path`` its model) on
    the host ``fp`` (its ``description`` the user's words): its first launch (the baseline) failed with ``log``.
    Returns the planner, its view and its next proposal."""
    case = Case.model_validate({"name": "c", "model": {"path": str(flags["--model-path"])},
                                "baseline": {"flags": flags}, "description": description})
    case.baseline = Baseline(flags={catalog.resolve(k).name: v for k, v in case.baseline.flags.items()})
    view = PlannerView(case=case, fingerprint=fp)
    planner = RulePlanner(load_catalog(), catalog)
    first = planner.propose(view, planner.history(view)).experiment
    assert first is not None and first.purpose == "baseline"
    return planner, view, after_failed_launch(planner, view, first, log)


def experiment_of(base: Baseline, change: Change) -> Experiment:
    """The test experiment of ``change`` against ``base`` (done), as the planner would propose it."""
    return Experiment(id=Experiment.make_id(base, change, "test"), purpose="test", baseline=base, change=change,
                      attempt=1, status="done")


def fingerprint_with_model(
    tmp_path: Path, config: dict[str, object], fp: HostFingerprint, name: str = "model"
) -> tuple[HostFingerprint, str]:
    """The fingerprint intake builds for ``fp``'s host once the model's ``config.json`` (``config``, written
    under ``tmp_path/name``) is read from disk through LocalHost; returns it and the model's path."""
    model = tmp_path / name
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(config))
    fp = fp.model_copy(deep=True)
    case = Case.model_validate({"name": "c", "model": {"path": str(model)},
                                "baseline": {"flags": {"--model-path": str(model)}}})
    _read_model_and_cpus(LocalHost(), case, fp)
    return fp, str(model)


@contextmanager
def empty_catalog(tmp_path: Path) -> Iterator[None]:
    """The bench's ablation in force meanwhile: the knowledge folder `python -m bench` gives the
    agent-empty method, every file that maps a symptom to a remedy emptied."""
    with use_knowledge(empty_catalog_knowledge(tmp_path)):
        yield

T = TypeVar("T")


def under_catalog(catalog: str, tmp_path: Path, decide: Callable[[], T]) -> T:
    """``decide()`` with the repository's knowledge (``catalog`` "catalog") or under the bench's ablation
    (``"empty"``: ``empty_catalog``, its folder made under ``tmp_path``)."""
    if catalog == "empty":
        with empty_catalog(tmp_path / "empty-knowledge"):
            return decide()
    return decide()
