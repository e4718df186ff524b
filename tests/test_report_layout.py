"""The HTML report read on a phone (360 px) and a wide screen (1440 px) in headless Chromium, measured by
properties rather than by eye: nothing leaves the page sideways, no table cell is a sliver (narrow
screens get one card per row), no two axis or step labels overlap, every log excerpt keeps its line
breaks, the probability chart draws only the hypotheses that mattered in colours that differ, and only
one hypothesis reads "confirmed (root cause)"."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.record.recorded import RecordedRun
from agent.review.report import build_report, probability_chart, render

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = sorted((ROOT / "transcripts" / "reference").glob("*.jsonl"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

if CHROMIUM is None and os.environ.get("CI") != "true":
    pytest.skip("headless Chromium is not installed (.ci/run installs it)", allow_module_level=True)

MEASURE = r"""
<script>
(() => {
  const W = innerWidth, out = {width: W, pageOverflow: document.documentElement.scrollWidth - W,
    outside: [], slivers: [], overlaps: [], excerpts: [], badges: []};
  const visible = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  for (const el of document.querySelectorAll('body *')) {
    if (!visible(el) || el.closest('svg')) continue;
    const r = el.getBoundingClientRect();
    if (r.right > W + 0.5 || r.left < -0.5) out.outside.push({tag: el.tagName, cls: el.className, text: el.textContent.slice(0, 40)});
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);  // a word too long for its box
  while (walker.nextNode()) {
    const node = walker.currentNode, range = document.createRange();
    if (!node.textContent.trim() || node.parentElement.closest('svg, script')) continue;
    range.selectNodeContents(node);
    for (const r of range.getClientRects())
      if (r.width > 0 && (r.right > W + 0.5 || r.left < -0.5)) out.outside.push({text: node.textContent.slice(0, 40)});
  }
  // a cell broken inside its words (one letter per line) shows more rows than it has words
  const rowsOf = el => { const range = document.createRange(); range.selectNodeContents(el);
    const rects = [...range.getClientRects()].filter(r => r.width > 0 && r.height > 0).sort((a, b) => a.top - b.top);
    let rows = 0, bottom = -Infinity;
    for (const r of rects) { if (r.top >= bottom - 2) { rows += 1; bottom = r.bottom; } else bottom = Math.max(bottom, r.bottom); }
    return rows; };
  for (const td of document.querySelectorAll('td')) {
    if (!visible(td) || !td.textContent.trim()) continue;
    const words = td.textContent.trim().split(/[\s-]+/).length + td.querySelectorAll('br').length;
    const rows = rowsOf(td);
    if (rows > words) out.slivers.push({text: td.textContent.slice(0, 40), rows, words});
  }
  for (const group of document.querySelectorAll('.axis, .steps')) {
    const rects = [...group.children].filter(visible).map(c => [c.textContent, c.getBoundingClientRect()]);
    for (let i = 0; i < rects.length; i++) for (let j = i + 1; j < rects.length; j++) {
      const [ta, a] = rects[i], [tb, b] = rects[j];
      if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
        out.overlaps.push([ta, tb]);
    }
  }
  for (const pre of document.querySelectorAll('.ev pre')) {
    const lh = parseFloat(getComputedStyle(pre).lineHeight) || 12;
    out.excerpts.push({lines: pre.textContent.split('\n').length, rendered: Math.round(pre.clientHeight / lh)});
  }
  for (const b of document.querySelectorAll('.badge')) {
    if (!visible(b)) continue;
    out.badges.push({text: b.textContent, rows: rowsOf(b), words: b.textContent.trim().split(/\s+/).length});
  }
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def _chromium(page_path: Path, width: int, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars", f"--window-size={max(width, 500)},900", "--virtual-time-budget=5000",
            f"--user-data-dir={tmp_path / f'profile-{width}'}", *extra, page_path.as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


#: Headless Chromium's window is at least 500 px wide, so the report is measured inside an iframe of
#: the width under test (its own viewport: media queries and innerWidth are the iframe's).
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="{src}" style="width:{width}px;height:900px;border:0;display:block"></iframe>
<script>document.getElementById('f').onload = () => {{
  const m = document.getElementById('f').contentDocument.getElementById('measured');
  const p = document.createElement('pre'); p.id = 'measured'; p.textContent = m ? m.textContent : 'null';
  document.body.appendChild(p);
}};</script></body></html>"""


def _framed(page: str, width: int, tmp_path: Path, *, measure: bool = True) -> Path:
    """The report (with the measuring script) and a page framing it at ``width`` CSS pixels."""
    inner = tmp_path / f"report-{width}.html"
    inner.write_text(page.replace("</body>", (MEASURE if measure else "") + "</body>"), encoding="utf-8")
    outer = tmp_path / f"frame-{width}.html"
    outer.write_text(FRAME.format(src=inner.name, width=width), encoding="utf-8")
    return outer


def screenshot(page: str, width: int, tmp_path: Path, png: Path) -> Path:
    """A PNG of the report's top at ``width`` CSS pixels (the frame's window is at least 500 px)."""
    _chromium(_framed(page, width, tmp_path, measure=False), width, tmp_path, f"--screenshot={png}")
    return png


def _measure(page: str, width: int, tmp_path: Path) -> dict:
    path = _framed(page, width, tmp_path)
    done = _chromium(path, width, tmp_path, "--allow-file-access-from-files", "--dump-dom")
    m = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert m, f"Chromium printed no measurement (exit {done.returncode}): {done.stderr[-800:]}"
    return json.loads(html.unescape(m.group(1)))


@pytest.mark.parametrize("width", [360, 1440])
@pytest.mark.parametrize("transcript", REFERENCE[:2], ids=lambda p: p.stem)
def test_report_reads_at_phone_and_desktop_width(transcript: Path, width: int, tmp_path: Path) -> None:
    run = RecordedRun.load(transcript)
    got = _measure(render(run, "html"), width, tmp_path)
    assert got["width"] == width
    assert got["pageOverflow"] <= 0
    assert got["outside"] == []
    assert got["slivers"] == []  # no "one letter per line" column
    assert got["overlaps"] == []
    # a verdict wraps between words, never inside one
    assert all(b["rows"] <= b["words"] for b in got["badges"]), got["badges"]
    shot = screenshot(render(run, "html"), width, tmp_path, tmp_path / f"top-{width}.png")
    assert shot.exists() and shot.stat().st_size > 1000


def test_log_excerpts_keep_their_line_breaks(tmp_path: Path) -> None:
    run = RecordedRun.load(REFERENCE[0])
    rep = build_report(run)
    want = [len(ev.excerpt.lines) for h in rep.hypotheses for ev in h.evidence if ev.excerpt]
    assert want and max(want) > 1
    got = _measure(render(run, "html"), 1440, tmp_path)
    assert [e["lines"] for e in got["excerpts"]] == want
    assert all(e["rendered"] >= e["lines"] for e in got["excerpts"])


@pytest.mark.parametrize("transcript", REFERENCE, ids=lambda p: p.stem)
def test_probability_chart_draws_only_what_mattered_in_distinct_colours(transcript: Path) -> None:
    rep = build_report(RecordedRun.load(transcript))
    chart = probability_chart(rep)
    colours = [s.color for s in chart.series]
    assert len(colours) == len(set(colours))
    drawn = {s.id for s in chart.series}
    settled = {h.id for h in rep.hypotheses if h.status in ("confirmed", "supported")}
    assert settled <= drawn
    for h in rep.hypotheses:
        if h.id not in drawn:
            assert max([h.prior, h.posterior, *rep.series.get(h.id, {}).values()]) < 0.10
    assert chart.hidden == len(rep.hypotheses) - len(drawn)


@pytest.mark.parametrize("transcript", REFERENCE, ids=lambda p: p.stem)
def test_only_one_hypothesis_reads_root_cause(transcript: Path) -> None:
    rep = build_report(RecordedRun.load(transcript))
    roots = [h.id for h in rep.hypotheses if h.verdict == "confirmed (root cause)"]
    assert len(roots) <= 1
    page = render(RecordedRun.load(transcript), "html")
    boxes = re.findall(r'id="h-([^"]+)">\s*<h3>.*?<span class="badge [a-z]+">([^<]*)</span>', page)
    assert [hid for hid, verdict in boxes if verdict == "confirmed (root cause)"] == roots
