"""The HTML report in a real browser (headless Chromium): at 1280 and 800 px wide no chart label, tick or
legend text is clipped or leaves its chart, nothing overflows the page sideways, axis labels do not
overlap, and every status colour reads with a contrast ratio of at least 4.5:1 (WCAG AA)."""

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
from agent.review.report import render

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = sorted((ROOT / "transcripts" / "reference").glob("*.jsonl"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

if CHROMIUM is None and os.environ.get("CI") != "true":
    pytest.skip("headless Chromium is not installed (.ci/run installs it)", allow_module_level=True)

#: Runs in the page after load and writes what it measured into <pre id="measured"> as JSON.
MEASURE = r"""
<script>
(() => {
  const out = {width: innerWidth, pageOverflow: document.documentElement.scrollWidth - innerWidth,
               outside: [], clipped: [], overlaps: [], contrast: [], texts: 0};
  const rectOf = r => ({l: Math.round(r.left), r: Math.round(r.right), t: Math.round(r.top), b: Math.round(r.bottom)});
  for (const fig of document.querySelectorAll('figure.chart')) {
    const box = fig.getBoundingClientRect();
    const walker = document.createTreeWalker(fig, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode;
      if (!node.textContent.trim() || node.parentElement.closest('svg')) continue;
      out.texts += 1;
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const r of range.getClientRects()) {
        if (r.width === 0) continue;
        if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
          out.outside.push({text: node.textContent, rect: rectOf(r), box: rectOf(box)});
        // clipped by an ancestor that hides overflow
        for (let el = node.parentElement; el && el !== fig.parentElement; el = el.parentElement) {
          const cs = getComputedStyle(el);
          if (cs.overflowX === 'visible' && cs.overflowY === 'visible') continue;
          const e = el.getBoundingClientRect();
          if (r.left < e.left - 0.5 || r.right > e.right + 0.5 || r.top < e.top - 0.5 || r.bottom > e.bottom + 0.5)
            out.clipped.push({text: node.textContent, by: el.className || el.tagName});
        }
      }
    }
    for (const t of fig.querySelectorAll('svg text')) out.outside.push({text: t.textContent, svgText: true});
    for (const group of fig.querySelectorAll('.axis, .steps')) {
      const rects = [...group.children].map(c => [c.textContent, c.getBoundingClientRect()]);
      for (let i = 0; i < rects.length; i++) for (let j = i + 1; j < rects.length; j++) {
        const [ta, a] = rects[i], [tb, b] = rects[j];
        if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
          out.overlaps.push([ta, tb]);
      }
    }
  }
  // Every status style, also those this run does not use, on the report's own boxes.
  const probe = document.createElement('div');
  probe.className = 'box';
  probe.innerHTML = ['confirmed', 'supported', 'refuted', 'open'].map(s => `<span class="badge ${s}">${s}</span>`).join(' ')
    + ['supports', 'refutes', 'weakens', 'confirms', 'neutral'].map(s => `<span class="eff ${s}">${s}</span>`).join(' ')
    + '<table><tr><td class="ok">ok</td><td class="fail">fail</td></tr><tr class="chosen"><td>chosen</td></tr></table>'
    + '<span class="src">src</span> <span class="meta">meta</span><pre><span class="hit">hit</span> line</pre>';
  document.querySelector('main').appendChild(probe);
  const lum = c => { const v = c / 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const rgb = s => s.match(/[\d.]+/g).map(Number);
  const L = ([r, g, b]) => 0.2126 * lum(r) + 0.7152 * lum(g) + 0.0722 * lum(b);
  const background = el => {
    for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor); if (c.length < 4 || c[3] > 0) return c; }
    return [255, 255, 255];
  };
  const sel = '.badge, .eff, .ok, .fail, .chosen td, .src, .meta, pre .hit, pre, .legend .note, .tl .stage, .axis span, .steps span, .yaxis span';
  for (const el of document.querySelectorAll(sel)) {
    if (!el.textContent.trim()) continue;
    const fg = L(rgb(getComputedStyle(el).color)), bg = L(background(el));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    out.contrast.push({cls: el.className || el.parentElement.className, text: el.textContent.slice(0, 40), ratio});
  }
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def _measure(page: str, width: int, tmp_path: Path) -> dict:
    path = tmp_path / f"report-{width}.html"
    path.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars", f"--window-size={width},1000", "--virtual-time-budget=5000",
            f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", path.as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    m = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert m, f"Chromium printed no measurement (exit {done.returncode}): {done.stderr[-800:]}"
    return json.loads(html.unescape(m.group(1)))


@pytest.mark.parametrize("width", [1280, 800])
@pytest.mark.parametrize("transcript", REFERENCE[:2], ids=lambda p: p.stem)
def test_chart_text_stays_inside_its_chart(transcript: Path, width: int, tmp_path: Path) -> None:
    got = _measure(render(RecordedRun.load(transcript), "html"), width, tmp_path)
    assert got["width"] == width
    assert got["texts"] > 10  # labels, ticks, step names and legends were measured
    assert got["outside"] == []
    assert got["clipped"] == []
    assert got["overlaps"] == []
    assert got["pageOverflow"] <= 0


def test_every_status_colour_is_readable(tmp_path: Path) -> None:
    got = _measure(render(RecordedRun.load(REFERENCE[0]), "html"), 1280, tmp_path)
    shown = {c["cls"] for c in got["contrast"]}
    for status in ("badge confirmed", "badge supported", "badge refuted", "badge open", "ok", "fail"):
        assert status in shown
    poor = [c for c in got["contrast"] if c["ratio"] < 4.5]
    assert poor == []
