"""Failures no launch setting reaches, so the run ends after the baseline naming a package (issue 20: only
what is in play): an exception raised while only module-level code ran (the entry point still importing,
whatever the exception), and a package's own error saying its installed version is out of date."""

from __future__ import annotations

from agent.domain.models import LogLine, Outcome
from agent.planning.observations import import_time_failure
from agent.planning.package_changes import outdated_package

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


_CONFIG_READ = (
    "Traceback (most recent call last):\n"
    f'  File "{_SITE}/sglang/srt/server_args.py", line 1188, in _handle_model_specific_adjustments\n'
    "    hf_config = self.get_model_config().hf_config\n"
    f'  File "{_SITE}/transformers/models/auto/configuration_auto.py", line 1362, in from_pretrained\n'
    "    raise ValueError(\n"
    "ValueError: The checkpoint you are trying to load has model type `new_moe` but Transformers does not "
    "recognize this architecture. This could be because of an issue with the checkpoint, or because your "
    "version of Transformers is out of date.\n"
)


def test_a_package_that_says_its_own_version_is_out_of_date_is_the_remedy() -> None:
    """The error is raised in transformers and says transformers is out of date: the package is named."""
    assert outdated_package(_outcome(_CONFIG_READ).tracebacks) == "transformers"


def test_advice_about_another_package_than_the_one_that_raised_is_not_taken() -> None:
    """SGLang's own code saying some other package is old is not that package reporting on itself: a
    setting may still route around the check, so nothing is concluded from the words alone."""
    elsewhere = _CONFIG_READ.replace(
        f'  File "{_SITE}/transformers/models/auto/configuration_auto.py", line 1362, in from_pretrained\n',
        f'  File "{_SITE}/sglang/srt/configs/model_config.py", line 119, in __init__\n',
    )
    assert outdated_package(_outcome(elsewhere).tracebacks) is None


_LAZY = (
    f'  File "{_SITE}/sglang/srt/layers/attention/attention_registry.py", line 61, in create_backend\n'
    "    from sglang.srt.layers.attention.fi_backend import FlashInferBackend\n"
    f'  File "{_SITE}/sglang/srt/layers/attention/fi_backend.py", line 12, in <module>\n'
    "    import flashinfer\n"
    "ModuleNotFoundError: No module named 'flashinfer'\n"
)


def test_an_import_error_reached_through_a_function_is_not_an_import_time_dead_end() -> None:
    """A lazy import behind a backend choice fails after the arguments were read: a setting may lead
    around it even when no guard was read from the source, so the run goes on testing changes."""
    called = (
        f'  File "{_SITE}/sglang/launch_server.py", line 30, in <module>\n'
        "    run_server(server_args)\n"
        f'  File "{_SITE}/sglang/srt/entrypoints/http_server.py", line 90, in launch_server\n'
        "    engine = Engine(server_args)\n"
    )
    head = _HEAD.split("  File \"" + _SITE)[0]
    assert import_time_failure(_outcome(head + called + _LAZY)) is None
    # a scheduler process's traceback starts in a function run after the arguments were parsed
    worker = ("Traceback (most recent call last):\n"
              f'  File "{_SITE}/sglang/srt/managers/scheduler.py", line 3100, in run_scheduler_process\n'
              "    scheduler = Scheduler(server_args)\n")
    assert import_time_failure(_outcome(worker + _LAZY)) is None


def test_an_import_error_raised_by_code_an_import_ran_is_an_import_time_dead_end() -> None:
    """The entry point imported a module whose module-level code called a helper that raised an import
    error: still before any argument was read, so no setting decides whether it runs."""
    helper = (
        f'  File "{_SITE}/sglang/srt/layers/quantization/__init__.py", line 44, in <module>\n'
        "    _ops = _load_ops()\n"
        f'  File "{_SITE}/kernels_pkg/loader.py", line 9, in _load_ops\n'
        "    raise ImportError('libkernels.so: cannot open shared object file')\n"
        "ImportError: libkernels.so: cannot open shared object file\n"
    )
    assert import_time_failure(_outcome(_HEAD + helper)) == "kernels_pkg"


def test_an_import_the_entry_points_own_launcher_makes_unconditionally_is_an_import_time_dead_end() -> None:
    """SGLang 0.5.23's launch_server parses its arguments, then its own ``run_server`` imports the HTTP
    server whatever they say: a kernel package failing to load in that chain of module-level imports is
    reached by every launch, so no setting leads around it."""
    launcher = (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        f'  File "{_SITE}/sglang/launch_server.py", line 35, in <module>\n'
        "    run_server(server_args)\n"
        f'  File "{_SITE}/sglang/launch_server.py", line 26, in run_server\n'
        "    from sglang.srt.entrypoints.http_server import launch_server\n"
    )
    assert import_time_failure(_outcome(launcher + _TAIL.replace("AttributeError", "ImportError"))) == "kernels_pkg"
    # the same launcher reaching a lazy import inside a function of the server is not
    assert import_time_failure(_outcome(launcher + _LAZY)) is None
