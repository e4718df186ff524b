"""`hypoloop report`: the review document of a run, in Markdown and as one self-contained HTML file."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

from clirun import run_cli

from agent.record.recorded import RecordedRun
from agent.review.report import build_report, render
from tools.sanitize import md_raw

REPO = Path(__file__).resolve().parent.parent
GLM5 = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120.jsonl"
REJECTED = REPO / "transcripts" / "reference" / "glm5-nvfp4-sm120-reject-kv.jsonl"


def _events(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


#: Where the baseline's NaN assert sits in the reference run's log (two lines: the assert and its tail),
#: and how many probes its confirmation sent; read from the transcript, which a regeneration changes.
NAN_FIRST, NAN_LAST = next(
    m["line_numbers"][:2]
    for e in _events(GLM5)
    if e["type"] == "outcome"
    for m in e["data"]["matches"]
    if m["signature_id"] == "probability_tensor_nan"
)
CONFIRM_PROBES = next(
    len(e["data"]["probes"]) for e in reversed(_events(GLM5)) if e["type"] == "outcome" and e["data"]["stage"] == "ok"
)


def _hypoloop(tmp_path: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """``hypoloop ARGS`` as a user runs it (tests/clirun.py), 200 columns wide."""
    return run_cli(tmp_path, *args, timeout=timeout, **{"COLUMNS": "200", **env})


def test_markdown_names_root_cause_fix_and_why_deepgemm_was_dropped() -> None:
    md = render(RecordedRun.load(GLM5), "md")
    summary = md.split("## How the run got there")[0]
    assert (
        "**root cause**: The sparse-attention (DSA/NSA) decode kernels read the fp8_e4m3 KV cache" in summary
    )
    assert "**fix**: --kv-cache-dtype: (unset) → bf16" in summary
    assert "**confirmation**" in summary and f"{CONFIRM_PROBES}/{CONFIRM_PROBES} probes ok" in summary
    # Ruled out, with the reason and where it was seen: the DeepGemm warning also appears in a run that
    # served correctly.
    assert "fp8-gemm-scale-format" in summary and "DeepGemm" in summary
    assert "also appears in a run that served correctly" in summary and "log line" in summary
    # Why the KV-cache dtype went first: the best P(fix) per host-second, the weight behind it.
    assert "Chosen for the best probability of fixing per host-second" in md
    assert "Next best: --attention-backend: (unset) → flashinfer" in md  # the runner-up and its P(fix)
    # The DeepGemm hypothesis's own section says why it was dropped.
    section = md.split("### `fp8-gemm-scale-format`")[1].split("### ")[0]
    # (the runner-up is now another change, so the section says why it fell: refuted by the healthy run)
    assert "Refuted at step 2" in section


def test_report_has_experiment_table_and_probabilities() -> None:
    md = render(RecordedRun.load(GLM5), "md")
    table = md.split("## Experiments")[1].split("Timeline")[0]
    rows = [r for r in table.splitlines() if re.match(r"\| \d ", r)]
    assert len(rows) == 3
    assert "request_failed" in rows[0] and "probability_tensor_nan (log line" in rows[0]
    assert "min" in rows[0]  # time to ready / to crash in host time
    assert "adopted into the baseline" in rows[1] and "confirms the fix" in rows[2]
    assert "| hypothesis | after #1 | after #2 | after #3 |" in md


def test_excerpts_fall_back_to_the_transcript_when_the_log_is_gone() -> None:
    rep = build_report(RecordedRun.load(GLM5))
    items = [e for h in rep.hypotheses for e in h.evidence if e.excerpt]
    assert items
    assert all("transcript" in e.excerpt.source for e in items if e.excerpt)
    nan = next(e for e in items if NAN_FIRST in e.line_numbers)
    assert nan.excerpt and "probability tensor contains" in nan.excerpt.lines[0][1]


def test_excerpts_come_from_the_server_log_when_it_exists(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"log line number {n}\n" for n in range(1, 300)), encoding="utf-8")
    lines = GLM5.read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(lines):
        ev = json.loads(line)
        if ev["type"] == "outcome" and ev["data"]["stage"] != "ok":
            ev["data"]["log_path"] = str(log)
            lines[i] = json.dumps(ev) + "\n"
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    rep = build_report(RecordedRun.load(path))
    nan = next(e for h in rep.hypotheses for e in h.evidence if e.excerpt and NAN_FIRST in e.line_numbers)
    assert nan.excerpt is not None and str(log) in nan.excerpt.source
    assert [(n, cited) for n, _, cited in nan.excerpt.lines] == [
        (NAN_FIRST - 1, False),
        (NAN_FIRST, True),
        (NAN_LAST, True),
        (NAN_LAST + 1, False),
    ]
    assert nan.excerpt.lines[1][1] == f"log line number {NAN_FIRST}"


def test_html_is_one_self_contained_file(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    r = _hypoloop(tmp_path, "report", str(GLM5), "--format", "html", "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count('<figure class="chart') == 2  # the experiment timeline and the probabilities
    for needle in ("<script", "<link", "@import", "url(", " src="):
        assert needle not in page
    assert not re.findall(r"https?://(?!www\.w3\.org/2000/svg)", page)  # nothing to fetch
    assert "Why it was dropped" in page and "kv-cache-dtype" in page


def test_markdown_to_stdout(tmp_path: Path) -> None:
    r = _hypoloop(tmp_path, "report", str(REJECTED))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# hypoloop run")
    assert "Rejected: --kv-cache-dtype: (unset) → bf16 — a bf16 KV cache halves" in r.stdout
    assert "**status**: not_isolated" in r.stdout


def test_report_of_an_unfinished_run_says_so(tmp_path: Path) -> None:
    lines = GLM5.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "hypothesis.supported")
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:cut]), encoding="utf-8")
    md = render(RecordedRun.load(path), "md")
    assert "**Unfinished run**" in md
    html = render(RecordedRun.load(path), "html")
    assert "Unfinished run" in html


def test_bad_format_is_refused(tmp_path: Path) -> None:
    r = _hypoloop(tmp_path, "report", str(GLM5), "--format", "pdf")
    assert r.returncode == 2 and "'pdf' is not one of 'md', 'html'" in r.stderr


def test_a_proposal_made_again_after_an_edit_and_rejected_shows_no_outcome(tmp_path: Path) -> None:
    """The planner proposes --kv-cache-dtype bf16, the user edits it into another change, the planner
    proposes bf16 again under the same experiment id, and the user rejects it: the rejected step ran
    nothing, so the report must not lend it the edited run's outcome."""
    def answer(*args: str) -> dict[str, object]:
        r = run_cli(tmp_path, *args, "--json")
        assert r.returncode == 3, r.stderr[-2000:]
        return dict(json.loads(r.stdout.strip().splitlines()[-1]))

    first = answer("run", "lab:glm5-nvfp4-sm120", "--transcript-dir", "tr")
    run_id = str(first["run_id"])
    proposed = answer("resume", run_id, "--decision", "approve")["pending"]
    repeated = answer("resume", run_id, "--decision", "edit", "--set", "--sampling-backend=pytorch")[
        "pending"
    ]
    again = answer("resume", run_id, "--decision", "reject", "--reason", "bf16 halves the KV cache")
    assert isinstance(proposed, dict) and proposed["change"]["name"] == "--kv-cache-dtype"
    assert isinstance(repeated, dict) and repeated["experiment_id"] == proposed["experiment_id"]
    md = render(RecordedRun.load(tmp_path / "tr" / f"{run_id}.jsonl"), "md")
    steps = [line for line in md.splitlines() if re.match(r"\d+\. Step \d+(, rejected proposal)? — ", line)]
    edited = next(s for s in steps if "ran --sampling-backend" in s)
    rejected = next(s for s in steps if "Approval: reject" in s)
    assert "Outcome: request_failed" in edited  # the edited change ran and failed like the baseline
    assert "bf16 halves the KV cache" in rejected and "Outcome:" not in rejected
    assert again["pending"] is not None  # the run goes on with another proposal


