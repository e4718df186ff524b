"""Reading the installed source at a failure's traceback frames (tools/source_guards.py, tools/tracebacks.py).

Three kinds of source are read, always through a real host (LocalHost, and an SSHHost on the test sshd):
- the lab's simulated installed tree (lab/site/) and the world whose traceback points into it;
- small packages written here, one per kind of guard, to pin down the value that flips each;
- the real SGLang 0.5.23 sources, installed (never imported) into a cache folder outside the checkout
  (``pip install --no-deps --target``, as .ci/run does), under real tracebacks from public issues whose
  site-packages prefix is rewritten to that folder.

Real files and lines exercised (SGLang 0.5.23): srt/managers/scheduler.py (``_dispatch_event_loop_once``:
``elif scheduler.enable_overlap:`` at 6230 guarding ``scheduler.event_loop_overlap()`` at 6231, and
``self.enable_overlap = (not get_schedule().disable_overlap_schedule and not use_mlx())`` at 500;
``init_model_worker``: ``if use_mlx(): ... else: self.init_tp_model_worker()`` at 1026/1033/1130),
srt/hardware_backend/mlx/runtime.py (``use_mlx``: ``envs.SGLANG_USE_MLX.get()`` at 66), srt/managers/tp_worker.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clirun import HYPOLOOP

from agent.domain.models import Baseline, LogLine, Outcome
from agent.planning.generators import GeneratorInput
from agent.planning.generators.installed_source import InstalledSourceGenerator
from lab.world import SITE_DIR, WORLDS_DIR
from tools.flags import FlagCatalog, parse_help
from tools.host import LocalHost
from tools.source_guards import SourceReading, read_guards
from tools.ssh import SSHHost, SSHOptions
from tools.tracebacks import missing_import, parse_tracebacks

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
#: Where the test set-up installs SGLang 0.5.23's sources (.ci/run does the same, cached).
SGLANG_SRC = Path(os.environ.get("HYPOLOOP_SGLANG_SRC", "~/.cache/hypoloop/sglang-0.5.23-src")).expanduser()


def _catalog(version: str) -> FlagCatalog:
    return parse_help((DATA / f"help_sglang_{version}.txt").read_text(), version=version)


def _leads(reading: SourceReading) -> dict[tuple[str, str], Any]:
    """(kind, name) -> the first lead of that variable."""
    out: dict[tuple[str, str], Any] = {}
    for lead in reading.leads:
        out.setdefault((lead.kind, lead.name), lead)
    return out


# ------------------------------------------------------------------------------ the lab's simulated tree

VIT_TRACEBACK = """[2026-12-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{site}/sglang/srt/managers/scheduler.py", line 19, in run_scheduler_process
    scheduler = Scheduler(server_args, model_config, gpu_id, tp_rank)
  File "{site}/sglang/srt/managers/scheduler.py", line 11, in __init__
    self.model_runner.initialize()
  File "{site}/sglang/srt/model_executor/model_runner.py", line 20, in initialize
    self.init_device_graphs()
  File "{site}/sglang/srt/model_executor/model_runner.py", line 34, in init_device_graphs
    self.vit_graph_runner = ViTCudaGraphRunner(self)
                            ^^^^^^^^^^^^^^^^^^^^^^^^
  File "{site}/sglang/srt/multimodal/vit_cuda_graph_runner.py", line 17, in __init__
    self.capture()
  File "{site}/sglang/srt/multimodal/vit_cuda_graph_runner.py", line 24, in capture
    _check_static_boundaries(cu_seqlens)
  File "{site}/sglang/srt/multimodal/vit_cuda_graph_runner.py", line 34, in _check_static_boundaries
    raise RuntimeError(
RuntimeError: ViT CUDA graph capture failed: a packed batch of 4 images has image-dependent boundaries
"""


def _assert_vit_leads(reading: SourceReading) -> None:
    leads = _leads(reading)
    images = leads[("env", "SGLANG_VLM_MAX_IMAGES_PER_VIT")]
    # `if self.max_images > 1:` held; self.max_images = envs.SGLANG_VLM_MAX_IMAGES_PER_VIT.get()
    assert (images.value, images.certain, images.guard) == ("1", True, "if")
    assert images.condition == "self.max_images > 1" and images.path.endswith("vit_cuda_graph_runner.py")
    assert images.line == 22 and "envs.SGLANG_VLM_MAX_IMAGES_PER_VIT.get()" in images.via[0]
    graphs = leads[("env", "SGLANG_VIT_ENABLE_CUDA_GRAPH")]
    assert (graphs.value, graphs.line) == ("0", 33)  # `if self.is_multimodal and envs....get():` held
    disable = leads[("flag", "--disable-cuda-graph")]
    assert (disable.value, disable.guard, disable.line) == (True, "early exit", 30)
    assert [f.status for f in reading.frames] == ["read"] * 6
    assert reading.files_read == 4  # three files on the path plus environ.py for the variables' types


def test_reader_finds_the_env_and_flag_guards_of_the_lab_world_locally() -> None:
    reading = read_guards(LocalHost().read_text, VIT_TRACEBACK.format(site=SITE_DIR), _catalog("0.5.9"))
    _assert_vit_leads(reading)
    assert reading.exception.startswith("RuntimeError: ViT CUDA graph capture failed")


def test_every_world_traceback_into_the_lab_site_matches_its_files() -> None:
    """A world's `{site}` frames name lines whose text is the source line the traceback prints."""
    frame = re.compile(r'File "\{site\}/(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s+(?P<code>.+)')
    seen = 0
    for world in sorted([*WORLDS_DIR.glob("*/world.toml"), *(DATA / "worlds").glob("*/world.toml")]):
        for m in frame.finditer(world.read_text()):
            lines = (Path(SITE_DIR) / m["path"]).read_text().splitlines()
            assert lines[int(m["line"]) - 1].strip() == m["code"].strip(), f"{world}: {m['path']}:{m['line']}"
            seen += 1
    assert seen >= 8


def test_agent_isolates_the_lab_world_from_the_installed_source(tmp_path: Path) -> None:
    """Nothing in the log names a remedy: the root fix comes from the guard of the failing line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_")}
    env.update(HYPOLOOP_HOME=str(tmp_path / "home"), HYPOLOOP_LAB_TIME_SCALE="0.001")
    r = subprocess.run(
        [*HYPOLOOP, "run", "lab:vlm-vit-graph-multi-image", "--auto", "--json", "--transcript-dir", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "isolated" and result["launches"] == 3
    assert result["root_cause"]["fix"] == {
        "kind": "env", "name": "SGLANG_VLM_MAX_IMAGES_PER_VIT", "before": None, "after": "1",
    }  # fmt: skip
    events = [json.loads(line) for line in Path(result["transcript"]).read_text().splitlines()]
    read = next(e["data"] for e in events if e["type"] == "tool.result" and e["data"]["tool"] == "installed_source")
    assert any("SGLANG_VLM_MAX_IMAGES_PER_VIT =1" in lead for lead in read["leads"])
    added = next(e["data"] for e in events if e["type"] == "hypothesis.added" and e["data"]["id"].startswith("source:env:SGLANG_VLM"))
    assert any("vit_cuda_graph_runner.py:22: if self.max_images > 1" in ev["detail"] for ev in added["evidence"])
    outcome = next(e["data"] for e in events if e["type"] == "outcome")
    assert outcome["source_reading"]["leads"][0]["name"] == "SGLANG_VLM_MAX_IMAGES_PER_VIT"


def test_a_missing_package_nothing_avoids_ends_not_isolated_naming_it(tmp_path: Path) -> None:
    """An unconditional import of a package that is not installed: no guard, so no variable to try."""
    world = DATA / "worlds" / "missing-kernel-package" / "world.toml"
    case = tmp_path / "case.toml"
    case.write_text(
        'name = "missing-kernel-package"\ndescription = "the server exits while loading"\n'
        f'[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{world}" }}\n'
        '[launcher]\nargv = ["{python}", "-m", "lab.launch_server"]\n'
        'version_argv = ["{python}", "-m", "lab.launch_server", "--version"]\n'
        'gpu_query_argv = ["{python}", "-m", "lab.nvidia_smi"]\n'
        '[model]\npath = "org/Small-FP8"\n[baseline]\nflags = {}\n'
        "[budget]\nexperiments = 3\nhost_seconds = 28800\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOLOOP_")}
    env.update(HYPOLOOP_HOME=str(tmp_path / "home"), HYPOLOOP_LAB_TIME_SCALE="0.001")
    r = subprocess.run(
        [*HYPOLOOP, "run", str(case), "--auto", "--json", "--transcript-dir", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["status"] == "not_isolated"
    assert result["implicated"]["package"] == "deep_gemm" and result["implicated"]["missing"] == "deep_gemm"
    assert "failed import of deep_gemm" in result["reason"]
    events = [json.loads(line) for line in Path(result["transcript"]).read_text().splitlines()]
    outcome = next(e["data"] for e in events if e["type"] == "outcome")
    assert outcome["facts"]["missing_package"] == "deep_gemm" and outcome["source_reading"]["leads"] == []
    assert not any(e["data"]["id"].startswith("source:") for e in events if e["type"] == "hypothesis.added")


# ------------------------------------------------------------------------------ one package per guard kind


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    """A tiny installed 'sglang' under tmp_path/site-packages with one function per guard shape."""
    root = tmp_path / "site-packages" / "sglang" / "srt"
    root.mkdir(parents=True)
    (root.parent / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "utils.py").write_text(textwrap.dedent('''\
        import os

        def get_bool_env_var(name, default="false"):
            return os.getenv(name, default).lower() in ("1", "true")

        _use_fused = get_bool_env_var("SGLANG_USE_FUSED") and True

        def use_fused():
            return _use_fused
        '''))
    (root / "layer.py").write_text(textwrap.dedent('''\
        import os
        from sglang.srt.utils import get_bool_env_var, use_fused


        def by_backend(server_args):
            if server_args.attention_backend == "triton":
                raise RuntimeError("triton")


        def by_not_equal(server_args):
            assert server_args.kv_cache_dtype == "auto", "fp8"


        def by_membership():
            if "SGLANG_DEBUG_DUMP" in os.environ:
                raise RuntimeError("dump")


        def by_raw_env():
            mode = os.environ.get("SGLANG_MODE", "")
            if not mode:
                return None
            raise RuntimeError("mode")


        def by_helper():
            if use_fused():
                raise RuntimeError("fused")


        def by_either(server_args):
            if server_args.enable_torch_compile or get_bool_env_var("SGLANG_FORCE_COMPILE"):
                raise RuntimeError("compile")


        def by_size():
            if int(os.getenv("SGLANG_CHUNK", "4096")) > 2048:
                raise RuntimeError("chunk")


        def by_lazy_import(server_args):
            if server_args.attention_backend == "flashinfer":
                from sglang.srt import fi_backend
        '''))
    (root / "fi_backend.py").write_text("import flashinfer\n")
    return tmp_path / "site-packages"


def _read_at(pkg: Path, func: str, code: str) -> SourceReading:
    path = pkg / "sglang" / "srt" / "layer.py"
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip() == code)
    tb = f'Traceback (most recent call last):\n  File "{path}", line {line}, in {func}\n    {code}\nRuntimeError: x\n'
    return read_guards(LocalHost().read_text, tb, _catalog("0.5.9"))


@pytest.mark.parametrize(
    ("func", "code", "kind", "name", "expect"),
    [
        # == on the failing path: any other choice flips it (recorded as the value to avoid)
        ("by_backend", 'raise RuntimeError("triton")', "flag", "--attention-backend", {"avoid": ["triton"]}),
        # a failed assert of == : the compared value is what flips it
        ("by_not_equal", 'assert server_args.kv_cache_dtype == "auto", "fp8"', "flag", "--kv-cache-dtype",
         {"value": "auto", "guard": "assert", "certain": True}),
        ("by_membership", 'raise RuntimeError("dump")', "env", "SGLANG_DEBUG_DUMP", {"unset": True}),
        # an early return not taken: the variable was set and non-empty
        ("by_raw_env", 'raise RuntimeError("mode")', "env", "SGLANG_MODE", {"unset": True, "guard": "early exit"}),
        # a call into an imported helper, through a module-level assignment in another file
        ("by_helper", 'raise RuntimeError("fused")', "env", "SGLANG_USE_FUSED", {"value": "0", "certain": True}),
        # one operand of an `or` that held: flipping it alone may not be enough
        ("by_either", 'raise RuntimeError("compile")', "env", "SGLANG_FORCE_COMPILE", {"value": "0", "certain": False}),
        ("by_size", 'raise RuntimeError("chunk")', "env", "SGLANG_CHUNK", {"value": "2048"}),
    ],
)  # fmt: skip
def test_reader_reads_the_flipping_value_off_each_kind_of_condition(
    pkg: Path, func: str, code: str, kind: str, name: str, expect: dict[str, Any]
) -> None:
    lead = _leads(_read_at(pkg, func, code))[(kind, name)]
    for key, value in expect.items():
        assert getattr(lead, key) == value, (key, lead)


def test_reader_turns_argument_dests_into_the_hosts_flag_names(pkg: Path) -> None:
    lead = _leads(_read_at(pkg, "by_either", 'raise RuntimeError("compile")'))[("flag", "--enable-torch-compile")]
    assert (lead.dest, lead.value, lead.certain, lead.known_flag) == ("enable_torch_compile", None, False, True)
    assert lead.unset  # a switch that was on: leaving it off flips the condition


def test_a_frame_whose_file_is_not_on_the_host_is_reported_not_guessed(tmp_path: Path) -> None:
    tb = 'Traceback (most recent call last):\n  File "/nowhere/site-packages/sglang/srt/x.py", line 3, in f\n    g()\nValueError: v\n'
    reading = read_guards(LocalHost().read_text, tb)
    assert [(f.status, f.line) for f in reading.frames] == [("missing", 3)] and reading.leads == []


def test_a_lazy_import_behind_a_guard_is_not_an_import_time_dead_end(pkg: Path) -> None:
    """An import error raised while only module-level imports ran ends a run after the baseline (nothing
    at launch reaches import-time code); one reached through a function, or behind a guard the installed
    source shows, does not."""
    from agent.planning.planner import import_time_failure

    layer, backend = pkg / "sglang" / "srt" / "layer.py", pkg / "sglang" / "srt" / "fi_backend.py"
    line = next(i for i, t in enumerate(layer.read_text().splitlines(), 1) if "import fi_backend" in t)
    text = (
        f'Traceback (most recent call last):\n  File "{layer}", line {line}, in by_lazy_import\n'
        f'    from sglang.srt import fi_backend\n  File "{backend}", line 1, in <module>\n    import flashinfer\n'
        "ModuleNotFoundError: No module named 'flashinfer'\n"
    )
    reading = read_guards(LocalHost().read_text, text, _catalog("0.5.9"))
    assert _leads(reading)[("flag", "--attention-backend")].avoid == ["flashinfer"]
    assert reading.missing is not None and reading.missing.package == "flashinfer"
    excerpt = [LogLine(line=i, text=t) for i, t in enumerate(text.splitlines(), 1)]
    guarded = Outcome(experiment_id="e", stage="load_failed", log_excerpt=excerpt, source_reading=reading)
    assert import_time_failure(guarded) is None
    # without a guard seen, the import is still reached through a function (``by_lazy_import``): code that
    # ran after the arguments were read, so a setting upstream may lead around it (issue 20, ending rules)
    unguarded = reading.model_copy(update={"leads": []})
    assert import_time_failure(guarded.model_copy(update={"source_reading": unguarded})) is None
    at_import = text.replace("in by_lazy_import", "in <module>")
    excerpt = [LogLine(line=i, text=t) for i, t in enumerate(at_import.splitlines(), 1)]
    module_level = Outcome(experiment_id="e", stage="load_failed", log_excerpt=excerpt, source_reading=unguarded)
    assert import_time_failure(module_level) == "flashinfer"


# ------------------------------------------------------------------------------ tracebacks as logged


def test_tracebacks_are_parsed_innermost_first_and_once_per_rank() -> None:
    one = VIT_TRACEBACK.format(site="/s")
    text = one + one.replace("TP0", "TP1")
    tbs = parse_tracebacks(text)
    assert len(tbs) == 1
    assert [f.function for f in tbs[0].frames][:2] == ["_check_static_boundaries", "capture"]
    assert tbs[0].frames[0].code == "raise RuntimeError(" and tbs[0].exception == "RuntimeError"


@pytest.mark.parametrize(
    ("text", "kind", "package"),
    [
        # https://github.com/sgl-project/sglang/issues/9603 (0.5.1.post2 on MI210)
        ('Traceback (most recent call last):\n  File "/vast/users/me/sglang/python/sglang/srt/layers/quantization/'
         'fp8_kernel.py", line 64, in <module>\n    import vllm._C\nModuleNotFoundError: No module named \'vllm\'\n',
         "module", "vllm"),
        # https://github.com/sgl-project/sglang/issues/8373 (RTX 5080, 0.4.9.post2)
        ("ImportError: /home/devuser/.local/lib/python3.10/site-packages/sgl_kernel/common_ops.abi3.so: "
         "undefined symbol: _ZN3c104cuda9SetDeviceEa\n", "library", "sgl_kernel"),
        # https://github.com/sgl-project/sglang/issues/5494 (0.4.5.post1, ROCm)
        ("ImportError: cannot import name 'ck_moe_2stages_win4' from 'aiter.fused_moe_bf16_asm' "
         "(/root/miniconda3/envs/xinf/lib/python3.10/site-packages/aiter/fused_moe_bf16_asm.py)\n", "name", "aiter"),
        # the lab's triton-ptxas-sm120 world (FlashInfer built for CUDA 12 on a CUDA 13 host)
        ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n",
         "library", "libcudart.so.12"),
    ],
)  # fmt: skip
def test_a_failed_import_names_its_package(text: str, kind: str, package: str) -> None:
    missing = missing_import(text)
    assert missing is not None and (missing.kind, missing.package) == (kind, package)


def test_the_generator_proposes_one_variable_changes_with_the_guard_as_evidence() -> None:
    from agent.domain.case import load_case

    case = load_case(str(WORLDS_DIR / "vlm-vit-graph-multi-image" / "case.toml"))
    text = VIT_TRACEBACK.format(site=SITE_DIR)
    outcome = Outcome(
        experiment_id="exp-1",
        stage="load_failed",
        log_excerpt=[LogLine(line=i, text=t) for i, t in enumerate(text.splitlines(), 1)],
        source_reading=read_guards(LocalHost().read_text, text, _catalog("0.5.9")),
    )
    inp = GeneratorInput(
        case=case, baseline=Baseline(flags={"--mem-fraction-static": "0.85"}),
        reference=outcome, flags=_catalog("0.5.9"),
    )  # fmt: skip
    cands = {c.id: c for c in InstalledSourceGenerator().generate(inp)}
    images = cands["source:env:SGLANG_VLM_MAX_IMAGES_PER_VIT"]
    assert [(iv.kind, iv.names, iv.values, iv.decisive) for iv in images.interventions] == [
        ("env", ["SGLANG_VLM_MAX_IMAGES_PER_VIT"], ["1"], True)
    ]
    assert images.evidence[0].kind == "host" and "vit_cuda_graph_runner.py:22: if self.max_images > 1" in (
        images.evidence[0].detail
    )
    disable = cands["source:flag:--disable-cuda-graph"]
    assert disable.interventions[0].values == [True]
    # the innermost guard outweighs those of the calls that led to it
    assert images.weight > cands["source:env:SGLANG_VIT_ENABLE_CUDA_GRAPH"].weight


# ------------------------------------------------------------------------------ the real SGLang 0.5.23


@pytest.fixture(scope="module")
def sglang_src() -> Path:
    """SGLang 0.5.23's installed files (never imported): installed here when the set-up has not."""
    marker = SGLANG_SRC / "sglang" / "srt" / "managers" / "scheduler.py"
    if not marker.exists():
        r = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
             str(SGLANG_SRC), "sglang==0.5.23"],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if r.returncode != 0:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"cannot install SGLang 0.5.23 sources: {r.stderr[-500:]}")
            pytest.skip(f"cannot install SGLang 0.5.23 sources here: {r.stderr[-300:]}")
    return SGLANG_SRC


