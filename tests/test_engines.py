"""vLLM as a second engine (issue 22): a case names its engine or it is told from the launcher; the launch
names the model the engine's way; each engine's log is read with its own signatures (one engine's ready
line never ends the wait for another); `analyze` reads a vLLM log as vLLM's.

The vLLM texts below are the messages of vLLM 0.32.0's source (file named at each), as its process
writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import run_cli

from agent.domain.case import CaseError, load_case
from tools.engines import detect, detect_log, get_engine
from tools.server import render_command
from tools.signatures import for_engine, load_signatures, scan_text


def _case(tmp_path: Path, launcher: str) -> Path:
    path = tmp_path / "case.toml"
    path.write_text(f'name = "c"\n[launcher]\n{launcher}\n[model]\npath = "/models/tiny"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("launcher", "engine", "model_args"),
    [
        ('engine = "vllm"', "vllm", ["/models/tiny"]),
        ('argv = ["vllm", "serve"]', "vllm", ["/models/tiny"]),
        ('argv = ["/opt/venv/bin/vllm", "serve"]', "vllm", ["/models/tiny"]),
        ('argv = ["{python}", "-m", "vllm.entrypoints.openai.api_server"]', "vllm", ["--model", "/models/tiny"]),
        ('argv = ["python", "-m", "sglang.launch_server"]', "sglang", ["--model-path", "/models/tiny"]),
        ('argv = ["{python}", "-m", "lab.launch_server"]', "sglang", ["--model-path", "/models/tiny"]),
    ],
)
def test_a_case_names_its_engine_or_it_is_told_from_the_launcher(
    tmp_path: Path, launcher: str, engine: str, model_args: list[str]
) -> None:
    case = load_case(str(_case(tmp_path, launcher)))
    assert case.launcher.engine == engine
    own = case.launcher.engine_impl().data.fallback_model_flag  # the model's flag, positional or not
    argv = render_command(
        case.launcher.argv, case.model.path, {"--max-model-len": "256", own: "x", "--port": "1"},
        host="127.0.0.1", port=8000, engine=case.launcher.engine_impl(),
    )
    n = len(case.launcher.argv)
    assert argv[n : n + len(model_args)] == model_args
    # The session owns the model, host and port: a flag naming them again is dropped, not passed twice.
    assert argv.count("--port") == 1 and "x" not in argv
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "8000"]
    # The version query asks for the engine's own distribution.
    assert get_engine(engine).data.distributions[0] in " ".join(case.launcher.version_argv)


def test_vllm_flags_are_read_from_help_all_and_sglangs_from_help() -> None:
    assert get_engine("vllm").help_argv(["vllm", "serve"]) == ["vllm", "serve", "--help=all"]
    assert get_engine("sglang").help_argv(["python", "-m", "sglang.launch_server"])[-1] == "--help"
    assert detect(["bash", "-c", "run.sh"]) is None


def test_an_unknown_engine_is_one_line_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(CaseError) as err:
        load_case(str(_case(tmp_path, 'engine = "tgi"')))
    msg = str(err.value)
    assert "\n" not in msg and "launcher.engine" in msg and "'vllm'" in msg


#: A vLLM 0.32.0 launch whose --max-model-len is beyond the model's positions: the API server process
#: prints the version, its arguments, and the config error (vllm/config/model.py) as a pydantic error.
VLLM_MAX_LEN_LOG = """\
(APIServer pid=4242) INFO 12-01 10:00:00 [api_utils.py:327] vLLM server version 0.32.0, serving model /m/tiny
(APIServer pid=4242) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: {'model': '/m/tiny', 'max_model_len': 4096, 'enforce_eager': True}
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/entrypoints/cli/main.py", line 75, in main
    args.dispatch_function(args)
  File "/venv/lib/python3.11/site-packages/vllm/config/model.py", line 2662, in _get_and_verify_max_len
    raise ValueError(
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, User-specified max_model_len (4096) is greater than the derived max_model_len (max_position_embeddings=512 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]
"""

#: SGLang 0.5.23 logs uvicorn's start-up line before its warm-up request; ready is the line after it.
SGLANG_WARMUP_LOG = """\
[2026-12-01 10:00:00] server_args={'model_path': '/m/tiny', 'device': 'cpu'}
[2026-12-01 10:00:30] INFO:     Application startup complete.
[2026-12-01 10:00:30] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
"""


def test_each_engine_log_is_read_with_its_own_signatures() -> None:
    sigs = load_signatures()
    assert detect_log(VLLM_MAX_LEN_LOG) == "vllm" and detect_log(SGLANG_WARMUP_LOG) == "sglang"
    vllm, facts = scan_text(VLLM_MAX_LEN_LOG, for_engine(sigs, "vllm"))
    ids = {m.signature_id for m in vllm}
    assert {"vllm_server_version", "vllm_max_model_len_too_long"} <= ids
    assert facts["max_model_len"] == "4096" and facts["derived_max_model_len"] == "512"
    # uvicorn's start-up line is not SGLang's readiness (its warm-up has not run yet).
    sglang, _ = scan_text(SGLANG_WARMUP_LOG, for_engine(sigs, "sglang"))
    assert not [m for m in sglang if m.kind == "ready"]
    ready, _ = scan_text("(APIServer pid=1) INFO:     Application startup complete.", for_engine(sigs, "vllm"))
    assert [m.signature_id for m in ready if m.kind == "ready"] == ["vllm_ready"]
    # Every vLLM signature names its source release.
    assert all("vLLM" in s.source or "vllm" in s.source for s in sigs if "vllm" in s.engines)


def test_analyze_reads_a_vllm_log_as_vllms(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(VLLM_MAX_LEN_LOG, encoding="utf-8")
    proc = run_cli(tmp_path, "analyze", str(log), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    text = json.dumps(out)
    assert "vllm_max_model_len_too_long" in text
    assert out["stage"] == "launch_failed", out["stage"]


def test_flags_reads_vllms_help_all_with_its_groups_aliases_and_defaults(tmp_path: Path) -> None:
    """`hypoloop flags --from-file` on vLLM 0.32.0's real `vllm serve --help=all`: the flags of every
    argument group, `-tp`-style short aliases, `(default: X)` suffixes and `--x/--no-x` pairs."""
    help_file = Path(__file__).parent / "data" / "help_vllm_0.32.0_all.txt"
    proc = run_cli(tmp_path, "flags", "--from-file", str(help_file), "--json")
    assert proc.returncode == 0, proc.stderr
    flags = json.loads(proc.stdout)["flags"]
    assert len(flags) > 300
    tp = flags["--tensor-parallel-size"]
    assert tp["aliases"] == ["-tp"] and tp["value_type"] == "int" and tp["default"] == "1"
    assert flags["--max-model-len"]["value_type"] == "int"
    assert flags["--enforce-eager"]["negation"] == "--no-enforce-eager"
    assert "float32" in flags["--dtype"]["choices"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_version_query_runs_with_the_launchers_interpreter(engine: str) -> None:
    """The version command is real Python run by the interpreter beside the launcher: here (no engine in
    the test environment) it says in one line that none of the engine's distributions is installed."""
    import subprocess
    import sys

    launcher = [str(Path(sys.executable).parent / "vllm"), "serve"]
    argv = get_engine(engine).version_argv(launcher)
    assert argv[0] == str(Path(sys.executable).parent / "python")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.strip().startswith("none of " + get_engine(engine).data.distributions[0])


@pytest.mark.parametrize(
    ("log", "baseline", "kind", "name", "after"),
    [
        ("quant-awq", '"--enforce-eager" = true, "--quantization" = "awq"', "flag", "--quantization", None),
        ("max-model-len", '"--enforce-eager" = true, "--max-model-len" = 4096', "flag", "--max-model-len", None),
        ("tp2-no-bind", '"--enforce-eager" = true, "--tensor-parallel-size" = 2', "env",
         "VLLM_CPU_OMP_THREADS_BIND", "nobind"),
        ("kv-too-small", '"--enforce-eager" = true, "--kv-cache-memory-bytes" = "4096"', "flag",
         "--kv-cache-memory-bytes", None),
        ("kvcache-above-free", '"--enforce-eager" = true', "env", "VLLM_CPU_KVCACHE_SPACE", "1"),
    ],
)
def test_analyze_advises_the_change_vllms_own_error_points_at(
    tmp_path: Path, log: str, baseline: str, kind: str, name: str, after: str | None
) -> None:
    """Real logs of vLLM 0.32.0 on this CPU host (tests/data/logs_vllm_0.32.0, written by `vllm serve`
    with one wrong setting): the first experiment `analyze` advises is the change vLLM's message points
    at (remove the refused setting; bind threads by hand on a one-NUMA-node host), not a flag whose value
    some INFO line happens to contain."""
    case = tmp_path / "case.toml"
    env = '{ VLLM_CPU_KVCACHE_SPACE = "4096" }' if log == "kvcache-above-free" else "{}"
    case.write_text(
        f'name = "c"\n[launcher]\nengine = "vllm"\n[model]\npath = "/m/tiny"\n[baseline]\n'
        f"flags = {{ {baseline} }}\nenv = {env}\n",
        encoding="utf-8",
    )
    path = Path(__file__).parent / "data" / "logs_vllm_0.32.0" / f"{log}.log"
    proc = run_cli(tmp_path, "analyze", str(path), "--case", str(case), "--json")
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)["first_experiment"]
    assert (first["kind"], first["name"], first["after"]) == (kind, name, after), first
