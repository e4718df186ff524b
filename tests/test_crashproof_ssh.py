"""Infrastructure is not evidence, over a real OpenSSH server (tests/conftest.py, .ci/sshd.py): a probe
cut by a dropped connection is sent again, a host key that changes mid-run and an sshd without SFTP end
the run in error with the cause in plain words (issue 12)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from clirun import HYPOLOOP, cli_env, live_processes, run_cli

from agent.record.transcript import Transcript, read_transcript
from agent.run.crashsafe import probe_through_drops
from tools.probes import Probe
from tools.ssh import SSHHost, SSHOptions

REPO = Path(__file__).resolve().parent.parent

#: A server whose /generate answers after a pause (time for the test to cut the connection), or dies.
SLOW_SERVER = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
port, mode = int(sys.argv[1]), sys.argv[2]
seen = 0
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        global seen
        seen += 1
        self.rfile.read(int(self.headers.get("content-length") or 0))
        print(f"request {seen}", flush=True)
        if mode == "die":
            os._exit(3)
        time.sleep(1.5)
        body = json.dumps({"text": "The capital of France is Paris.", "meta_info": {}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
print("listening", flush=True)
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _wait_text(path: Path, text: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.02)
    raise AssertionError(f"no {text!r} in {path}")


def _probe_while(sshd: Any, tmp_path: Path, mode: str, cut: bool) -> tuple[Any, list[dict[str, Any]]]:
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SERVER)
    host = SSHHost(
        sshd.target,
        options=SSHOptions(key_path=str(sshd.key), known_hosts=str(sshd.known_hosts), python=sys.executable,
                           workdir_root=str(tmp_path / "remote-runs"), reconnect_timeout_s=10),
    )
    tr = Transcript(tmp_path / "t.jsonl", "probe-test")
    try:
        port = host.free_port()
        log = Path(host.workdir("probe-test")) / "slow.log"
        handle = host.spawn([sys.executable, str(script), str(port), mode], log_path=str(log))
        _wait_text(log, "listening")
        base = f"http://127.0.0.1:{host.forward_port(port)}"
        probe = Probe(id="capital", kind="generate", prompt="The capital of France is", expect="Paris")
        out: dict[str, Any] = {}
        worker = threading.Thread(
            target=lambda: out.update(r=probe_through_drops(tr, host, base, probe, model="m", experiment_id="e1"))
        )
        worker.start()
        _wait_text(log, "request 1")  # the request is in flight on the SSH connection
        if cut:
            assert sshd.cut_connections() >= 1
        worker.join(60)
        assert not worker.is_alive()
        with contextlib.suppress(Exception):
            host.terminate(handle, grace_s=1.0)
    finally:
        host.close()
        tr.close()
    return out["r"], [e.model_dump() for e in read_transcript(tmp_path / "t.jsonl")]


def test_a_probe_cut_by_a_dropped_connection_is_sent_again_not_counted(sshd: Any, tmp_path: Path) -> None:
    result, events = _probe_while(sshd, tmp_path, "answer", cut=True)
    assert result.status == "ok" and result.ok, result  # the server's real answer, after reconnecting
    retried = [e["data"] for e in events if e["type"] == "probe.retried"]
    assert len(retried) == 1 and retried[0]["discarded_status"] in ("connection_error", "timeout")
    assert "connection to the host was lost" in retried[0]["reason"]


def test_a_server_that_dies_under_a_probe_is_evidence_not_retried(sshd: Any, tmp_path: Path) -> None:
    result, events = _probe_while(sshd, tmp_path, "die", cut=False)
    assert result.status == "connection_error" and not result.ok  # the connection held: the server failed
    assert not [e for e in events if e["type"] == "probe.retried"]


# --- whole runs ----------------------------------------------------------------------------------


def _ssh_case(sshd: Any, tmp_path: Path, *, reconnect_s: int = 5) -> Path:
    src = (REPO / "lab" / "worlds" / "glm5-nvfp4-sm120" / "case.toml").read_text()
    host_block = (
        "[host]\n"
        f'target = "{sshd.target}"\n'
        f'ssh_key = "{sshd.key}"\n'
        f'known_hosts = "{sshd.known_hosts}"\n'
        f'remote_python = "{sys.executable}"\n'
        f'remote_workdir = "{tmp_path / "remote-runs"}"\n'
        f"reconnect_timeout_s = {reconnect_s}\n"
    )
    case = tmp_path / "case.toml"
    case.write_text(src.replace('[host]\ntarget = "local"\n', host_block).replace('knowledge = ["FINDINGS.md"]', ""))
    return case


def _events(path: Path) -> list[dict[str, Any]]:
    return [e.model_dump() for e in read_transcript(path)]


def _kill_servers(run_id: str) -> None:
    for pid in live_processes(run_id, only="lab.launch_server"):
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def test_a_host_key_that_changes_mid_run_ends_the_run_in_error(own_sshd: Any, tmp_path: Path) -> None:
    case = _ssh_case(own_sshd, tmp_path)
    proc = subprocess.Popen(
        [*HYPOLOOP, "run", str(case), "--auto", "--json", "--transcript-dir", "tr"],
        cwd=tmp_path, env=cli_env(tmp_path, HYPOLOOP_LAB_TIME_SCALE="0.05"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    run_id = ""
    try:
        deadline = time.monotonic() + 60
        transcript = None
        while time.monotonic() < deadline and transcript is None:
            files = list((tmp_path / "tr").glob("*.jsonl"))
            if files and any(e["type"] == "server.launched" for e in _events(files[0])):
                transcript = files[0]
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        assert transcript is not None
        run_id = transcript.stem
        # The host is "reinstalled": a new host key on the same address, and every connection cut.
        own_sshd.stop()
        key = own_sshd.workdir / "ssh_host_ed25519_key"
        key.unlink()
        Path(f"{key}.pub").unlink()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        own_sshd.start()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if run_id:
            _kill_servers(run_id)  # left on the host: nobody may connect to stop it
    assert proc.returncode == 1, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "error" and "does not match" in result["error"], result
    assert "ssh-keygen -R" in result["error"]  # the cause in plain words, with what to do
    events = _events(transcript)
    assert [e["type"] for e in events].count("experiment.proposed") == 1  # no second experiment
    assert events[-1]["type"] == "run.ended" and events[-1]["data"]["status"] == "error"
    assert result["launches"] == 1
    lost = [e for e in events if e["type"] == "host.connection_lost"]
    assert lost and lost[0]["data"]["seen_at"] <= lost[0]["ts"]  # when the drop was seen, not written


def test_an_sshd_without_sftp_is_refused_before_any_launch(own_sshd: Any, tmp_path: Path) -> None:
    own_sshd.stop()
    own_sshd.config.write_text(
        "\n".join(line for line in own_sshd.config.read_text().splitlines() if not line.startswith("Subsystem"))
    )
    own_sshd.start()
    case = _ssh_case(own_sshd, tmp_path)
    r = run_cli(tmp_path, "run", str(case), "--auto", "--json", "--transcript-dir", "tr")
    assert r.returncode == 2, r.stderr[-2000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "error" and "no SFTP subsystem" in result["error"]
    assert "Channel closed" not in r.stderr.replace("(Channel closed.)", "")
    # refused at intake, before anything was launched: no run is kept (no transcript, no run id)
    assert result["run_id"] is None
    assert not list((tmp_path / "tr").glob("*.jsonl")) if (tmp_path / "tr").exists() else True
