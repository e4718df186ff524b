"""The launch command that worked carries its environment: the variables the fix unset (``env -u NAME``),
the ones the working configuration still sets, and the case's host env, in the printed answer, in
``hypoloop report`` and at the end of a resumed run alike; pasted into a shell that still has the
cluster's bad variable, it serves."""

from __future__ import annotations

import shlex
from pathlib import Path

from clirun import paste_until_ready, run_cli

ROOT = Path(__file__).resolve().parent.parent
PROXY = "http://proxy.cluster.internal:3128"


def _pasted_command(out: str) -> str:
    """The lines printed between the copy-paste note and the evidence panel."""
    lines = []
    for line in out.split("(copy-paste):", 1)[1].splitlines()[1:]:
        if line.startswith("╭"):
            break
        lines.append(line)
    return "\n".join(lines)


def _words(command: str) -> list[str]:
    """The command's words as bash reads them (a backslash-newline joins lines)."""
    return shlex.split(command.replace("\\\n", " "))


def _env_part(command: str) -> list[str]:
    """The words before the launcher: assignments and ``env -u NAME``."""
    argv = _words(command)
    return argv[: argv.index("python")]


def _serves(command: str) -> list[str]:
    """Paste ``command`` into bash whose environment has the cluster's proxies set; its output up to
    the server's ready line (or a traceback, or its end)."""
    return paste_until_ready(command, ROOT, http_proxy=PROXY, https_proxy=PROXY)


def test_the_command_unsets_what_the_fix_unset_and_keeps_what_still_is_set(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "run", "lab:qwen3-next-b200x4", "--auto", COLUMNS="80")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "root fix: unset http_proxy" in done.stdout, done.stdout[-3000:]
    command = _pasted_command(done.stdout)
    words = _env_part(command)
    assert f"https_proxy={PROXY}" in words and words[-3:] == ["env", "-u", "http_proxy"], command
    assert any(w.startswith("HYPOLOOP_LAB_WORLD=") for w in words), command  # the case's host env
    seen = _serves(command)
    assert any("ready to roll" in line for line in seen), "".join(seen[-30:])
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    report = run_cli(tmp_path, "report", str(transcript))
    assert report.returncode == 0, report.stderr[-2000:]
    block = report.stdout.split("Launch command that worked:", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert _words(block) == _words(command)


def test_a_resumed_run_prints_the_same_command_with_the_host_env(tmp_path: Path) -> None:
    waiting = run_cli(tmp_path, "run", "lab:qwen3-next-b200x4", COLUMNS="80")
    assert waiting.returncode == 3, waiting.stderr[-2000:]
    run_id = next((tmp_path / "transcripts").glob("*.jsonl")).stem
    done = run_cli(tmp_path, "resume", run_id, "--decision", "approve", "--auto", COLUMNS="80")
    assert done.returncode == 0, done.stderr[-2000:]
    words = _env_part(_pasted_command(done.stdout))
    assert any(w.startswith("HYPOLOOP_LAB_WORLD=") for w in words), words
    assert f"https_proxy={PROXY}" in words and words[-3:] == ["env", "-u", "http_proxy"], words


def test_the_model_flag_the_case_repeats_is_in_the_command_once(tmp_path: Path) -> None:
    """A case that also writes its model as a flag (``"--model-path"`` = model.path) launches it once, and
    the command that worked names it once: pasted twice it would be two values of one flag (found by a
    newcomer)."""
    import shutil

    folder = tmp_path / "case"
    shutil.copytree(ROOT / "lab" / "worlds" / "qwen3-next-b200x4", folder)
    case = folder / "case.toml"
    text = case.read_text()
    case.write_text(text.replace('flags = { "--tp-size" = 4,',
                                 'flags = { "--model-path" = "Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", "--tp-size" = 4,'))
    done = run_cli(tmp_path, "run", str(case), "--auto", COLUMNS="80")
    assert done.returncode == 0, done.stderr[-2000:]
    words = _words(_pasted_command(done.stdout))
    assert words.count("--model-path") == 1, words
    assert any("ready to roll" in line for line in _serves(_pasted_command(done.stdout)))