def test_open_hypotheses_say_whether_they_were_tested() -> None:
    """A person rejected the KV-cache change; other hypotheses were tested and did not fix it, which they
    allowed. The report must not call those "not tested", and a rejected proposal is labelled as such."""
    md = render(RecordedRun.load(REJECTED), "md")
    ledger = md.split("| hypothesis | component | verdict |", 1)[1].split("\n\n", 1)[0]
    rows = {m[1]: m[2].strip() for m in re.finditer(r"^\| `([^`]+)` \| [^|]+ \| ([^|]+) \|", ledger, re.M)}
    assert rows["lowprec-kv-cache-attention-numerics"] == "open — its test was rejected"
    assert rows["attention-backend-arch"].startswith("open — tested")  # tested, never "not tested"
    assert rows["fp8-gemm-scale-format"] == "refuted"
    # the candidates the run never reached are "not tested"; none that an experiment tested is
    assert rows["sparse-decode-backend-kernel"] == "not tested"
    assert all(v != "not tested" for k, v in rows.items() if k in ("attention-backend-arch", "component:--fp8-gemm-backend"))
    assert "Step 2, rejected proposal — --kv-cache-dtype: (unset) → bf16." in md
    assert "Not tested:" not in md and "- Still open: moe-kernel-numerics (p=" in md


