"""How a run ends (issue 10, point 7): a fix that a later re-run refuted is never ``isolated``; an
intermittent failure needs two passing confirmations; ``not_isolated`` names the implicated component
and package."""

from __future__ import annotations

from typing import Any

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.domain.models import Baseline, Change, Conclusion, Experiment, Outcome
from agent.run.nodes.analyze import classify_outcome
from agent.run.nodes.conclude import build_conclusion
from tools.probes import ProbeResult
from tools.signatures import load_signatures

SITE = "/usr/local/lib/python3.12/dist-packages"
BASE = Baseline(flags={"--tp-size": "2"})
FIX = Change(kind="flag", name="--cuda-graph-max-bs", after="16")
#: every CUDA graph off: a broad switch-off (knowledge/switches.toml [[broad]])
EAGER = Change(kind="flag", name="--disable-cuda-graph", after=True)


def _case(**extra: Any) -> dict[str, Any]:
    return Case.model_validate({"name": "c", "model": {"path": "org/M"}, "baseline": BASE.model_dump(), **extra}).model_dump(mode="json")


def _out(exp: Experiment, ok: bool, log: str = "") -> Outcome:
    probes = [ProbeResult(probe_id="chat", ok=ok, status="ok" if ok else "connection_error", latency_s=0.1)]
    raw = RawEvidence.from_log(exp.id, log or "[t] The server is fired up and ready to roll!\n", load_signatures(), "x.log")
    return classify_outcome(raw.model_copy(update={"status": "ready", "probes": probes}))


def _state(runs: list[tuple[Experiment, bool]], **case: Any) -> dict[str, Any]:
    return {
        "case": _case(**case),
        "experiments": [e.model_copy(update={"status": "done"}).model_dump(mode="json") for e, _ in runs],
        "outcomes": [_out(e, ok).model_dump(mode="json") for e, ok in runs],
        "hypotheses": [],
        "launches": len(runs),
        "host_seconds": 100.0,
        "conclude_reason": "fix found and confirmed",
    }


def _exp(purpose: str, baseline: Baseline, change: Change | None = None, attempt: int = 1) -> Experiment:
    return Experiment(id=Experiment.make_id(baseline, change, purpose, attempt=attempt), purpose=purpose,  # type: ignore[arg-type]
                      baseline=baseline, change=change, attempt=attempt)


def test_a_fix_whose_second_confirmation_failed_is_not_isolated() -> None:
    base = _exp("baseline", BASE)
    test = _exp("test", BASE, FIX)
    first = _exp("confirm", test.config())
    second = _exp("confirm", test.config(), attempt=2)
    c = build_conclusion(_state([(base, False), (test, True), (first, True), (second, False)]))  # type: ignore[arg-type]
    assert c.status == "not_isolated"
    assert "did not hold" in c.reason and second.id in c.reason


def test_an_intermittent_failure_seen_once_needs_four_passing_confirmations() -> None:
    """The case says the failure does not show on every run: with the one failure the run saw and the pass
    the user saw, a broken configuration passes a launch with chance about 1/2 (Laplace), so the fix and
    4 re-runs (3%) are needed before it is isolated, 3 re-runs (6%) are not enough (issue 20, point 6)."""
    base = _exp("baseline", BASE)
    test = _exp("test", BASE, FIX)
    runs = [(base, False), (test, True)]
    for attempt in range(1, 4):
        runs.append((_exp("confirm", test.config(), attempt=attempt), True))
        assert build_conclusion(_state(runs, reproduce={"intermittent": True})).status == "not_isolated"  # type: ignore[arg-type]
    fourth = _exp("confirm", test.config(), attempt=4)
    c = build_conclusion(_state([*runs, (fourth, True)], reproduce={"intermittent": True}))  # type: ignore[arg-type]
    assert c.status == "isolated" and c.confirmation_experiment_id == fourth.id
    # without the case saying so, one confirmation is enough
    assert build_conclusion(_state(runs[:3])).status == "isolated"  # type: ignore[arg-type]


