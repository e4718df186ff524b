"""A GPU whose architecture a kernel wheel was not built for (issue 20: a package no setting fixes is named):
SGLang's kernel wheel ships CUDA code compiled ahead of time for a fixed list of architectures
(knowledge/libraries.toml ``prebuilt``: sgl-kernel/CMakeLists.txt); on a Tesla T4 (sm_75) one of its ops fails
unchecked and PyTorch reports "no kernel image is available for execution on the device" at its next checked
launch, a torch op's (sgl-project/sglang#24224). No frame runs in the kernel package, yet the not_isolated
ending names it, with or without the hypothesis catalog. End to end on the lab world written from that
thread; the same ending on a failure of another kind names nothing of the sort."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_world

from agent.domain.models import Conclusion
from agent.planning.blame import blamed

WORDS = "compiled ahead of time"


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_the_kernel_wheel_built_for_other_gpus_is_named(tmp_path: Path, catalog: str) -> None:
    result, events = run_world(tmp_path, "qwen25-14b-t4x4", catalog)
    assert result["status"] == "not_isolated", result
    conclusion = next(e["data"] for e in events if e["type"] == "conclusion")
    assert conclusion["implicated"]["package"] in ("sgl_kernel", "sglang-kernel"), conclusion["implicated"]
    assert WORDS in conclusion["reason"] and "sglang-kernel" in conclusion["reason"], conclusion["reason"]


@pytest.mark.parametrize(("symptoms", "named"), [(["unsupported_arch"], True), (["illegal_memory_access"], False)])
def test_only_a_missing_kernel_image_names_the_prebuilt_wheel(symptoms: list[str], named: bool) -> None:
    base = Conclusion(status="not_isolated", reason="experiment budget spent",
                      implicated={"component": "layers.rotary_embedding.base", "package": None,
                                  "evidence": "torch.AcceleratorError: CUDA error", "symptoms": symptoms})
    state = {"case": {"name": "c", "model": {"path": "/m"}},
             "fingerprint": {"gpu_vendor": "nvidia", "installed": {"torch": "2.14.1", "sglang": "0.5.23",
                                                                   "sglang-kernel": "0.4.10"},
                             "import_names": {"sgl_kernel": ["sglang-kernel"]}},
             "outcomes": []}
    c = blamed(base, state)
    assert (WORDS in c.reason) is named, c.reason
    assert ((c.implicated or {}).get("package") in ("sgl_kernel", "sglang-kernel")) is named, c.implicated