# https://github.com/sgl-project/sglang/issues/30595 (2026-07-09, TP3; the rank's traceback as posted,
# prefix /root/miniconda3/envs/sglang-deep/lib/python3.12/site-packages rewritten)
ISSUE_30595 = """[2026-07-09 03:41:24 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "{sp}/sglang/srt/managers/scheduler.py", line 4227, in run_scheduler_process
    scheduler.run_event_loop()
  File "{sp}/sglang/srt/managers/scheduler.py", line 1486, in run_event_loop
    dispatch_event_loop(self)
  File "{sp}/sglang/srt/managers/scheduler.py", line 4092, in dispatch_event_loop
    scheduler.event_loop_overlap()
  File "/root/miniconda3/envs/sglang-deep/lib/python3.12/site-packages/torch/utils/_contextlib.py", line 124, in decorate_context
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "{sp}/sglang/srt/managers/scheduler.py", line 1570, in event_loop_overlap
    batch_result = self.run_batch(batch)
                   ^^^^^^^^^^^^^^^^^^^^^
RuntimeError: (the issue's innermost frames and message are not part of this excerpt)
"""
# https://github.com/gpustack/gpustack/issues/4770 (2026-03-04, SGLang in /usr/local/lib/python3.12/dist-packages)
GPUSTACK_4770 = """[2026-03-04 10:31:59] Scheduler hit an exception: Traceback (most recent call last):
  File "{sp}/sglang/srt/managers/scheduler.py", line 3130, in run_scheduler_process
    scheduler = Scheduler(
                ^^^^^^^^^^
  File "{sp}/sglang/srt/managers/scheduler.py", line 368, in __init__
    self.init_model_worker()
  File "{sp}/sglang/srt/managers/scheduler.py", line 564, in init_model_worker
    self.init_tp_model_worker()
  File "{sp}/sglang/srt/managers/scheduler.py", line 522, in init_tp_model_worker
    self.tp_worker = TpModelWorker(
                     ^^^^^^^^^^^^^^
  File "{sp}/sglang/srt/managers/tp_worker.py", line 247, in __init__
    self._init_model_runner()
  File "{sp}/sglang/srt/managers/tp_worker.py", line 330, in _init_model_runner
    self._model_runner = ModelRunner(
                         ^^^^^^^^^^^^
  File "{sp}/sglang/srt/model_executor/model_runner.py", line 413, in __init__
    self.initialize(min_per_gpu_memory)
RuntimeError: (the issue's innermost frames and message are not part of this excerpt)
"""


