"""A ``--json`` error before the run exists names no run (README: ``"run_id": null``): a transcript folder that
cannot be written, or a damaged checkpoint store, gave a fresh run id that `show` then did not know."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_cli


def test_an_unwritable_transcript_folder_gives_a_null_run_id(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", "--json", "--transcript-dir", str(blocker / "tr"))
    assert r.returncode == 2, r.stderr[-2000:]
    line = json.loads(r.stdout.strip().splitlines()[-1])
    assert line["status"] == "error" and line["run_id"] is None, line
