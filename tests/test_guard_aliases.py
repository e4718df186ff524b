"""The guard compares values alias-blind everywhere (SGLang's server_args.py accepts ``bf16`` and
``bfloat16`` for one KV-cache dtype): a rejected value never comes back in its other spelling, whoever
proposes it; an experiment already run on a baseline spelled differently is not run again."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.domain.case import Case, ModelSpec
from agent.domain.models import Baseline, Change, Experiment, Hypothesis, Intervention, Rejection
from agent.planning.guard import GuardError, check_experiment
from agent.planning.planner import PlannerView
from agent.run.approval import EditError, apply_edit
from tools.flags import FlagCatalog, parse_help

REPO = Path(__file__).resolve().parent.parent
BASE = Baseline(flags={"--tensor-parallel-size": "8", "--quantization": "modelopt_fp4"})
LEAD = Hypothesis(
    id="kv", statement="the FP8 KV cache breaks decode", component="attention", prior=0.5, posterior=0.7,
    interventions=[Intervention(names=["--kv-cache-dtype"], values=["bf16", "bfloat16"])],
)  # fmt: skip
OTHER = Hypothesis(id="backend", statement="the attention backend", component="attention", prior=0.2, posterior=0.2)


@pytest.fixture(scope="module")
def flags() -> FlagCatalog:
    return parse_help((REPO / "tests" / "data" / "help_sglang_0.5.23.txt").read_text())


def _exp(after: str, base: Baseline = BASE, by: str = "rules", name: str = "--kv-cache-dtype") -> Experiment:
    ch = Change(kind="flag", name=name, before=base.value("flag", name), after=after)
    return Experiment(id=Experiment.make_id(base, ch, "test"), purpose="test", baseline=base, change=ch, proposed_by=by)


def _view(**kw: object) -> PlannerView:
    return PlannerView(case=Case(name="c", model=ModelSpec(path="m"), baseline=BASE), launches=1, **kw)  # type: ignore[arg-type]


def _predict(h: Hypothesis, change: Change | None) -> str:
    kv = change is not None and change.name == "--kv-cache-dtype" and str(change.after) in ("bf16", "bfloat16")
    return "fixed" if h.id == "kv" and kv else "persists"


def _rejected(after: str = "bf16") -> Rejection:
    exp = _exp(after)
    assert exp.change is not None
    return Rejection(experiment_id=exp.id, change_key=exp.change.key(), reason="keep the FP8 KV cache", change=exp.change)


def test_a_rejected_value_never_comes_back_in_its_other_spelling(flags: FlagCatalog) -> None:
    view = _view(rejections=[_rejected("bf16")])
    for by in ("rules", "llm", "user"):
        with pytest.raises(GuardError, match="rejected earlier .*as --kv-cache-dtype: \\(unset\\) → bf16"):
            check_experiment(_exp("bfloat16", by=by), view=view, flags=flags)
    with pytest.raises(EditError, match="rejected earlier"):
        apply_edit(_exp("fp8_e5m2", by="user"), ["--kv-cache-dtype=bfloat16"], view=view, flags=flags,
                   hypotheses=[LEAD, OTHER], predict=_predict)  # fmt: skip


def test_an_experiment_run_on_a_respelled_baseline_is_not_run_again(flags: FlagCatalog) -> None:
    b1 = Baseline(flags={**BASE.flags, "--kv-cache-dtype": "bf16"})
    b2 = Baseline(flags={**BASE.flags, "--kv-cache-dtype": "bfloat16"})
    ran = _exp("triton", b1, name="--attention-backend").model_copy(update={"status": "done"})
    with pytest.raises(GuardError, match="already run"):
        check_experiment(_exp("triton", b2, name="--attention-backend"), view=_view(experiments=[ran]), flags=flags)