def _assert_overlap_leads(reading: SourceReading) -> None:
    scheduler = [f for f in reading.frames if f.path.endswith("managers/scheduler.py")]
    # the traceback's 0.5.1x lines moved in 0.5.23; the printed source lines place them
    assert [(f.line, f.located, f.status) for f in scheduler] == [
        (1570, 2109, "moved"), (4092, 6231, "moved"), (1486, 1989, "moved"), (4227, 6368, "moved"),
    ]  # fmt: skip
    lead = _leads(reading)[("flag", "--disable-overlap-schedule")]
    assert (lead.value, lead.certain, lead.line, lead.condition) == (True, True, 6230, "scheduler.enable_overlap")
    assert lead.function == "dispatch_event_loop" and lead.via[0].endswith("scheduler.py:500: self.enable_overlap = (")


def test_real_issue_traceback_leads_to_the_overlap_scheduler_flag(sglang_src: Path) -> None:
    reading = read_guards(LocalHost().read_text, ISSUE_30595.format(sp=sglang_src), _catalog("0.5.23"))
    _assert_overlap_leads(reading)


def test_real_issue_traceback_leads_to_an_envs_variable(sglang_src: Path) -> None:
    reading = read_guards(LocalHost().read_text, GPUSTACK_4770.format(sp=sglang_src), _catalog("0.5.23"))
    lead = _leads(reading)[("env", "SGLANG_USE_MLX")]
    # `if use_mlx(): ... else: self.init_tp_model_worker()`; use_mlx() reads envs.SGLANG_USE_MLX.get()
    assert (lead.value, lead.guard, lead.path.endswith("managers/scheduler.py")) == ("1", "else", True)
    assert any("envs.SGLANG_USE_MLX.get()" in hop for hop in lead.via)
    assert {f.status for f in reading.frames} == {"moved", "differs"}  # ModelRunner.__init__ changed since


