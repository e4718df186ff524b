"""Conformance of the lab with each real release (issue 21, item 10): its log texts, the order of its
CUDA-graph stages, its HTTP endpoints and its --help, checked against the release's wheel source
(fetched like `.ci/run` does, cached under $HOME/.cache/hypoloop)."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from functools import cache
from pathlib import Path

import pytest

from lab import make_versions
from lab.release import DEFAULT_TEXTS
from lab.world import load_version
from tools.flags import parse_help

REPO = Path(__file__).resolve().parents[1]
RELEASES = make_versions.RELEASES

#: Texts that are not one log record of the release: traceback frames the lab prints around its own
#: messages (their file/line pairs are release-specific and checked where a world uses them).
NOT_RECORDS = {"no_kv_room_frames"}
#: Fragments of the lab's texts that are the lab's rendering, not SGLang's literal text: Python's repr of
#: a list (`bs={bs_list}` prints the list the release's f-string formats), the exception-class prefix
#: Python prints before a raised message, and the traceback header lines.
LAB_RENDERING = re.compile(r"^(RuntimeError: |ValueError: |Traceback \(most recent call last\):|EOFError$|\s+File )")


#: Where the lab's texts come from in a release (the whole tree is parsed only here, once per release).
SOURCE_DIRS = ("srt/model_executor", "srt/managers", "srt/mem_cache", "srt/entrypoints", "srt/utils",
               "srt/speculative", "srt/distributed")


@cache
def _patterns(release: str) -> list[tuple[str, re.Pattern[str]]]:
    """Each string literal of the release's source as (its longest literal piece, a regex): the literal
    text, any text where the f-string has a field (`f"Capture {name} begin"` matches the lab's rendered
    `Capture cuda graph begin`)."""
    root = make_versions.source_dir(release) / "sglang"
    out: list[tuple[str, re.Pattern[str]]] = []
    for folder in SOURCE_DIRS:
        for path in (root / folder).rglob("*.py"):
            try:
                # A release's own source may hold a string with an invalid escape (``"\\("`` in a plain
                # string): compiling it warns about that file (DeprecationWarning in 3.11, SyntaxWarning
                # from 3.12), not about this test; the literal's value is the same either way.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", SyntaxWarning)
                    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.JoinedStr):
                    template = "".join(str(v.value) if isinstance(v, ast.Constant) else "\x00" for v in node.values)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    template = node.value
                else:
                    continue
                for tline in template.split("\n"):  # a multi-line message is logged line by line here
                    tline = tline.strip()
                    pieces = [p for p in tline.split("\x00") if p]
                    if not pieces or len(max(pieces, key=len)) < 8:
                        continue
                    regex = re.compile(".*?".join(re.escape(p) for p in tline.split("\x00")), re.S)
                    out.append((max(pieces, key=len), regex))
    return out


def _lines_not_in_source(release: str, text: str) -> list[str]:
    """The lines of a lab text that no string of the release's source produces (the lab's `{fields}`
    are rendered as `x`; the source's f-string fields match any text)."""
    missing = []
    for line in text.split("\n"):
        line = LAB_RENDERING.sub("", line).strip()
        if len(line) < 8 or not re.search(r"[A-Za-z]{3}", line):
            continue
        rendered = re.sub(r"\{[^{}]*\}", "x", line)
        if not any(anchor in rendered and regex.search(rendered) for anchor, regex in _patterns(release)):
            missing.append(line)
    return missing


@pytest.mark.parametrize("release", RELEASES)
def test_every_log_text_of_the_release_is_in_its_source(release: str) -> None:
    texts = load_version(release).release.texts
    missing = [
        f"{key}: {line!r}"
        for key, text in texts.items()
        if text and key not in NOT_RECORDS
        for line in _lines_not_in_source(release, text)
    ]
    assert not missing, f"{release}: lab texts not found in the release's source:\n" + "\n".join(missing)


@pytest.mark.parametrize("release", RELEASES)
def test_reading_the_release_source_warns_about_nothing(release: str) -> None:
    """Reading a release's source for its texts printed "DeprecationWarning: invalid escape sequence
    '\\('" (a plain string in SGLang's own source): the warning is about that file, not a finding."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patterns = _patterns.__wrapped__(release)
    assert patterns and not [str(w.message) for w in caught]


def test_the_texts_the_lab_does_not_override_are_0_5_9s() -> None:
    """lab/release.py's defaults are the 0.5.9 texts (a later release overrides the ones it changed)."""
    for key, text in DEFAULT_TEXTS.items():
        if text and key not in NOT_RECORDS:
            assert not _lines_not_in_source("0.5.9", text), key


