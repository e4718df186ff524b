"""Secrets are never echoed, and hypoloop's state is private (issue 24, point 3).

- A password in a URL (``--host ssh://user:PW@...``, a case's ``host.target``, ``slurm+ssh://``) is
  refused with the URL shown without it, on stderr and in the ``--json`` line.
- Redaction by context, not only by token shape: ``--api-key VALUE`` as hypoloop words a change
  (``--api-key: (unset) → VALUE``), a quoted option, ``Authorization:``, ``*_TOKEN=``/``*_KEY=``, and
  an ``sk-`` key of any length, through a real run whose FINDINGS.md command carries a short key.
- State files and logs (checkpoints.sqlite, locks, runs/*, server logs, transcripts) are 0600 in 0700
  folders, also when an older hypoloop left the state folder 0755.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from clirun import run_cli

from agent.record.redact import Redactor

ROOT = Path(__file__).resolve().parent.parent
WORLD = ROOT / "lab" / "worlds" / "glm5-nvfp4-sm120"
PASSWORD = "Hunter2-pw-9431"
SHORT_KEY = "sk-x7Q"


@pytest.mark.parametrize(
    "where,target,shown",
    [
        ("--host", f"ssh://bob:{PASSWORD}@127.0.0.1:2222", "ssh://bob@127.0.0.1:2222"),
        ("--host", f"slurm+ssh://bob:{PASSWORD}@login.example/gpu", "slurm+ssh://bob@login.example/gpu"),
        ("case", f"ssh://bob:{PASSWORD}@127.0.0.1", "ssh://bob@127.0.0.1"),
    ],
)
def test_a_password_in_a_url_is_refused_without_being_echoed(tmp_path: Path, where: str, target: str,
                                                             shown: str) -> None:
    if where == "case":
        case = tmp_path / "case.toml"
        text = (WORLD / "case.toml").read_text(encoding="utf-8").replace('target = "local"', f'target = "{target}"')
        case.write_text(text, encoding="utf-8")
        (tmp_path / "FINDINGS.md").write_text((WORLD / "FINDINGS.md").read_text(encoding="utf-8"), encoding="utf-8")
        r = run_cli(tmp_path, "run", str(case), "--auto", "--json")
    else:
        r = run_cli(tmp_path, "run", f"lab:{WORLD.name}", "--auto", "--json", "--host", target)
    assert r.returncode == 2, r.stderr[-2000:]
    assert PASSWORD not in r.stdout + r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "error" and shown in result["error"] and "password" in result["error"]
    assert shown in r.stderr


def test_redaction_by_context_not_only_by_shape() -> None:
    r = Redactor()
    secret = "abcDEF987"
    for text in (
        f"--api-key: (unset) → {secret}",
        f'"--api-key": "{secret}"',
        f"['--api-key', '{secret}']",
        f"--api-key {secret}",
        f"Authorization: Bearer {secret}",
        f"HF_TOKEN={secret}",
        f"MY_SERVICE_KEY={secret}",
        f"export OPENAI_API_KEY={SHORT_KEY}",
        f"the key {SHORT_KEY} was passed",
    ):
        out = r(text)
        assert secret not in out and SHORT_KEY not in out, (text, out)
    assert r("max_total_tokens: 10 → 20") == "max_total_tokens: 10 → 20"
    assert r("sk-learn stays a word") == "sk-learn stays a word"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_run_leaves_no_secret_and_only_private_state(tmp_path: Path) -> None:
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    notes = (WORLD / "FINDINGS.md").read_text(encoding="utf-8") + (
        "\n## 2026-01-04 — GLM-5-NVFP4 on RTX PRO 6000 sm120 behind a key\n\nOutcome: works\n\n"
        "GLM-5-NVFP4 on 8 × RTX PRO 6000 Blackwell served after the KV cache went to bf16.\n\n```bash\n"
        "python -m sglang.launch_server --model-path zai-org/GLM-5-NVFP4 --tp-size 8 --kv-cache-dtype bf16 "
        f"--api-key {SHORT_KEY}\n```\n"
    )
    (case_dir / "FINDINGS.md").write_text(notes, encoding="utf-8")
    (case_dir / "case.toml").write_text((WORLD / "case.toml").read_text(encoding="utf-8"), encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir(mode=0o755)  # as an older hypoloop left it: its folders 0755 (a folder the user made
    home.chmod(0o755)       # and pointed HYPOLOOP_HOME at, without hypoloop's state in it, keeps its mode)
    (home / "runs").mkdir(mode=0o755)
    (home / "runs").chmod(0o755)
    r = run_cli(tmp_path, "run", str(case_dir / "case.toml"), "--auto", "--json", HYPOLOOP_LAB_TIME_SCALE="0.002")
    assert r.returncode == 0, r.stderr[-3000:]
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    report = run_cli(tmp_path, "report", str(transcript), "--format", "md")
    shown = r.stdout + r.stderr + report.stdout + run_cli(tmp_path, "replay", str(transcript), "-v").stdout
    assert SHORT_KEY not in shown
    for path in [home, *home.rglob("*"), transcript.parent, transcript]:
        if path.is_symlink():
            continue
        want = 0o700 if path.is_dir() else 0o600
        assert _mode(path) == want, f"{path} is {oct(_mode(path))}, expected {oct(want)}"
        if path.is_file() and path.suffix != ".sqlite":
            assert SHORT_KEY not in path.read_text(encoding="utf-8", errors="replace"), path
    assert (home / "checkpoints.sqlite").exists() and list((home / "runs").rglob("*.log"))


def test_a_shell_reference_to_a_secret_is_kept_so_the_pasted_command_reads_it() -> None:
    """The copy-paste launch command writes a redacted secret as the variable the reader sets
    (``OPENAI_API_KEY="$OPENAI_API_KEY"``); redacting the reference itself made the pasted command set the
    key to the literal ``<redacted>``. A value is still redacted."""
    r = Redactor()
    assert r('OPENAI_API_KEY="$OPENAI_API_KEY" \\') == 'OPENAI_API_KEY="$OPENAI_API_KEY" \\'
    assert r('api_key="${KEY}"') == 'api_key="${KEY}"'
    assert "sk-abcdefghijklmnop" not in r('OPENAI_API_KEY="sk-abcdefghijklmnop"')