def test_not_isolated_names_the_implicated_component_and_package() -> None:
    log = f"""[t TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/sglang/srt/layers/attention/flashinfer_backend.py", line 300, in forward_decode
    self.decode_wrapper.run(q, kv)
  File "{SITE}/flashinfer/decode.py", line 1200, in run
    raise RuntimeError("BatchDecodeWithPagedKVCache failed with error code an illegal memory access was encountered")
RuntimeError: BatchDecodeWithPagedKVCache failed with error code an illegal memory access was encountered
"""
    base = _exp("baseline", BASE)
    state = _state([(base, False)])
    state["outcomes"] = [_out(base, False, log).model_dump(mode="json")]
    state["conclude_reason"] = "no untested change is left"
    c = build_conclusion(state)  # type: ignore[arg-type]
    assert c.status == "not_isolated" and c.implicated is not None
    assert c.implicated["package"] == "flashinfer"
    assert c.implicated["component"] == "layers.attention.flashinfer_backend"
    assert "illegal memory access" in c.implicated["evidence"]


def test_a_failure_that_never_showed_blames_nothing() -> None:
    base = _exp("baseline", BASE)
    again = _exp("baseline", BASE, attempt=2)
    state = _state([(base, True), (again, True)])
    state["conclude_reason"] = "the failure could not be reproduced"
    c = build_conclusion(state)  # type: ignore[arg-type]
    assert c.status == "not_isolated" and c.implicated is None and c.fix is None


def test_an_import_error_at_import_time_ends_after_the_baseline_naming_the_package() -> None:
    from agent.planning.catalog import load_catalog
    from agent.planning.planner import PlannerView, RulePlanner

    log = f"""Traceback (most recent call last):
  File "{SITE}/sglang/launch_server.py", line 35, in <module>
    from sglang.srt.entrypoints.http_server import launch_server
  File "{SITE}/sgl_kernel/__init__.py", line 5, in <module>
    common_ops = _load_architecture_specific_ops()
  File "{SITE}/sgl_kernel/load_utils.py", line 188, in _load_architecture_specific_ops
    raise ImportError(error_msg)
ImportError: {SITE}/sgl_kernel/sm90/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEab
"""
    base = _exp("baseline", BASE)
    raw = RawEvidence.from_log(base.id, log, load_signatures(), "x.log").model_copy(update={"status": "exited"})
    view = PlannerView(case=Case.model_validate(_case()), experiments=[base.model_copy(update={"status": "done"})],
                       outcomes=[classify_outcome(raw)], launches=1)
    planner = RulePlanner(load_catalog(), None)
    proposal = planner.propose(view, planner.history(view))
    assert proposal.experiment is None
    assert "imports sgl_kernel" in (proposal.conclude_reason or "")


def test_a_failed_import_rules_out_the_flag_only_hypotheses_with_that_evidence(tmp_path: Any) -> None:
    """On a host whose kernel package fails to import before SGLang reads its arguments, the ending
    lists the flag-only hypotheses as ruled out by that (not as open and "not tested" beside "no flag can
    fix it"), in the --json result too, and names the package."""
    import json

    from clirun import run_cli

    r = run_cli(tmp_path, "run", "lab:coder-lite-h100x2", "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.002")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "not_isolated" and out["implicated"]["package"] == "sgl_kernel"
    ruled = {x["id"]: x for x in out["ruled_out"]}
    assert "component:--attention-backend" in ruled
    assert any("no flag reaches the failing code" in d for d in ruled["component:--attention-backend"]["evidence"])
    assert not any(u["id"].startswith("component:") for u in out["untested"])
    # the conclusion box gives the hypotheses ruled out by that one piece of evidence one row, not a row each
    (transcript,) = (tmp_path / "transcripts").glob("*.jsonl")
    shown = run_cli(tmp_path, "replay", str(transcript), COLUMNS="200").stdout
    box = shown[shown.rindex("status"):]
    assert " ".join(box.split()).count("no flag reaches the failing code") == 1, box
    assert f"({len(ruled)} hypotheses)" in " ".join(box.split()) or len(ruled) == 1, box


