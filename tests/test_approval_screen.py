"""The approval screen in a real 80 × 24 terminal (tmux): the whole box fits on the screen, the change
and its purpose sit right above the prompt, a few hypotheses are listed and the rest are one line that
`h` expands."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from clirun import HYPOLOOP, cli_env

TMUX = shutil.which("tmux")
if TMUX is None and os.environ.get("CI") != "true":
    pytest.skip("tmux is not installed", allow_module_level=True)

PROMPT = "[a]pprove / [e]dit / [r]eject / [h]ypotheses / [s]top:"
#: A baseline run changes nothing: its prompt offers no edit.
BASELINE_PROMPT = "[a]pprove / [r]eject / [h]ypotheses / [s]top:"


class Terminal:
    """A tmux session of ``rows`` × ``cols`` on a private server socket, running one command."""

    def __init__(self, command: str, env: dict[str, str], cwd: Path, cols: int = 80, rows: int = 24) -> None:
        assert TMUX is not None
        self.base = [TMUX, "-L", f"hypoloop-test-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith(("HYPOLOOP", "PATH")))
        script = f"cd {shlex.quote(str(cwd))} && export {exports} NO_COLOR=1 && {command}; sleep 600"
        subprocess.run(
            [*self.base, "new-session", "-d", "-x", str(cols), "-y", str(rows), "bash", "-c", script], check=True
        )

    def screen(self) -> list[str]:
        out = subprocess.run([*self.base, "capture-pane", "-p"], capture_output=True, text=True, check=True)
        return out.stdout.rstrip("\n").splitlines()

    def wait_for(self, text: str, *, last_line: bool = False, timeout: float = 120) -> list[str]:
        """The screen once ``text`` shows (on the last non-empty line with ``last_line``); polls the pane."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.screen()
            shown = [ln for ln in lines if ln.strip()]
            if (shown and text in shown[-1]) if last_line else any(text in ln for ln in lines):
                return lines
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never showed; the screen:\n" + "\n".join(self.screen()))

    def send(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


def test_approval_screen_fits_80x24_with_the_change_above_the_prompt(tmp_path: Path) -> None:
    cmd = " ".join(shlex.quote(a) for a in HYPOLOOP) + " run lab:glm5-nvfp4-sm120 --transcript-dir tr"
    term = Terminal(cmd, cli_env(tmp_path), tmp_path)
    try:
        term.wait_for("approve experiment 1?")
        term.wait_for(BASELINE_PROMPT, last_line=True)
        term.send("a", "Enter")
        screen = term.wait_for(PROMPT, last_line=True, timeout=180)
        while not any("approve experiment 2?" in ln for ln in screen):  # the baseline ran; the next box
            screen = term.wait_for(PROMPT, last_line=True, timeout=180)
        (Path(os.environ.get("HYPOLOOP_SHOTS", tmp_path)) / "approval-80x24.txt").write_text("\n".join(screen) + "\n")
        assert len(screen) <= 24 and all(len(ln) <= 80 for ln in screen)
        top = next(i for i, ln in enumerate(screen) if "approve experiment 2?" in ln)
        prompt = max(i for i, ln in enumerate(screen) if PROMPT in ln)
        bottom = max(i for i, ln in enumerate(screen[:prompt]) if ln.startswith("╰"))
        box = screen[top : bottom + 1]
        change = next(i for i, ln in enumerate(box) if "│ change" in ln)
        purpose = next(i for i, ln in enumerate(box) if "│ purpose" in ln)
        assert purpose < change and len(box) - change <= 4  # the change, the choices, the border
        assert "→" in box[change]
        assert any("more: press h" in ln for ln in box)
        # h lists every open hypothesis, with statements; the choice is asked again
        term.send("h", "Enter")
        deadline = time.monotonic() + 30
        while True:
            full = subprocess.run([*term.base, "capture-pane", "-p", "-S", "-400"], capture_output=True, text=True).stdout
            if full.count("approve experiment 2?") >= 2 and full.rstrip().endswith(PROMPT):
                break
            assert time.monotonic() < deadline, full[-3000:]
            time.sleep(0.2)
        listed = full.rsplit("approve experiment 2?", 1)[1]
        assert "press h" not in listed and "hypothesis (3 of" not in listed
        assert listed.count("0.0") + listed.count("0.1") + listed.count("0.5") >= 10  # every hypothesis's p
        term.send("s", "Enter")
        term.wait_for("stopped", timeout=60)
    finally:
        term.close()
