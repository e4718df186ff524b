"""Blame what the error asks for (issue 20, point 7): when no launch setting fixes a failure and the error's
own message says which distribution to install ("Run the following command immediately to fix: pip install
NAME==VERSION"), the not_isolated ending names that distribution first, even a generic runtime (an
``nvidia-*`` wheel: the error is the evidence against it) and even when check_env's report (SGLang's own
package list) does not list it; the version asked for is the suggested fix. Advice printed outside the
exception's message (a later log record) names nothing.

Real parts: the repository's knowledge (packages.toml ``[install_advice]``, libraries.toml), SGLang's log
format and its engine-side check raising a multi-line ``RuntimeError(msg)`` (the wording of
sgl-project/sglang PR #14119, as an H100 host on a CUDA 13 image printed it in ai-dynamo/dynamo#5482), the
outcome classifier and the conclusion's blame.
"""

from __future__ import annotations

from typing import Any

from agent.domain.evidence import RawEvidence
from agent.domain.models import Conclusion
from agent.planning.blame import blamed
from agent.planning.package_changes import install_advice
from agent.run.nodes.analyze import classify_outcome
from tools.signatures import for_engine, load_signatures

SITE = "/usr/local/lib/python3.12/dist-packages"
CHECK = f'''Traceback (most recent call last):
  File "{SITE}/sglang/srt/entrypoints/engine.py", line 913, in _launch_subprocesses
    server_args.check_server_args()
  File "{SITE}/sglang/srt/server_args.py", line 4706, in check_torch_2_9_1_cudnn_compatibility
    raise RuntimeError(msg)
RuntimeError: CRITICAL WARNING: PyTorch 2.9.1 & CuDNN Compatibility Issue Detected
--------------------------------------------------------------------------------
Current Environment: PyTorch 2.9.1+cu130 | CuDNN 9.13

Solution:  You MUST upgrade CuDNN to version 9.15+ to ensure correctness.

Run the following command immediately to fix:
    pip install nvidia-cudnn-cu13==9.16.0.29

Or you can disable this check by setting env var SGLANG_DISABLE_CUDNN_CHECK=1
--------------------------------------------------------------------------------
'''
#: check_env's report on that host: SGLang's own package list, without any cuDNN wheel.
INSTALLED = {"torch": "2.9.1+cu130", "sglang": "0.5.8", "sgl-kernel": "0.3.20", "flashinfer-python": "0.6.1"}


def _ending(log: str, installed: dict[str, str] | None = None) -> Conclusion:
    raw = RawEvidence.from_log("exp-1", log, for_engine(load_signatures(), "sglang"), "x.log")
    outcome = classify_outcome(raw.model_copy(update={"status": "exited"}))
    state: dict[str, Any] = {
        "case": {"name": "c", "model": {"path": "/m/q"}, "baseline": {"flags": {}, "env": {}},
                 "description": "Our multimodal model on the CUDA 13 image; the server stops at once."},
        "fingerprint": {"gpu_vendor": "nvidia", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1,
                        "installed": INSTALLED if installed is None else installed},
        "outcomes": [outcome.model_dump(mode="json")],
    }
    c = Conclusion(status="not_isolated", reason="no fix found",
                   implicated={"component": "server_args", "experiment_id": "exp-1"})
    return blamed(c, state)


def test_the_distribution_the_error_asks_to_install_is_named_with_its_version() -> None:
    c = _ending(CHECK)
    assert c.implicated["package"] == "nvidia-cudnn-cu13", c.implicated
    assert c.implicated["install"] == "nvidia-cudnn-cu13==9.16.0.29"
    assert "asks for nvidia-cudnn-cu13==9.16.0.29" in c.reason and "does not install packages" in c.reason
    # the cuDNN version line of the message is log evidence of the same library
    assert any(e["package"] == "nvidia-cudnn-cu12" and "CuDNN 9.13" in e["line"] for e in c.implicated["log_evidence"])


def test_the_advice_is_read_without_installed_versions() -> None:
    """No check_env report at all: the error's own words still name the distribution."""
    assert _ending(CHECK, installed={}).implicated["package"] == "nvidia-cudnn-cu13"


def test_advice_in_a_later_log_record_is_not_the_errors() -> None:
    """The same failure whose message asks for nothing, followed by a warning record that mentions a pip
    command: the record is not part of the exception's message, so it names nothing to install."""
    text = CHECK.replace("    pip install nvidia-cudnn-cu13==9.16.0.29\n", "    (ask your administrator)\n")
    text += "[2026-12-03 10:00:01] WARNING utils.py:12: for HTTP/2 run pip install sglang-router==0.3.1\n"
    c = _ending(text)
    assert "install" not in c.implicated and "sglang-router" not in str(c.implicated.get("packages"))


def test_a_requirements_file_names_no_distribution() -> None:
    from tools.logwatch import LogLine
    from tools.tracebacks import parse_tracebacks

    text = "\n".join(["Traceback (most recent call last):",
                      f'  File "{SITE}/sglang/srt/server_args.py", line 10, in check',
                      "RuntimeError: the evaluation harness is missing: pip install -r eval/requirements.txt"])
    lines = [LogLine(line=i + 1, text=t) for i, t in enumerate(text.splitlines())]
    tracebacks = parse_tracebacks(text)
    assert tracebacks and install_advice(tracebacks, lines) == []
    named = text.replace("-r eval/requirements.txt", "--upgrade transformers")
    assert [a[:2] for a in install_advice(parse_tracebacks(named), [LogLine(line=i + 1, text=t) for i, t in
                                                                     enumerate(named.splitlines())])] == [("transformers", None)]


def test_a_package_the_frames_run_in_is_named_once_as_the_frames_spell_it() -> None:
    """The error raised in sgl_kernel's own code asks to upgrade it by its distribution's spelling: the
    ending names it once, first, as the frames spell it (no second spelling of the same package)."""
    log = f'''Traceback (most recent call last):
  File "{SITE}/sglang/srt/layers/activation.py", line 40, in <module>
    from sgl_kernel import silu_and_mul
  File "{SITE}/sgl_kernel/load_utils.py", line 188, in _load_architecture_specific_ops
    raise ImportError(error_msg)
ImportError: [sgl_kernel] CRITICAL: Could not load any common_ops library!
Please ensure sgl_kernel is properly installed with:
pip install --upgrade sgl_kernel
'''
    c = _ending(log, installed={**INSTALLED, "sgl-kernel": "0.3.20"})
    packages = c.implicated["packages"]
    assert packages[0] == "sgl_kernel" and "sgl-kernel" not in packages, packages
    assert "install" not in c.implicated  # no version asked for: nothing to suggest beyond naming it
