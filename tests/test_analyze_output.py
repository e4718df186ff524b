"""What `hypoloop analyze` presents: never an empty "hypotheses" heading; when a failed import stops the
server before any flag is read, it says plainly that only a package change can help and names the
package; a value copied out of a sentence carries no prose punctuation into an experiment (the guard
refuses it and says what the value is)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_cli

from agent.domain.case import Case, ModelSpec
from agent.domain.models import Baseline, Change, Experiment
from agent.planning.guard import GuardError, check_experiment
from agent.planning.planner import PlannerView
from agent.planning.values import clean_value

#: An import failure as CPython and SGLang print it (the missing CPU kernel package of SGLang's CPU
#: engine: /work/shared/reference/real-engines-cpu.md, "No module named 'sgl_kernel'").
IMPORT_FAILURE = """\
[2026-12-01 10:00:00] server_args=ServerArgs(model_path='tiny', device='cpu', attention_backend='torch_native')
Traceback (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
  File "/venv/lib/python3.11/site-packages/sglang/launch_server.py", line 12, in <module>
  File "/venv/lib/python3.11/site-packages/sglang/srt/layers/activation.py", line 40, in <module>
    from sgl_kernel import gelu_and_mul
ModuleNotFoundError: No module named 'sgl_kernel'
"""


def test_analyze_says_only_a_package_change_can_help_and_never_prints_an_empty_heading(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(IMPORT_FAILURE)
    done = run_cli(tmp_path, "analyze", str(log), COLUMNS="100")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("hypotheses"):
            # a heading is followed by what it heads, or says itself that there is none
            assert "none" in line or (i + 1 < len(lines) and lines[i + 1].strip()), lines[i : i + 2]
    text = " ".join(done.stdout.split())
    assert "only a package change can help" in text and "sgl_kernel" in text
    assert "no experiment to propose" not in text


@pytest.mark.parametrize("raw", ["0-31.", "'0-31'", "0-31;"])
def test_a_value_with_prose_punctuation_never_reaches_an_experiment(raw: str) -> None:
    base = Baseline()
    ch = Change(kind="env", name="SGLANG_CPU_OMP_THREADS_BIND", before=None, after=raw)
    exp = Experiment(id=Experiment.make_id(base, ch, "test"), purpose="test", baseline=base, change=ch)
    view = PlannerView(case=Case(name="c", model=ModelSpec(path="m"), baseline=base), launches=1)
    with pytest.raises(GuardError, match="prose punctuation.*'0-31'"):
        check_experiment(exp, view=view, flags=None)
    assert clean_value(raw) == "0-31" and clean_value("0.9") == "0.9"


def test_analyze_text_keeps_every_bracket_of_the_log_and_of_the_changes(tmp_path: Path) -> None:
    """The alternatives lost the ')' of "(on)" (the prose clean-up of a value ran over the whole line),
    and a log line's brackets must not be taken for markup."""
    log = tmp_path / "crash.log"
    odd = "RuntimeError: foo(bar[1]) failed (x[2]) [warn] (y) [/] [bold]"
    log.write_text(
        "[2026-01-02 03:04:05 TP0] Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB "
        "(GPU 0; 79.10 GiB total) [rank0]\n"
        "Possible solutions:\n1. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n" + odd + "\n"
    )
    done = run_cli(tmp_path, "analyze", str(log), COLUMNS="400")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert odd in out and "(GPU 0; 79.10 GiB total) [rank0]" in out
    switched = [ln for ln in out.splitlines() if "→ (on" in ln]
    assert switched and all(ln.rstrip().endswith("→ (on)") for ln in switched), switched


def test_analyze_never_prints_a_secret_of_the_log(tmp_path: Path) -> None:
    # An api key in the server arguments SGLang prints at start-up (server_args.py prints every field):
    # neither the text (with --all, which shows the fact lines) nor the JSON may carry it.
    key = "sk-proj-Zx81hQ2mW0aLt5Rq9NvB"
    log = tmp_path / "server.log"
    log.write_text(IMPORT_FAILURE.replace("device='cpu'", f"device='cpu', api_key='{key}'"))
    for args in (["--all"], ["--json"]):
        done = run_cli(tmp_path, "analyze", str(log), *args, COLUMNS="100")
        assert done.returncode == 0, done.stderr
        assert key not in done.stdout + done.stderr
        assert "api_key" in done.stdout  # the line is shown, its value redacted


def test_an_import_that_fails_after_the_flags_were_read_is_not_called_package_only(tmp_path: Path) -> None:
    """The real CPU-engine log (tests/data/logs_0.5.23/cpu_engine.log): the missing module is imported
    inside server_args.resolve_once, after the launch flags were read, so a setting may guard the import
    (the run finds SGLANG_USE_CPU_ENGINE in the installed source); analyze without the host says so
    instead of "only a package change can help ... before it reads any launch flag"."""
    log = Path(__file__).parent / "data" / "logs_0.5.23" / "cpu_engine.log"
    done = run_cli(tmp_path, "analyze", str(log), COLUMNS="100")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "only a package change can help" not in text and "before it reads any launch flag" not in text
    assert "a setting that avoids this import" in text and "sgl_kernel" in text and "--case" in text


def test_a_setting_offered_only_to_silence_a_warning_is_no_remedy(tmp_path: Path) -> None:
    """The real TP=2 CPU log (tests/data/logs_0.5.23/tp2-weight-loader.log) warns "Setup Custom allreduce
    failed ... To silence this warning, specify --disable-custom-all-reduce explicitly": that quiets the
    message, it fixes nothing, and it was analyze's only proposal for a weight loader failing on shapes."""
    log = Path(__file__).parent / "data" / "logs_0.5.23" / "tp2-weight-loader.log"
    done = run_cli(tmp_path, "analyze", str(log), "--cpu-only", "--json")
    assert done.returncode == 0, done.stderr
    import json

    doc = json.loads(done.stdout)
    named = [doc["first_experiment"]["name"]] if doc["first_experiment"] else []
    named += [a["change"] for a in doc["alternatives"]]
    assert not [n for n in named if "custom-all-reduce" in n], named


def test_analyze_reads_a_log_with_stray_nul_and_invalid_bytes_and_says_what_it_replaced(tmp_path: Path) -> None:
    """Engines leave blocks of NUL bytes in a log after a crash or a truncated write: such a log is still
    read (it was refused as "not a text file"), the replaced bytes are named on stderr with their lines,
    and nothing from the log reaches the terminal unescaped (NUL, an OSC title sequence)."""
    clean = tmp_path / "clean.log"
    clean.write_text(IMPORT_FAILURE)
    lines = IMPORT_FAILURE.encode().split(b"\n")
    lines[1:1] = [b"\0" * 4096, b"noise \xff\xfe \x1b]0;owned\x07"]  # a truncated write's block of zeros;
    # bytes not UTF-8 and a terminal title escape
    stray = tmp_path / "stray.log"
    stray.write_bytes(b"\n".join(lines))
    expected = run_cli(tmp_path, "analyze", str(clean), COLUMNS="100")
    done = run_cli(tmp_path, "analyze", str(stray), COLUMNS="100")
    assert done.returncode == 0, done.stderr
    assert "sgl_kernel" in done.stdout and "only a package change can help" in " ".join(done.stdout.split())
    assert "ModuleNotFoundError" in expected.stdout and "ModuleNotFoundError" in done.stdout
    note = " ".join(done.stderr.split())
    assert "4096 NUL bytes and 2 bytes not valid UTF-8 replaced" in note and "(lines 2, 3)" in note, note
    assert "\0" not in done.stdout + done.stderr and "\x1b" not in done.stdout + done.stderr
    assert "clean.log" not in expected.stderr and not expected.stderr.strip()  # nothing replaced, no note


def test_analyze_refuses_a_mostly_binary_file_in_one_line(tmp_path: Path) -> None:
    blob = tmp_path / "core.gz"
    blob.write_bytes(bytes(range(256)) * 64)
    done = run_cli(tmp_path, "analyze", str(blob))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {blob}: not a text file: 61% of it is binary (NUL, "
                                                "control or not UTF-8) (expected a log)"]


def test_analyze_reads_standard_input_for_a_dash(tmp_path: Path) -> None:
    import subprocess

    from clirun import HYPOLOOP, cli_env

    done = subprocess.run([*HYPOLOOP, "analyze", "-"], input=IMPORT_FAILURE, capture_output=True, text=True,
                          cwd=tmp_path, env=cli_env(tmp_path, COLUMNS="100"), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sgl_kernel" in done.stdout and "ModuleNotFoundError" in done.stdout


def test_analyze_of_a_fifo_says_it_waits_for_a_writer_then_reads_the_stream(tmp_path: Path) -> None:
    """A FIFO nobody writes to hung analyze with nothing said; a device is refused in one line."""
    import os
    import subprocess
    import threading

    from clirun import HYPOLOOP, cli_env

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([*HYPOLOOP, "analyze", str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env=cli_env(tmp_path, COLUMNS="200"))
    watchdog = threading.Timer(60, proc.kill)  # a hang fails the test (the readline below returns "")
    watchdog.start()
    try:
        assert proc.stderr is not None
        assert "is a FIFO: waiting for a writer" in proc.stderr.readline()  # said before it blocks
        with fifo.open("w") as writer:
            writer.write(IMPORT_FAILURE)
        out, err = proc.communicate(timeout=120)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == 0, err
    assert "sgl_kernel" in out
    device = run_cli(tmp_path, "analyze", "/dev/zero")
    assert device.returncode == 2
    assert device.stderr.strip().splitlines() == [
        "error: /dev/zero: not a regular file (expected a log file, a FIFO, or - for standard input)"]


@pytest.mark.parametrize("content", [b"# FINDINGS\n" + b"x" * (1024 * 1024 + 10), b"# FINDINGS\n\xff\xfe not text\n"])
def test_a_case_whose_findings_file_is_unusable_is_one_line_as_in_run(tmp_path: Path, content: bytes) -> None:
    """analyze --case reads the case's FINDINGS.md as a run does: a file over 1 MiB or not UTF-8 is the same
    one-line error naming the case and the file (it was a traceback)."""
    (tmp_path / "FINDINGS.md").write_bytes(content)
    case = tmp_path / "case.toml"
    case.write_text('name = "c"\ndescription = "d"\nknowledge = ["FINDINGS.md"]\n'
                    '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
                    '[model]\npath = "Qwen/Qwen3-8B"\n')
    log = Path(__file__).parent / "data" / "logs_0.5.23" / "no_kv_room.log"
    done = run_cli(tmp_path, "analyze", "--case", str(case), str(log))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
    assert f"{case}: knowledge:" in done.stderr and "FINDINGS.md" in done.stderr, done.stderr
