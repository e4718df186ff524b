"""The real vLLM cases (issue 22, item 3: `bench/real/vllm-*`, each one wrong setting a user could make on
vLLM 0.32.0 on this host's CPU) and the vLLM fingerprint. The end-to-end runs of these cases
(`hypoloop run CASE --auto --json`: right ending, launches <= chain + 3, no engine process left) are
tests/test_real_cases.py's, which drives every case under bench/real.

Marked `real_engine`: they need the bed of `.ci/real-engines` (skipped with the reason where it is not
built). A vLLM launch takes 30-40 s on an idle host and minutes on a shared one; run them alone with
`pytest -m real_engine tests/test_real_vllm.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EnginesBed

from bench.real import discover


def test_six_or_more_vllm_cases_with_a_chain_and_a_workaround(tmp_path: Path) -> None:
    cases = discover(["vllm"], out_dir=tmp_path)
    assert len(cases) >= 6
    assert all(c.case.launcher.engine == "vllm" for c in cases)
    assert any(len(c.chain) >= 2 for c in cases)
    assert any(not f.get("root", True) for c in cases for f in c.truth.fixes)


@pytest.mark.real_engine
def test_the_fingerprint_carries_the_real_vllm_version(engines: EnginesBed) -> None:
    """The host fingerprint of a vLLM case (what `hypoloop doctor` prints) names the engine and the
    version installed beside its launcher, asked of that environment's own Python."""
    from agent.domain.case import LauncherSpec
    from tools.fingerprint import engine_label, fingerprint
    from tools.host import LocalHost

    launcher = LauncherSpec.model_validate({"argv": [str(engines.root / "bin" / "vllm"), "serve"]})
    host = LocalHost()
    try:
        fp = fingerprint(host, gpu_query_argv=["nvidia-smi"], version_argv=launcher.version_argv,
                         engine=launcher.engine_impl())
    finally:
        host.close()
    assert fp.engine == "vllm" and fp.vllm_version and fp.vllm_version.startswith("0.32.0")
    assert fp.engine_version == fp.vllm_version and fp.sglang_version is None
    assert engine_label(fp.model_dump()) == f"vLLM {fp.vllm_version}"
