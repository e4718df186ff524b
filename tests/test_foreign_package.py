"""A package built for another platform than the host's (issue 20, points 1 and 7): a CUDA-only kernel
library installed on a ROCm host fails in its own module-level code while SGLang imports it, on every
launch. The run ends naming the package (a package change, not a launch setting), its options are not
candidates on that host, and nothing of this fires where the package's build fits the host, where the
user's own setting leads to it, or where the package failed at run time rather than at import. Which
platforms each package's builds target is ``knowledge/libraries.toml`` (``platforms``, ``ports``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from clirun import run_cli

from agent.cli.drive import check_knowledge
from agent.domain.case import Case
from agent.domain.knowledge_dir import default_dir, use_knowledge
from agent.domain.models import Baseline, Change, Experiment, Hypothesis, Intervention, LogLine, Outcome
from agent.planning.conclusion import conclusion_of
from agent.planning.foreign import foreign_import
from agent.planning.platform_builds import foreign_option, names_package
from tools.fingerprint import HostFingerprint

_SITE = "/opt/venv/lib/python3.12/site-packages"

#: SGLang's scheduler imports a kernel package lazily, from a function; the package's own module-level
#: code then runs a check of its platform that fails (not an ImportError).
LAZY_THEN_MODULE_LEVEL = f"""\
Traceback (most recent call last):
  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3120, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "{_SITE}/sglang/srt/layers/moe/token_dispatcher/__init__.py", line 19, in <module>
    from sglang.srt.layers.moe.token_dispatcher.flashinfer import MoeA2A
  File "{_SITE}/sglang/srt/layers/moe/token_dispatcher/flashinfer.py", line 51, in <module>
    from flashinfer.comm import MoeAlltoAll
  File "{_SITE}/flashinfer/comm/__init__.py", line 1, in <module>
    from .cuda_ipc import create_shared_buffer as create_shared_buffer
  File "{_SITE}/flashinfer/comm/cuda_ipc.py", line 211, in <module>
    cudart = CudaRTLibrary()
  File "{_SITE}/flashinfer/comm/cuda_ipc.py", line 159, in __init__
    assert so_file is not None, "libcudart is not loaded in the current process"
AssertionError: libcudart is not loaded in the current process
"""

#: The same package failing in a function SGLang called after the import finished (a kernel at run time).
AT_RUN_TIME = f"""\
Traceback (most recent call last):
  File "{_SITE}/sglang/srt/layers/attention/flashinfer_backend.py", line 420, in forward_decode
    o = self.decode_wrapper.run(q, kv)
  File "{_SITE}/flashinfer/decode.py", line 1210, in run
    assert self._plan_info is not None
AssertionError
"""


def _outcome(text: str) -> Outcome:
    lines = [LogLine(line=i, text=t) for i, t in enumerate(text.splitlines(), 1)]
    return Outcome(experiment_id="e1", stage="load_failed", exit_code=1, log_excerpt=lines, summary="died")


def _host(vendor: str, installed: dict[str, str] | None = None) -> HostFingerprint:
    return HostFingerprint(gpu_vendor=vendor, installed=installed or {"flashinfer-python": "0.7.2"})


def test_a_cuda_only_package_failing_at_import_on_a_rocm_host_is_the_cause() -> None:
    found = foreign_import(_outcome(LAZY_THEN_MODULE_LEVEL), _host("amd"), Baseline())
    assert found is not None
    assert (found.package, found.host, found.platforms) == ("flashinfer", "rocm", ("cuda",))
    said = found.statement()
    assert "uninstall flashinfer-python" in said and "libcudart is not loaded" in said
    assert "flashinfer.comm" in said  # where its import failed


def test_the_same_failure_on_the_packages_own_platform_is_not_a_platform_mismatch() -> None:
    assert foreign_import(_outcome(LAZY_THEN_MODULE_LEVEL), _host("nvidia"), Baseline()) is None


def test_an_unknown_platform_decides_nothing() -> None:
    assert foreign_import(_outcome(LAZY_THEN_MODULE_LEVEL), HostFingerprint(), Baseline()) is None


def test_the_ports_build_for_the_host_is_not_foreign_and_an_unknown_version_could_be_it() -> None:
    """FlashInfer has a ROCm port whose versions carry an ``amd`` label: installed, it is this platform's."""
    log = _outcome(LAZY_THEN_MODULE_LEVEL)
    assert foreign_import(log, _host("amd", {"flashinfer-python": "0.5.3.amd1"}), Baseline()) is None
    assert foreign_import(log, _host("amd", {"torch": "2.9.1"}), Baseline()) is None  # version not known


def test_a_users_setting_that_leads_to_the_package_is_left_to_the_experiments() -> None:
    """The user chose the package's backend on this host: changing that choice is a candidate, so the run
    does not end on the package."""
    chose = Baseline(flags={"--moe-a2a-backend": "flashinfer"})
    assert foreign_import(_outcome(LAZY_THEN_MODULE_LEVEL), _host("amd"), chose) is None


def test_a_failure_of_the_package_at_run_time_is_not_an_import_failure() -> None:
    assert foreign_import(_outcome(AT_RUN_TIME), _host("amd"), Baseline()) is None


