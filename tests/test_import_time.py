"""A failure raised while only module-level code ran (the server's entry point still importing) is one no
launch flag reaches: the run ends after the baseline, naming the package the failing code is in, whatever
the exception (issue 20: only what is in play)."""

from __future__ import annotations

from agent.domain.models import LogLine, Outcome
from agent.planning.observations import import_time_failure

_SITE = "/opt/venv/lib/python3.10/site-packages"
_HEAD = (
    "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
    f'  File "{_SITE}/sglang/launch_server.py", line 7, in <module>\n'
    "    from sglang.srt.entrypoints.http_server import launch_server\n"
)
_TAIL = (
    f'  File "{_SITE}/sglang/srt/layers/quantization/__init__.py", line 44, in <module>\n'
    "    from kernels_pkg.ops import fused\n"
    f'  File "{_SITE}/kernels_pkg/ops/__init__.py", line 21, in <module>\n'
    "    fp8_dtype = kernels_pkg.dtypes.fp8\n"
    "AttributeError: module 'kernels_pkg' has no attribute 'dtypes'\n"
)


def _outcome(text: str) -> Outcome:
    lines = [LogLine(line=i, text=t) for i, t in enumerate(text.splitlines(), 1)]
    return Outcome(experiment_id="e", stage="load_failed", log_excerpt=lines)


def test_an_attribute_error_raised_while_importing_names_the_package_it_is_in() -> None:
    assert import_time_failure(_outcome(_HEAD + _TAIL)) == "kernels_pkg"


def test_the_same_error_after_a_function_of_the_server_ran_is_not_an_import_time_dead_end() -> None:
    """Once a function ran (here the server's launch, which reads the arguments), a flag may lead
    around the failing code: the run goes on testing changes."""
    called = (
        f'  File "{_SITE}/sglang/srt/entrypoints/http_server.py", line 90, in launch_server\n'
        "    load_kernels(server_args)\n"
    )
    assert import_time_failure(_outcome(_HEAD + called + _TAIL)) is None
