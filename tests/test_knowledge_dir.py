"""Which knowledge a run reads: ``--knowledge DIR`` / ``$HYPOLOOP_KNOWLEDGE``, a missing file falling
back to the repository's, an empty hypothesis catalog."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from clirun import run_cli

from agent.domain.knowledge_dir import ENV_VAR, default_dir, knowledge_file, use_knowledge
from agent.planning.catalog import load_catalog


def _empty_catalog(tmp_path: Path) -> Path:
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "hypotheses.toml").write_text("# nothing here\n")
    return folder


def _hypoloop(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    extra = {"HYPOLOOP_LAB_TIME_SCALE": "0.002", **(env or {})}
    saved = os.environ.pop(ENV_VAR, None)  # the test's own environment must not choose the folder
    try:
        return run_cli(tmp_path, *args, timeout=600, **extra)
    finally:
        if saved is not None:
            os.environ[ENV_VAR] = saved


def test_a_missing_file_falls_back_to_the_repository_and_an_empty_catalog_is_empty(tmp_path: Path) -> None:
    folder = _empty_catalog(tmp_path)
    with use_knowledge(folder):
        assert knowledge_file("hypotheses.toml") == folder / "hypotheses.toml"
        assert knowledge_file("signatures.toml") == default_dir() / "signatures.toml"
        assert load_catalog() == []
    assert os.environ.get(ENV_VAR) is None
    assert load_catalog()  # the repository's again


def test_run_with_an_empty_catalog_uses_no_catalog_hypothesis_and_records_the_folder(tmp_path: Path) -> None:
    folder = _empty_catalog(tmp_path)
    r = _hypoloop(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--json", "--knowledge", str(folder))
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    events = [json.loads(line) for line in Path(result["transcript"]).read_text().splitlines()]
    started = next(e for e in events if e["type"] == "run.started")
    assert started["data"]["knowledge_dir"] == str(folder.resolve())
    catalog_ids = {e.id for e in load_catalog()}
    added = [e["data"]["id"] for e in events if e["type"] == "hypothesis.added"]
    assert added and not catalog_ids & set(added)
    # the hang is still found: the symptom-class and settings generators do not need the catalog
    assert result["status"] == "isolated"
    assert (result["root_cause"]["fix"]["name"], result["root_cause"]["fix"]["after"]) == ("NCCL_P2P_DISABLE", "1")


def test_redecide_reads_the_knowledge_folder_the_run_read(tmp_path: Path) -> None:
    """A run made with an empty catalog re-decides identically, because --redecide reads the folder the
    run recorded (it re-decided with the repository's catalog before); when that folder is gone it says so
    and --knowledge gives it back. A run with the repository's own folder records none, so its transcript
    re-decides in any checkout."""
    folder = _empty_catalog(tmp_path)
    r = _hypoloop(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--json", "--knowledge", str(folder))
    assert r.returncode == 0, r.stderr[-2000:]
    transcript = json.loads(r.stdout.strip().splitlines()[-1])["transcript"]
    same = _hypoloop(tmp_path, "replay", transcript, "--redecide")
    assert same.returncode == 0 and "warning" not in same.stderr, same.stdout[-2000:] + same.stderr[-2000:]
    moved = folder.rename(tmp_path / "elsewhere")
    gone = _hypoloop(tmp_path, "replay", transcript, "--redecide")
    assert f"the run read the knowledge folder {folder.resolve()}, which is not here" in " ".join(gone.stderr.split())
    assert gone.returncode == 1  # the repository's catalog decides differently
    given = _hypoloop(tmp_path, "replay", transcript, "--redecide", "--knowledge", str(moved))
    assert given.returncode == 0 and "warning" not in given.stderr, given.stderr[-2000:]
    own = _hypoloop(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--json")
    events = [
        json.loads(line)
        for line in Path(json.loads(own.stdout.strip().splitlines()[-1])["transcript"]).read_text().splitlines()
    ]
    assert next(e for e in events if e["type"] == "run.started")["data"]["knowledge_dir"] is None


def test_analyze_reads_the_knowledge_folder_from_the_environment(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    log.write_text(
        "[2026-01-02 03:04:05 TP0] Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB.\n"
        "Possible solutions:\n1. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    )
    with_catalog = _hypoloop(tmp_path, "analyze", str(log), "--json")
    assert with_catalog.returncode == 0, with_catalog.stderr
    without = _hypoloop(tmp_path, "analyze", str(log), "--json", env={ENV_VAR: str(_empty_catalog(tmp_path))})
    assert without.returncode == 0, without.stderr

    def ids(r: subprocess.CompletedProcess[str]) -> set[str]:
        return {h["id"] for h in json.loads(r.stdout)["hypotheses"]}

    assert "cuda-graph-capture-memory" in ids(with_catalog)
    assert "cuda-graph-capture-memory" not in ids(without)
    assert "symptom:capture-oom" in ids(without)  # the symptom classes need no catalog


def test_a_knowledge_folder_that_does_not_exist_is_one_line_and_exit_2(tmp_path: Path) -> None:
    r = _hypoloop(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--knowledge", str(tmp_path / "nope"))
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "nope does not exist" in lines[0] and "Traceback" not in r.stderr


def test_resume_keeps_the_knowledge_folder_the_run_started_with(tmp_path: Path) -> None:
    """A run paused for approval and resumed later (without --knowledge) still reads the folder it
    started with: no catalog hypothesis appears after the resume either."""
    folder = _empty_catalog(tmp_path)
    first = _hypoloop(tmp_path, "run", "lab:nccl-p2p-hang", "--json", "--knowledge", str(folder))
    assert first.returncode == 3, first.stderr[-2000:]  # no terminal: waits for the baseline's approval
    paused = json.loads(first.stdout.strip().splitlines()[-1])
    r = _hypoloop(tmp_path, "resume", paused["run_id"], "--decision", "approve", "--auto", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    events = [json.loads(line) for line in Path(paused["transcript"]).read_text().splitlines()]
    catalog_ids = {e.id for e in load_catalog()}
    added = [e["data"]["id"] for e in events if e["type"] == "hypothesis.added"]
    assert added and not catalog_ids & set(added)


def test_an_unusable_catalog_is_refused_before_a_run_exists(tmp_path: Path) -> None:
    """A broken hypotheses.toml in --knowledge is one line and exit 2, and leaves no run behind that
    `runs` would offer to resume."""
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "hypotheses.toml").write_text("[[hypothesis]]\nid = 'x'\n")  # required fields missing
    r = _hypoloop(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--knowledge", str(folder))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "hypotheses.toml" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    listed = _hypoloop(tmp_path, "runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


@pytest.mark.parametrize("command", ["run", "analyze"])
def test_a_file_the_knowledge_folder_should_not_hold_is_refused_with_the_names_it_may(
    tmp_path: Path, command: str
) -> None:
    """A misspelt file (``hypothesis.toml`` for ``hypotheses.toml``) was ignored without a word: the run
    used the repository's catalog while its author believed theirs was read."""
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "hypothesis.toml").write_text("")
    (folder / ".gitignore").write_text("*.swp\n")  # hidden files are not knowledge and not refused
    log = tmp_path / "crash.log"
    log.write_text("RuntimeError: boom\n")
    target = "lab:nccl-p2p-hang" if command == "run" else str(log)
    r = _hypoloop(tmp_path, command, target, "--knowledge", str(folder))
    assert r.returncode == 2, r.stdout[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{folder.resolve() / 'hypothesis.toml'}: not a knowledge file" in lines[0]
    assert "hypotheses.toml" in lines[0] and "signatures.toml" in lines[0]


def test_resume_refuses_unusable_knowledge_before_anything_is_launched(tmp_path: Path) -> None:
    """A run paused before its first launch, resumed with --knowledge naming a folder whose subsystems.toml
    is broken: one line naming the file, exit 2, and no launch (the run still waits, and a good resume
    afterwards goes on)."""
    first = _hypoloop(tmp_path, "run", "lab:nccl-p2p-hang", "--json")
    assert first.returncode == 3, first.stderr[-2000:]
    paused = json.loads(first.stdout.strip().splitlines()[-1])
    folder = tmp_path / "bad-knowledge"
    folder.mkdir()
    text = (default_dir() / "subsystems.toml").read_text()
    (folder / "subsystems.toml").write_text(text.replace('device_work_only_with = ["tools", "json_schema", "regex"]',
                                                         'device_work_only_with = "tools"', 1))
    r = _hypoloop(tmp_path, "resume", paused["run_id"], "--decision", "approve", "--auto", "--knowledge", str(folder))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "subsystems.toml" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    events = [json.loads(line) for line in Path(paused["transcript"]).read_text().splitlines()]
    assert not [e for e in events if e["type"] == "server.launching"]
    again = _hypoloop(tmp_path, "resume", paused["run_id"], "--decision", "approve", "--auto", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
