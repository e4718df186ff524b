"""``hypoloop report RUN -o report.html`` writes HTML: without ``--format`` the output file's extension
says which (it wrote Markdown into a .html file); an explicit ``--format`` still wins."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_cli


def test_the_output_files_extension_chooses_the_format(tmp_path: Path) -> None:
    r = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--auto", "--json", "--transcript-dir", "tr")
    assert r.returncode == 0, r.stderr[-2000:]
    run_id = json.loads(r.stdout.strip().splitlines()[-1])["run_id"]
    for name, fmt, start in (("r.html", None, "<!DOCTYPE html>"), ("r.htm", None, "<!DOCTYPE html>"),
                             ("r.md", None, "# hypoloop run"), ("r.txt", None, "# hypoloop run"),
                             ("forced.html", "md", "# hypoloop run")):
        args = ["report", run_id, "-o", name, *(["--format", fmt] if fmt else [])]
        done = run_cli(tmp_path, *args)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (tmp_path / name).read_text().startswith(start), name
    # a name that says another format (a PDF) is refused rather than filled with Markdown; --format allows it
    pdf = run_cli(tmp_path, "report", run_id, "-o", "r.pdf")
    assert pdf.returncode == 2 and not (tmp_path / "r.pdf").exists(), pdf.stderr
    assert pdf.stderr.strip().splitlines() == ["error: --output r.pdf: a report is Markdown (.md, .markdown, .txt) "
                                               "or HTML (.html, .htm); give --format to write it under another name"]
    assert run_cli(tmp_path, "report", run_id, "-o", "r.pdf", "--format", "md").returncode == 0
