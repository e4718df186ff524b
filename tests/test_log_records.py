"""A log record's header is not its message (tools/log_records.py): vLLM repeats its header
``(EngineCore pid=N) ERROR MM-DD HH:MM:SS [core.py:N]`` on every line of a logged traceback, and a
WARNING record that quotes an error is not a failure. Read on real vLLM 0.32.0 logs written on this
CPU host (tests/data/logs_vllm_0.32.0) and its real ``--help=all``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.domain.case import Case
from agent.domain.evidence import RawEvidence
from agent.planning.generators import GeneratorInput
from agent.planning.generators.remedies import remedies_in
from agent.planning.observations import classify_observation
from agent.run.nodes.analyze import classify_outcome
from tools.fingerprint import HostFingerprint
from tools.flags import parse_help
from tools.log_records import read_record
from tools.signatures import for_engine, load_signatures
from tools.tracebacks import parse_tracebacks

DATA = Path(__file__).parent / "data"
VLLM_LOGS = DATA / "logs_vllm_0.32.0"


@pytest.mark.parametrize(
    ("line", "level", "message"),
    [
        ("(EngineCore pid=22627) ERROR 12-02 02:22:28 [core.py:1510]   File \"x.py\", line 3, in f",
         "ERROR", "  File \"x.py\", line 3, in f"),
        ("(APIServer pid=21889) WARNING 12-02 02:20:10 [system_utils.py:255] Found ulimit of 20000",
         "WARNING", "Found ulimit of 20000"),
        ("INFO 12-02 02:20:10 [api_server.py:3] Starting", "INFO", "Starting"),
        ("WARNING:root:the message", "WARNING", "the message"),
        ("[2026-01-10 13:23:27 TP0] Scheduler hit an exception: boom", None, "Scheduler hit an exception: boom"),
        ("ValueError: bad value", None, "ValueError: bad value"),
        ("[core.py:1] not a header alone", None, "[core.py:1] not a header alone"),
    ],
)
def test_a_record_is_read_as_header_level_and_message(line: str, level: str | None, message: str) -> None:
    record = read_record(line)
    assert (record.level, record.message) == (level, message)
    assert record.header + record.message == line


def test_a_vllm_traceback_is_read_through_its_repeated_header() -> None:
    tbs = parse_tracebacks((VLLM_LOGS / "kv-too-small.log").read_text(encoding="utf-8"))
    first = tbs[0]
    assert first.exception == "ValueError"
    assert first.message.startswith("No available memory for the cache blocks")
    assert first.frames[0].function == "_check_enough_kv_cache_memory"
    assert first.frames[0].path.endswith("vllm/v1/core/kv_cache_utils.py")


def _outcome(log: str):
    text = (VLLM_LOGS / f"{log}.log").read_text(encoding="utf-8")
    sigs = for_engine(load_signatures(), "vllm")
    raw = RawEvidence.from_log("exp-1", text, sigs, f"{log}.log").model_copy(update={"status": "crashed"})
    return classify_outcome(raw)


def test_two_start_up_failures_with_other_exceptions_are_not_the_same_failure() -> None:
    """vLLM's wrapper lines ("EngineCore failed to start" and the traceback's outer frames) are the same
    for every start-up failure; the exceptions underneath differ. With --kv-cache-memory-bytes removed,
    the "No available memory for the cache blocks" error is gone and the worker is killed instead (-9:
    the default budget took the host's memory): another failure, not the first one persisting."""
    kv, killed = _outcome("kv-too-small"), _outcome("kv-unset-worker-killed")
    assert classify_observation(killed, kv) != "persists"
    assert classify_observation(kv, kv) == "persists"


def test_a_warning_that_quotes_an_error_names_no_log_level_as_the_remedy() -> None:
    """The ulimit WARNING line quotes `OSError: ...`; neither its level word nor the word 'error' of its
    message is a choice of --log-level or --uvicorn-log-level that the failure names."""
    out = _outcome("kv-too-small")
    flags = parse_help((DATA / "help_vllm_0.32.0_all.txt").read_text(encoding="utf-8"), source="vllm 0.32.0")
    case = Case.model_validate({"name": "c", "launcher": {"engine": "vllm"}, "model": {"path": "/m/tiny"},
                                "baseline": {"flags": {"--kv-cache-memory-bytes": "4096"}, "env": {}}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out,
                         fingerprint=HostFingerprint(gpu_count=0, cpu_count=2), flags=flags, outcomes=[out])
    names = {iv.names[0] for _cid, iv, *_ in remedies_in(inp)}
    assert not names & {"--log-level", "--uvicorn-log-level"}, names


def test_a_vllm_failure_is_localised_in_vllms_own_frames_and_implicates_no_vllm_package() -> None:
    """The engine's own code is where an error surfaced, not a swappable kernel package: on a vLLM log
    the raise site is vLLM's innermost frame (it was None: only SGLang's frames were read) and vLLM is
    not among the implicated packages."""
    from agent.planning.generators.common import implicated, raise_site

    out = _outcome("kv-too-small")
    case = Case.model_validate({"name": "c", "launcher": {"engine": "vllm"}, "model": {"path": "/m/tiny"},
                                "baseline": {"flags": {"--kv-cache-memory-bytes": "4096"}, "env": {}}})
    inp = GeneratorInput(case=case, baseline=case.baseline, reference=out,
                         outcomes=[out])
    site = raise_site(inp)
    assert site is not None and site.where.startswith("vllm.")
    imp = implicated(inp)
    assert imp.innermost.startswith("vllm.") and "vllm" not in imp.packages


def test_every_real_log_looks_like_one_and_no_document_of_the_repository_does() -> None:
    """`hypoloop analyze` refuses a file with no line a server writes (tools.log_records.looks_like_log):
    every real log kept here is read, the one of an argparse error before the engine said anything too,
    and the repository's documents, which quote a server's messages in prose, are refused."""
    from tools.log_records import looks_like_log

    repo = DATA.parents[1]
    logs = sorted(DATA.glob("logs_*/*.log"))
    assert len(logs) > 20
    assert [p.name for p in logs if not looks_like_log(p.read_text(errors="replace"))] == []
    docs = [repo / "README.md", repo / "docs" / "ARCHITECTURE.md", repo / "lab" / "README.md",
            repo / "transcripts" / "README.md"]
    assert [p.name for p in docs if looks_like_log(p.read_text())] == []
