"""The benchmark runs end to end on one world (the real agent, the baselines, the lab server) and reports
a table and JSON with the targets; ddmin and the human sequence behave as described."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.domain.models import Baseline, Change
from agent.planning.catalog import load_catalog
from bench.launcher import LaunchRecord
from bench.method_result import LaunchCache
from bench.random_search import plausible_changes, random_expectation
from bench.run import run_bench
from bench.worlds import discover, is_root_fix
from tools.flags import parse_help

REPO = Path(__file__).resolve().parents[1]
HELP = parse_help((REPO / "tests" / "data" / "help_sglang_0.5.9.txt").read_text(), source="fixture")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_")}
    env["COLUMNS"] = "160"
    return env


def test_bench_runs_on_one_world_and_prints_json_with_targets(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--worlds",
            "triton-ptxas-sm120",
            "--seeds",
            "2",
            "--json",
            "--quiet",
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    world = out["worlds"]["triton-ptxas-sm120"]
    agent, rnd = world["agent"], world["random"]
    assert (
        agent["correct_root_cause"] is True
        and agent["found"] == "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas"
    )
    assert agent["launches"] >= 2 and agent["host_seconds"] > 0 and agent["wall_seconds"] > 0
    assert rnd["launches"] > agent["launches"] and rnd["seeds"] == 2 and len(rnd["runs"]) == 2
    # A deterministic world: every plausible change launched once, the exact expectation reported.
    n, k = rnd["plausible_changes"], rnd["working_changes"]
    assert rnd["estimate"] == "exact" and k >= 1 and rnd["real_launches"] == n + 1
    assert rnd["launches"] == round(1 + (n + 1) / (k + 1), 2)
    assert "human" not in world and "ddmin" not in world  # no human session and no known-good finding here
    assert out["agent_detection_delay_s"]["median"] < 0.2
    assert out["agent_overhead_per_step_ms"]["steps"] == agent["launches"]
    names = [t["target"] for t in out["targets"]]
    assert "triton-ptxas-sm120: agent launches <= 1/2 of random's mean" in names
    assert any(n.startswith("agent overhead per step") for n in names)
    rows = {t["target"]: t for t in out["targets"]}
    assert rows["agent correct on >= 90% of the development worlds"]["measured"] == "1/1 (100%)"
    assert rows["agent ends on a root fix on >= 80% of the development worlds whose truth has one"]["met"]
    bound = rows["agent launches <= chain length + 3 on every development world"]
    assert bound["met"] == (agent["launches"] <= 4)


def test_a_case_refused_as_bad_input_is_a_miss_not_a_crash(tmp_path: Path) -> None:
    """A world whose case hypoloop refuses before any launch (an illegal value of a flag the host's --help lists)
    scores as a miss with the refusal's reason; the bench goes on and prints its table."""
    world = tmp_path / "refused-world"
    shutil.copytree(REPO / "lab" / "worlds" / "llama8b-a100", world)
    case = world / "case.toml"
    text = case.read_text()
    assert '"--mem-fraction-static" = 0.85' in text
    case.write_text(text.replace('"--mem-fraction-static" = 0.85', '"--mem-fraction-static" = "lots"', 1))
    r = subprocess.run(
        [sys.executable, "-m", "bench", "--worlds", str(world), "--methods", "agent", "--json", "--quiet"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    agent = json.loads(r.stdout)["worlds"]["refused-world"]["agent"]
    assert agent["correct_root_cause"] is False and agent["launches"] == 0
    assert "refused" in agent["status"] and "--mem-fraction-static" in agent["status"], agent


class _TableLauncher:
    """Serves when the configuration sets one of ``working`` (flag name -> value); costs 10 host-s."""

    def __init__(self, working: dict[str, object]) -> None:
        self.working = working
        self.launches = 0

    def launch(self, flags: dict[str, object], env: dict[str, str]) -> LaunchRecord:
        self.launches += 1
        ok = any(flags.get(name) == value for name, value in self.working.items())
        return LaunchRecord(ok, "ok" if ok else "crash", 10.0, 0.01)


def test_random_exact_expectation_equals_the_mean_over_every_order() -> None:
    """The bench's random figures are the mean over all orders of the plausible changes: checked
    against brute force over every permutation of six changes, two of which work (one a root fix)."""
    world = next(w for w in discover(["gemma3-l4"]))
    changes = [
        Change(kind="flag", name="--dtype", before="float16", after=v)
        for v in ("bfloat16", "float32", "half")
    ] + [
        Change(kind="flag", name=f"--x{i}", before=None, after=True) for i in range(3)
    ]
    launcher = _TableLauncher({"--dtype": "bfloat16", "--x1": True})
    # --dtype float32 does not serve here (the table says so), so k = 2: bfloat16 (root) and --x1.
    cache = LaunchCache(launcher, enabled=True, seed_env=dict)  # type: ignore[arg-type]
    exp = random_expectation(world, cache, changes)
    orders = list(itertools.permutations(changes))
    lengths, correct = [], 0
    for order in orders:
        i = next(i for i, c in enumerate(order) if c.name in ("--x1",) or c.after == "bfloat16")
        lengths.append(1 + i + 1)
        correct += order[i].after == "bfloat16"
    assert exp.working == 2 and exp.correct == 1
    assert exp.launches == pytest.approx(sum(lengths) / len(orders)) == pytest.approx(1 + 7 / 3)
    assert exp.rate == pytest.approx(correct / len(orders)) == pytest.approx(0.5)
    assert exp.host_s == pytest.approx(10.0 * sum(lengths) / len(orders))
    assert launcher.launches == 1 + len(changes)  # each configuration once, however many orders


def test_human_sequence_and_ddmin_on_the_worlds_that_have_them(tmp_path: Path) -> None:
    res = run_bench(["glm5-nvfp4-sm120", "cuda-graph-oom"], methods=("human", "ddmin"), workdir=tmp_path)
    glm = {w.world: w for w in res.worlds}["glm5-nvfp4-sm120"].methods
    human = glm["human"]
    assert human.launches == 6 and human.correct and human.found == "--kv-cache-dtype bf16"
    assert glm["ddmin"].correct is False  # the known-good Kimi settings do not fix GLM-5
    ddmin = {w.world: w for w in res.worlds}["cuda-graph-oom"].methods["ddmin"]
    assert ddmin.correct and ddmin.found == "--mem-fraction-static 0.85"
    assert ddmin.extra["minimal"] == ["--mem-fraction-static: 0.9 → 0.85"]


def test_random_baseline_draws_from_catalog_values_flag_choices_and_findings() -> None:
    changes = plausible_changes(
        Baseline(flags={"--attention-backend": "triton"}), load_catalog(), HELP, findings=[]
    )
    keys = {c.key() for c in changes}
    assert 'env:TRITON_PTXAS_PATH="/usr/local/cuda/bin/ptxas"' in keys
    assert 'flag:--attention-backend="flashinfer"' in keys and 'flag:--attention-backend="triton"' not in keys
    assert not any("ascend" in k or "intel" in k for k in keys)  # other vendors' backends are not plausible
    assert len(keys) == len(changes) > 30


def test_scoring_tells_root_fixes_from_workarounds() -> None:
    world = next(
        w for w in discover(["triton-ptxas-sm120", "kv-pool-no-room"]) if w.name == "triton-ptxas-sm120"
    )
    assert is_root_fix(world, "env", "TRITON_PTXAS_PATH", "/usr/local/cuda/bin/ptxas")
    assert not is_root_fix(world, "flag", "--disable-cuda-graph", True)
    kv = discover(["kv-pool-no-room"])[0]
    assert is_root_fix(kv, "flag", "--mem-fraction-static", "0.93")  # any working value of a numeric fix


def test_chains_are_scored_link_by_link_against_the_truth() -> None:
    from bench.worlds import score_run

    world = discover(["qwen3-next-b200x4"])[0]
    base = world.case.baseline
    passed = Baseline(
        flags={k: v for k, v in base.flags.items() if k not in ("--quantization", "--attention-backend")},
        env={"https_proxy": base.env["https_proxy"]},
    )
    last = ("env", "http_proxy", None)
    assert score_run(world, "isolated", last, passed).correct
    two_links = Baseline(flags={**passed.flags, "--attention-backend": "triton"}, env=dict(base.env))
    score = score_run(world, "isolated", ("flag", "--attention-backend", "triton"), two_links)
    assert not score.correct and score.wrong_isolated and score.why == "chain 2/3 links"
    workaround = Baseline(flags={**passed.flags, "--skip-server-warmup": True}, env=dict(base.env))
    assert not score_run(world, "isolated", ("flag", "--skip-server-warmup", True), workaround).correct
    assert not score_run(world, "not_isolated", None, None).correct


def test_not_isolated_needs_the_package_named_and_the_control_needs_nothing_blamed() -> None:
    from bench.worlds import score_run

    kernel = discover(["coder-lite-h100x2"])[0]
    assert score_run(kernel, "not_isolated", None, None, "implicated package: sgl_kernel").correct
    assert not score_run(kernel, "not_isolated", None, None, "nothing left to try").correct
    wrong = score_run(kernel, "isolated", ("flag", "--tp-size", "1"), None)
    assert not wrong.correct and wrong.wrong_isolated
    control = discover(["llama8b-a100"])[0]
    assert score_run(control, "not_isolated", None, None).correct
    blamed = score_run(control, "isolated", ("flag", "--mem-fraction-static", "0.8"), None)
    assert not blamed.correct and blamed.wrong_isolated
    gemma = discover(["gemma3-l4"])[0]
    assert is_root_fix(gemma, "flag", "--dtype", None)  # removing the flag: auto, the checkpoint's bf16
    assert not is_root_fix(gemma, "flag", "--dtype", "float32")  # a costly workaround


def test_the_empty_catalog_folder_empties_every_file_that_maps_a_symptom_to_a_remedy(tmp_path: Path) -> None:
    from bench.run import KNOWLEDGE_DIR, empty_catalog_knowledge

    folder = empty_catalog_knowledge(tmp_path)
    assert {p.name for p in folder.glob("*.toml")} == {p.name for p in KNOWLEDGE_DIR.glob("*.toml")}
    assert load_catalog(folder / "hypotheses.toml") == []
    # the symptom-class rules are a second answer catalog (issue 20): emptied too
    assert load_catalog(KNOWLEDGE_DIR / "symptoms.toml") and load_catalog(folder / "symptoms.toml") == []
    assert (folder / "signatures.toml").read_text() == (KNOWLEDGE_DIR / "signatures.toml").read_text()


def test_the_catalog_used_check_sees_a_symptom_class_rule(tmp_path: Path) -> None:
    """A run whose ledger drew a hypothesis from symptoms.toml drew on an answer catalog: the check the
    empty-catalog rows rely on says so (it could not see those entries before)."""
    from agent.domain.models import Hypothesis
    from agent.record.transcript import Transcript
    from agent.record.wire import to_payload
    from bench.methods import read_ending
    from bench.worlds import discover

    (world,) = discover(["triton-ptxas-sm120"])
    rule = load_catalog(Path(__file__).parent.parent / "knowledge" / "symptoms.toml")[0]

    def used(hid: str) -> bool:
        path = tmp_path / f"{hid.replace(':', '_')}.jsonl"
        h = Hypothesis(id=hid, statement=rule.statement, component=rule.component, prior=0.1, posterior=0.1)
        Transcript(path, "r").emit("hypothesis.added", to_payload("hypothesis.added", h), node="hypothesize")
        return bool(read_ending(world, path, {})["catalog_used"])

    assert used(f"symptom:{rule.id}") is True
    assert used("remedy:--mem-fraction-static:raise") is False  # read off the log, not a catalog


def test_random_baseline_also_reverts_the_baselines_own_settings() -> None:
    baseline = Baseline(flags={"--dtype": "float16", "--tp-size": "2"}, env={"http_proxy": "http://p:3128"})
    keys = {c.key() for c in plausible_changes(baseline, load_catalog(), HELP, findings=[])}
    assert {"flag:--dtype=null", "env:http_proxy=null", 'flag:--dtype="bf16"'} <= keys
    assert "flag:--tp-size=null" not in keys  # the parallel layout is part of the deployment's identity


def test_sealed_worlds_stay_out_of_the_default_run_and_run_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default world set is the development worlds only; ``--sealed`` and ``--all-worlds`` add the
    sealed half (lab/worlds-sealed), which a bare name also reaches; the flags refuse --worlds.

    The sealed folder is a temporary one holding a copy of a development world under another name, so the
    test neither reads the sealed half in force nor depends on whether one is committed (between halves
    the folder is empty)."""
    import bench.worlds
    from bench.worlds import WORLDS_DIR

    SEALED_DIR = tmp_path / "worlds-sealed"
    source = WORLDS_DIR / sorted(p.name for p in WORLDS_DIR.iterdir() if (p / "case.toml").is_file())[0]
    shutil.copytree(source, SEALED_DIR / "copied-sealed-world")
    monkeypatch.setattr(bench.worlds, "SEALED_DIR", SEALED_DIR)
    dev = {w.case_path.parent for w in discover()}
    sealed = {w.case_path.parent for w in discover(None, "sealed")}
    assert sealed, "no sealed worlds found"
    assert all(p.parent == SEALED_DIR for p in sealed)
    assert all(p.parent == WORLDS_DIR for p in dev)
    assert not dev & sealed
    assert [w.case_path.parent for w in discover(None, "all")] == [w.case_path.parent for w in discover()] + [
        w.case_path.parent for w in discover(None, "sealed")
    ]
    one = sorted(sealed)[0]
    (found,) = discover([one.name])
    assert found.case_path.parent == one and found.name == one.name
    with pytest.raises(ValueError, match="world set"):
        discover(None, "everything")
    r = subprocess.run(
        [sys.executable, "-m", "bench", "--sealed", "--worlds", "any-world"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(),
        timeout=60,
    )
    assert r.returncode == 2 and "cannot be combined" in r.stderr


# --- real-engine cases (bench/real, issue 22) --------------------------------------------------------


def test_every_real_case_loads_with_its_truth_and_a_launch_limit(tmp_path: Path) -> None:
    from bench.real import discover

    cases = discover(out_dir=tmp_path, root=tmp_path / "bed")
    sglang = [c for c in cases if c.engine == "sglang"]
    assert len([c for c in sglang if c.expect != "not_reproduced"]) >= 6
    assert any(c.chain for c in sglang) and any(c.expect == "not_isolated" for c in sglang)
    for c in cases:
        text = c.case_path.read_text()
        assert "{engines}" not in text and str(tmp_path / "bed") in text
        assert not (c.case_path.parent / "truth.toml").exists()  # the agent never sees the truth
        assert c.case.budget.experiments <= c.max_launches
        assert all(p.answer for p in c.case.probes)  # judged against the healthy model's answers


def test_bench_real_without_the_bed_says_so_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "HYPOLOOP_ENGINES": str(tmp_path / "no-bed")}
    r = subprocess.run([sys.executable, "-m", "bench", "--real", "--json"], capture_output=True, text=True,
                       env=env, timeout=120, cwd=str(Path(__file__).resolve().parent.parent))
    assert r.returncode == 0
    assert json.loads(r.stdout)["skipped"].startswith(f"the real-engine bed at {tmp_path / 'no-bed'} is not built")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_the_bench_never_writes_into_the_users_hugging_face_cache(tmp_path: Path) -> None:
    # The lab writes each world's model config.json into the hub cache of the server's environment;
    # with HF_HOME unset that is ~/.cache/huggingface, the developer's real cache. The bench runs in
    # its own.
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in _env().items() if k not in ("HF_HOME", "HF_HUB_CACHE")}
    env["HOME"] = str(home)
    r = subprocess.run(
        [sys.executable, "-m", "bench", "--worlds", "triton-ptxas-sm120", "--methods", "agent",
         "--json", "--quiet", "--keep", str(tmp_path / "keep")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["worlds"]["triton-ptxas-sm120"]["agent"]["launches"] >= 1
    assert not (home / ".cache" / "huggingface").exists()
    assert list((tmp_path / "keep" / "hf" / "hub").glob("models--*/snapshots/*/config.json"))


def test_a_real_case_holder_listens_on_its_port_during_the_run_and_is_gone_after(tmp_path: Path) -> None:
    import socket

    from bench.real import Hold, discover, holding
    from bench.worlds import score_run

    with socket.socket() as s:  # a port the OS says is free
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hold = Hold(port, ("{python}", "-m", "http.server", str(port), "--bind", "127.0.0.1"))

    def listens() -> bool:
        with socket.socket() as c:
            return c.connect_ex(("127.0.0.1", port)) == 0

    with holding((hold,)):
        assert listens()
        with pytest.raises(ValueError, match=f"port {port} is already in use"), holding((hold,)):
            pass
    assert not listens()
    # the port cases say what holds the port, and their ending must name it
    taken = [c for c in discover(out_dir=tmp_path, root=tmp_path / "bed") if c.holds]
    assert {c.engine for c in taken} >= {"sglang", "vllm"}
    for c in taken:
        assert not (c.case_path.parent / "before.toml").exists()  # the agent never sees it
        port_named = f"port {c.holds[0].port}"
        assert score_run(c, "not_isolated", None, None, f"the case's --{port_named} was already taken").correct  # type: ignore[arg-type]
        assert not score_run(c, "not_isolated", None, None, "nothing left to try").correct  # type: ignore[arg-type]


def test_issue_20_targets_per_world_set_name_the_runs_over_the_launch_bound() -> None:
    """The sealed half is held to 80% and the development worlds to 90%; a chain world may take its
    links + 3 launches; a not_isolated world counts for correctness but not for the root-fix share."""
    from bench.issue_targets import issue20_rows
    from bench.method_result import MethodResult
    from bench.run import WorldResult

    def world(name: str, world_set: str, ok: bool, launches: int, links: int = 0, expect: str = "isolated"):
        res = MethodResult(method="agent", correct=ok, launches=launches, host_s=1.0, wall_s=1.0)
        return WorldResult(world=name, expect=expect, methods={"agent": res}, world_set=world_set, chain_links=links)

    dev = [world(f"d{i}", "dev", True, 3) for i in range(8)]
    dev += [world("chain", "dev", True, 5, links=2), world("pkg", "dev", False, 1, expect="not_isolated")]
    sealed = [world(f"s{i}", "sealed", i < 4, 4 + (i == 0)) for i in range(5)]
    rows = {r.name: r for r in issue20_rows(dev + sealed)}
    got = rows["agent correct on >= 90% of the development worlds"]
    assert (got.measured, got.met) == ("9/10 (90%)", True)
    got = rows["agent ends on a root fix on >= 80% of the development worlds whose truth has one"]
    assert (got.measured, got.met) == ("9/9 (100%)", True)
    assert rows["agent launches <= chain length + 3 on every development world"].met  # the chain's 5 <= 2 + 3
    got = rows["agent correct on >= 80% of the sealed worlds"]
    assert (got.measured, got.met) == ("4/5 (80%)", True)
    got = rows["agent launches <= chain length + 3 on every sealed world"]
    assert (got.measured, got.met) == ("s0 (5 > 4)", False)
    assert not any("agent-empty" in name for name in rows)


def test_the_empty_catalog_run_faces_the_same_lab_draws_as_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flaky world's n-th launch is live or not alike for the agent and its empty-catalog ablation, whether
    or not the agent ran first: the ablation's launches are numbered from 0 under the agent's seed (its own
    lab counter), not after the agent's. The seeds are those the lab itself draws (``lab.chance``)."""
    from bench import run as bench_run
    from bench.method_result import MethodResult
    from lab.chance import launch_seed

    (world,) = discover(["r1-mxfp4-mi355x-dp8"])
    firsts: dict[str, list[str]] = {}

    def fake_agent(w, *, transcripts, seed, knowledge=None, method="agent"):  # type: ignore[no-untyped-def]
        env = dict(os.environ) | {"HYPOLOOP_LAB_SEED": seed}
        firsts[method] = [launch_seed(env) for _ in range(3)]  # three launches, as the lab numbers them
        return MethodResult(method=method, correct=True, launches=3, host_s=0.0, wall_s=0.0)

    monkeypatch.setattr(bench_run, "run_agent", fake_agent)
    monkeypatch.setenv("HYPOLOOP_LAB_STATE", str(tmp_path / "lab-state"))
    bench_run._run_agents(world, tmp_path, ("agent", "agent-empty"), lambda _s: None, tmp_path / "k")
    assert firsts["agent"] == firsts["agent-empty"] == [f"bench:{world.name}:agent:{n}" for n in range(3)]
    assert os.environ["HYPOLOOP_LAB_STATE"] == str(tmp_path / "lab-state")  # restored afterwards
