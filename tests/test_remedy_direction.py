"""A solution that says which way to move the user's setting moves it; it does not make removing the setting
the suspect (issue 20, point 2: an error that names a flag is read as a remedy, with the value it asks for).

SGLang 0.5.23's capture failure lists "set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)"
(runner_backend_utils CUDA_GRAPH_CAPTURE_FAILED_MSG); the log is tests/data/logs_0.5.23/capture_oom.log,
whose server ran with the user's --mem-fraction-static 0.93. Removing the flag lets SGLang pick a fraction
of its own (higher or lower, by GPU size): that is no reading of "a smaller value", so with or without the
hypothesis catalog (the bench's ablation) a smaller value ranks ahead of the removal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planner_steps import SGLANG_0_5_23_FLAGS, baseline_failed_with, under_catalog

from tools.fingerprint import HostFingerprint

LOG = (Path(__file__).parent / "data" / "logs_0.5.23" / "capture_oom.log").read_text()
H100X2 = HostFingerprint(gpu_vendor="nvidia", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=2,
                         compute_capability="9.0", memory_total_mib=81559, sglang_version="0.5.23")


@pytest.mark.parametrize("catalog", ["catalog", "empty"])
def test_a_solution_asking_for_a_smaller_value_lowers_the_users_setting_before_removing_it(tmp_path: Path,
                                                                                           catalog: str) -> None:
    def decide() -> list[tuple[str, float]]:
        flags = {"--model-path": "meta-llama/Llama-3.3-70B-Instruct", "--tp-size": "2", "--mem-fraction-static": "0.93"}
        _, _, proposal = baseline_failed_with(H100X2, flags, LOG, SGLANG_0_5_23_FLAGS)
        return [(c["change"], c["score"]) for c in proposal.considered if "score" in c]

    scored = under_catalog(catalog, tmp_path, decide)
    lower = [s for c, s in scored if c.startswith("--mem-fraction-static: 0.93 → 0.")]
    removal = [s for c, s in scored if c == "--mem-fraction-static: 0.93 → (unset)"]
    assert lower, scored
    assert not removal or max(lower) > max(removal), scored
