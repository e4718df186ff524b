"""Probes against a real fake server over HTTP: ok, wrong answer, degenerate, errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tools.host import LocalHost, terminate_all
from tools.probes import (
    DEFAULT_PROBES,
    Probe,
    classify_text,
    degeneracy_reason,
    get_server_info,
    request_timeout_s,
    run_probe,
)
from tools.server import ServerSession, SessionOptions, render_command
from tools.signatures import SignatureMatcher, load_signatures

FAKE_SERVER = str(Path(__file__).parent / "fakes" / "fake_server.py")
SIGS = load_signatures()
CHAT, GENERATE, SAMPLED = DEFAULT_PROBES


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start a fake server with extra args; returns its base URL. Everything is stopped afterwards."""
    host = LocalHost()
    sessions: list[ServerSession] = []

    def start(*args: str) -> str:
        port = host.free_port()
        argv = render_command(
            ["{python}", FAKE_SERVER, *args, "--then", "serve"], "m", {}, host="127.0.0.1", port=port
        )
        s = ServerSession(
            host,
            argv,
            log_path=str(tmp_path / f"server{len(sessions)}.log"),
            port=port,
            matcher=SignatureMatcher(SIGS),
            options=SessionOptions(ready_timeout_s=30.0, stop_grace_s=1.0),
        )
        sessions.append(s)
        result = s.wait_ready()
        assert result.status == "ready" and result.base_url
        return result.base_url

    yield start
    for s in sessions:
        assert s.stop() is True
    assert terminate_all() == []


def test_default_probes_ask_for_paris() -> None:
    assert CHAT.kind == "chat" and CHAT.expect == "Paris"
    assert CHAT.prompt == "What is the capital of France? Answer in one word."
    assert GENERATE.kind == "generate" and GENERATE.prompt == "The capital of France is"
    # greedy (argmax) and sampled decoding fail differently on NaN logits: the defaults cover both
    assert CHAT.temperature == GENERATE.temperature == 0 and SAMPLED.temperature > 0


@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=lambda p: p.kind)
def test_correct_answer_is_ok(serve: Callable[..., str], probe: Probe) -> None:
    url = serve("--answer", " Paris.")
    r = run_probe(url, probe, model="m", timeout_s=10)
    assert (r.status, r.ok, r.http_status, r.text) == ("ok", True, 200, " Paris.")
    assert 0 < r.latency_s < 10


@pytest.mark.parametrize("probe", [CHAT, GENERATE], ids=lambda p: p.kind)  # the probes that expect "Paris"
def test_wrong_answer_is_classified(serve: Callable[..., str], probe: Probe) -> None:
    url = serve("--answer", "Berlin")
    r = run_probe(url, probe, model="m", timeout_s=10)
    assert r.status == "wrong_answer" and not r.ok and r.text == "Berlin"


@pytest.mark.parametrize(
    "answer", ["!!!!!!!!!!!!!!!!!!!!!!!!", "Paris Paris Paris Paris Paris Paris", "\ufffd\ufffd\ufffd\ufffd"]
)
@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=lambda p: p.kind)
def test_degenerate_text_is_classified_even_if_it_contains_the_answer(
    serve: Callable[..., str], probe: Probe, answer: str
) -> None:
    url = serve("--answer", answer)
    r = run_probe(url, probe, model="m", timeout_s=10)
    assert r.status == "degenerate", r
    assert r.error


@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=lambda p: p.kind)
def test_empty_answer_is_classified(serve: Callable[..., str], probe: Probe) -> None:
    url = serve("--answer", "")
    assert run_probe(url, probe, model="m", timeout_s=10).status == "empty"


@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=lambda p: p.kind)
def test_http_error_keeps_the_status_code(serve: Callable[..., str], probe: Probe) -> None:
    url = serve("--on-request", "error")
    r = run_probe(url, probe, model="m", timeout_s=10)
    assert (r.status, r.http_status) == ("http_error", 500)
    assert r.error


@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=lambda p: p.kind)
def test_server_dying_mid_request_is_a_connection_error(serve: Callable[..., str], probe: Probe) -> None:
    url = serve("--on-request", "crash")
    r = run_probe(url, probe, model="m", timeout_s=10)
    assert r.status == "connection_error", r
    assert r.error


@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=lambda p: p.kind)
def test_refused_connection_is_a_connection_error(probe: Probe) -> None:
    port = LocalHost().free_port()
    r = run_probe(f"http://127.0.0.1:{port}", probe, model="m", timeout_s=5)
    assert r.status == "connection_error" and r.http_status is None
    assert r.latency_s < 5


@pytest.mark.parametrize("probe", DEFAULT_PROBES, ids=lambda p: p.kind)
def test_hanging_request_is_a_timeout(serve: Callable[..., str], probe: Probe) -> None:
    url = serve("--on-request", "hang")
    r = run_probe(url, probe, model="m", timeout_s=0.5)
    assert r.status == "timeout", r
    assert 0.4 < r.latency_s < 5