@pytest.fixture
def ssh_host(sshd: Any, tmp_path: Path) -> Iterator[SSHHost]:
    opts = SSHOptions(
        key_path=str(sshd.key), known_hosts=str(sshd.known_hosts), python=sys.executable,
        workdir_root=str(tmp_path / "remote-runs"),
    )  # fmt: skip
    host = SSHHost(sshd.target, options=opts)
    yield host
    host.close()


def test_reader_reads_the_real_source_over_ssh(ssh_host: SSHHost, sglang_src: Path) -> None:
    reading = read_guards(ssh_host.read_text, ISSUE_30595.format(sp=sglang_src), _catalog("0.5.23"))
    _assert_overlap_leads(reading)
    assert ssh_host.read_text(str(sglang_src / "sglang" / "no_such_file.py")) is None


def test_reader_reads_the_lab_site_over_ssh(ssh_host: SSHHost) -> None:
    _assert_vit_leads(read_guards(ssh_host.read_text, VIT_TRACEBACK.format(site=SITE_DIR), _catalog("0.5.9")))


def test_an_import_error_sglang_says_it_ignored_is_not_the_missing_import() -> None:
    # Real SGLang 0.5.23 on a CPU host prints these on every start (tests/data/logs_0.5.23/port-taken.log)
    # and then serves; a run whose failure is elsewhere must not be told it is a failed import.
    text = (DATA / "logs_0.5.23" / "port-taken.log").read_text()
    assert "Ignore import error when loading sglang.srt.models.falcon_mamba: cannot import name" in text
    assert missing_import(text) is None
    assert missing_import(text + "\nModuleNotFoundError: No module named 'sgl_kernel'\n") is not None


