"""Blame what changed (issue 20, point 7): when no launch setting fixes a failure, the ending names the
package that changed on the host (from the case's words, or from a known-good FINDINGS.md note's
package versions against the host's installed ones) with its old and new version and the source of the
claim, then the packages of the failing frames; a generic runtime (torch, triton) only with evidence
against it. Each run is the real ``hypoloop run`` against the lab host (real processes, real HTTP)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from clirun import run_case_copy, run_cli, transcript_events

from agent.record.recorded import RecordedRun
from agent.review.findings import add_finding
from tools.knowledge import parse_findings, read_findings

REPO = Path(__file__).resolve().parent.parent
WORLDS = REPO / "tests" / "data" / "worlds"
UPGRADED = WORLDS / "torch-upgrade-kernel-abi"


def _run(tmp_path: Path, case_dir: Path, **replace: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``hypoloop run CASE --auto --json`` on a copy of a test world's case (``replace``: case text to
    swap); the result line and the transcript's events."""
    result, _ = run_case_copy(tmp_path, case_dir, **replace)
    return result, transcript_events(Path(result["transcript"]))


def test_the_case_says_what_was_upgraded_and_the_ending_names_it_with_old_and_new(tmp_path: Path) -> None:
    result, events = _run(tmp_path, UPGRADED)
    assert result["status"] == "not_isolated"
    fp = next(e["data"] for e in events if e["type"] == "host.fingerprint")
    assert fp["installed"]["torch"] == "2.10.0" and fp["installed"]["sgl-kernel"] == "0.3.21"
    imp = result["implicated"]
    # the frames run in sgl_kernel; what changed is torch, named first with its versions and source
    assert imp["package"] == "torch" and imp["packages"][:2] == ["torch", "sgl_kernel"]
    changed = imp["changed"][0]
    assert (changed["package"], changed["before"], changed["after"]) == ("torch", "2.9.1", "2.10.0")
    assert changed["source"].startswith("the case's description") and "upgraded torch" in changed["source"]
    assert imp["pin"] == "torch==2.9.1"
    assert "torch 2.9.1 -> 2.10.0" in result["reason"] and "pin torch==2.9.1" in result["reason"]
    hyp = next(e["data"] for e in events if e["type"] == "hypothesis.added" and e["data"]["id"] == "package:torch")
    assert hyp["package"] == "torch" and not hyp["interventions"]


def test_a_known_good_note_gives_the_versions_when_the_case_says_nothing(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, WORLDS / "torch-upgrade-kernel-abi-notes")
    assert result["status"] == "not_isolated"
    imp = result["implicated"]
    assert imp["package"] == "torch"
    changed = {c["package"]: c for c in imp["changed"]}
    assert set(changed) == {"torch"}  # the note's other versions are the installed ones
    assert (changed["torch"]["before"], changed["torch"]["after"]) == ("2.9.1", "2.10.0")
    assert "known-good note" in changed["torch"]["source"] and "FINDINGS.md" in changed["torch"]["source"]
    assert imp["pin"] == "torch==2.9.1"


def test_a_package_the_case_names_but_the_host_does_not_have_is_not_blamed(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, UPGRADED, **{
        "Since I upgraded torch from 2.9.1 to 2.10.0 yesterday (pip install -U torch)":
        "Since I upgraded fancyattn from 1.0 to 1.1 yesterday"})
    imp = result["implicated"]
    assert imp["changed"] == [] and imp["package"] == "sgl_kernel"  # the frames' package, never a guess
    assert "fancyattn" not in json.dumps(imp)


def test_the_frames_package_is_named_not_the_generic_runtime_it_called(tmp_path: Path) -> None:
    """The control: the innermost frames are triton's, called from flashinfer, and nothing changed."""
    result, _ = _run(tmp_path, WORLDS / "kernel-import-through-triton")
    assert result["status"] == "not_isolated"
    imp = result["implicated"]
    # named by the distribution that provides the frames' flashinfer (the host's Python says so)
    assert imp["package"] == "flashinfer-python" and imp["imports"] == {"flashinfer-python": "flashinfer"}
    assert imp["changed"] == [] and "triton" not in imp["packages"] and "pin " not in result["reason"]


