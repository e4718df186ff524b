"""The compact approval screen lists the likeliest hypotheses at that point, in falling probability: a
less likely hypothesis the experiment tests never displaces a likelier one (it is named on the purpose
line anyway). Run as a user does: ``hypoloop run`` with no terminal prints the screen and waits;
``hypoloop resume`` answers; the lab's server is real."""

from __future__ import annotations

import re
from pathlib import Path

from clirun import run_cli, transcript_events

_ROW = re.compile(r"│\s+(\d\.\d\d)\s+(fixed|may fix|persists)\s+(\S+)\s*│")
_REST = re.compile(r"│\s+≤(\d\.\d\d)\s+\S+\s+\+ \d+ more")


def _screen_rows(out: str) -> tuple[list[tuple[float, str]], float]:
    """The last approval screen's listed ``(p, id)`` rows and the bound of its ``+ N more`` line."""
    box = out[out.rindex("approve experiment") :]
    rows = [(float(m[1]), m[3]) for m in _ROW.finditer(box)]
    rest = _REST.search(box)
    assert rows and rest, box
    return rows, float(rest[1])


def _posteriors(events: list[dict]) -> dict[str, float]:
    """Each open hypothesis's posterior at the end of the transcript, from its own events."""
    p: dict[str, float] = {}
    for ev in events:
        if ev["type"].startswith("hypothesis.") and "posterior" in ev["data"]:
            p[ev["data"]["id"]] = ev["data"]["posterior"]
        if ev["type"] in ("hypothesis.refuted", "hypothesis.confirmed"):
            p.pop(ev["data"]["id"], None)
    return p


def test_approval_screen_lists_the_three_likeliest_hypotheses_in_order(tmp_path: Path) -> None:
    first = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--transcript-dir", "tr")
    assert first.returncode == 3, first.stderr[-2000:]
    run_id = re.search(r"run (\d{8}-\d{6}-[0-9a-f]+) waits", first.stdout)[1]  # type: ignore[index]
    base = run_cli(tmp_path, "resume", run_id, "--decision", "approve")  # the baseline runs on the lab
    assert base.returncode == 3, base.stderr[-2000:]
    # a rejected first test: the next proposal tests a less likely hypothesis
    nxt = run_cli(tmp_path, "resume", run_id, "--decision", "reject", "--reason", "not this one")
    assert nxt.returncode == 3, nxt.stderr[-2000:]
    for out in (base.stdout, nxt.stdout):
        rows, rest = _screen_rows(out)
        shown = [p for p, _ in rows]
        assert shown == sorted(shown, reverse=True), rows
        assert rest <= min(shown), (rows, rest)  # nothing left off is likelier than a listed one
    posteriors = _posteriors(transcript_events(next((tmp_path / "tr").glob("*.jsonl"))))
    listed = [h for _, h in rows]
    likeliest = sorted(posteriors.values(), reverse=True)[:3]
    assert [round(posteriors[h], 2) for h in listed] == [round(p, 2) for p in likeliest], (rows, likeliest)


def _box(out: str) -> str:
    return out[out.rindex("approve experiment") : out.rindex("╯")]


def test_edit_is_offered_only_for_a_change_and_no_key_is_named_where_none_is_read(tmp_path: Path) -> None:
    """The baseline reproduction has no change: its screen offers no ``[e]dit``; a test of a change does.
    Where no key is read (a run left waiting, ``show``) the screen names the command that lists every
    hypothesis instead of "press h"."""
    first = run_cli(tmp_path, "run", "lab:glm5-nvfp4-sm120", "--transcript-dir", "tr")
    assert first.returncode == 3, first.stderr[-2000:]
    assert "baseline" in _box(first.stdout) and "[e]dit" not in _box(first.stdout), first.stdout
    run_id = re.search(r"run (\d{8}-\d{6}-[0-9a-f]+) waits", first.stdout)[1]  # type: ignore[index]
    nxt = run_cli(tmp_path, "resume", run_id, "--decision", "approve")
    assert nxt.returncode == 3, nxt.stderr[-2000:]
    assert "[e]dit one change" in _box(nxt.stdout), nxt.stdout
    shown = run_cli(tmp_path, "show", run_id)
    for out in (nxt.stdout, shown.stdout):
        box = _box(out)
        assert "press h" not in box and "[h]" not in box, box
        assert f"hypoloop show {run_id} -v lists them" in box, box
