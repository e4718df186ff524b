"""What the case's description says the user deploys is kept (issue 20, point 5): "we serve MODEL with
FEATURE" names a feature the user runs on purpose, whether the baseline turns it on with a switch
(``--enable-hisparse``) or a selector set to a value (``--speculative-algorithm EAGLE``); dropping it is then
a workaround that changes the deployment, not the root fix. A description that only reports the failure
keeps nothing."""

from __future__ import annotations

import pytest

from agent.domain.case import Case
from agent.planning.served import description_keeps


@pytest.mark.parametrize(("description", "flags", "kept"), [
    ("We serve GLM-5.1-FP8 with hierarchical sparse attention (HiSparse) on 8 GPUs. It dies at start-up.",
     {"--enable-hisparse": True}, {"--enable-hisparse"}),
    ("We serve DeepSeek-V3.1 at TP=8 with EAGLE speculative decoding. Sampled requests kill it.",
     {"--speculative-algorithm": "EAGLE", "--tp-size": 8}, {"--speculative-algorithm"}),
    ("Serving the model on 8 GPUs with DP attention and EAGLE speculative decoding; requests hang.",
     {"--enable-dp-attention": True, "--speculative-algorithm": "EAGLE"},
     {"--enable-dp-attention", "--speculative-algorithm"}),
    ("The server dies at the first sampled request; greedy ones are fine.",
     {"--enable-hisparse": True, "--speculative-algorithm": "EAGLE"}, set()),
])
def test_a_feature_the_user_says_they_serve_with_is_kept(description: str, flags: dict[str, object],
                                                         kept: set[str]) -> None:
    case = Case.model_validate({"name": "c", "description": description, "model": {"path": "/m"},
                                "baseline": {"flags": flags}})
    assert description_keeps(case) == kept