def test_a_generic_runtime_that_changed_is_named(tmp_path: Path) -> None:
    """The same control world, but the case says triton was upgraded: now triton is named first."""
    result, _ = _run(tmp_path, WORLDS / "kernel-import-through-triton", **{
        "launch_server exits right away with an ImportError.":
        "after pip install -U triton this morning, launch_server exits right away with an ImportError."})
    imp = result["implicated"]
    assert imp["packages"][:2] == ["triton", "flashinfer-python"]
    assert imp["changed"][0]["in_frames"] is True and imp["changed"][0]["after"] == "3.5.1"
    assert "pin " not in result["reason"]  # the earlier version is not known: nothing to pin to


def test_a_packages_line_in_a_note_is_read() -> None:
    f = parse_findings(
        "## 2026-11-10 — Qwen/Qwen3-8B on 1x H100: works\n\nfine.\n\n"
        "- **Packages:** torch==2.9.1, sgl_kernel 0.3.21; flashinfer-python (0.6.3), not a version\n"
    )[0]
    assert f.packages == {"torch": "2.9.1", "sgl-kernel": "0.3.21", "flashinfer-python": "0.6.3"}


def test_a_findings_entry_records_the_hosts_package_versions(tmp_path: Path) -> None:
    """``findings add`` writes the installed versions of the run's host, which read back as the note's
    packages (a later run compares them with its host's)."""
    src = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"
    lines = src.read_text().splitlines()
    out = []
    for line in lines:
        ev = json.loads(line)
        if ev["type"] == "host.fingerprint":
            ev["data"]["installed"] = {"torch": "2.9.1", "sgl-kernel": "0.3.21"}
        out.append(json.dumps(ev))
    transcript = tmp_path / "run.jsonl"
    transcript.write_text("\n".join(out) + "\n")
    notes = tmp_path / "FINDINGS.md"
    entry, finding = add_finding(RecordedRun.load(transcript), notes)
    assert "- Packages: sgl-kernel==0.3.21, torch==2.9.1" in entry
    assert finding.packages == {"sgl-kernel": "0.3.21", "torch": "2.9.1"}
    assert read_findings(notes)[-1].packages == finding.packages


