"""Approval: the risky-change policy, edits (one change, same guard rails as a planner), the approval
screen, the approve node's answers, and an interactive session at a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agent.domain.case import Case, ModelSpec
from agent.domain.models import Baseline, Change, Experiment, Hypothesis, Intervention, Rejection
from agent.planning.planner import PlannerView
from agent.record.transcript import read_transcript
from agent.run.approval import (
    ApprovalAnswer,
    EditError,
    RequestContext,
    RiskRule,
    RiskRulesError,
    apply_edit,
    approval_panel,
    ask,
    build_request,
    load_risk_rules,
    must_ask,
    parse_edit,
    risky_reasons,
)
from tools.flags import FlagCatalog, parse_help

REPO = Path(__file__).resolve().parent.parent
HYPOLOOP = [sys.executable, "-c", "from agent.cli import main; main()"]


@pytest.fixture(scope="module")
def flags() -> FlagCatalog:
    return parse_help((REPO / "tests" / "data" / "help_sglang_0.5.9.txt").read_text())


BASE = Baseline(flags={"--tensor-parallel-size": "8", "--quantization": "modelopt_fp4"})


def _test_exp(name: str = "--kv-cache-dtype", after: str = "bf16", kind: str = "flag") -> Experiment:
    ch = Change(kind=kind, name=name, before=None, after=after)  # type: ignore[arg-type]
    return Experiment(id=Experiment.make_id(BASE, ch, "test"), purpose="test", baseline=BASE, change=ch)


def _view(**kw: object) -> PlannerView:
    return PlannerView(case=Case(name="c", model=ModelSpec(path="m"), baseline=BASE), launches=1, **kw)  # type: ignore[arg-type]


HYPS = [
    Hypothesis(
        id="kv",
        statement="the FP8 KV cache breaks decode",
        component="attention",
        prior=0.5,
        posterior=0.7,
        interventions=[Intervention(names=["--kv-cache-dtype"], values=["bf16", "bfloat16"])],
    ),
    Hypothesis(
        id="backend", statement="the attention backend", component="attention", prior=0.2, posterior=0.2
    ),
    Hypothesis(id="gone", statement="refuted", component="x", prior=0.1, posterior=0.0, status="refuted"),
]


def _predict(h: Hypothesis, change: Change | None) -> str:
    return (
        "fixed" if h.id == "kv" and change is not None and change.name == "--kv-cache-dtype" else "persists"
    )


# ------------------------------------------------------------------------------------------ policy


def test_risky_rules_come_from_the_knowledge_file() -> None:
    rules = load_risk_rules()
    ids = {r.id for r in rules}
    assert {"mem-fraction-above-0.95", "nccl-env"} <= ids
    high = _test_exp("--mem-fraction-static", "0.97")
    low = _test_exp("--mem-fraction-static", "0.90")
    nccl = _test_exp("NCCL_P2P_DISABLE", "1", kind="env")
    tp = _test_exp("--tensor-parallel-size", "4")
    assert risky_reasons(high, rules) and not risky_reasons(low, rules)
    assert any(r.startswith("nccl-env") for r in risky_reasons(nccl, rules))
    assert risky_reasons(tp, rules)
    assert not risky_reasons(_test_exp(), rules)
    # a variable that changes which code the server loads always needs a person under --approve risky
    for name, value in (("LD_PRELOAD", "/tmp/x.so"), ("PYTHONPATH", "/tmp"), ("PATH", "/tmp")):
        assert any(r.startswith("code-loading-env") for r in risky_reasons(_test_exp(name, value, kind="env"), rules))
    assert not risky_reasons(_test_exp("SGLANG_USE_AITER", "0", kind="env"), rules)
    baseline = Experiment(id="exp-b", purpose="baseline", baseline=BASE)
    assert risky_reasons(baseline, rules) == []


def test_approval_modes_decide_when_to_ask() -> None:
    assert must_ask("each", []) and must_ask(None, [])
    assert not must_ask("auto", ["nccl-env: ..."])
    assert must_ask("risky", ["nccl-env: ..."]) and not must_ask("risky", [])


def test_risk_rule_conditions() -> None:
    rule = RiskRule(id="r", why="w", kind="env", name_matches="^NCCL_", value_matches="^1$")
    assert rule.matches(Change(kind="env", name="NCCL_IB_DISABLE", after="1"))
    assert not rule.matches(Change(kind="env", name="NCCL_IB_DISABLE", after="0"))
    assert not rule.matches(Change(kind="flag", name="NCCL_IB_DISABLE", after="1"))
    unset = RiskRule(id="u", why="w", name="--x", unset=True)
    assert unset.matches(Change(kind="flag", name="--x", before="1", after=None))
    assert not RiskRule(id="n", why="w", above=0.5).matches(Change(kind="flag", name="--y", after="abc"))


def test_bad_risky_file_names_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "risky.toml"
    path.write_text('[[risky]]\nid = "x"\nwhy = "w"\nname_matches = "("\n')
    with pytest.raises(RiskRulesError, match=r"risky #1 \(x\).*regex"):
        load_risk_rules(path)


# ------------------------------------------------------------------------------------------ edits


def test_edit_grammar(flags: FlagCatalog) -> None:
    cur = Change(kind="flag", name="--kv-cache-dtype", after="bf16")
    assert parse_edit(["--attention-backend triton"], current=cur, flags=flags) == (
        "flag",
        "--attention-backend",
        "triton",
    )
    assert parse_edit(["--attention-backend=triton"], current=cur, flags=flags)[2] == "triton"
    assert parse_edit(["NCCL_P2P_DISABLE=1"], current=cur, flags=flags) == ("env", "NCCL_P2P_DISABLE", "1")
    assert parse_edit(["NCCL_P2P_DISABLE="], current=cur, flags=flags) == ("env", "NCCL_P2P_DISABLE", None)
    assert parse_edit(["kv-cache-dtype=bfloat16"], current=cur, flags=flags) == (
        "flag",
        "kv-cache-dtype",
        "bfloat16",
    )
    assert parse_edit(["bfloat16"], current=cur, flags=flags) == ("flag", "--kv-cache-dtype", "bfloat16")
    assert parse_edit(["--disable-cuda-graph"], current=cur, flags=flags) == (
        "flag",
        "--disable-cuda-graph",
        True,
    )
    # JSON keeps its quotes and spaces, typed at the prompt or passed as one --set argument.
    override = '{"index_topk_pattern": "FF SS", "rope": [1, 2]}'
    for typed in (
        f"--json-model-override-args={override}",
        f"--json-model-override-args {override}",
        f"json-model-override-args={override}",  # the lower-case flag-name=VALUE form
    ):
        kind, name, value = parse_edit([typed], current=cur, flags=flags)
        assert (kind, name.lstrip("-"), value) == ("flag", "json-model-override-args", override)


def test_rejects_edit_with_two_changes(flags: FlagCatalog) -> None:
    for items in (
        ["--attention-backend triton --kv-cache-dtype bf16"],
        ["--attention-backend=triton", "NCCL_P2P_DISABLE=1"],
        ["--disable-cuda-graph NCCL_P2P_DISABLE=1"],
    ):
        with pytest.raises(EditError, match="exactly one variable; this edit changes 2"):
            apply_edit(_test_exp(), items, view=_view(), flags=flags, hypotheses=HYPS, predict=_predict)


def test_edit_becomes_a_checked_one_change_experiment(flags: FlagCatalog) -> None:
    new = apply_edit(
        _test_exp("--attention-backend", "fa3"),
        ["--kv-cache", "bfloat16"],  # a unique prefix, normalised to the canonical name
        view=_view(),
        flags=flags,
        hypotheses=HYPS,
        predict=_predict,
    )
    assert new.change == Change(kind="flag", name="--kv-cache-dtype", before=None, after="bfloat16")
    assert new.id == Experiment.make_id(BASE, new.change, "test") and new.proposed_by == "user"
    assert {p.hypothesis_id: p.expect for p in new.predictions} == {"kv": "fixed", "backend": "persists"}
    env = apply_edit(
        _test_exp(), ["NCCL_P2P_DISABLE=1"], view=_view(), flags=flags, hypotheses=HYPS, predict=_predict
    )
    assert env.change is not None and (env.change.kind, env.change.name, env.change.after) == (
        "env",
        "NCCL_P2P_DISABLE",
        "1",
    )


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["--kv-cache-dtipe", "bf16"], "unknown flag"),
        (["--attention-backend", "warp9"], "not one of"),
        (["--tp-size", "8"], "already 8 in the baseline"),
        (["NCCL_P2P_DISABLE=$(reboot)"], "characters a shell would interpret"),
        (["--kv-cache-dtype", "bf16"], "was rejected earlier"),
        ([""], "empty edit"),
    ],
)
def test_edit_passes_the_same_guard_rails_as_a_proposal(
    flags: FlagCatalog, items: list[str], message: str
) -> None:
    rejected = _test_exp()
    view = _view(rejections=[Rejection(experiment_id=rejected.id, change_key=None, reason="no")])
    with pytest.raises(EditError, match=message.replace("$", r"\$")):
        apply_edit(
            _test_exp("--attention-backend", "fa3"),
            items,
            view=view,
            flags=flags,
            hypotheses=HYPS,
            predict=_predict,
        )


def test_an_edit_removes_a_flag_refuses_a_stray_equals_and_a_respelled_repeat(flags: FlagCatalog) -> None:
    def edit(items: list[str], view: PlannerView | None = None) -> Experiment:
        return apply_edit(
            _test_exp("--attention-backend", "fa3"), items, view=view or _view(), flags=flags, hypotheses=HYPS,
            predict=_predict,
        )  # fmt: skip

    removed = edit(["--quantization="])  # README: "--flag= removes a flag"
    assert removed.change == Change(kind="flag", name="--quantization", before="modelopt_fp4", after=None)
    with pytest.raises(EditError, match="expected --flag VALUE"):  # a typo, not the value "=1"
        edit(["=1"])
    ran = edit(["--mem-fraction-static", "0.93"]).model_copy(update={"status": "done"})
    with pytest.raises(EditError, match="already run as .*spelled differently"):
        edit(["--mem-fraction-static=0.930"], _view(experiments=[ran]))


def test_an_edit_may_bind_ranks_to_cpu_lists_but_never_pass_a_pipe_to_a_shell(flags: FlagCatalog) -> None:
    """SGLang's per-rank CPU binding separates ranks with '|' (SGLANG_CPU_OMP_THREADS_BIND=0-3|4-7,
    sglang/srt/utils/numa_utils.py, 0.5.23): a CPU list passes the guard; anything else with '|' does not."""

    def edit(items: list[str]) -> Experiment:
        return apply_edit(
            _test_exp("--attention-backend", "fa3"), items, view=_view(), flags=flags, hypotheses=HYPS,
            predict=_predict,
        )  # fmt: skip

    bound = edit(["SGLANG_CPU_OMP_THREADS_BIND=0-3|4-7"])
    assert bound.change == Change(kind="env", name="SGLANG_CPU_OMP_THREADS_BIND", before=None, after="0-3|4-7")
    for value in ("0-3|reboot", "0|1;rm", "a|b"):
        with pytest.raises(EditError, match="characters a shell would interpret"):
            edit([f"SGLANG_CPU_OMP_THREADS_BIND={value}"])


def test_baseline_run_cannot_be_edited(flags: FlagCatalog) -> None:
    exp = Experiment(id="exp-b", purpose="baseline", baseline=BASE)
    with pytest.raises(EditError, match="baseline run changes nothing"):
        apply_edit(
            exp, ["--disable-cuda-graph"], view=_view(), flags=flags, hypotheses=HYPS, predict=_predict
        )


def test_answers_from_any_client() -> None:
    assert ApprovalAnswer.parse("y").decision == "approve"
    assert ApprovalAnswer.parse({"decision": "approve", "set": "X=1"}).decision == "edit"
    assert ApprovalAnswer.parse({"decision": "reject", "reason": "r"}).reason == "r"
    with pytest.raises(ValueError, match="decision"):
        ApprovalAnswer.parse({"decision": "maybe"})


# ------------------------------------------------------------------------------------------ screen


def _request(exp: Experiment, **kw: object) -> object:
    exp = Experiment.model_validate(
        {
            **exp.model_dump(),
            "predictions": [{"hypothesis_id": "kv", "expect": "fixed"}],
            "cost_estimate_s": 512,
        }
    )
    return build_request(
        exp,
        HYPS,
        RequestContext(
            run_id="r1",
            launches=1,
            host_seconds=517.0,
            budget_launches=8,
            budget_host_seconds=14400,
            mode="each",
            risky=[],
            **kw,  # type: ignore[arg-type]
        ),
    )


def test_approval_screen_shows_what_a_person_needs() -> None:
    req = _request(_test_exp(), error="edit refused: two changes")
    console = Console(width=160, record=True, color_system=None)
    console.print(approval_panel(req))  # type: ignore[arg-type]
    text = console.export_text()
    assert "--kv-cache-dtype: (unset) → bf16" in text
    assert "kv (p=0.70)" in text  # the hypothesis under test and its probability
    assert "fixed" in text and "persists" in text  # what each open hypothesis predicts
    assert "refuted" not in text  # only open hypotheses
    assert "~512 host-s" in text and "1 of 8 launches" in text and "517 of 14400 host-s" in text
    assert "[a]pprove" in text and "[e]dit" in text and "[r]eject" in text and "[s]top" in text
    assert "two changes" in text


def test_prompt_asks_again_after_a_refused_edit() -> None:
    req = _request(_test_exp())
    answers = iter(["e", "--a 1 --b 2", "bfloat16"])  # refused, then asked for the change again
    console = Console(width=160, record=True, color_system=None)

    def check(items: list[str]) -> Experiment:
        if "--a" in items[0]:
            raise EditError("an experiment changes exactly one variable")
        return _test_exp(after="bfloat16")

    answer = ask(req, console, check_edit=check, read=lambda prompt: next(answers))  # type: ignore[arg-type]
    assert answer.decision == "edit" and answer.set == ["bfloat16"] and answer.experiment_id == _test_exp().id
    assert "edit refused: an experiment changes exactly one variable" in console.export_text()
    answers = iter(["r", "", "r", "too risky"])
    answer = ask(req, console, check_edit=check, read=lambda prompt: next(answers))  # type: ignore[arg-type]
    assert (answer.decision, answer.reason) == ("reject", "too risky")


def test_an_unknown_answer_lists_only_the_choices_offered() -> None:
    """At a confirmation or baseline run nothing can be edited: the help after an unknown answer does not
    offer e (edit), as the prompt does not (the newcomer read "e (edit)" and got "nothing to edit")."""
    req = _request(Experiment(id="exp-c", purpose="confirm", baseline=BASE))
    prompts: list[str] = []
    answers = iter(["", "a"])
    console = Console(width=160, record=True, color_system=None)

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    answer = ask(req, console, check_edit=lambda items: _test_exp(), read=read)  # type: ignore[arg-type]
    assert answer.decision == "approve"
    said = console.export_text().rsplit("╯", 1)[-1]
    assert "answer a, r, h or s" in said and "edit" not in said, said
    assert prompts[0] == "[a]pprove / [r]eject / [h]ypotheses / [s]top: "


# ------------------------------------------------------------------------------------------ the node


def test_approve_node_refuses_a_bad_answer_and_asks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the graph itself (as LangGraph Studio drives it): no launch happens before the answer,
    a refused answer is asked again with the reason, and approval.requested is written once per request."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from agent.run.studio import studio_graph

    monkeypatch.setenv("HYPOLOOP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HYPOLOOP_TRANSCRIPT_DIR", str(tmp_path / "tr"))
    graph = studio_graph(InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    out = graph.invoke({"case_ref": "lab:glm5-nvfp4-sm120"}, config)
    req = out["__interrupt__"][0].value
    assert req["kind"] == "approval" and req["experiment"]["purpose"] == "baseline" and req["error"] is None
    out = graph.invoke(Command(resume={"decision": "edit", "set": ["--disable-cuda-graph"]}), config)
    again = out["__interrupt__"][0].value
    assert again["experiment"]["id"] == req["experiment"]["id"]
    assert "baseline run changes nothing" in again["error"]
    out = graph.invoke(Command(resume={"decision": "approve", "experiment_id": "exp-0000000000"}), config)
    assert "is waiting for approval" in out["__interrupt__"][0].value["error"]
    out = graph.invoke(Command(resume={"decision": "stop", "reason": "enough"}), config)
    assert out["conclusion"]["status"] == "stopped" and "enough" in out["conclusion"]["reason"]
    events = [e for e in read_transcript(tmp_path / "tr" / "t1.jsonl")]
    types = [e.type for e in events]
    assert "server.launched" not in types
    assert types.count("approval.requested") == 3 and types.count("approval.refused") == 2
    assert [e.data["request"] for e in events if e.type == "approval.requested"] == [1, 2, 3]


def test_studio_threads_on_two_worlds_each_get_their_own_host_and_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One graph serves every LangGraph Studio thread: two runs on two lab worlds, interleaved, each see
    their own host (fingerprint), launch their own server and write their own transcript."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from agent.run.studio import ThreadRuntimes, studio_graph

    monkeypatch.setenv("HYPOLOOP_LAB_TIME_SCALE", "0.004")
    runtimes = ThreadRuntimes(tmp_path / "tr", tmp_path / "home")
    graph = studio_graph(InMemorySaver(), runtimes)
    worlds = {"a": "glm5-nvfp4-sm120", "b": "cuda-graph-oom"}
    configs = {t: {"configurable": {"thread_id": t}} for t in worlds}
    try:
        for t, world in worlds.items():  # both wait for their baseline's approval
            out = graph.invoke({"case_ref": f"lab:{world}"}, configs[t])
            assert out["__interrupt__"][0].value["experiment"]["purpose"] == "baseline"
        for t in worlds:
            out = graph.invoke(Command(resume={"decision": "approve"}), configs[t])
            assert out["__interrupt__"], f"thread {t}: {out.get('conclusion')}"
        for t in worlds:
            out = graph.invoke(Command(resume={"decision": "stop"}), configs[t])
            assert out["conclusion"]["status"] == "stopped"
    finally:
        runtimes.close()
    seen = {}
    for t in worlds:
        events = list(read_transcript(tmp_path / "tr" / f"{t}.jsonl"))
        assert {e.run_id for e in events} == {t}
        fp = next(e.data for e in events if e.type == "host.fingerprint")
        launched = [e.data for e in events if e.type == "server.launched"]
        outcome = next(e.data for e in events if e.type == "outcome")
        assert len(launched) == 1 and f"/runs/{t}/" in launched[0]["log"]
        assert outcome["experiment_id"] == launched[0]["experiment_id"]
        seen[t] = (fp["gpu_name"], fp["gpu_count"], outcome["stage"])
    assert seen["a"][:2] == ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 8)
    assert seen["b"][:2] == ("NVIDIA L40S", 4)
    assert seen["a"][2] != seen["b"][2]  # NaN at the first decode vs. out of memory while loading


# ------------------------------------------------------------------------------------------ terminal


def test_interactive_session_approves_edits_and_stops(tmp_path: Path) -> None:
    import pexpect  # a dev dependency (pyproject.toml)

    env = dict(os.environ)
    env.update(
        {
            "HYPOLOOP_HOME": str(tmp_path / "home"),
            "HYPOLOOP_LAB_TIME_SCALE": "0.004",
            "NO_COLOR": "1",
            "TERM": "dumb",
            "COLUMNS": "200",
        }
    )
    child = pexpect.spawn(
        HYPOLOOP[0],
        [*HYPOLOOP[1:], "run", "lab:glm5-nvfp4-sm120", "--transcript-dir", "tr"],
        cwd=str(tmp_path),
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
    )
    try:
        child.expect(r"approve experiment 1\?")
        child.expect(r"\[a\]pprove / \[r\]eject / \[h\]ypotheses / \[s\]top: ")  # a baseline: nothing to edit
        child.sendline("a")  # the baseline run
        child.expect(r"approve experiment 2\?")
        child.expect("--kv-cache-dtype: \\(unset\\) → bf16")
        child.expect(r"\[s\]top: ")
        child.sendline("e")
        child.expect("one change")
        child.sendline("--kv-cache-dtype bfloat16 --attention-backend triton")
        child.expect("edit refused: an experiment changes exactly one variable")
        child.expect("one change")  # asked for the change again, nothing ran
        child.sendline("bfloat16")  # a new value for the proposed variable
        child.expect("edited: --kv-cache-dtype: \\(unset\\) → bfloat16")
        child.expect("outcome: ok")
        child.expect(r"approve experiment 3\?")  # the confirmation run
        child.expect(r"\[s\]top: ")
        child.sendline("s")
        child.expect("status +stopped")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    transcript = next((tmp_path / "tr").glob("*.jsonl"))
    events = list(read_transcript(transcript))
    decided = [e.data for e in events if e.type == "approval.decided"]
    assert [d["decision"] for d in decided] == ["approve", "edit", "stop"]
    assert decided[1]["change"]["after"] == "bfloat16"
    launched = [e.data["experiment_id"] for e in events if e.type == "server.launched"]
    assert launched == [decided[0]["experiment_id"], decided[1]["edited_experiment_id"]]
    conclusion = next(e.data for e in events if e.type == "conclusion")
    assert conclusion["status"] == "stopped" and conclusion["edited"]
    json.dumps(conclusion)
