"""Crash-proof runs: ``kill -9`` at any instant, damaged state, leftovers (issue 12).

The kill sweep runs the motivating lab case with ``--auto`` and kills the real ``hypoloop`` process
with SIGKILL right after an event of each type is on disk (``HYPOLOOP_FAULT_KILL``, see
``agent/record/transcript.py``), and a few milliseconds after the events that end a graph step; then it
resumes the run as a user would and checks, for every point: the run ends (finished, or honestly in
error), the launches in the result equal the launches in the transcript, no experiment was launched
twice, and no lab server is left running.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from clirun import live_processes, run_cli, transcript_events

WORLD = "lab:glm5-nvfp4-sm120"
SCALE = "0.002"

#: Every event type a run of WORLD writes (the run is isolated in 3 launches).
KILL_AT = [
    "run.started",
    "tool.call",
    "host.fingerprint",
    "tool.result",
    "knowledge.read",
    "hypothesis.added",
    "experiment.proposed",
    "approval.decided",
    "server.launching",
    "server.launched",
    "observation",
    "server.ready",
    "probe.result",
    "server.stopped",
    "outcome",
    "hypothesis.updated",
    "hypothesis.refuted",
    "baseline.changed",
    "hypothesis.confirmed",
    "design.none",
    "conclusion",
    "run.ended",
]
#: The last event of each graph step, and a few milliseconds after it: the moment the graph moves on
#: and writes its checkpoint (where LangGraph's default "async" durability lost the step).
STEP_ENDS = ["experiment.proposed", "approval.decided", "server.stopped", "outcome", "baseline.changed", "run.ended"]
POINTS = KILL_AT + [f"{t}+5" for t in STEP_ENDS]


_events = transcript_events


def _last_json(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(r.stdout.strip().splitlines()[-1])


def _lab_servers(run_id: str) -> dict[int, str]:
    return live_processes(run_id, only="lab.launch_server")


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_any_instant_then_resume_launches_nothing_twice(tmp_path: Path, point: str) -> None:
    first = run_cli(tmp_path, "run", WORLD, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE,
                    HYPOLOOP_FAULT_KILL=point)
    transcripts = list((tmp_path / "transcripts").glob("*.jsonl"))
    assert len(transcripts) == 1, first.stderr[-2000:]
    transcript = transcripts[0]
    run_id = transcript.stem
    killed = first.returncode == -signal.SIGKILL
    assert killed or first.returncode == 0, first.stderr[-3000:]
    ended_before = any(e["type"] == "run.ended" for e in _events(transcript))
    try:
        if killed and point.startswith(("conclusion", "run.ended")):  # around the last step
            listed = {i["run_id"]: i for i in json.loads(run_cli(tmp_path, "runs", "--json").stdout)}
            if not any(e["type"] == "run.ended" for e in _events(transcript)):
                assert listed[run_id]["status"] != "finished"  # no conclusion is never called finished
        r = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
        assert r.returncode in (0, 1), r.stderr[-3000:]
        result = _last_json(r)
        assert result["status"] in ("isolated", "error", "not_isolated")
        if result["status"] == "error":
            assert result["error"], "an error says why"
        if result["status"] == "not_isolated":
            # Honest too: a server adopted after the kill ran while nobody watched, and that host time
            # counts; at this lab time scale a few wall seconds of a slow machine spend the budget.
            assert "budget spent" in result["reason"], result
    finally:
        left = _lab_servers(run_id)
        for pid in left:
            os.killpg(pid, signal.SIGKILL)
    assert not left, f"servers left running after {point}: {left}"
    events = _events(transcript)
    launched = Counter(e["data"]["experiment_id"] for e in events if e["type"] == "server.launched")
    assert result["launches"] == sum(launched.values())
    assert all(n == 1 for n in launched.values()), f"launched twice after a kill at {point}: {launched}"
    assert not any(e["type"] == "experiment.relaunched" for e in events)
    if killed and not ended_before:  # a run that had ended before the kill is only reported by resume
        assert any(e["type"] == "run.resumed" for e in events)
    runs = {i["run_id"]: i for i in json.loads(run_cli(tmp_path, "runs", "--json").stdout)}
    assert runs[run_id]["status"] == "finished" and not runs[run_id]["leftovers"]


def test_a_killed_run_left_server_is_listed_and_stopped_at_the_next_start(tmp_path: Path) -> None:
    """A local server whose hypoloop process was killed is shown by `runs` and stopped by the next
    `run --auto` (as over SSH), with the stop recorded."""
    first = run_cli(tmp_path, "run", WORLD, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.02",
                    HYPOLOOP_FAULT_KILL="server.launched")
    assert first.returncode == -signal.SIGKILL
    run_id = next((tmp_path / "transcripts").glob("*.jsonl")).stem
    servers = _lab_servers(run_id)
    try:
        assert len(servers) == 1
        listed = {i["run_id"]: i for i in json.loads(run_cli(tmp_path, "runs", "--json").stdout)}
        assert [x["pid"] for x in listed[run_id]["leftovers"]] == list(servers)
        table = run_cli(tmp_path, "runs")
        assert "1 server left running" in table.stdout
        second = run_cli(tmp_path, "run", WORLD, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
        assert second.returncode == 0, second.stderr[-3000:]
        assert not _lab_servers(run_id)
        newest = max((tmp_path / "transcripts").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        stopped = [e["data"] for e in _events(newest) if e["type"] == "host.orphan_stopped"]
        assert [s["pgid"] for s in stopped] == list(servers) and stopped[0]["verified"]
    finally:
        for pid in _lab_servers(run_id):
            os.killpg(pid, signal.SIGKILL)


def test_kill_between_intent_and_launch_record_is_adopted_by_resume(tmp_path: Path) -> None:
    """Killed after the spawn but before server.launched: the transcript has only the intent; resume
    finds the server by its log path and adopts it (one launch, recorded once)."""
    # tool.call is written before the intent; kill 1 ms after server.launching: mid-spawn.
    first = run_cli(tmp_path, "run", WORLD, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.02",
                    HYPOLOOP_FAULT_KILL="server.launching+1")
    assert first.returncode == -signal.SIGKILL
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    run_id = transcript.stem
    try:
        r = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        for pid in _lab_servers(run_id):
            os.killpg(pid, signal.SIGKILL)
    events = _events(transcript)
    launched = Counter(e["data"]["experiment_id"] for e in events if e["type"] == "server.launched")
    assert all(n == 1 for n in launched.values()) and _last_json(r)["launches"] == sum(launched.values())


def test_damaged_checkpoint_store_is_one_clear_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    store = home / "checkpoints.sqlite"
    store.write_bytes(b"")
    for args in (["runs"], ["show", "x"], ["run", WORLD, "--auto"]):
        r = run_cli(tmp_path, *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "empty (0 bytes)" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    store.write_bytes(b"this is not a database" * 100)
    r = run_cli(tmp_path, "runs")
    assert r.returncode == 2 and "damaged" in r.stderr and "Traceback" not in r.stderr


def test_a_fresh_store_is_never_left_empty(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "run", WORLD, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE,
                HYPOLOOP_FAULT_KILL="run.started")
    assert r.returncode == -signal.SIGKILL
    store = tmp_path / "home" / "checkpoints.sqlite"
    assert store.stat().st_size > 0
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] >= 1


def test_a_bad_line_in_the_middle_of_the_transcript_does_not_stop_resume(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "run", WORLD, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.02",
                    HYPOLOOP_FAULT_KILL="server.ready")
    assert first.returncode == -signal.SIGKILL
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    run_id = transcript.stem
    lines = transcript.read_text(encoding="utf-8").splitlines(keepends=True)
    lines.insert(len(lines) // 2, '{"v": 1, "seq": "garbage"}\n')  # damage in the middle
    transcript.write_text("".join(lines), encoding="utf-8")
    try:
        r = run_cli(tmp_path, "resume", run_id, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.02")
        assert r.returncode == 0, r.stderr[-3000:]
        assert "skipped; the run continues after it" in r.stderr
    finally:
        left = _lab_servers(run_id)
        for pid in left:
            os.killpg(pid, signal.SIGKILL)
    assert not left
    events = _events(transcript)
    assert [e["type"] for e in events].count("server.adopted") == 1
    assert _last_json(r)["status"] == "isolated"


def test_case_paths_outside_the_folder_only_when_named_explicitly(tmp_path: Path) -> None:
    from agent.domain.case import CaseError, load_case

    outside = tmp_path / "notes" / "FINDINGS.md"
    outside.parent.mkdir()
    outside.write_text("# notes\n", encoding="utf-8")
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    (case_dir / "case.toml").write_text('name = "c"\nknowledge = ["../notes/FINDINGS.md"]\n[model]\npath = "m"\n')
    with pytest.raises(CaseError, match="outside the case's folder; write it as an absolute path"):
        load_case(str(case_dir / "case.toml"))
    (case_dir / "case.toml").write_text(f'name = "c"\nknowledge = ["{outside}"]\n[model]\npath = "m"\n')
    case = load_case(str(case_dir / "case.toml"))
    from agent.domain.case import outside_warnings

    assert [w for w in outside_warnings(case) if "knowledge #1" in w and "outside the case's folder" in w]
    assert outside_warnings(case) == [
        f"{case_dir / 'case.toml'}: knowledge #1 = {outside} is outside the case's folder ({case_dir}); using it as named"
    ], "the warning names the case's folder, not the file a second time"
    (case_dir / "link.md").symlink_to(outside)  # a link inside that points out is not "named explicitly"
    (case_dir / "case.toml").write_text('name = "c"\nknowledge = ["link.md"]\n[model]\npath = "m"\n')
    with pytest.raises(CaseError, match="knowledge #1"):
        load_case(str(case_dir / "case.toml"))


def test_analyze_json_bounds_line_numbers_per_signature(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    warn = "node1:1234:1234 [0] NCCL WARN Call to connect returned Connection refused, retrying\n"
    ok = "[2026-01-01 00:00:01] The server is fired up and ready to roll!\n"
    log.write_text((warn * 3 + ok) * 2000)  # one signature on 6000 lines in 2000 separate runs
    r = run_cli(tmp_path, "analyze", str(log), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert len(r.stdout) < 20000
    nccl = next(s for s in out["signatures"] if s["id"] == "nccl_warn")
    assert nccl["line_count"] == 6000 and nccl["truncated"]
    assert nccl["lines"][:4] == [1, 2, 3, 5] and len(nccl["lines"]) == 20
    assert nccl["line_ranges"][:2] == [[1, 3], [5, 7]] and len(nccl["line_ranges"]) == 20


# ------------------------------------------------------------------------------------------ secrets

#: Secrets planted in every place a case or the environment can hold one; none may appear in anything
#: hypoloop writes or prints (the server's own log is the server's, not hypoloop's, and the checkpoint
#: store must keep the case's values to launch with them).
PLANTED = {
    "host_env": ("HF_TOKEN", "hf_" + "Q7x" * 10),
    "host_env_literal": ("MY_DB_PASSWORD", "correct-horse-battery-staple-42"),
    "baseline_env": ("WANDB_API_KEY", "wandb-literal-key-0123456789abcdef"),
    "api_key_flag": ("--api-key", "sk-lab-" + "Zk9" * 9),
    "own_env": ("OPENAI_API_KEY", "sk-proj-" + "Ab3" * 10),
    "own_env_literal": ("CLUSTER_SECRET", "process-env-secret-value-xyz"),
    "findings": ("--api-key", "sk-notes-" + "Yy7" * 8),
}


def _secret_case(tmp_path: Path) -> Path:
    src = Path(__file__).resolve().parent.parent / "lab" / "worlds" / "glm5-nvfp4-sm120"
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    notes = (src / "FINDINGS.md").read_text(encoding="utf-8")
    notes += (
        "\n## 2026-01-02 — a note with a key in its command\n\nOutcome: works\n\n```bash\n"
        f"python -m sglang.launch_server --model-path zai-org/GLM-5-NVFP4 --api-key {PLANTED['findings'][1]}\n```\n"
    )
    (case_dir / "FINDINGS.md").write_text(notes, encoding="utf-8")
    text = (src / "case.toml").read_text(encoding="utf-8")
    text = text.replace(
        'env = { HYPOLOOP_LAB_WORLD = "glm5-nvfp4-sm120", HYPOLOOP_LAB_TIME_SCALE = "0.01" }',
        'env = { HYPOLOOP_LAB_WORLD = "glm5-nvfp4-sm120", HYPOLOOP_LAB_TIME_SCALE = "0.01", '
        f'HF_TOKEN = "{PLANTED["host_env"][1]}", MY_DB_PASSWORD = "{PLANTED["host_env_literal"][1]}" }}',
    )
    text = text.replace(
        '"--quantization" = "modelopt_fp4" }\nenv = {}',
        f'"--quantization" = "modelopt_fp4", "--api-key" = "{PLANTED["api_key_flag"][1]}" }}\n'
        f'env = {{ WANDB_API_KEY = "{PLANTED["baseline_env"][1]}" }}',
    )
    assert PLANTED["api_key_flag"][1] in text and PLANTED["host_env"][1] in text
    (case_dir / "case.toml").write_text(text, encoding="utf-8")
    return case_dir / "case.toml"


def test_secrets_never_reach_any_artefact_or_output(tmp_path: Path) -> None:
    case = _secret_case(tmp_path)
    own = {PLANTED["own_env"][0]: PLANTED["own_env"][1], PLANTED["own_env_literal"][0]: PLANTED["own_env_literal"][1]}
    run = run_cli(tmp_path, "run", str(case), "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE, **own)
    assert run.returncode == 0, run.stderr[-3000:]
    result = _last_json(run)
    # The key was sent: the probes of a server started with --api-key were answered (not 401), so the
    # run isolated the fix as it does without a key.
    assert result["status"] == "isolated" and result["launches"] == 3
    transcript = Path(result["transcript"])
    events = _events(transcript)
    probes = [e["data"] for e in events if e["type"] == "probe.result"]
    assert probes and all(p.get("http_status") != 401 for p in probes)
    run_id = result["run_id"]
    outputs = [run.stdout, run.stderr]
    for args in (
        ["report", str(transcript), "--format", "md", "-o", str(tmp_path / "r.md")],
        ["report", str(transcript), "--format", "html", "-o", str(tmp_path / "r.html")],
        ["findings", "add", str(transcript), "--to", str(tmp_path / "FINDINGS.md")],
        ["show", run_id, "--json"],
        ["show", run_id, "-v"],
        ["runs", "--json"],
        ["runs"],
        ["replay", str(transcript), "-v"],
        ["resume", run_id, "--json"],
    ):
        r = run_cli(tmp_path, *args, **own)
        assert r.returncode == 0, (args, r.stderr[-2000:])
        outputs += [r.stdout, r.stderr]
    assert (tmp_path / "FINDINGS.md").read_text().count("Written by `hypoloop findings add`") == 1
    # Every file hypoloop wrote, except the server logs (the server's own output) and the checkpoint
    # store (it keeps the case as given, to launch with it; it never leaves the machine).
    written = [
        p for p in tmp_path.rglob("*")
        if p.is_file() and p.suffix not in (".log", ".owner") and "checkpoints.sqlite" not in p.name
        and not p.is_relative_to(tmp_path / "case")
    ]
    assert transcript in written and (tmp_path / "r.html") in written
    assert any(p.name.endswith(".result.json") for p in written)
    for where, (_, secret) in PLANTED.items():
        for path in written:
            assert secret not in path.read_text(encoding="utf-8", errors="replace"), f"{where} in {path}"
        for i, out in enumerate(outputs):
            assert secret not in out, f"{where} in output {i}"
    # ...while the redacted places still say what was there.
    started = next(e["data"] for e in events if e["type"] == "run.started")
    assert started["case_data"]["host"]["env"]["HF_TOKEN"] == "<redacted>"
    launch = next(e["data"] for e in events if e["type"] == "tool.call" and e["data"]["tool"] == "launch_server")
    assert launch["argv"][launch["argv"].index("--api-key") + 1] == "<redacted>"
    assert launch["env"]["WANDB_API_KEY"] == "<redacted>"
    # ...and the report shows the mark as text: escaped in the HTML, never a tag of its own that would cut
    # into the page's markup
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "&lt;redacted&gt;" in html and "<redacted>" not in html


def test_a_run_whose_checkpoint_lost_its_next_step_is_not_finished_and_resume_ends_it(tmp_path: Path) -> None:
    """What LangGraph's "async" durability left after a kill: the checkpoint says nothing comes next,
    yet the run has no conclusion. It is listed as interrupted, and resume ends it honestly (error)."""
    from agent.record.runs import open_checkpointer
    from agent.run.graph import read_graph

    paused = run_cli(tmp_path, "run", WORLD, "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
    assert paused.returncode == 3, paused.stderr[-2000:]  # waits for the baseline's approval
    run_id = _last_json(paused)["run_id"]
    home = tmp_path / "home"
    with open_checkpointer(home) as saver:
        graph = read_graph(home, saver)
        config = {"configurable": {"thread_id": run_id}}
        graph.update_state(config, {"pending": None}, as_node="conclude")  # END next, no conclusion
        assert not graph.get_state(config).next
    listed = {i["run_id"]: i for i in json.loads(run_cli(tmp_path, "runs", "--json").stdout)}
    assert listed[run_id]["status"] == "interrupted"
    r = run_cli(tmp_path, "resume", run_id, "--json", HYPOLOOP_LAB_TIME_SCALE=SCALE)
    assert r.returncode == 1, r.stderr[-2000:]
    result = _last_json(r)
    assert result["status"] == "error" and "without a conclusion" in result["error"]
    listed = {i["run_id"]: i for i in json.loads(run_cli(tmp_path, "runs", "--json").stdout)}
    assert listed[run_id]["status"] == "finished" and listed[run_id]["result"] == "error"


def test_the_working_directory_is_not_taken_for_a_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PWD ends in a "secret" name part, but it holds the current directory: paths must survive."""
    from agent.record.redact import redact_data, run_redactor

    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("DB_PWD", "a-real-database-password")
    data = {"log": f"{tmp_path}/runs/x.log", "note": "password a-real-database-password"}
    assert redact_data(data, run_redactor()) == {"log": f"{tmp_path}/runs/x.log", "note": "password <redacted>"}