def test_a_broken_packages_file_in_knowledge_is_one_line_before_any_run(tmp_path: Path) -> None:
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "packages.toml").write_text("[generic_runtimes]\nnames = 'torch'\n")
    r = run_cli(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--knowledge", str(folder), timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "packages.toml: field 'generic_runtimes" in r.stderr
    listed = run_cli(tmp_path, "runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_a_new_engine_release_is_named_after_the_package_the_frames_run_in(tmp_path: Path) -> None:
    """Moving to a new SGLang image changed everything; the frames say where it broke."""
    result, _ = _run(tmp_path, WORLDS / "kernel-import-through-triton", **{
        "launch_server exits right away with an ImportError.":
        "since we moved to the newer sglang 0.5.9 image, launch_server exits right away with an ImportError."})
    imp = result["implicated"]
    assert imp["package"] == "flashinfer-python" and imp["packages"] == ["flashinfer-python", "sglang"]
    assert [c["package"] for c in imp["changed"]] == ["sglang"]


def test_an_error_without_frames_still_names_the_package_the_case_says_was_upgraded(tmp_path: Path) -> None:
    """tests/data/worlds/upgraded-flashinfer (issue 21's bent case): the error line has no frames, so the
    frames name nothing; the case's words name the upgraded package, which the host has installed."""
    work = tmp_path / "source" / "upgraded"
    work.mkdir(parents=True)
    shutil.copy(WORLDS / "upgraded-flashinfer" / "world.toml", work / "world.toml")
    (work / "case.toml").write_text((UPGRADED / "case.toml").read_text().replace(
        "Since I upgraded torch from 2.9.1 to 2.10.0 yesterday (pip install -U torch), launch_server exits right away.",
        "Since I upgraded flashinfer-python from 0.6.3 to 0.6.4 yesterday, the first request kills the server."))
    result, _ = _run(tmp_path, work)
    imp = result["implicated"]
    assert result["status"] == "not_isolated" and imp["package"] == "flashinfer-python"
    assert (imp["changed"][0]["before"], imp["changed"][0]["after"]) == ("0.6.3", "0.6.4")
    assert imp["pin"] == "flashinfer-python==0.6.3"


def _flashinfer_world_with_torch_case(tmp_path: Path) -> Path:
    """upgraded-flashinfer's host (the error names FlashInfer and flashinfer-python, no frames) under the
    case text of torch-upgrade-kernel-abi, which blames torch."""
    work = tmp_path / "source" / "told-torch"
    work.mkdir(parents=True)
    shutil.copy(WORLDS / "upgraded-flashinfer" / "world.toml", work / "world.toml")
    shutil.copy(UPGRADED / "case.toml", work / "case.toml")
    return work


def test_the_package_the_error_names_outweighs_the_description_and_the_run_goes_on(tmp_path: Path) -> None:
    """The user says torch was upgraded (2.9.0 -> 2.9.1, the installed one), the error says FlashInfer's
    version does not match: the ending names flashinfer-python before torch, and the run does not stop at
    the baseline while a cheap in-play change (another attention implementation than the FlashInfer the
    error names) is untested: it finds that workaround and calls it one."""
    result, events = _run(tmp_path, _flashinfer_world_with_torch_case(tmp_path), **{
        "from 2.9.1 to 2.10.0": "from 2.9.0 to 2.9.1"})
    assert result["status"] == "not_isolated"
    imp = result["implicated"]
    assert imp["package"] == "flashinfer-python"
    assert imp["packages"].index("flashinfer-python") < imp["packages"].index("torch")
    assert "pin torch" not in result["reason"]
    launched = [e["data"]["change"] for e in events
                if e["type"] == "experiment.proposed" and e["data"]["purpose"] == "test"]
    assert any(c and c["name"] == "--attention-backend" and c["after"] != "flashinfer" for c in launched)
    assert not any(c and ("speculative" in c["name"] or "moe" in c["name"]) for c in launched)
    alt = next(e["data"] for e in events if e["type"] == "conclusion")["alternatives"][0]
    assert alt["name"] == "--attention-backend" and alt["workaround"] is True


def test_a_generic_runtime_the_case_names_but_that_did_not_change_is_not_blamed(tmp_path: Path) -> None:
    """The same host, the case's own text: "upgraded torch from 2.9.1 to 2.10.0", but 2.9.1 is what is
    installed, so torch did not change; the error names flashinfer-python, and torch is not named."""
    result, _ = _run(tmp_path, _flashinfer_world_with_torch_case(tmp_path))
    imp = result["implicated"]
    assert imp["package"] == "flashinfer-python" and "torch" not in imp["packages"]
    assert imp["changed"] == []


def test_a_change_word_inside_another_word_says_nothing_changed() -> None:
    """"removed" is not "moved", "unchanged" not "changed", "afternoon" not "after": the words that say
    something changed match at the start of a word only."""
    from agent.domain.case import Case
    from agent.planning.package_changes import package_changes

    installed = {"torch": "2.10.0", "flashinfer-python": "0.6.4"}

    def changed(text: str) -> list[str]:
        case = Case.model_validate({"name": "c", "description": text, "model": {"path": "org/M"}})
        return [ch.name for ch in package_changes(case, installed, [])]

    assert changed("I removed a flag, torch is unchanged this afternoon.") == []
    assert changed("It broke after I upgraded torch.") == ["torch"]
    assert changed("We moved to flashinfer-python 0.6.4.") == ["flashinfer-python"]
