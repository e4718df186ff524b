"""Load-shaped probes (a case's `[reproduce]`, issue 21 item 3) against the stand-in server over real HTTP:
each shape reaches the server as the shape says (the lab's per-key faults answer `HIT-<key>` only to a
request that has it), the same probe without the shape passes, and bad `[reproduce]` values are one line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_lab_load import FAULTS, Server, _serve

from agent.domain.case import CaseError, load_case
from tools.load_shapes import LoadShape
from tools.probes import Probe, run_probe


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from _serve(tmp_path, FAULTS)


def _probe(kind: str = "generate", **shape: object) -> Probe:
    return Probe(
        id="p", kind=kind, prompt="What is the capital of France?", expect="Paris",  # type: ignore[arg-type]
        shape=LoadShape.model_validate(shape) if shape else None,
    )


def _hit(server: Server, probe: Probe) -> str | None:
    r = run_probe(server.url, probe, model="org/m", timeout_s=30)
    if r.ok:
        return None
    m = re.search(r"HIT-([a-z]+)", (r.text or "") + (r.error or ""))
    return m.group(1) if m else f"{r.status}: {r.error}"


@pytest.mark.parametrize("kind", ["generate", "chat"])
def test_a_long_prompt_has_about_the_tokens_asked(server: Server, kind: str) -> None:
    assert _hit(server, _probe(kind)) is None
    assert _hit(server, _probe(kind, prompt_tokens=3000)) == "prompt"
    counted = [int(n) for n in re.findall(r"#new-token: (\d+)", server.log.read_text())]
    assert any(2700 <= n <= 3300 for n in counted), counted


def test_long_outputs_run_to_the_tokens_asked(server: Server) -> None:
    assert _hit(server, _probe()) is None
    assert _hit(server, _probe(output_tokens=400)) == "output"


def test_a_shared_prefix_is_cached_before_the_others_reuse_it(server: Server) -> None:
    assert _hit(server, _probe(prompt_tokens=1500)) is None  # long unique prompts share nothing
    probe = _probe(shared_prefix_tokens=1000)
    assert _hit(server, probe.model_copy(update={"concurrency": 3})) == "cached"


@pytest.mark.parametrize(("feature", "key"), [("tools", "tools"), ("json_schema", "schema"), ("regex", "regex"),
                                              ("image", "image"), ("logprobs", "logprobs")])
@pytest.mark.parametrize("kind", ["generate", "chat"])
def test_request_features_in_the_engines_own_api(server: Server, kind: str, feature: str, key: str) -> None:
    assert _hit(server, _probe(kind, features=[feature])) == key


def test_traffic_is_kept_up_for_the_duration_on_the_servers_clock(tmp_path: Path) -> None:
    # 10 ms per simulated second: the 60 s idle limit is 600 ms, so a busy CI machine's pause between
    # two answers does not end the stretch (at 1 ms it did: the probe then passed)
    for server in _serve(tmp_path, FAULTS, time_scale=0.01):
        assert _hit(server, _probe()) is None
        r = run_probe(server.url, _probe(duration_s=400).model_copy(update={"concurrency": 2}), model="org/m")
        assert not r.ok and "HIT-traffic" in (r.text or "")
        assert re.search(r"of \d+ requests over \d+ s failed", r.error or ""), r.error


def _case(tmp_path: Path, reproduce: str) -> Path:
    p = tmp_path / "case.toml"
    p.write_text(f'name = "x"\n[model]\npath = "m"\n[reproduce]\n{reproduce}\n')
    return p


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('features = ["tool"]', "field 'reproduce.features #1': expected one of 'tools', 'json_schema', 'regex', 'image' or 'logprobs', got 'tool'"),
        ("prompt_tokens = 0", "field 'reproduce.prompt_tokens': input should be greater than or equal to 1, got 0"),
        ('duration_s = "long"', "field 'reproduce.duration_s': expected a number, got 'long'"),
        ("output_tokens_min = 500", "output_tokens_min needs output_tokens at least as large"),
        ("prompt_tokens = 100\nshared_prefix_tokens = 200", "shared_prefix_tokens is part of the prompt: at most prompt_tokens"),
        ('features = ["json_schema", "regex"]', "features: json_schema and regex are two grammars"),
        ("prompt_tokns = 100", "unknown key 'prompt_tokns' in [reproduce]; did you mean 'prompt_tokens'?"),
    ],
)
def test_bad_reproduce_values_are_one_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(CaseError) as err:
        load_case(str(_case(tmp_path, text)))
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_case_load_is_the_first_probe_shaped_as_reported(tmp_path: Path) -> None:
    from agent.planning.observations import load_level, load_probe_for

    case = load_case(str(_case(tmp_path, 'concurrency = 4\nprompt_tokens = 9000\nfeatures = ["tools"]')))
    level = load_level(case)
    assert level == 4
    probe = load_probe_for(case, level)
    assert probe.concurrency == 4 and probe.shape is not None and probe.shape.prompt_tokens == 9000
    assert probe.load_text() == "4 concurrent requests with prompts of 9000 tokens, tools"
    plain = load_case(str(_case(tmp_path, "intermittent = true")))
    assert load_level(plain) is None


@pytest.mark.parametrize("kind", ["generate", "chat"])
def test_a_reply_cut_by_the_shapes_short_output_is_not_graded_against_the_answer(server: Server, kind: str) -> None:
    """`output_tokens = 5` stops the healthy answer ("The capital of France is Paris.") before its last
    word: the reply is sound, only short, so the probe passes (it was wrong_answer, failing a healthy
    server and every fix tested under that load); garbage would still fail it."""
    r = run_probe(server.url, _probe(kind, output_tokens=5), model="org/m", timeout_s=30)
    assert r.ok, (r.status, r.error, r.text)
    r = run_probe(server.url, _probe(kind, output_tokens=5, features=["json_schema"]), model="org/m", timeout_s=30)
    assert not r.ok and "HIT-schema" in (r.text or "") + (r.error or "")  # a fault's garbage still fails
