"""Knowledge that is data is read from the knowledge folder in force (``--knowledge DIR``): a swapped
folder's files are the ones read, and a file the folder lacks falls back to the repository's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from clirun import run_cli

from agent.domain.knowledge_dir import default_dir, use_knowledge
from agent.planning.generators.common import alternative_choices
from agent.planning.generators.implementations import (
    ImplementationsError,
    implementations,
    load_implementations,
)
from tools.engines import detect, get_engine
from tools.flags import parse_help
from tools.knowledge import KnowledgeError, parse_findings
from tools.server import render_command
from tools.signatures import load_signatures

DATA = Path(__file__).parent / "data"
FLAGS = parse_help((DATA / "help_sglang_0.5.9.txt").read_text(), source="fixture")


def _folder(tmp_path: Path, old: str, new: str) -> Path:
    """A knowledge folder holding only an edited copy of the repository's implementations.toml."""
    text = (default_dir() / "implementations.toml").read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "implementations.toml").write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path


def test_the_alternatives_of_a_backend_follow_the_folders_implementations_file(tmp_path: Path) -> None:
    spec = FLAGS.resolve("--attention-backend")
    shipped = alternative_choices(spec, "fa3", "NVIDIA H100")
    assert shipped[:3] == ["triton", "torch_native", "flashinfer"]  # portable first
    assert "aiter" not in shipped and "intel_xpu" not in shipped  # other vendors' left out on NVIDIA
    folder = _folder(
        tmp_path,
        'portable = ["triton", "torch_native", "pytorch", "torch", "flashinfer"]\n'
        "portable_source = ",
        'portable = ["flashinfer"]\nportable_source = ',
    )
    text = (folder / "implementations.toml").read_text()
    (folder / "implementations.toml").write_text(text.replace("other_vendor = 'aiter|wave|", "other_vendor = 'aiter|"))
    with use_knowledge(folder):
        swapped = alternative_choices(spec, "fa3", "NVIDIA H100")
        assert implementations().load.batch_caps == ("--max-running-requests", "--cuda-graph-max-bs")
    assert swapped[0] == "flashinfer" and swapped[1:3] == ["triton", "torch_native"]
    assert "wave" in swapped and "aiter" not in swapped
    assert alternative_choices(spec, "fa3", "NVIDIA H100") == shipped  # the repository's again


def test_a_bad_implementations_file_is_one_line_naming_the_field(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "batch_caps = [", "batch_caps = 3\nunused = [")
    with pytest.raises(ImplementationsError) as exc:
        load_implementations(folder / "implementations.toml")
    message = str(exc.value)
    assert message.startswith(f"{folder / 'implementations.toml'}: field 'load.batch_caps'") and "\n" not in message


# --- engines.toml and signatures.toml follow the folder too -------------------------------------------

FAKE_SERVER = """\
import argparse, sys
p = argparse.ArgumentParser(prog="server")
p.add_argument("--model-path", type=str)
p.add_argument("--zorp-size", type=int, default=1)
if "--every-flag" not in sys.argv:
    sys.exit("server: error: unrecognized arguments: " + " ".join(sys.argv[1:]))
print(p.format_help())
"""


def _engines(tmp_path: Path, old: str, new: str) -> Path:
    """A knowledge folder holding only an edited copy of the repository's engines.toml."""
    folder = tmp_path / "knowledge"
    folder.mkdir(exist_ok=True)
    text = (default_dir() / "engines.toml").read_text(encoding="utf-8")
    assert old in text
    (folder / "engines.toml").write_text(text.replace(old, new, 1), encoding="utf-8")
    return folder


def test_flags_asks_the_launcher_for_its_help_as_the_folders_engines_file_says(tmp_path: Path) -> None:
    """`hypoloop flags` runs the launcher with the engine's `help_args` of the engines.toml in force:
    a server that prints its flags only for `--every-flag` is read with a folder that says so, and
    refused (one line) with the repository's file."""
    server = tmp_path / "server.py"
    server.write_text(FAKE_SERVER)
    launcher = f"{sys.executable} {server}"
    folder = _engines(tmp_path, 'help_args = ["--help"]', 'help_args = ["--every-flag"]')
    swapped = run_cli(tmp_path, "flags", "--host", "local", "--launcher", launcher, "--json",
                      HYPOLOOP_KNOWLEDGE=str(folder))
    assert swapped.returncode == 0, swapped.stderr
    assert "--zorp-size" in json.loads(swapped.stdout)["flags"]
    own = run_cli(tmp_path, "flags", "--host", "local", "--launcher", launcher, "--json")
    assert own.returncode == 2 and "--help" in own.stderr and "Traceback" not in own.stderr, own.stderr


def test_the_engine_a_log_or_launcher_is_and_its_model_flag_follow_the_folder(tmp_path: Path) -> None:
    folder = _engines(tmp_path, 'model_flag = "--model-path"', 'model_flag = "--checkpoint"')
    text = (folder / "engines.toml").read_text()
    (folder / "engines.toml").write_text(text.replace('programs = ["vllm serve"]', 'programs = ["vllm up"]'))
    assert get_engine("sglang").model_args(["python", "-m", "sglang.launch_server"], "m") == ["--model-path", "m"]
    assert detect(["vllm", "up"]) is None
    with use_knowledge(folder):
        assert get_engine("sglang").model_args(["python", "-m", "sglang.launch_server"], "m") == ["--checkpoint", "m"]
        assert detect(["vllm", "up"]) == "vllm" and detect(["vllm", "serve"]) is None
    assert detect(["vllm", "serve"]) == "vllm"