def test_the_ignored_import_of_the_models_own_implementation_is_the_missing_import() -> None:
    """SGLang's registry skips a model module whose import fails (0.5.23 srt/models/registry.py: "Ignore import
    error when loading {name}: {e}") and the loader then says the architecture has no implementation of its
    own and falls back to Transformers (srt/model_loader/utils.py): that skipped import is why the native
    class is missing, and it is the failed import, whatever the fallback then raises. The other modules'
    skipped imports, and the same lines without the fallback, are not."""
    real = (DATA / "logs_0.5.23" / "port-taken.log").read_text()
    ts = "[2026-12-01 10:00:00 TP0]"
    ignored = (f"{ts} Ignore import error when loading sglang.srt.models.deepseek_v4_dspark: No module named 'cutlass'\n"
               f"{ts} Ignore import error when loading sglang.srt.models.deepseek_v4: No module named 'cutlass'\n")
    fallback = (f"{ts} DeepseekV4ForCausalLM has no SGLang implementation, falling back to Transformers "
                "implementation. Some features may not be supported and performance may not be optimal.\n")
    fatal = ("Traceback (most recent call last):\n"
             '  File "/usr/local/lib/python3.12/dist-packages/transformers/models/auto/auto_factory.py", line 252, '
             "in from_config\n    raise ValueError(\nValueError: Unrecognized configuration class <class "
             "'sglang.srt.utils.hf_transformers.common._DeepseekV4ConfigAlias'> for this kind of AutoModel: AutoModel.\n")
    found = missing_import(real + ignored + fallback + fatal)
    assert found is not None and found.module == "cutlass", found
    assert missing_import(real + ignored + fatal) is None  # the native class was registered: not why it failed
    other = fallback.replace("DeepseekV4ForCausalLM", "Glm5ForCausalLM")
    assert missing_import(real + ignored + other + fatal) is None  # skipped modules of another model