def test_a_run_without_a_root_cause_names_its_leading_open_hypothesis() -> None:
    md = render(RecordedRun.load(REJECTED), "md")
    summary = md.split("## How the run got there", 1)[0]
    lead = re.search(r"\*\*leading hypothesis\*\*: (\S+) \(p=([0-9.]+)", summary)
    # nothing tested after the rejection moved the rejected change's hypothesis: it still leads at the end
    assert lead is not None and lead.group(1) == "lowprec-kv-cache-attention-numerics"
    assert "its test (--kv-cache-dtype: (unset) → bf16) was rejected" in summary
    isolated = render(RecordedRun.load(GLM5), "md").split("## How the run got there", 1)[0]
    assert "leading hypothesis" not in isolated  # the root cause is named instead


def test_a_log_line_cited_for_several_hypotheses_is_quoted_once() -> None:
    run = RecordedRun.load(GLM5)
    rep = build_report(run)
    citing = [
        h.id
        for h in rep.hypotheses
        for e in h.evidence
        if e.experiment and e.experiment.startswith("#1 ") and NAN_FIRST in e.line_numbers
    ]
    assert len(citing) > 1  # several hypotheses rest on the NaN assert of the baseline
    md = render(run, "md")
    assert len(re.findall(rf"^\s+>\s+{NAN_FIRST}\s", md, re.M)) == 1
    page = render(run, "html")
    assert len(re.findall(rf'<span class="hit">&gt;\s+{NAN_FIRST}\s', page)) == 1
    assert "log lines quoted under" in page


def _excerpt_lines(md: str) -> dict[int, set[str]]:
    """The numbered log lines the report's excerpts quote: line number → the texts quoted for it."""
    out: dict[int, set[str]] = {}
    for m in re.finditer(r"^\s*>?\s+(\d+)  (.*)$", md, re.M):
        out.setdefault(int(m.group(1)), set()).add(m.group(2).rstrip())
    return out