SIGNATURE = """
[[signature]]
id = "zorp-pool-exhausted"
pattern = 'zorp pool exhausted after (?P<n>\\d+) requests'
severity = "fatal"
kind = "fatal"
stage = "serve"
meaning = "the zorp pool ran out"
source = "a made-up line"
facts = { zorp_requests = "{n}" }
"""


def test_a_folders_signatures_are_what_analyze_reports_and_the_default_loader_reads(tmp_path: Path) -> None:
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "signatures.toml").write_text(SIGNATURE)
    log = tmp_path / "server.log"
    log.write_text("[2026-01-02 03:04:05] starting\n[2026-01-02 03:04:09] zorp pool exhausted after 17 requests\n")
    r = run_cli(tmp_path, "analyze", str(log), "--json", "--knowledge", str(folder))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "zorp-pool-exhausted" in r.stdout and out["facts"]["zorp_requests"] == "17"
    with use_knowledge(folder):  # the default of load_signatures (the bench, tools) is the folder's too
        assert [s.id for s in load_signatures()] == ["zorp-pool-exhausted"]
    assert "zorp-pool-exhausted" not in {s.id for s in load_signatures()}


def test_a_broken_engines_file_is_refused_before_a_run_in_one_line(tmp_path: Path) -> None:
    """A broken engines.toml in --knowledge is one line and exit 2, and leaves no run behind."""
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "engines.toml").write_text("[sglang]\ndisplay = 3\n")
    r = run_cli(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--knowledge", str(folder), timeout=600)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "engines.toml: [sglang] display" in r.stderr, r.stderr
    listed = run_cli(tmp_path, "runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


# --- the deployment flags and the log wording of facts are data too -------------------------------------


def test_the_folders_listen_flags_are_what_a_launch_sets_and_what_notes_leave_out(tmp_path: Path) -> None:
    """engines.toml's host and port flags: a launch sets them (and drops them from the case's flags), and
    the findings reader leaves them out of a known-good command's configuration."""
    folder = _engines(tmp_path, 'port_flag = "--port"', 'port_flag = "--listen-port"')
    launcher = ["python", "-m", "sglang.launch_server"]
    notes = (
        "## 2026-03-01 — works\n\n```\npython -m sglang.launch_server --model-path acme/m --listen-port 9000 "
        "--tp-size 2\n```\n"
    )
    shipped = render_command(launcher, "m", {"--tp-size": 2}, host="h", port=5)
    assert shipped[-4:] == ["--host", "h", "--port", "5"]
    assert parse_findings(notes)[0].flags == {"--listen-port": "9000", "--tp-size": "2"}
    with use_knowledge(folder):
        argv = render_command(launcher, "m", {"--tp-size": 2, "--listen-port": 7}, host="h", port=5, engine=get_engine())
        assert argv[-4:] == ["--host", "h", "--listen-port", "5"] and argv.count("--listen-port") == 1
        assert parse_findings(notes)[0].flags == {"--tp-size": "2"}


def test_the_sentences_that_state_a_fact_are_the_folders(tmp_path: Path) -> None:
    """config_facts.toml's [[line]]: the engines' log wording of a fact (SGLang's "Setting KV cache dtype
    to ...", vLLM's "Using ... data type to store kv cache") is data; a folder can add another wording,
    or drop the shipped ones."""
    notes = (
        "## 2026-03-01 — works\n\n```\npython -m sglang.launch_server --model-path acme/m\n```\n"
        "The log said: Setting KV cache dtype to fp8_e4m3 for DeepSeek DSA on SM100 device.\n"
        "And: kv cache stored as fp8_e5m2 by the zorp engine\n"
    )
    assert parse_findings(notes)[0].facts == {"kv_cache_dtype": "fp8_e4m3"}
    vllm_said = notes + "vLLM said: Using fp8_e5m2 data type to store kv cache. It reduces the GPU memory\n"
    assert parse_findings(vllm_said)[0].facts == {"kv_cache_dtype": "fp8_e5m2"}  # the later line wins
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "config_facts.toml").write_text(
        'keys = ["kv_cache_dtype"]\nsource = "s"\n\n[[line]]\n'
        "pattern = 'kv cache stored as (?P<kv_cache_dtype>\\w+)'\nsource = \"a made-up engine's log\"\n"
    )
    with use_knowledge(folder):
        assert parse_findings(notes)[0].facts == {"kv_cache_dtype": "fp8_e5m2"}
    (folder / "config_facts.toml").write_text(
        'keys = ["kv_cache_dtype"]\nsource = "s"\n\n[[line]]\npattern = \'as (?P<kv_dtype>\\w+)\'\nsource = "s"\n'
    )
    with use_knowledge(folder), pytest.raises(KnowledgeError) as err:
        parse_findings(notes)
    assert "line #1.pattern" in str(err.value) and "kv_dtype" in str(err.value)