@pytest.mark.parametrize("release", RELEASES)
def test_the_graph_stage_order_is_the_release_order(release: str) -> None:
    srt = make_versions.source_dir(release) / "sglang" / "srt" / "model_executor"
    if release == "0.5.9":
        text = (srt / "model_runner.py").read_text()
        prefill_first = text.index("self.init_piecewise_cuda_graphs()") < text.index("self.init_device_graphs()")
    else:
        text = (srt / "model_runner_components" / "cuda_graph_setup.py").read_text()
        body = text[text.index("prefill = capture_prefill_graph("):]
        prefill_first = body.index("capture_prefill_graph(") < body.index("capture_decode_graph(")
    assert load_version(release).release.prefill_graph_first is prefill_first


ENDPOINTS = ["/health", "/health_generate", "/model_info", "/server_info", "/v1/models", "/generate",
             "/v1/chat/completions", "/get_model_info", "/get_server_info", "/flush_cache", "/v1/completions"]


@pytest.mark.parametrize("release", RELEASES)
def test_the_release_routes_every_endpoint_the_lab_serves(release: str) -> None:
    text = (make_versions.source_dir(release) / "sglang" / "srt" / "entrypoints" / "http_server.py").read_text()
    for route in ENDPOINTS:
        assert f'"{route}"' in text, f"{release}: {route} is not routed by http_server.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WORLD = """
name = "conformance"
description = "d"
[sglang]
version = "{version}"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 81559
[model]
path = "org/M"
architecture = "LlamaForCausalLM"
checkpoint_shards = 1
features = ["dense"]
[timing]
init_s = 0.5
load_s = 0.5
capture_s = 0.5
[memory]
weights_gb_total = 16.0
"""


@pytest.mark.parametrize("release", RELEASES)
def test_the_lab_answers_every_endpoint_and_prints_the_release_texts(tmp_path: Path, release: str) -> None:
    world = tmp_path / "world.toml"
    world.write_text(WORLD.format(version=release))
    port = _port()
    log = tmp_path / "log"
    env = {**os.environ, "HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": "0.01",
           "HF_HOME": str(tmp_path / "hf")}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lab.launch_server", "--model-path", "org/M", "--port",
                                 str(port)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "fired up" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        posts = {"/generate": {"text": "2 + 3 =", "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
                 "/v1/chat/completions": {"model": "org/M", "messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 4},
                 "/v1/completions": {"model": "org/M", "prompt": "hi", "max_tokens": 4}}
        for route in ENDPOINTS:
            data = json.dumps(posts[route]).encode() if route in posts else None
            req = urllib.request.Request(base + route, data=data, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200, route
        text = log.read_text(errors="replace")
        texts = load_version(release).release.texts
        for key in ("load_end", "kv_allocated", "capture_end"):
            first = re.split(r"\{[^{}]*\}", texts[key])[0]
            assert first in text, f"{release}: {key} ({first!r}) not printed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.parametrize("release", RELEASES)
def test_the_lab_help_is_the_release_parser(tmp_path: Path, release: str) -> None:
    world = tmp_path / "world.toml"
    world.write_text(WORLD.format(version=release))
    r = subprocess.run([sys.executable, "-m", "lab.launch_server", "--help"], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "HYPOLOOP_LAB_WORLD": str(world)}, check=False)
    assert r.returncode == 0, r.stderr
    lab = parse_help(r.stdout)
    real = make_versions.parser_of(release)
    real_options = {o for opt in real for o in opt["option_strings"]}
    lab_options = {o for spec in lab.flags.values() for o in spec.option_strings} | {
        spec.negation for spec in lab.flags.values() if spec.negation
    }
    assert real_options <= lab_options, sorted(real_options - lab_options)[:10]
    assert lab_options - real_options <= {"--help", "-h", "--version"}, sorted(lab_options - real_options)[:10]
    for opt in real:
        spec = lab.lookup(opt["option_strings"][0])
        assert spec is not None
        if opt["choices"] and opt["action"] == "store":
            assert spec.choices == [str(c) for c in opt["choices"]], opt["option_strings"][0]
