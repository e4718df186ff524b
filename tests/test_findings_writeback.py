"""`hypoloop findings add`: a run's finding appended to a FINDINGS.md file, read back by the knowledge
reader, and used by a later run on a similar case."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from clirun import run_cli

from agent.record.recorded import RecordedRun
from agent.record.transcript import read_transcript
from agent.review.findings import add_finding
from tools.knowledge import read_findings

REPO = Path(__file__).resolve().parent.parent
GLM5 = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"
REJECTED = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120-reject-kv.jsonl"
WORLD = REPO / "lab" / "worlds" / "glm5-nvfp4-sm120"


def _hypoloop(tmp_path: Path, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess[str]:
    """``hypoloop ARGS`` as a user runs it (tests/clirun.py), 200 columns wide."""
    return run_cli(tmp_path, *args, timeout=timeout, **{"COLUMNS": "200", **env})


def _notes(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "FINDINGS.md"
    original = (WORLD / "FINDINGS.md").read_bytes()
    path.write_bytes(original)
    return path, original


def test_entry_is_appended_and_reads_back(tmp_path: Path) -> None:
    path, original = _notes(tmp_path)
    r = _hypoloop(tmp_path, "findings", "add", str(GLM5), "--to", str(path))
    assert r.returncode == 0, r.stderr
    after = path.read_bytes()
    assert after[: len(original)] == original  # nothing before the entry changed
    assert len(after) > len(original)
    findings = read_findings(path)
    assert len(findings) == len(read_findings(WORLD / "FINDINGS.md")) + 1
    new = findings[-1]
    assert new.outcome == "works"
    assert new.flags.get("--kv-cache-dtype") == "bf16"
    assert new.flags.get("--quantization") == "modelopt_fp4"
    assert new.model == "zai-org/GLM-5-NVFP4"
    assert new.gpus == ["RTX PRO 6000"] and new.hardware == "8x RTX PRO 6000"
    assert new.date and new.facts.get("kv_cache_dtype") == "bf16"
    assert {"moe", "dsa", "nvfp4"} <= set(new.features)
    run_id = RecordedRun.load(GLM5).run_id
    assert "fp8-gemm-scale-format" in new.text and f"hypoloop run {run_id}" in new.text
    assert "reads back as: outcome works" in r.stderr


def test_second_add_of_the_same_run_changes_nothing(tmp_path: Path) -> None:
    path, _ = _notes(tmp_path)
    assert _hypoloop(tmp_path, "findings", "add", str(GLM5), "--to", str(path)).returncode == 0
    once = path.read_bytes()
    r = _hypoloop(tmp_path, "findings", "add", str(GLM5), "--to", str(path))
    assert r.returncode == 2 and "already recorded" in r.stderr
    assert path.read_bytes() == once


def test_a_file_the_entry_would_take_over_what_a_case_reads_is_left_alone(tmp_path: Path) -> None:
    """A case refuses a findings file over 1 MiB; ``findings add`` does not make one (found by a newcomer:
    it appended, said it read back, and the next run on it was refused)."""
    from tools.knowledge import MAX_FINDINGS_BYTES

    path = tmp_path / "FINDINGS.md"
    path.write_text("# notes\n\n" + "x" * (MAX_FINDINGS_BYTES - 200) + "\n")
    before = path.read_bytes()
    r = _hypoloop(tmp_path, "findings", "add", str(GLM5), "--to", str(path))
    assert r.returncode == 2 and "over 1 MiB" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert path.read_bytes() == before


def test_a_run_without_a_fix_is_not_written(tmp_path: Path) -> None:
    path, original = _notes(tmp_path)
    r = _hypoloop(tmp_path, "findings", "add", str(REJECTED), "--to", str(path))
    assert r.returncode == 2 and "did not isolate a confirmed fix" in r.stderr
    assert path.read_bytes() == original


def test_dry_run_and_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "notes" / "FINDINGS.md"
    path.parent.mkdir()  # a missing folder is refused (tests/test_small_cli_defects.py)
    entry, finding = add_finding(RecordedRun.load(GLM5), path, dry_run=True)
    assert not path.exists() and finding.outcome == "works"
    entry2, finding2 = add_finding(RecordedRun.load(GLM5), path)
    assert entry2 == entry and path.read_text(encoding="utf-8") == entry
    assert read_findings(path)[0].flags == finding2.flags


def test_entry_follows_the_files_heading_level(tmp_path: Path) -> None:
    path = tmp_path / "FINDINGS.md"
    path.write_text("# Box notes\n\n### 2026-01-02 — something works\n\nIt works.\n", encoding="utf-8")
    entry, _ = add_finding(RecordedRun.load(GLM5), path)
    assert entry.startswith("### ")
    assert path.read_text(encoding="utf-8").startswith(
        "# Box notes\n\n### 2026-01-02 — something works\n\nIt works.\n\n### "
    )


def test_a_later_run_on_a_similar_case_uses_the_written_finding(tmp_path: Path) -> None:
    notes, _ = _notes(tmp_path)
    assert _hypoloop(tmp_path, "findings", "add", str(GLM5), "--to", str(notes)).returncode == 0
    title = read_findings(notes)[-1].title
    case = (WORLD / "case.toml").read_text(encoding="utf-8")
    case = case.replace('knowledge = ["FINDINGS.md"]', f"knowledge = [{json.dumps(str(notes))}]")
    case_path = tmp_path / "case.toml"
    case_path.write_text(case, encoding="utf-8")
    r = _hypoloop(
        tmp_path, "run", str(case_path), "--auto", "--json", "--transcript-dir", str(tmp_path / "tr")
    )
    assert r.returncode == 0, r.stderr[-3000:]
    events = list(read_transcript(Path(json.loads(r.stdout.strip().splitlines()[-1])["transcript"])))
    read = next(e for e in events if e.type == "knowledge.read").data
    mine = next(f for f in read["findings"] if f["title"] == title)
    assert mine["outcome"] == "works" and mine["relevance"] >= 0.9
    # Its flags (and the effective KV-cache dtype it quotes) weigh on the ledger: the KV-cache hypothesis
    # carries the finding as evidence and starts higher than it did without it.
    added = {e.data["id"]: e.data for e in events if e.type == "hypothesis.added"}
    kv = added["lowprec-kv-cache-attention-numerics"]
    assert any(ev["kind"] == "finding" and title in ev["detail"] for ev in kv["evidence"])
    before = next(
        e.data for e in read_transcript(GLM5) if e.type == "hypothesis.added" and e.data["id"] == kv["id"]
    )
    assert kv["prior"] > before["prior"]


def test_the_conclusion_entry_is_what_findings_add_writes_with_its_alternatives(tmp_path: Path) -> None:
    """One entry writer: the conclusion's FINDINGS entry is the text `findings add` appends, and it names
    the other changes that avoid the failure (ptxas case: --disable-cuda-graph, a costlier workaround)."""
    run = _hypoloop(tmp_path, "run", "lab:triton-ptxas-sm120", "--auto", "--json", "--transcript-dir", "tr")
    assert run.returncode == 0, run.stderr[-2000:]
    ptxas = tmp_path / json.loads(run.stdout.strip().splitlines()[-1])["transcript"]
    r = _hypoloop(tmp_path, "findings", "add", str(ptxas), "--to", str(tmp_path / "F.md"), "--dry-run")
    assert r.returncode == 0, r.stderr
    recorded = RecordedRun.load(ptxas).conclusion or {}
    assert r.stdout == recorded["findings_entry"]
    assert "- Alternative: --disable-cuda-graph: (unset) → (on) (workaround, performance cost high" in r.stdout
    assert not (tmp_path / "F.md").exists()  # --dry-run writes nothing
    # The symptom quotes the line that names the cause, not the generic "Scheduler hit an exception".
    assert "- Symptom: load_failed: \"ptxas fatal : Value 'sm_120' is not defined" in r.stdout


def test_a_fix_that_unsets_a_variable_says_so_and_its_command_unsets_it(tmp_path: Path) -> None:
    """The run's fix removes an environment variable (the baseline's http_proxy): the entry says 'works
    without' and 'unset', never 'http_proxy=None', and its working command runs with the variable unset
    (a shell that exports it must not pass it on); the reader takes the command's env without it."""
    r = _hypoloop(tmp_path, "run", "lab:qwen3-next-b200x4", "--auto", timeout=300)
    assert r.returncode == 0, r.stderr
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    fix = RecordedRun.load(transcript).conclusion["fix"]  # type: ignore[index]
    assert fix["kind"] == "env" and fix["after"] is None, fix
    name = fix["name"]
    dry = _hypoloop(tmp_path, "findings", "add", str(transcript), "--to", str(tmp_path / "F.md"), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "None" not in dry.stdout, dry.stdout
    assert f": works without {name}\n" in dry.stdout.splitlines()[0] + "\n", dry.stdout
    assert f"- Fix: unset {name} (before: " in dry.stdout, dry.stdout
    command = dry.stdout.split("```bash", 1)[1].split("```", 1)[0]
    assert f"env -u {name} " in command and f"{name}=" not in command, command
    assert _hypoloop(tmp_path, "findings", "add", str(transcript), "--to", str(tmp_path / "F.md")).returncode == 0
    found = read_findings(tmp_path / "F.md")[-1]
    assert found.outcome == "works" and name not in found.env and "--attention-backend" in found.flags, found


def test_a_fix_confirmed_by_another_value_of_its_setting_is_written_with_the_fixs_own_command(tmp_path: Path) -> None:
    """The user's ``--attention-backend`` value fails; another backend serves, then removing the user's value
    serves too, and the other backend's launch counts as the removal's confirmation (no re-run). The working
    command (finding, report) is the removal's, not that earlier launch's failing baseline; the report says why
    that launch confirms (found by a newcomer: the command read back with the failing value)."""
    r = _hypoloop(tmp_path, "run", "lab:glm5-fp8-mi325x", "--auto", "--json", timeout=600,
                  HYPOLOOP_LAB_TIME_SCALE="0.002")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    run = RecordedRun.load(Path(result["transcript"]))
    c = run.conclusion or {}
    confirm = run.run_of(c.get("confirmation_experiment_id"))
    assert confirm is not None and confirm.experiment.get("purpose") == "test", "confirmed by the other value"
    fix = c["fix"]
    assert (confirm.experiment.get("change") or {}).get("name") == fix["name"]
    notes = tmp_path / "F.md"
    notes.write_text("")
    added = _hypoloop(tmp_path, "findings", "add", result["transcript"], "--to", str(notes))
    assert added.returncode == 0, added.stderr
    new = read_findings(notes)[-1]
    if fix["after"] is None:
        assert fix["name"] not in new.flags, new.flags
    else:
        assert new.flags.get(fix["name"]) == fix["after"], new.flags
    assert "another value of the same setting" in new.text
    report = _hypoloop(tmp_path, "report", result["transcript"])
    assert report.returncode == 0 and "another value of the fix's own setting" in report.stdout
