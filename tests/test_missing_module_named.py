"""A module the host lacks is named by the distribution that ships it (issue 20: a package no setting fixes is
named as ``pip install`` takes it). The registry of SGLang 0.5.23 swallows a model module's failed import
(``Ignore import error when loading ...: No module named 'cutlass'``) and falls back to Transformers, which
then dies; the import name ``cutlass`` is not a distribution, and the host, lacking it, cannot say which one
provides it: knowledge/libraries.toml does (``nvidia-cutlass-dsl``, sgl-project/sglang#30856). End to end on
the lab world written from that thread, and the naming rule alone."""

from __future__ import annotations

from pathlib import Path

from clirun import run_world

from agent.planning.blame import DistributionNames


def test_the_missing_module_is_named_by_its_distribution(tmp_path: Path) -> None:
    result, events = run_world(tmp_path, "dsv4-flash-fp8-h20x8")
    assert result["status"] == "not_isolated", result
    implicated = next(e["data"] for e in events if e["type"] == "conclusion")["implicated"]
    assert implicated["missing"] == "cutlass"
    assert "nvidia-cutlass-dsl" in implicated["packages"], implicated


def test_an_installed_distribution_wins_and_an_unknown_module_keeps_its_name() -> None:
    lacking = DistributionNames(import_names={}, installed={"torch": "2.14.1"}, missing="cutlass")
    assert lacking.name("cutlass") == "nvidia-cutlass-dsl"
    assert DistributionNames(missing="not_a_known_module").name("not_a_known_module") == "not_a_known_module"
    # a module the failure does not say is missing keeps its name (the host's list may just not show it)
    assert DistributionNames(missing="cutlass").name("deep_gemm") == "deep_gemm"
    # the host's own Python says which distribution provides an installed import name
    having = DistributionNames(import_names={"cutlass": ["cutlass-fork"]}, installed={"cutlass-fork": "1.0"})
    assert having.name("cutlass") == "cutlass-fork"
    # missing: the distribution the current release uses
    assert DistributionNames(missing="sgl_kernel").name("sgl_kernel") == "sglang-kernel"
