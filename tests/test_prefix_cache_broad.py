"""Turning the whole radix (prefix) cache off is a broad switch-off (knowledge/switches.toml ``[[broad]]``):
when it serves, the narrower choices inside the cache are tried before it is reported, and it is never
the root fix of an ``isolated`` ending. An unset choice flag is never "changed" to ``auto``: that is what
SGLang resolves an unset flag by, so the launch would change nothing.

The world: a hybrid linear-attention model on SGLang's CPU engine whose start-up asserts in the mamba
radix cache's strategy (lab/worlds/qwen35-27b-xeon8592-2s, from sgl-project/sglang PR #37705)."""

from __future__ import annotations

from pathlib import Path

from clirun import run_cli, transcript_events

REPO = Path(__file__).resolve().parents[1]
WORLD = "lab:qwen35-27b-xeon8592-2s"


def _launched_changes(events: list[dict]) -> list[tuple[str, object]]:
    out = []
    for e in events:
        if e["type"] == "experiment.proposed":
            ch = (e["data"].get("experiment") or e["data"]).get("change")
            if ch:
                out.append((ch["name"], ch.get("after")))
    return out


def test_the_radix_cache_switched_off_is_a_workaround_and_the_strategy_inside_it_is_tried(
    tmp_path: Path,
) -> None:
    import json

    r = run_cli(tmp_path, "run", WORLD, "--auto", "--json", "--transcript-dir", "tr", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    events = transcript_events(Path(result["transcript"]))
    changes = _launched_changes(events)
    assert ("--disable-radix-cache", True) in changes  # it served in the run
    # never the fix of an isolated ending
    fix = ((result.get("root_cause") or {}).get("fix") or {}).get("name")
    assert fix != "--disable-radix-cache", result
    # after it served, a narrower choice inside the cache was launched: the strategy's other implementation
    after = changes[changes.index(("--disable-radix-cache", True)) + 1 :]
    assert ("--mamba-radix-cache-strategy", "no_buffer") in after, changes
    # first of them: the choice the error named is the likeliest, not halved for avoiding the named one
    assert after[0] == ("--mamba-radix-cache-strategy", "no_buffer"), changes
    # and no launch set the unset strategy to what it resolves by anyway
    assert ("--mamba-radix-cache-strategy", "auto") not in changes, changes
