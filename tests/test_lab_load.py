"""Load shapes in the lab (issue 21, item 3): each request and batch key a fault can test, shown on a real
stand-in server over HTTP with a request that has the shape and one that has not; and the radix cache's
`cached_tokens` / `#cached-token:` as SGLang reports them."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tools.host import LocalHost

REPO = Path(__file__).resolve().parents[1]

WORLD = """
name = "load-keys"
[sglang]
version = "0.5.9"
[hardware]
gpu_name = "NVIDIA H100 80GB HBM3"
gpu_count = 1
compute_capability = "9.0"
memory_mib = 81559
[model]
path = "org/m"
architecture = "Qwen3ForCausalLM"
checkpoint_shards = 2
[timing]
init_s = 1.0
load_s = 1.0
capture_s = 1.0
warmup_s = 1.0
[memory]
weights_gb_total = 15.0
"""

#: One wrong_output fault per key, in check order: a reply's text says which key held for it.
FAULTS = {
    "prompt": '"req.prompt_tokens" = { ge = 2000 }',
    "output": '"req.output_tokens" = { ge = 300 }',
    "cached": '"req.cached_tokens" = { ge = 500 }',
    "tools": '"req.features" = { contains = "tools" }',
    "schema": '"req.features" = { contains = "json_schema" }',
    "regex": '"req.features" = { contains = "regex" }',
    "image": '"req.features" = { contains = "image" }',
    "logprobs": '"req.features" = { contains = "logprobs" }',
    "traffic": "traffic_s = { ge = 300 }",
}
BATCH_FAULTS = {
    "shrink": '"batch.shrink" = { ge = 1 }',
    "mixed": '"batch.features" = { contains = "json_schema" }, "req.features" = { not_contains = "json_schema" }',
}


def _world(tmp_path: Path, faults: dict[str, str]) -> Path:
    text = WORLD + "".join(
        f'\n[[fault]]\nid = "{k}"\neffect = "wrong_output"\ntext = "HIT-{k}"\nwhen = {{ {cond} }}\n'
        for k, cond in faults.items()
    )
    path = tmp_path / "world.toml"
    path.write_text(text)
    return path


class Server:
    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log
        self.client = httpx.Client(timeout=30, trust_env=False)

    def generate(self, text: str, max_new: int = 16, **extra: object) -> dict:
        params = {"max_new_tokens": max_new, "temperature": 0, **extra.pop("params", {})}  # type: ignore[dict-item]
        return self.client.post(self.url + "/generate", json={"text": text, "sampling_params": params, **extra}).json()

    def chat(self, **body: object) -> dict:
        body = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 16,
                "temperature": 0, **body}
        return self.client.post(self.url + "/v1/chat/completions", json=body).json()


def _serve(
    tmp_path: Path, faults: dict[str, str], args: tuple[str, ...] = (), time_scale: float = 0.001
) -> Iterator[Server]:
    """A lab server on the world with these faults; `time_scale` real seconds per simulated second (at
    0.001 the 60 simulated seconds that end a stretch of traffic are 60 ms: a loaded machine's pause can
    reach that, so a test that needs unbroken traffic serves slower)."""
    world = _world(tmp_path, faults)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    host = LocalHost(env={"HYPOLOOP_LAB_WORLD": str(world), "HYPOLOOP_LAB_TIME_SCALE": str(time_scale)})
    port = host.free_port()
    log = tmp_path / "server.log"
    handle = host.spawn(
        [sys.executable, "-m", "lab.launch_server", "--model-path", "org/m", "--port", str(port), *args],
        log_path=str(log), env={**env, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 30
        while "ready to roll" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.02)
        yield Server(f"http://127.0.0.1:{port}", log)
    finally:
        host.terminate(handle, grace_s=1)  # type: ignore[arg-type]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from _serve(tmp_path, FAULTS)


def _words(n: int) -> str:
    return " ".join(["alpha", "beta", "gamma", "delta"] * (n // 4))


def test_prompt_length_in_tokens(server: Server) -> None:
    assert "HIT" not in server.generate("The capital of France is")["text"]
    long = server.generate(_words(2400) + " The capital of France is")
    assert long["text"].startswith("HIT-prompt") and long["meta_info"]["prompt_tokens"] >= 2400


def test_output_length_counts_the_tokens_generated(server: Server) -> None:
    # asking for many tokens is not generating them: a short answer stops at its end
    assert "HIT" not in server.generate("The capital of France is", 400)["text"]
    reply = server.generate("The capital of France is", 400, params={"ignore_eos": True})
    assert reply["text"].startswith("HIT-output")


def test_cached_prefix_tokens_as_sglang_reports_them(server: Server) -> None:
    prefix = _words(800)
    first = server.generate(prefix + " first question: The capital of France is")
    assert first["meta_info"]["cached_tokens"] == 0 and "HIT" not in first["text"]
    second = server.generate(prefix + " second question: The capital of France is")
    assert second["text"].startswith("HIT-cached")
    assert 800 <= second["meta_info"]["cached_tokens"] < second["meta_info"]["prompt_tokens"]
    assert f"#cached-token: {second['meta_info']['cached_tokens']}," in server.log.read_text()


def test_radix_cache_off_caches_nothing(tmp_path: Path) -> None:
    for srv in _serve(tmp_path, FAULTS, ("--disable-radix-cache",)):
        prefix = _words(800)
        srv.generate(prefix + " one")
        again = srv.generate(prefix + " two")
        assert again["meta_info"]["cached_tokens"] == 0 and "HIT" not in again["text"]


@pytest.mark.parametrize(
    ("key", "chat_body", "native"),
    [
        ("tools", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, None),
        ("schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}},
         {"params": {"json_schema": "{}"}}),
        ("regex", {"regex": "[a-z]+"}, {"params": {"regex": "[a-z]+"}}),
        ("image", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
         {"image_data": "data:image/png;base64,AAAA"}),
        ("logprobs", {"logprobs": True, "top_logprobs": 2}, {"return_logprob": True}),
    ],
)
def test_request_features(server: Server, key: str, chat_body: dict, native: dict | None) -> None:
    assert "HIT" not in (server.chat()["choices"][0]["message"]["content"] or "")
    assert server.chat(**chat_body)["choices"][0]["message"]["content"].startswith(f"HIT-{key}")
    if native is not None:
        assert server.generate("The capital of France is", **native)["text"].startswith(f"HIT-{key}")


def test_time_under_traffic(server: Server) -> None:
    assert "HIT" not in server.generate("The capital of France is")["text"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # continuous traffic: each request as soon as the last answered
        if server.generate("The capital of France is")["text"].startswith("HIT-traffic"):
            break
    else:
        raise AssertionError("300 simulated seconds of traffic never reached")
    # a pause longer than the idle limit (60 simulated s = 60 ms here) ends the stretch
    time.sleep(0.3)
    assert "HIT" not in server.generate("The capital of France is")["text"]


def _together(server: Server, lengths: list[int], schema: list[bool]) -> list[str]:
    import concurrent.futures

    def one(i: int) -> str:
        extra = {"params": {"ignore_eos": True, **({"json_schema": "{}"} if schema[i] else {})}}
        return server.generate(f"Question {i}: the capital of France is", lengths[i], **extra)["text"]

    with concurrent.futures.ThreadPoolExecutor(len(lengths)) as pool:
        return list(pool.map(one, range(len(lengths))))


def test_a_batch_that_shrinks(tmp_path: Path) -> None:
    for srv in _serve(tmp_path, BATCH_FAULTS):
        same = _together(srv, [40, 40, 40], [False] * 3)
        assert not any(t.startswith("HIT") for t in same)  # finishing together: no request sees a shrink
        mixed = _together(srv, [8, 60, 120], [False] * 3)
        assert not mixed[0].startswith("HIT") and mixed[2].startswith("HIT-shrink")
        assert "#running-req: 3" in srv.log.read_text()


def test_batch_features_are_the_union_of_the_batch(tmp_path: Path) -> None:
    for srv in _serve(tmp_path, BATCH_FAULTS):
        alone = _together(srv, [20, 20], [False, False])
        assert not any(t.startswith("HIT") for t in alone)
        mixed = _together(srv, [20, 20], [True, False])
        assert mixed[1].startswith("HIT-mixed") and not mixed[0].startswith("HIT")


def test_the_date_header_is_the_simulated_clock(server: Server) -> None:
    from email.utils import parsedate_to_datetime

    first = parsedate_to_datetime(server.client.get(server.url + "/health").headers["date"]).timestamp()
    time.sleep(0.3)  # 300 simulated seconds at scale 0.001
    later = parsedate_to_datetime(server.client.get(server.url + "/health").headers["date"]).timestamp()
    assert later - first >= 250