def test_options_of_a_package_built_for_another_platform_are_not_in_play() -> None:
    """The chooser skips a change that configures a package which cannot run on the host's platform."""
    installed = {"flashinfer-python": "0.7.2"}
    option = Change(kind="flag", name="--flashinfer-mxfp4-moe-precision", before=None, after="bf16")
    assert "cannot run here" in (foreign_option(option, "rocm", installed) or "")
    assert foreign_option(option, "cuda", installed) is None
    assert foreign_option(option, None, installed) is None  # the host's platform unknown: nothing skipped
    aiter = Change(kind="env", name="SGLANG_USE_AITER", before=None, after="1")
    assert "aiter" in (foreign_option(aiter, "cuda", installed) or "")
    assert foreign_option(aiter, "rocm", installed) is None
    removal = Change(kind="flag", name="--flashinfer-mxfp4-moe-precision", before="bf16", after=None)
    assert foreign_option(removal, "rocm", installed) is None  # removing the user's setting restores SGLang's choice
    port = {"flashinfer-python": "0.5.3.amd1"}
    assert foreign_option(option, "rocm", port) is None  # the ROCm port's options run here


def test_a_package_is_named_by_its_words_not_by_a_prefix_it_shares() -> None:
    assert names_package("SGLANG_ENABLE_JIT_DEEPGEMM 1", "deep_gemm")
    assert names_package("--moe-runner-backend flashinfer_cutlass", "flashinfer")
    assert not names_package("--deepep-mode low_latency", "deep_gemm")


def test_the_ending_rules_out_the_packages_options_with_the_platform_as_evidence() -> None:
    case = Case.model_validate({"name": "c", "description": "", "model": {"path": "org/M"}})
    exp = Experiment(id="e1", purpose="baseline", baseline=Baseline(), status="done")
    hyps = [Hypothesis(id="h-fi", statement="flashinfer's precision", component="x", generator="component",
                       interventions=[Intervention(names=["--flashinfer-mxfp4-moe-precision"], values=["bf16"])]),
            Hypothesis(id="h-moe", statement="the MoE runner", component="y", generator="component",
                       interventions=[Intervention(names=["--moe-runner-backend"], values=["triton"])])]
    state: dict[str, Any] = {
        "case": case.model_dump(mode="json"), "experiments": [exp.model_dump(mode="json")],
        "outcomes": [_outcome(LAZY_THEN_MODULE_LEVEL).model_dump(mode="json")],
        "hypotheses": [h.model_dump(mode="json") for h in hyps], "rejections": [], "launches": 1,
        "status": "not_isolated", "conclude_reason": "the package cannot run here",
        "fingerprint": _host("amd").model_dump(mode="json")}
    c = conclusion_of(state)  # type: ignore[arg-type]
    refuted = {r["id"]: r for r in c.refuted}
    assert "h-fi" in refuted and "built for cuda" in refuted["h-fi"]["evidence"][0]["detail"]
    assert [u["id"] for u in c.untested] == ["h-moe"]  # SGLang's own MoE settings are not the package's
    assert c.implicated and c.implicated["package"] in ("flashinfer", "flashinfer-python")


def test_platforms_without_their_source_are_refused_in_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    text = (default_dir() / "libraries.toml").read_text(encoding="utf-8")
    cut = "\n".join(ln for ln in text.splitlines() if not ln.startswith("platforms_source"))
    (tmp_path / "libraries.toml").write_text(cut, encoding="utf-8")
    capsys.readouterr()
    with use_knowledge(tmp_path), pytest.raises(typer.Exit):
        check_knowledge()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "platforms_source" in err and "libraries.toml" in err


WORLD = Path(__file__).resolve().parent / "data" / "worlds" / "cuda-package-on-rocm"


def test_a_run_on_a_rocm_host_with_a_cuda_only_package_ends_naming_it(tmp_path: Path) -> None:
    """``hypoloop run`` on the lab's ROCm host (real processes and HTTP): the baseline fails inside the
    package's import, reached through a lazy import of SGLang's; the run ends promptly (at most one
    confirming relaunch), not on its budget, naming the package and the remedy."""
    work = tmp_path / WORLD.name
    shutil.copytree(WORLD, work)
    r = run_cli(tmp_path, "run", str(work / "case.toml"), "--auto", "--json", "--transcript-dir", str(tmp_path),
                timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "not_isolated" and result["launches"] <= 2
    assert "budget" not in result["reason"]
    assert result["implicated"]["package"] in ("deep_gemm", "deep-gemm")
    assert "built for cuda" in result["reason"] and "this host is rocm" in result["reason"]


def test_a_libraries_entry_is_named_counted_from_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal names the entry as a person counts ``[[library]]`` tables (``library #3``), as every
    hypoloop error does, not by Python's index from 0."""
    import tomllib

    text = (default_dir() / "libraries.toml").read_text(encoding="utf-8")
    cut = "\n".join(ln for ln in text.splitlines() if not ln.startswith("platforms_source"))
    first = next(i for i, lib in enumerate(tomllib.loads(cut)["library"]) if lib.get("platforms") or lib.get("ports"))
    (tmp_path / "libraries.toml").write_text(cut, encoding="utf-8")
    capsys.readouterr()
    with use_knowledge(tmp_path), pytest.raises(typer.Exit):
        check_knowledge()
    assert f"field 'library #{first + 1}.platforms_source'" in capsys.readouterr().err