def test_a_file_name_in_a_path_is_not_taken_for_a_secret_assignment() -> None:
    """"with /home/u/.ssh/client_key: the host refused the key" (an SSH error) kept its words: the file
    name before the colon is no ``name: value`` assignment. A real assignment is still redacted."""
    from agent.record.redact import run_redactor

    redact = run_redactor()
    for text in (
        "authentication failed for root with /home/u/.ssh/client_key: the host refused the key",
        "ssh key /home/u/.ssh/deploy_key: file not found",
    ):
        assert redact(text) == text
    assert redact("RuntimeError: HF_TOKEN=hf_" + "x" * 24) == "RuntimeError: HF_TOKEN=<redacted>"
    assert redact("client_key: s3cr3t-value-123") == "client_key: <redacted>"


def test_a_run_killed_mid_launch_counts_the_launch_in_its_host_seconds(tmp_path: Path) -> None:
    """`runs` and `show` said 0 host-seconds for a run killed while its first server loaded: the launch
    counts from its recorded start to the last sign of it (its log's last write once it is stopped)."""
    import time

    scale = 0.02
    first = run_cli(tmp_path, "run", WORLD, "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE=str(scale),
                    HYPOLOOP_FAULT_KILL="server.launched")
    assert first.returncode == -signal.SIGKILL
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    run_id = transcript.stem
    (launched,) = [e["data"] for e in _events(transcript) if e["type"] == "server.launched"]
    log = Path(launched["log"])
    deadline = time.monotonic() + 120
    try:  # the server left running loads on; stopped once it has served, its log no longer changes
        while "ready to roll" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the left server never got ready"
            time.sleep(0.05)  # polling the log, not waiting a fixed time
    finally:
        for pid in _lab_servers(run_id):
            os.killpg(pid, signal.SIGKILL)
    ran_s = (log.stat().st_mtime - float(launched["started_wall"])) / scale
    (info,) = json.loads(run_cli(tmp_path, "runs", "--json").stdout)
    assert info["status"] == "interrupted" and info["launches"] == 1
    assert ran_s > 0 and abs(info["host_seconds"] - ran_s) <= 0.01 * ran_s + 1, (info["host_seconds"], ran_s)
    shown = " ".join(run_cli(tmp_path, "show", run_id).stdout.split())
    assert f"interrupted, 1 launch, {info['host_seconds']:.0f} host-seconds" in shown
