"""LogWatcher: incremental, offset-based tail that returns complete lines only."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tools.host import LocalHost
from tools.logwatch import CUT_NOTE, LogLine, LogWatcher


class CountingHost(LocalHost):
    """A LocalHost that records every read_from offset."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int]] = []

    def read_from(self, path: str, offset: int, max_bytes: int = 1 << 20) -> bytes:
        data = super().read_from(path, offset, max_bytes)
        self.reads.append((offset, len(data)))
        return data


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)
        f.flush()


def test_returns_only_complete_lines_and_keeps_the_partial_tail(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    w = LogWatcher(LocalHost(), str(log))
    assert w.poll() == []  # file does not exist yet
    _append(log, b"first line\nsecond li")
    lines = w.poll()
    assert [(x.line, x.text) for x in lines] == [(1, "first line")]
    assert w.offset == len(b"first line\n")
    assert w.poll() == []
    _append(log, b"ne\nthird\n")
    assert [(x.line, x.text) for x in w.poll()] == [(2, "second line"), (3, "third")]
    assert w.lines_read == 3
    assert w.offset == log.stat().st_size


def test_reads_incrementally_by_byte_offset_never_from_the_start_again(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    host = CountingHost()
    w = LogWatcher(host, str(log))
    for i in range(50):
        _append(log, f"line {i}\n".encode())
        assert [x.line for x in w.poll()] == [i + 1]
    data_reads = [(offset, n) for offset, n in host.reads if n]
    assert len(data_reads) == 50
    position = 0
    for offset, n in data_reads:  # each read starts exactly where the previous data ended
        assert offset == position
        position += n
    assert position == log.stat().st_size  # every byte read exactly once


def test_start_offset_skips_existing_content(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"old 1\nold 2\n")
    w = LogWatcher(LocalHost(), str(log), start_offset=log.stat().st_size)
    _append(log, b"new\n")
    assert [(x.line, x.text) for x in w.poll()] == [(1, "new")]


def test_strips_crlf_and_replaces_invalid_utf8(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _append(log, b"windows\r\nbad \xff byte\n")
    lines = LogWatcher(LocalHost(), str(log)).poll()
    assert [x.text for x in lines] == ["windows", "bad \ufffd byte"]


def test_flush_returns_the_unterminated_last_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _append(log, b"one\ntwo without newline")
    w = LogWatcher(LocalHost(), str(log))
    assert [x.text for x in w.poll()] == ["one"]
    assert [(x.line, x.text) for x in w.flush()] == [(2, "two without newline")]
    assert w.flush() == []


def test_an_overlong_line_is_one_cut_record_and_the_rest_is_read_past(tmp_path: Path) -> None:
    """Its first max_line_bytes, said to be cut, as soon as they are there; the rest of the line is never
    matched or kept; the next line is read as usual, with its own line number."""
    log = tmp_path / "server.log"
    _append(log, b"x" * 25)
    w = LogWatcher(LocalHost(), str(log), max_line_bytes=10)
    assert [x.text for x in w.poll()] == ["x" * 10 + CUT_NOTE.format(limit=10)]
    _append(log, b"y" * 30)
    assert w.poll() == []
    _append(log, b"\nnext\n")
    assert [(x.line, x.text) for x in w.poll()] == [(2, "next")]
    assert w.offset == log.stat().st_size


def test_growth_time_tracks_bytes_even_without_newline(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    w = LogWatcher(LocalHost(), str(log))
    assert w.last_growth_monotonic is None
    _append(log, b"\rLoading 10%")
    before = time.monotonic()
    assert w.poll() == []
    assert w.last_growth_monotonic is not None and w.last_growth_monotonic >= before
    assert w.bytes_read == len(b"\rLoading 10%")


def test_reacts_to_a_newly_written_line_within_a_fraction_of_a_second(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    w = LogWatcher(LocalHost(), str(log))
    seen: list[LogLine] = []
    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set() and not seen:
            seen.extend(w.poll())
            time.sleep(0.05)

    t = threading.Thread(target=poller)
    t.start()
    try:
        time.sleep(0.2)  # let the poller settle into its loop; the write moment is measured below
        written = time.monotonic()
        _append(log, b"The server is fired up and ready to roll!\n")
        t.join(timeout=5.0)
    finally:
        stop.set()
        t.join()
    assert seen, "line never seen"
    reaction = seen[0].seen_monotonic - written
    print(f"log watcher reaction time: {reaction * 1000:.1f} ms")
    assert 0 <= reaction < 0.5


def test_tqdm_redraws_on_one_physical_line_are_records_of_their_own(tmp_path: Path) -> None:
    # tqdm writes "\r" + bar for every update and "\n" only when the bar closes: one physical line of
    # the log file holds every update (SGLang's "Loading safetensors checkpoint shards" bar).
    log = tmp_path / "server.log"
    w = LogWatcher(LocalHost(), str(log))
    _append(log, b"before\n\rLoading 0% 0/4\rLoading 25% 1/4\r")
    assert [(x.line, x.text) for x in w.poll()] == [(1, "before"), (2, "Loading 0% 0/4"), (2, "Loading 25% 1/4")]
    _append(log, b"\nafter\r\n")  # the "\n" of a "\r\n" split across two reads ends the same line
    assert [(x.line, x.text) for x in w.poll()] == [(3, "after")]
    assert w.lines_read == 3 and w.offset == log.stat().st_size


def test_scan_text_splits_records_like_the_watcher(tmp_path: Path) -> None:
    from tools.logwatch import split_records

    data = "a\r\n\rbar 1\rbar 2\r\n\nlast"
    log = tmp_path / "server.log"
    _append(log, data.encode())
    w = LogWatcher(LocalHost(), str(log))
    live = [(x.line, x.text) for x in w.flush()]
    assert live == split_records(data) == [(1, "a"), (2, "bar 1"), (2, "bar 2"), (3, ""), (4, "last")]


def test_one_log_line_model_and_the_transcript_keeps_line_and_text(tmp_path: Path) -> None:
    """The line a watcher reads is the line an outcome keeps as evidence; its read time is not written."""
    from agent.domain.models import LogLine as KeptLine
    from agent.domain.models import Outcome

    log = tmp_path / "server.log"
    log.write_text("first line\n")
    (read,) = LogWatcher(LocalHost(), str(log)).poll()
    assert isinstance(read, KeptLine) and read.seen_monotonic > 0
    out = Outcome(experiment_id="e", stage="ok", log_excerpt=[read])
    assert out.model_dump(mode="json")["log_excerpt"] == [{"line": 1, "text": "first line"}]