def test_a_broad_switch_off_that_served_and_held_is_a_workaround_never_isolated() -> None:
    """Eager mode served and its re-run held, but it turns every CUDA graph off instead of repairing the
    part that fails: the run ends not_isolated naming it as the workaround (issue 20, points 3 and 5),
    whatever proposed it (no catalog entry calls it a workaround here); a narrow change on the same
    history is isolated."""
    base = _exp("baseline", BASE)
    for change, status in ((EAGER, "not_isolated"), (FIX, "isolated")):
        test = _exp("test", BASE, change)
        c = build_conclusion(_state([(base, False), (test, True), (_exp("confirm", test.config()), True)]))  # type: ignore[arg-type]
        assert c.status == status, c.reason
    eager = _exp("test", BASE, EAGER)
    c = build_conclusion(_state([(base, False), (eager, True), (_exp("confirm", eager.config()), True)]))  # type: ignore[arg-type]
    assert c.fix is None and "a broad switch-off" in c.reason and "only a workaround" in c.reason and "--disable-cuda-graph" in c.reason
    assert [a["change"] for a in c.alternatives if a["workaround"]] == [EAGER.describe()]
    # adopted past a first blocker, the switch-off makes the narrow fix behind it no root fix either
    past = Baseline(flags={**BASE.flags, "--disable-cuda-graph": True})
    second = _exp("test", past, FIX)
    runs = [(base, False), (eager, False), (_exp("baseline", past), False), (second, True),
            (_exp("confirm", second.config()), True)]
    assert build_conclusion(_state(runs)).status == "not_isolated"  # type: ignore[arg-type]


def test_a_workaround_found_past_a_blocker_names_the_blocker_it_needs() -> None:
    """The user's own setting was dropped to get past a first error, and only a switch-off served behind
    it: the ending names both, the blocker first, so the user can rebuild the configuration that served;
    it does not repeat the design's "fix found and confirmed" after saying no root fix was found."""
    own = Change(kind="flag", name="--tp-size", before="2", after=None)
    past = BASE.apply(own)
    base, blocker = _exp("baseline", BASE), _exp("test", BASE, own)
    eager = _exp("test", past, EAGER)
    runs = [(base, False), (blocker, False), (eager, True), (_exp("confirm", eager.config()), True)]
    state = _state(runs)
    state["outcomes"][1] = _out(blocker, False, "[t TP0] Load weight begin. avail mem=40 GB\n").model_dump(mode="json")
    c = build_conclusion(state)  # type: ignore[arg-type]
    assert c.status == "not_isolated", c.reason
    assert [b["change"] for b in c.blockers] == [own.describe()]
    assert f"{EAGER.describe()} past {own.describe()}" in c.reason
    assert "fix found and confirmed" not in c.reason


def test_a_confirmation_without_the_cases_full_load_does_not_confirm() -> None:
    """With ``[reproduce] concurrency``, a re-run that did not send the case's load is no confirmation
    (issue 20, point 6: a second blocker may need the full load to show)."""
    from agent.planning.observations import load_probe_for

    case = Case.model_validate(_case(reproduce={"concurrency": 8}))
    load = [load_probe_for(case, 8)]
    base = _exp("baseline", BASE).model_copy(update={"probes": load})
    test = _exp("test", BASE, FIX).model_copy(update={"probes": load})
    bare = _exp("confirm", test.config())
    assert build_conclusion(_state([(base, False), (test, True), (bare, True)], reproduce={"concurrency": 8})).status \
        == "not_isolated"  # type: ignore[arg-type]
    loaded = bare.model_copy(update={"probes": load})
    assert build_conclusion(_state([(base, False), (test, True), (loaded, True)], reproduce={"concurrency": 8})).status \
        == "isolated"  # type: ignore[arg-type]


# ----- the user's intent kept (issue 20, point 5) ------------------------------------------------------

KV = Change(kind="flag", name="--kv-cache-dtype", before="fp8_e4m3", after="bf16")
KV_BASE = Baseline(flags={"--tp-size": "2", "--kv-cache-dtype": "fp8_e4m3"})


def _kv_runs() -> list[tuple[Experiment, bool]]:
    base = _exp("baseline", KV_BASE)
    test = _exp("test", KV_BASE, KV)
    return [(base, False), (test, True), (_exp("confirm", test.config()), True)]


def test_a_fix_that_changes_a_setting_the_user_keeps_is_a_workaround_not_the_fix() -> None:
    state = _state(_kv_runs(), intent={"keep": ["--kv-cache-dtype"]})
    state["case"]["baseline"] = KV_BASE.model_dump(mode="json")
    c = build_conclusion(state)  # type: ignore[arg-type]
    assert c.status == "not_isolated"
    assert "changes the deployment" in c.reason and "--kv-cache-dtype" in c.reason
    assert [a["change"] for a in c.alternatives] == [KV.describe()]