def test_log_lines_and_changes_are_never_cut(tmp_path: Path) -> None:
    """Issue 13: an evidence line quoted in the report is the whole log line (the reader wraps it), in
    Markdown and HTML, and the Markdown timeline names each experiment's change whole. A run whose error
    line is long and whose fix is a proxy URL shows both."""
    r = _hypoloop(tmp_path, "run", "lab:qwen3-next-b200x4", "--auto", timeout=300)
    assert r.returncode == 0, r.stderr
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    md = _hypoloop(tmp_path, "report", str(transcript), "--format", "md").stdout
    page = _hypoloop(tmp_path, "report", str(transcript), "--format", "html").stdout
    quoted = _excerpt_lines(md)
    cited = re.findall(r"log line (\d+): (.+)$", md, re.M)
    assert cited, md
    for n, text in cited:  # as the prose shows it (its backticks escaped there, and <, > and & as entities)
        assert md_raw(text.rstrip()) in quoted.get(int(n), set()), f"log line {n} shown as {text!r}, the log has {quoted.get(int(n))}"
    html_cited = re.findall(r"<br>log line (\d+): ([^<\n]+)", page)
    assert html_cited, page
    for n, text in html_cited:
        assert text.rstrip() in {html.escape(t, quote=False) for t in quoted.get(int(n), set())}, f"html log line {n}: {text!r}"
    timeline = md.split("```text", 1)[1].split("```", 1)[0]
    changes = re.findall(r"^\| (\d+) \| ([^|]+?) \| ", md.split("## Experiments", 1)[1].split("## Hypotheses", 1)[0], re.M)
    assert any("http_proxy" in c for _, c in changes), changes
    for n, change in changes:
        assert f"#{n} {md_raw(change)}" in timeline, f"the timeline cut #{n} {change}:\n{timeline}"


def test_a_hypothesis_the_conclusion_ruled_out_is_neither_leading_nor_open(tmp_path: Path) -> None:
    """A failed import before any flag is read: the conclusion rules the flag-only ideas out while the
    ledger leaves them open. The report follows the conclusion: none of them is named the leading
    hypothesis, and each one's verdict is 'ruled out' with the conclusion's evidence."""
    r = _hypoloop(tmp_path, "run", "lab:coder-lite-h100x2", "--auto", timeout=300)
    assert r.returncode == 0, r.stderr
    transcript = next((tmp_path / "transcripts").glob("*.jsonl"))
    conclusion = next(e for e in reversed(_events(transcript)) if e["type"] == "conclusion")["data"]
    ruled_out = {x["id"]: x["evidence"][0]["detail"] for x in conclusion["refuted"]}
    assert conclusion["status"] == "not_isolated" and ruled_out, conclusion
    md = _hypoloop(tmp_path, "report", str(transcript)).stdout
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    leading = next((line for line in summary.splitlines() if "**leading hypothesis**" in line), "")
    assert not any(f" {h} " in leading for h in ruled_out), leading
    for h, why in ruled_out.items():
        row = next(line for line in md.splitlines() if line.startswith(f"| `{h}` |") and "| 0." in line)
        assert row.split(" | ")[2] == "ruled out", row
        section = md.split(f"### `{h}` — ", 1)[1].split("\n### ", 1)[0]
        assert section.startswith("ruled out") and why in section, section


def _rendered_text(md: str) -> str:
    """The text a CommonMark renderer shows for ``md`` (markdown-it-py, which rich installs)."""
    from markdown_it import MarkdownIt

    return html.unescape(re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").render(md)))


def test_backticks_in_log_lines_and_values_render_as_themselves_in_markdown() -> None:
    """The NaN assert's log line holds backticks ("Assertion `probability tensor contains either `inf`,
    ...`"): in prose they opened code spans, which garbled the line and showed '&lt;' literally. In code
    spans and fences a run of backticks longer than any inside keeps a value whole."""
    from markdown_it import MarkdownIt

    from tools.sanitize import fence, md_code, md_text

    line = "Assertion `probability tensor contains either `inf`, `nan` or element < 0` failed."
    md = render(RecordedRun.load(GLM5), "md")
    shown = _rendered_text(md)
    summary = shown.split("How the run got there")[0]
    assert line in summary, summary[-1500:]
    assert "&lt;" not in shown
    for value in ("a``b", "`start", "end`", "```", "x < y & `z`"):
        out = MarkdownIt("commonmark").render(f"see {md_code(md_text(value))} here")
        assert f"<code>{html.escape(value, quote=False)}</code>" in out, (value, out)
    block = "```\nstill `inside`\n````"
    tick = fence(block)
    out = MarkdownIt("commonmark").render(f"{tick}text\n{block}\n{tick}\nafter")
    assert html.escape(block, quote=False) in out and out.rstrip().endswith("<p>after</p>"), out