def test_a_request_that_never_returns_waits_host_time_not_wall_time(serve: Callable[..., str], tmp_path: Path) -> None:
    """A run's probe on a simulated host (HYPOLOOP_LAB_TIME_SCALE) waits the host's 60 s scaled, with a
    floor of real wall time, so a hang holds the orchestrator 5 s at 0.001, not 60; on a real host (scale 1)
    it still waits 60 s."""
    from agent.record.transcript import Transcript
    from agent.run.crashsafe import probe_through_drops

    assert request_timeout_s(1.0) == 60.0
    assert request_timeout_s(0.001) == 5.0
    assert request_timeout_s(0.5) == 30.0
    with pytest.raises(ValueError, match="time scale"):
        request_timeout_s(0)

    class ScaledHost:
        time_scale = 0.001

    url = serve("--on-request", "hang")
    r = probe_through_drops(Transcript(tmp_path / "t.jsonl", "r1"), ScaledHost(), url, GENERATE, model="m",
                            experiment_id="e1")
    assert r.status == "timeout", r
    assert 4.5 < r.latency_s < 15, r.latency_s


def test_get_server_info(serve: Callable[..., str]) -> None:
    url = serve()
    info = get_server_info(url)
    assert info is not None and info["version"] == "0.0-fake"
    port = LocalHost().free_port()
    assert get_server_info(f"http://127.0.0.1:{port}", timeout_s=2) is None


@pytest.mark.parametrize(
    "text",
    [
        "Paris",
        "Paris.",
        "The capital of France is Paris.",
        "Sure! The capital of France is **Paris**.",
        "The capital of France is Paris. The capital of France is Paris. The capital of France is Paris.",
        "1, 2, 3, 4, 5, 6, 7, 8",
        "巴黎是法国的首都。",
    ],
)
def test_ordinary_text_is_not_degenerate(text: str) -> None:
    assert degeneracy_reason(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "!!!!!!!!!!!!!!!!",
        "Paris!!!!!!!!!!!!!!!!!!",
        "the the the the the the the the",
        "Paris. Paris. Paris. Paris.",
        "ababababababababab",
        "\ufffd\ufffd\ufffd",
        "的的的的的的的的的的的的的的的的",
    ],
)
def test_garbage_and_repetition_are_degenerate(text: str) -> None:
    assert degeneracy_reason(text) is not None


def test_classify_text_order() -> None:
    assert classify_text(None, "Paris")[0] == "empty"
    assert classify_text("   ", None)[0] == "empty"
    assert classify_text("Paris Paris Paris Paris Paris", "paris")[0] == "degenerate"
    assert classify_text("berlin", "Paris")[0] == "wrong_answer"
    assert classify_text("PARIS", "paris") == ("ok", None)
    assert classify_text("anything sensible", None) == ("ok", None)


# --- judged against what the model at hand answers when healthy (issue 22) ---------------------------


@pytest.mark.parametrize("kind", ["chat", "generate"])
def test_the_healthy_models_own_answer_passes_even_if_it_does_not_look_like_english(
    serve: Callable[..., str], kind: str
) -> None:
    # A tiny model's healthy answer can repeat itself; measured on a good launch, it is the right one.
    healthy = "Paris Paris Paris Paris Paris Paris Paris Paris"
    base = serve("--answer", healthy)
    probe = Probe(id="p", kind=kind, prompt="The capital of France is", answer="Paris Paris")  # type: ignore[arg-type]
    r = run_probe(base, probe, model="m")
    assert r.status == "ok" and r.ok, r


@pytest.mark.parametrize("kind", ["chat", "generate"])
def test_fluent_text_that_is_not_the_healthy_answer_is_wrong(serve: Callable[..., str], kind: str) -> None:
    base = serve("--answer", "The weather is lovely today and the birds are singing.")
    probe = Probe(id="p", kind=kind, prompt="The capital of France is", answer=" Paris.")  # type: ignore[arg-type]
    r = run_probe(base, probe, model="m")
    assert r.status == "wrong_answer" and not r.ok
    assert r.error is not None and "Paris" in r.error


def test_garbage_that_is_not_the_healthy_answer_is_still_called_degenerate() -> None:
    status, reason = classify_text("!!!!!!!!!!!!!!!!!!!!!!!!", None, " Paris")
    assert status == "degenerate" and reason is not None and "Paris" in reason


def test_a_case_lists_the_healthy_answers_of_its_probes(tmp_path: Path) -> None:
    from agent.domain.case import load_case

    case = tmp_path / "case.toml"
    case.write_text(
        'name = "c"\n[model]\npath = "m"\n'
        '[[probes]]\nid = "g"\nkind = "generate"\nprompt = "The capital of France is"\nanswer = " Paris."\n'
    )
    loaded = load_case(str(case))
    assert [(p.prompt, p.answer) for p in loaded.probes] == [("The capital of France is", " Paris.")]


def test_the_wait_beyond_a_timeout_in_host_time_is_not_host_time() -> None:
    """A timed-out probe on a simulated host held the orchestrator for the wall floor, longer than the
    host's own 60 s scaled: that excess is what a launch's host-seconds leave out (none on a real host,
    none for a probe that answered)."""
    from tools.probes import ProbeResult, patience_beyond_host_s

    hung = ProbeResult(probe_id="load:x16", ok=False, status="timeout", latency_s=5.0)
    answered = ProbeResult(probe_id="chat", ok=True, status="ok", latency_s=0.1)
    assert patience_beyond_host_s([hung, answered], 0.001) == pytest.approx(5.0 - 0.06)
    assert patience_beyond_host_s([hung, hung], 0.001) == pytest.approx(2 * (5.0 - 0.06))
    assert patience_beyond_host_s([hung], 1.0) == 0.0
    assert patience_beyond_host_s([answered], 0.001) == 0.0
