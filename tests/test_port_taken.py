"""A case whose own ``--port`` is already taken on the host (issue 22: "a port already taken, which SGLang
reports misleadingly"), end to end through the real CLI on a lab host: hypoloop launches on a port of its
own, so it checks the case's port at intake, and once the baseline serves there it ends naming the
conflict instead of repeating the baseline. The real engines' version is bench/real/*-port-taken."""

from __future__ import annotations

import socket
from pathlib import Path

from clirun import run_auto, run_cli

from lab.world import WORLDS_DIR


def _case(tmp_path: Path, port: int) -> Path:
    world = WORLDS_DIR / "llama8b-a100"  # the control world: the deployment itself serves
    text = (world / "case.toml").read_text().replace("{case_dir}", str(world))
    head, sep, rest = text.partition("[baseline]\nflags = {")
    assert sep, "the control world's case has no inline [baseline] flags table"
    path = tmp_path / "case.toml"
    path.write_text(f'{head}{sep} "--port" = {port},{rest}')  # the user's command named its port
    return path


def test_a_taken_case_port_ends_the_run_naming_it_after_one_launch(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result, events = run_auto(tmp_path, _case(tmp_path, port), HYPOLOOP_LAB_SEED="t",
                                  HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))
    fp = next(e["data"] for e in events if e["type"] == "host.fingerprint")
    assert fp["taken_port"] == port
    assert result["status"] == "not_isolated" and result["root_cause"] is None and result["launches"] == 1
    assert f"--port {port} was already taken" in result["reason"]
    # Shown with the host, live and in replay, whatever the run goes on to find (the copy-paste command
    # at the end keeps the case's --port)
    shown = run_cli(tmp_path, "replay", result["transcript"], COLUMNS="200")
    assert shown.returncode == 0, shown.stderr
    assert f"warning: the case's --port {port} is already taken on the host" in shown.stdout


def test_a_free_case_port_is_not_blamed(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result, events = run_auto(tmp_path, _case(tmp_path, port), HYPOLOOP_LAB_SEED="t",
                              HYPOLOOP_LAB_STATE=str(tmp_path / "lab-state"))
    assert next(e["data"] for e in events if e["type"] == "host.fingerprint")["taken_port"] is None
    assert "already taken" not in (result["reason"] or "") and result["launches"] > 1
    assert "already taken" not in run_cli(tmp_path, "replay", result["transcript"], COLUMNS="200").stdout


def test_a_cpu_host_is_shown_as_cpu_only_not_as_zero_gpus() -> None:
    # A CPU-only host answers no GPU query: its line said "0 × None (compute capability None, None MiB),
    # driver None" (found by a newcomer on the real-engine bed).
    from io import StringIO

    from rich.console import Console

    from agent.record.transcript import TranscriptEvent
    from agent.review.render import EventRenderer

    out = StringIO()
    render = EventRenderer(Console(file=out, width=200))
    render(TranscriptEvent(seq=1, ts=0.0, run_id="r", type="host.fingerprint",
                           data={"gpu_count": 0, "gpu_name": None, "cpu_count": 2, "sglang_version": "0.5.23"}))
    line = out.getvalue()
    assert "host: CPU only, 2 CPUs" in line and "None" not in line.split("CPUs")[0], line