CHUNK = Change(kind="flag", name="--chunked-prefill-size", before="8192", after="4096")
CHUNK_BASE = Baseline(flags={"--tp-size": "2", "--chunked-prefill-size": "8192"})


def _chunk_runs() -> list[tuple[Experiment, bool]]:
    base = _exp("baseline", CHUNK_BASE)
    test = _exp("test", CHUNK_BASE, CHUNK)
    return [(base, False), (test, True), (_exp("confirm", test.config()), True)]


def test_the_description_saying_a_setting_is_needed_keeps_it_too() -> None:
    state = _state(_chunk_runs(), description="We need --chunked-prefill-size 8192 for the latency we promise.")
    state["case"]["baseline"] = CHUNK_BASE.model_dump(mode="json")
    assert build_conclusion(state).status == "not_isolated"  # type: ignore[arg-type]
    # without that sentence the same run isolates it
    plain = _state(_chunk_runs())
    plain["case"]["baseline"] = CHUNK_BASE.model_dump(mode="json")
    assert build_conclusion(plain).status == "isolated"  # type: ignore[arg-type]


def test_a_quantized_kv_cache_the_case_sets_is_kept_but_one_the_engine_chose_is_not() -> None:
    # knowledge/served.toml role "intent": the user's own FP8 KV cache is what they chose for the
    # deployment, so the fix that drops it is a workaround; a case that left the dtype to SGLang ("auto",
    # its default) chose nothing, and the same change is the fix
    own = _state(_kv_runs())
    own["case"]["baseline"] = KV_BASE.model_dump(mode="json")
    c = build_conclusion(own)  # type: ignore[arg-type]
    assert c.status == "not_isolated" and "--kv-cache-dtype" in c.reason and "changes the deployment" in c.reason
    auto = Baseline(flags={"--tp-size": "2", "--kv-cache-dtype": "auto"})
    change = Change(kind="flag", name="--kv-cache-dtype", before="auto", after="bf16")
    base, test = _exp("baseline", auto), _exp("test", auto, change)
    engine = _state([(base, False), (test, True), (_exp("confirm", test.config()), True)])
    engine["case"]["baseline"] = auto.model_dump(mode="json")
    assert build_conclusion(engine).status == "isolated"  # type: ignore[arg-type]


def test_changing_the_parallel_layout_changes_the_deployment_but_dropping_a_redundant_quantization_does_not() -> None:
    layout = Change(kind="flag", name="--tp-size", before="2", after="1")
    base = _exp("baseline", BASE)
    test = _exp("test", BASE, layout)
    c = build_conclusion(_state([(base, False), (test, True), (_exp("confirm", test.config()), True)]))  # type: ignore[arg-type]
    assert c.status == "not_isolated" and "changes the deployment" in c.reason
    qbase = Baseline(flags={"--tp-size": "2", "--quantization": "w8a8_fp8"})
    drop = Change(kind="flag", name="--quantization", before="w8a8_fp8", after=None)
    b2, t2 = _exp("baseline", qbase), _exp("test", qbase, drop)
    state = _state([(b2, False), (t2, True), (_exp("confirm", t2.config()), True)])
    state["case"]["baseline"] = qbase.model_dump(mode="json")
    assert build_conclusion(state).status == "isolated"  # type: ignore[arg-type]


def test_dropping_a_quantization_the_checkpoint_does_not_declare_changes_the_deployment() -> None:
    # The host's config.json is known: a bf16 checkpoint (no quantization_config) quantized online with
    # --quantization fp8. Without the flag SGLang serves bf16 weights, another deployment: that is at
    # most a workaround. On an FP8 checkpoint the same removal keeps what is served.
    qbase = Baseline(flags={"--quantization": "fp8", "--moe-runner-backend": "flashinfer_cutlass"})
    drop = Change(kind="flag", name="--quantization", before="fp8", after=None)
    other = Change(kind="flag", name="--quantization", before="fp8", after="w8a8_fp8")
    for change, ckpt, status in (
        (drop, {"architecture": "M", "keys": "architectures model_type"}, "not_isolated"),
        (other, {"architecture": "M", "keys": "architectures model_type"}, "not_isolated"),
        (drop, {"architecture": "M", "quant_method": "fp8", "keys": "quant_method:fp8"}, "isolated"),
    ):
        b, t = _exp("baseline", qbase), _exp("test", qbase, change)
        state = _state([(b, False), (t, True), (_exp("confirm", t.config()), True)])
        state["case"]["baseline"] = qbase.model_dump(mode="json")
        state["fingerprint"] = {"checkpoint": ckpt}
        c = build_conclusion(state)  # type: ignore[arg-type]
        assert c.status == status, (change.describe(), ckpt, c.reason)
        if status == "not_isolated":
            assert "changes the deployment" in c.reason and "--quantization" in c.reason


