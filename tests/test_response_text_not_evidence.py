"""What a server answered a request is not evidence about a flag. SGLang's warm-up assertion echoes the
response (``AssertionError: res=<Response [502]>, res.text=''``); the word ``text`` there is Python's
echo of ``res.text``, the body after it the server's output. Neither may make a flag whose choices
include that word (``--log-requests-format {text,json}``) a suspect. A lab world's run, as a user runs
it (``hypoloop run --auto``)."""

from __future__ import annotations

import re
from pathlib import Path

from clirun import run_auto

_NAMES = re.compile(r"the error names (?:its value )?(\S+)")


def test_a_response_body_echoed_in_an_error_names_no_flag_choice(tmp_path: Path) -> None:
    _, events = run_auto(tmp_path, Path("lab:qwen3-next-b200x4"), HYPOLOOP_LAB_TIME_SCALE="0.004")
    logs = [ll["text"] for ev in events if ev["type"] == "outcome" for ll in ev["data"].get("log_excerpt", [])]
    assert any(re.search(r"res\.text=", t) for t in logs), "the world's warm-up failure no longer echoes res.text"
    named = {
        (ev["data"]["id"], m[1])
        for ev in events if ev["type"] == "hypothesis.added"
        for e in ev["data"]["evidence"] if (m := _NAMES.search(e["detail"]))
    }
    assert not [(h, word) for h, word in named if word.lower() in ("text", "json")], named
