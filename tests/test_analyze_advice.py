"""`analyze` advice on a CUDA-graph capture that ran out of memory: the max batch size is derived per
batch size from the log's capture figures (large graphs cost more than small ones), the "before" is the
value the log shows the server ran with, and SGLang's own suggestions from the log are listed."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run_cli

from agent.planning.values import CAPTURE_SHARE, ValueEvidence, cuda_graph_max_bs_that_fits
from tools.signatures import load_signatures, scan_text

SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512]
FREE0, WORKSPACE = 4.0, 0.8


def graph_gb(bs: int) -> float:
    """What one graph costs in this log: a fixed part and a part that grows with the batch size."""
    return 0.04 + 0.0016 * bs


def capture_oom_log() -> str:
    """A 0.5.9-style log: server args (cuda_graph_max_bs=512), capture from the largest batch size down
    until memory runs out, SGLang's failure text with its possible solutions."""
    ts = "[2026-02-16 10:00:00 TP0]"
    lines = [
        f"{ts} server_args=ServerArgs(model_path='org/m', tp_size=4, mem_fraction_static=0.9, "
        "cuda_graph_max_bs=512, kv_cache_dtype='auto')",
        f"{ts} Load weight begin. avail mem=44.50 GB",
        f"{ts} Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=25.93 GB, mem usage=18.20 GB.",
        f"{ts} Capture cuda graph begin. This can take up to several minutes. avail mem={FREE0:.2f} GB",
        f"{ts} Capture cuda graph bs {SIZES}",
    ]
    free = FREE0 - WORKSPACE
    order = SIZES[::-1]
    for done, bs in enumerate(order, start=1):
        if free - graph_gb(bs) < 0.05:
            break
        free -= graph_gb(bs)
        pct = done * 100 // len(order)
        lines.append(f"Capturing batches (bs={bs} avail_mem={free:.2f} GB): {pct:3d}%|###| {done}/{len(order)} [00:0{done % 10}<00:10, 1.50s/it]")
    lines += [
        f"{ts} Scheduler hit an exception: Traceback (most recent call last):",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 0.45 GiB.",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
        "3. disable torch compile by not using --enable-torch-compile",
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
        "[2026-02-16 10:00:09] Received sigquit from a child process. It usually means the child failed.",
    ]
    return "\n".join(lines) + "\n"


def test_max_batch_size_is_derived_per_batch_size() -> None:
    _, facts = scan_text(capture_oom_log(), load_signatures())
    value, how = cuda_graph_max_bs_that_fits(ValueEvidence(facts=facts))
    assert value is not None, how
    best = int(value)
    room = FREE0 * CAPTURE_SHARE

    def need(max_bs: int) -> float:
        return WORKSPACE + sum(graph_gb(b) for b in SIZES if b <= max_bs)

    assert need(best) <= room * 1.02  # its graphs fit (within the rounding of the logged figures)
    nxt = SIZES[SIZES.index(best) + 1]
    assert need(nxt) > room * 0.98  # the next size would not
    # The largest graph's cost applied to every graph would allow far fewer batch sizes.
    largest = graph_gb(SIZES[-1])
    naive = SIZES[int((room - WORKSPACE) // largest) - 1]
    assert best > naive
    assert "per graph" in how and "captured graphs" in how


def test_analyze_shows_the_logged_value_as_before_and_sglangs_suggestions(tmp_path: Path) -> None:
    log = tmp_path / "capture-oom.log"
    log.write_text(capture_oom_log())
    shown = run_cli(tmp_path, "analyze", str(log), COLUMNS="200")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "first experiment: --cuda-graph-max-bs: 512 (in the log) → " in out
    assert "(unset) →" not in out.split("first experiment:", 1)[1].split("\n", 1)[0]
    assert "--mem-fraction-static: 0.9 (in the log) → " in out  # an alternative, with its logged value
    suggestions = out.split("SGLang's own suggestions", 1)[1]
    assert "set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)" in suggestions
    assert "disable CUDA graph by --disable-cuda-graph" in suggestions
    data = json.loads(run_cli(tmp_path, "analyze", str(log), "--json").stdout)
    first = data["first_experiment"]
    assert first["name"] == "--cuda-graph-max-bs" and first["before"] is None and first["effective_before"] == "512"
    assert int(first["after"]) < 512
    assert [s["text"][:5] for s in data["sglang_suggestions"]] == ["set -", "set -", "disab", "disab"]
    assert any(a["change"].startswith("--mem-fraction-static") for a in data["alternatives"])