def test_dropping_a_format_the_engine_reads_only_from_a_checkpoint_made_in_it_keeps_the_deployment() -> None:
    # AWQ's parameters come from the checkpoint's own files (vLLM 0.32.0 weight_utils.get_quant_config:
    # "Cannot find the config file for awq"): with a checkpoint that declares no quantization, the
    # baseline never served AWQ, so removing the flag serves what the weights are and is the root fix.
    # fp8, which the engine makes online from bf16 weights, stays a change of what is served.
    ckpt = {"architecture": "M", "keys": "architectures model_type"}
    for method, status in (("awq", "isolated"), ("fp8", "not_isolated")):
        c = _ending_of_dropping("--quantization", method, ckpt)
        assert c.status == status, (method, c.reason)


def _ending_of_dropping(flag: str, value: str, checkpoint: dict[str, str]) -> Conclusion:
    """The ending of a run whose baseline sets ``flag value`` and fails, and whose test removing it
    passes and is confirmed, on a host whose checkpoint digest is ``checkpoint``."""
    base = Baseline(flags={flag: value})
    drop = Change(kind="flag", name=flag, before=value, after=None)
    b, t = _exp("baseline", base), _exp("test", base, drop)
    state = _state([(b, False), (t, True), (_exp("confirm", t.config()), True)])
    state["case"]["baseline"] = base.model_dump(mode="json")
    state["fingerprint"] = {"checkpoint": checkpoint}
    return build_conclusion(state)  # type: ignore[arg-type]


def test_a_tensor_parallel_size_that_cannot_split_the_heads_was_never_served() -> None:
    # vLLM 0.32.0: "Total number of attention heads (2) must be divisible by tensor parallel size (3)."
    # Removing --tensor-parallel-size 3 from a 2-head model is the root fix; going from 2 to 1 ranks on a
    # model whose heads 2 ranks split is a change of the parallel layout (a workaround at most).
    ckpt = {"architecture": "M", "num_attention_heads": "2", "keys": "architectures num_attention_heads"}
    for before, status in (("3", "isolated"), ("2", "not_isolated")):
        c = _ending_of_dropping("--tp-size", before, ckpt)
        assert c.status == status, (before, c.reason)


def test_an_alternative_whose_re_run_failed_does_not_hide_the_fix_confirmed_after_it() -> None:
    """After a fix served, another change served by luck and failed its re-run (the failure is flaky); the run
    went back to the first fix and confirmed it. The ending names that fix, with the confirmation that completed
    it, not "the other change did not hold" and no fix at all."""
    other = Change(kind="env", name="SGLANG_USE_CUSTOM_AR", after="0")
    base = _exp("baseline", BASE)
    test = _exp("test", BASE, FIX)
    alt = _exp("test", BASE, other)
    alt_rerun = _exp("confirm", alt.config())
    runs = [(base, False), (test, True), (alt, True), (alt_rerun, False)]
    confirms = [_exp("confirm", test.config(), attempt=n) for n in range(1, 6)]
    c = build_conclusion(_state([*runs, *((e, True) for e in confirms)]))  # type: ignore[arg-type]
    assert c.fix_experiment_id == test.id
    assert c.confirmation_experiment_id in {e.id for e in confirms}
    assert c.status == "isolated" and "did not hold" not in (c.reason or "")
    # without the first fix's confirmations it is not isolated, and the ending says that fix was not confirmed
    c = build_conclusion(_state(runs))  # type: ignore[arg-type]
    assert c.status == "not_isolated" and c.fix_experiment_id is None
    assert test.id in (c.reason or "") and "not confirmed" in (c.reason or "")
