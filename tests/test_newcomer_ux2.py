"""More things a newcomer met at the command line, each run as a user runs it (the real ``hypoloop``
command, or the lab as a real process)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from clirun import HYPOLOOP, cli_env, live_processes, run_cli, transcript_events

REPO = Path(__file__).resolve().parents[1]
GLM5 = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"


@pytest.mark.parametrize("speed", ["nan", "inf", "-2"])
def test_replay_refuses_a_speed_that_is_not_a_positive_finite_number_in_one_line(tmp_path: Path, speed: str) -> None:
    r = run_cli(tmp_path, "replay", str(GLM5), "--speed", speed)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[-500:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--speed" in lines[0] and "positive finite number" in lines[0], r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_labs_log_timestamps_never_go_back_under_concurrent_requests(tmp_path: Path) -> None:
    """A burst of concurrent requests to the lab server (its HTTP handlers log from their own threads): the
    timestamps of consecutive records never decrease. At a fast clock (0.001: a simulated second is a
    millisecond) a record stamped before another thread's was sometimes written after it."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_LAB_")}
    env.update(HYPOLOOP_LAB_WORLD="glm5-nvfp4-sm120", HYPOLOOP_LAB_TIME_SCALE="0.001", PYTHONPATH=str(REPO))
    log = tmp_path / "server.log"
    argv = [sys.executable, "-m", "lab.launch_server", "--model-path", "zai-org/GLM-5-NVFP4", "--tp-size", "8",
            "--trust-remote-code", "--quantization", "modelopt_fp4", "--kv-cache-dtype", "bf16", "--port", str(port)]
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def generate() -> None:
        body = {"text": "What is the capital of France?", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
        req = urllib.request.Request(f"{url}/generate", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()

    try:
        deadline = time.monotonic() + 60
        while "ready to roll" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.02)
        for _ in range(3):
            threads = [threading.Thread(target=generate) for _ in range(48)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    stamps = [m.group(1) for ln in log.read_text(errors="replace").splitlines()
              if (m := re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", ln))]
    assert len(stamps) > 150, len(stamps)
    back = [(a, b) for a, b in zip(stamps, stamps[1:], strict=False) if b < a]
    assert back == [], back[:5]


def _paused(tmp_path: Path) -> tuple[str, Path]:
    """A run of the GLM-5 world waiting for approval of its baseline (no terminal): its id and transcript."""
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--json", "--transcript-dir", "tr")
    assert r.returncode == 3, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["run_id"], tmp_path / out["transcript"]


def _killed_while_loading(tmp_path: Path, run_id: str, transcript: Path, *, scale: str,
                          ready: bool = False) -> dict[str, Any]:
    """``resume --decision approve`` at the lab clock ``scale``, killed -9 while its server loads (``ready``:
    once it is ready); the ``server.launched`` record."""
    env = cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE=scale)
    proc = subprocess.Popen([*HYPOLOOP, "resume", run_id, "--decision", "approve"], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        launched: list[dict[str, Any]] = []
        while not launched:
            assert time.monotonic() < deadline and proc.poll() is None, "no launch"
            launched = [e for e in transcript_events(transcript) if e["type"] == "server.launched"]
            time.sleep(0.02)
        log = Path(launched[0]["data"]["log"])
        while not (log.exists() and log.stat().st_size > 0):
            assert time.monotonic() < deadline, "the server wrote nothing"
            time.sleep(0.02)
        while ready and not any(e["type"] == "server.ready" for e in transcript_events(transcript)):
            assert time.monotonic() < deadline and proc.poll() is None, "never ready"
            time.sleep(0.02)
        if not ready:
            assert not any(e["type"] == "server.ready" for e in transcript_events(transcript)), "kill it loading"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    return dict(launched[0]["data"])


def test_experiments_are_numbered_one_by_one_after_a_lost_launch_is_relaunched(tmp_path: Path) -> None:
    """Killed while the baseline loads, its server lost too; resumed: the baseline is launched again. The
    experiments are still numbered 1, 2, 3 in ``show``, ``replay`` and the report (it was 1, 3, 4: the
    number counted launches), and the relaunch keeps the baseline's number 1."""
    run_id, transcript = _paused(tmp_path)
    launched = _killed_while_loading(tmp_path, run_id, transcript, scale="0.01")
    os.killpg(int(launched["pgid"]), signal.SIGKILL)  # the server dies too while nobody watches
    r = run_cli(tmp_path, "resume", run_id, "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["launches"] == 4  # the lost launch counts
    for cmd in ("show", "replay"):
        out = run_cli(tmp_path, cmd, run_id).stdout
        assert re.findall(r"^experiment (\d+) exp-", out, re.M) == ["1", "2", "3"], (cmd, out[-3000:])
    report = run_cli(tmp_path, "report", run_id).stdout
    table = report.split("## Experiments", 1)[1].split("\n\n", 2)[1]
    numbers = [ln.split("|")[1].strip() for ln in table.splitlines()[2:]]
    assert numbers == ["1", "1", "2", "3"], table  # the interrupted launch and its relaunch: experiment 1
    assert not live_processes(run_id, only="lab.launch_server")


def _host_s_of_outcomes(transcript: Path) -> dict[str, float]:
    return {e["data"]["experiment_id"]: float(e["data"]["timings"]["host_seconds"])
            for e in transcript_events(transcript) if e["type"] == "outcome"}


def test_a_lost_launch_is_billed_at_the_time_scale_it_ran_under(tmp_path: Path) -> None:
    """Launched at the lab clock 0.01, lost with its process once ready, relaunched by a ``resume`` at 0.004:
    the lost launch's host-seconds are its wall seconds over 0.01, not over the resumed process's 0.004."""
    run_id, transcript = _paused(tmp_path)
    launched = _killed_while_loading(tmp_path, run_id, transcript, scale="0.01", ready=True)
    os.killpg(int(launched["pgid"]), signal.SIGKILL)
    exp = launched["experiment_id"]
    seen = [e["ts"] for e in transcript_events(transcript) if e["data"].get("experiment_id") == exp]
    wall = max(seen) - float(launched["started_wall"])  # as long as it was seen running
    r = run_cli(tmp_path, "resume", run_id, "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    total = float(json.loads(r.stdout.strip().splitlines()[-1])["host_seconds"])
    lost = total - sum(_host_s_of_outcomes(transcript).values())
    assert abs(lost - wall / 0.01) < 1.0, (lost, wall / 0.01, wall / 0.004)


def test_an_adopted_server_is_billed_at_the_time_scale_it_was_launched_with(tmp_path: Path) -> None:
    """Launched at the lab clock 0.01, its process killed while it loads, adopted by a ``resume`` at 0.004:
    its host-seconds are those of a launch at its own clock (about what the next launches cost), not its
    wall seconds over 0.004 (2.5 times as many; a margin for a loaded machine)."""
    run_id, transcript = _paused(tmp_path)
    launched = _killed_while_loading(tmp_path, run_id, transcript, scale="0.01")
    r = run_cli(tmp_path, "resume", run_id, "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert any(e["type"] == "server.adopted" for e in transcript_events(transcript))
    billed = _host_s_of_outcomes(transcript)
    adopted = billed.pop(launched["experiment_id"])
    assert billed and adopted < 1.8 * max(billed.values()), (adopted, billed)
    assert not live_processes(run_id, only="lab.launch_server")


def test_show_gives_the_runs_host_seconds_as_one_figure_in_the_conclusion_and_the_run_line(tmp_path: Path) -> None:
    """The conclusion's cost and ``show``'s run line are one figure, rounded once: the conclusion kept the
    total rounded to 0.1, and rounding that again to whole seconds could differ by one from the run line."""
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    run_id = json.loads(r.stdout.strip().splitlines()[-1])["run_id"]
    info = json.loads(run_cli(tmp_path, "show", run_id, "--json").stdout)
    assert info["conclusion"]["host_seconds"] == info["host_seconds"], info["conclusion"]["host_seconds"]
    out = run_cli(tmp_path, "show", run_id).stdout
    cost = re.findall(r"cost\s+\d+ launches, (\d+) host-seconds", out)
    total = re.findall(r"finished, \d+ launches, (\d+) host-seconds", out)
    assert cost and cost == total == [f"{info['host_seconds']:.0f}"], (cost, total)


def test_the_reports_experiment_table_holds_under_each_title_what_it_says(tmp_path: Path) -> None:
    """``hypoloop report``: the column titled "outcome" holds each launch's outcome (request_failed, ok) as
    ``show`` names it, and the signature it showed is under "what it showed" (the outcome was under
    "stage reached" and the signature under "outcome"), in Markdown and in HTML alike."""
    md = run_cli(tmp_path, "report", str(GLM5))
    assert md.returncode == 0, md.stderr[-2000:]
    lines = md.stdout.split("## Experiments", 1)[1].strip().split("\n\n", 1)[0].splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True)) for ln in lines[2:]]
    assert "stage reached" not in head
    assert [r["outcome"] for r in rows] == ["request_failed", "ok", "ok"], rows
    assert rows[0]["what it showed"].startswith("probability_tensor_nan (log line "), rows
    html = run_cli(tmp_path, "report", str(GLM5), "--format", "html")
    assert '<td data-label="outcome" class="fail">request_failed</td>' in html.stdout
    assert '<td data-label="what it showed">probability_tensor_nan (log line' in html.stdout


def test_runs_and_show_say_a_run_asked_at_another_terminal_runs_there_not_answer_with_resume(tmp_path: Path) -> None:
    """``hypoloop run`` at a terminal, waiting at its approval prompt (it holds the run): ``runs`` and ``show``
    from another shell say it runs in that process (its pid), and do not tell to answer with ``resume``,
    which that process's lock would refuse."""
    import pexpect  # a dev dependency (pyproject.toml)

    env = cli_env(tmp_path, COLUMNS="120", LINES="50", TERM="xterm-256color")
    child = pexpect.spawn(HYPOLOOP[0], [*HYPOLOOP[1:], "run", "lab:glm5-nvfp4-sm120"], cwd=str(tmp_path), env=env,
                          encoding="utf-8", timeout=120, dimensions=(50, 120))
    try:
        child.expect(r"\[a\]pprove / \[r\]eject / \[h\]ypotheses / \[s\]top: ")  # the baseline: no edit
        listed = json.loads(run_cli(tmp_path, "runs", "--json").stdout)
        assert len(listed) == 1 and listed[0]["holder"] == child.pid, listed
        run_id = listed[0]["run_id"]
        runs = " ".join(run_cli(tmp_path, "runs", COLUMNS="100").stdout.split())  # one run a few lines
        shown = " ".join(run_cli(tmp_path, "show", run_id).stdout.replace("│", " ").split())
        child.sendline("s")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    held = f"running in another hypoloop process (pid {child.pid})"
    assert held in runs and "resume" not in runs, runs
    assert held in shown and "answer with" not in shown and "hypoloop resume" not in shown, shown[-1500:]


def test_show_and_runs_at_40_columns_never_split_a_run_id(tmp_path: Path) -> None:
    """At COLUMNS=40 a run id is never broken across lines in ``show`` or ``runs``: the transcript's path,
    which ends with it, folds after a ``/`` (it was cut mid-id at the terminal's edge)."""
    run_id, _ = _paused(tmp_path)
    for args in (("show", run_id), ("runs",)):
        out = run_cli(tmp_path, *args, COLUMNS="40")
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        assert sum(run_id in ln for ln in lines) >= (3 if args[0] == "show" else 1), out.stdout
        broken = [ln for ln in lines if run_id[:9] in ln and run_id not in ln]
        assert broken == [], out.stdout
    shown = run_cli(tmp_path, "show", run_id, COLUMNS="40").stdout
    assert any(ln.strip() == f"{run_id}.jsonl" or ln.rstrip().endswith(f"/{run_id}.jsonl") for ln in shown.splitlines())


def test_edits_offered_after_a_refusal_leave_out_what_the_host_refused_and_the_baselines_own_value(
    tmp_path: Path,
) -> None:
    """At the terminal: the baseline fails with its FP8 KV cache (SGLang chose fp8_e4m3), the test of bf16 is
    rejected, and an edit to fp4_e2m1 is refused by the host ("only supports bf16/bfloat16 or fp8_e4m3").
    The next screen offers no KV-cache dtype the host refused (fp8_e5m2) nor the baseline's own effective
    fp8_e4m3 (a launch that changes nothing): both were offered."""
    import pexpect  # a dev dependency (pyproject.toml)

    prompt = r"\[a\]pprove / (?:\[e\]dit / )?\[r\]eject / \[h\]ypotheses / \[s\]top: "  # no edit at a baseline
    env = cli_env(tmp_path, COLUMNS="130", LINES="60", TERM="xterm-256color")
    child = pexpect.spawn(HYPOLOOP[0], [*HYPOLOOP[1:], "run", "lab:glm5-nvfp4-sm120"], cwd=str(tmp_path), env=env,
                          encoding="utf-8", timeout=120, dimensions=(60, 130))
    try:
        child.expect(prompt)
        child.sendline("a")
        child.expect(prompt)
        child.sendline("r")
        child.expect("reason")
        child.sendline("a bf16 KV cache halves the tokens that fit")
        child.expect(prompt)
        child.sendline("e")
        child.expect("one change")
        child.sendline("--kv-cache-dtype=fp4_e2m1")
        child.expect(prompt)
        screen = " ".join(re.sub(r"[│╭╮╰╯─]", " ", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)).split())
        child.sendline("s")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert "only supports bf16/bfloat16 or fp8_e4m3" in screen  # the host refused the edit's value
    note = screen.split("can no longer be tested as proposed", 1)[1]
    offered = re.findall(r"--kv-cache-dtype=[\w.]+", note)
    assert "--kv-cache-dtype=fp8_e5m2" not in offered and "--kv-cache-dtype=fp8_e4m3" not in offered, note[:600]


def test_the_command_to_paste_is_printed_on_one_line_however_long(tmp_path: Path) -> None:
    """A run waiting for approval without a terminal prints the `hypoloop resume ...` answer on a line of its
    own, never wrapped (at 80 columns the old sentence broke it before `--experiment`, and pasting ran only
    the first half); `show` does the same."""
    waiting = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", COLUMNS="80")
    assert waiting.returncode == 3, waiting.stderr[-2000:]
    lines = [ln for ln in waiting.stdout.splitlines() if "hypoloop resume" in ln]
    assert lines and all("--experiment" in ln and "--decision" in ln for ln in lines), waiting.stdout[-2000:]
    run_id = json.loads(run_cli(tmp_path, "runs", "--json").stdout)[0]["run_id"]
    shown = run_cli(tmp_path, "show", run_id, COLUMNS="80").stdout
    assert any("hypoloop resume" in ln and "--experiment" in ln for ln in shown.splitlines()), shown[-2000:]


def test_a_baseline_waiting_for_approval_offers_no_edit(tmp_path: Path) -> None:
    """A baseline run changes nothing, so there is nothing to edit: `show --json` lists approve, reject and
    stop for it (it listed edit, and the terminal prompt offered [e]dit only to answer "nothing to edit")."""
    waiting = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120")
    assert waiting.returncode == 3, waiting.stderr[-2000:]
    run_id = json.loads(run_cli(tmp_path, "runs", "--json").stdout)[0]["run_id"]
    shown = json.loads(run_cli(tmp_path, "show", run_id, "--json").stdout.strip().splitlines()[-1])
    assert shown["pending"]["experiment"]["purpose"] == "baseline"
    assert shown["pending"]["choices"] == ["approve", "reject", "stop"]
