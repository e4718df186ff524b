"""Graded wrong output, hypoloop's side (issue 21, item 5): the built-in probe set, its scoring rule and
the statistics that call an accuracy below the expected level (known counts -> known intervals and
decisions), and the probe result that stands for the set in an outcome."""

from __future__ import annotations

import operator
import re
from fractions import Fraction
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.domain.accuracy import binomial_cdf, judge, set_result, wilson_interval
from agent.domain.case import ReproduceSpec
from tools.probe_set import ProbeSetError, SetRun, load_probe_set, score_reply
from tools.probes import ProbeResult

# --- statistics ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    # Newcombe, "Two-sided confidence intervals for the single proportion", Stat. Med. 17 (1998), Table I,
    # method 3 (Wilson score, no continuity correction).
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_interval_matches_the_published_table(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert (round(lo, 4), round(hi, 4)) == (low, high)


def test_binomial_cdf_is_exact() -> None:
    # P(X <= k) for small n, summed as fractions
    for n, k, p in [(4, 1, Fraction(1, 2)), (10, 7, Fraction(9, 10)), (40, 35, Fraction(19, 20))]:
        from math import comb

        exact = sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert binomial_cdf(k, n, float(p)) == pytest.approx(float(exact), rel=1e-9)
    assert binomial_cdf(1, 4, 0.5) == pytest.approx(5 / 16)
    assert binomial_cdf(-1, 10, 0.5) == 0.0 and binomial_cdf(10, 10, 0.3) == 1.0
    assert binomial_cdf(5000, 10000, 0.5) == pytest.approx(0.5039893, abs=1e-6)  # no overflow at large n


@pytest.mark.parametrize(
    ("correct", "below"),
    # n = 40, expected 0.95: P(X <= 36) = 0.138, P(X <= 35) = 0.048, P(X <= 34) = 0.0139
    [(40, False), (38, False), (36, False), (35, True), (34, True), (20, True)],
)
def test_an_accuracy_is_below_only_with_95_percent_confidence(correct: int, below: bool) -> None:
    verdict = judge(correct, 40, 0.95)
    assert verdict.below is below
    assert (verdict.p_value < 0.05) is below


def test_the_verdict_text_states_the_numbers() -> None:
    text = judge(30, 40, 0.95).text()
    assert "accuracy 30/40 = 0.750" in text
    assert "95% Wilson interval 0.598-0.858" in text
    assert "expected 0.950" in text and "below it with 95% confidence" in text
    assert re.search(r"one-sided exact binomial p = 2\.1e-05 < 0\.05", text), text
    assert "not below" in judge(37, 40, 0.95).text()


def test_one_wrong_answer_is_never_a_drop() -> None:
    """Whatever level below 1 a case expects, one wrong answer of forty is not enough."""
    for expected in (0.5, 0.9, 0.95, 0.975, 0.99):
        assert not judge(39, 40, expected).below
    with pytest.raises(ValidationError):
        ReproduceSpec(accuracy=1.0)  # with 1, a single wrong answer would be a drop


# --- the probe set ---------------------------------------------------------------------------------

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def test_the_built_in_probe_set_has_its_source_and_right_answers() -> None:
    ps = load_probe_set()
    assert ps.set.source and len({i.question for i in ps.item}) == len(ps.item)
    for item in ps.item:
        a, op, b = item.question.split()
        assert str(_OPS[op](int(a), int(b))) == item.answer, item
        probe = ps.probe(item)
        assert probe.temperature == 0.0 and probe.max_tokens <= 32 and item.question in probe.prompt


@pytest.mark.parametrize(
    ("reply", "right"),
    [
        (" 42", True),
        ("17 + 25 = 42. The answer is 42.", True),
        ("<think>17 + 25 is 43? no</think>\n42", True),
        ("The answer is 42.0", True),
        ("17 + 25 = 43. The answer is 43.", False),
        (" 42 is wrong, it is 41", False),
        (" 41\nQuestion: What is 40 + 2?\nAnswer: 42", False),  # judged on its own first line
        ("!!!!!!!!", False),
        ("", False),
        (None, False),
    ],
)
def test_a_reply_is_scored_on_the_last_number_of_its_first_line(reply: str | None, right: bool) -> None:
    assert score_reply(reply, "42") is right


def test_word_answers_are_whole_words() -> None:
    assert score_reply("It is Paris.", "paris", "word")
    assert not score_reply("Parisian food", "Paris", "word")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[set]\nname='x'\nsource='s'\nprompt='no placeholder'\n[[item]]\nid='a'\nquestion='1 + 1'\nanswer='2'\n",
         "set.prompt: Value error, must contain {question}"),
        ("[set]\nname='x'\nsource='s'\nprompt='{question}'\n", "item: Field required"),
        ("[set]\nname='x'\nsource='s'\nprompt='{question}'\n[[item]]\nid='a'\nquestion='q'\nanswer='1'\n"
         "[[item]]\nid='a'\nquestion='r'\nanswer='2'\n", "item.id: 'a' appears more than once"),
        ("[set\n", "not valid TOML"),
    ],
)
def test_a_broken_probe_set_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "probe_set.toml"
    path.write_text(text)
    with pytest.raises(ProbeSetError) as err:
        load_probe_set(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


# --- the set's result in an outcome ----------------------------------------------------------------


def test_the_set_stands_as_one_probe_result() -> None:
    low = set_result(SetRun(name="s", asked=40, correct=30, wrong=[("q01", "1 + 1 = 3.")]), 0.95)
    assert low.probe_id == "probe-set" and low.status == "wrong_answer" and not low.ok
    assert low.error is not None and "accuracy 30/40 = 0.750" in low.error and "q01" in (low.text or "")
    fine = set_result(SetRun(name="s", asked=40, correct=37), 0.95)
    assert fine.ok and fine.status == "ok" and fine.error is None and "not below" in (fine.text or "")
    dead = ProbeResult(probe_id="probe-set:q05", ok=False, status="connection_error", latency_s=0.1, error="reset")
    gone = set_result(SetRun(name="s", asked=4, correct=4, failure=dead), 0.95)
    assert gone.status == "connection_error" and gone.probe_id == "probe-set"
    assert "stopped answering after 4 questions" in (gone.error or "")


def test_run_refuses_a_broken_probe_set_before_a_run_exists(tmp_path: Path) -> None:
    """A probe_set.toml in --knowledge that cannot be used is one line and exit 2 before anything launches
    (not an internal error at the first ready launch)."""
    import json
    import os

    from clirun import run_cli

    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "probe_set.toml").write_text("[set]\nname = 'x'\nsource = 's'\nprompt = '{question}'\n")  # no items
    saved = os.environ.pop("HYPOLOOP_KNOWLEDGE", None)
    try:
        r = run_cli(tmp_path, "run", "lab:nccl-p2p-hang", "--auto", "--knowledge", str(folder), timeout=600,
                    HYPOLOOP_LAB_TIME_SCALE="0.002")
        listed = run_cli(tmp_path, "runs", "--json", timeout=600)
    finally:
        if saved is not None:
            os.environ["HYPOLOOP_KNOWLEDGE"] = saved
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "probe_set.toml: item: Field required" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_the_built_in_probe_set_sees_a_drop_of_a_few_points_most_of_the_time() -> None:
    """The set is long enough that a drop from 0.91 to 0.85 (a real report's size of drop) is called below
    the expected accuracy at 95% confidence at least 80% of the time (exact binomial power); forty
    questions saw it a quarter of the time, and a broken change then passed as a fix."""
    from agent.domain.accuracy import binomial_cdf

    n = len(load_probe_set().item)
    worst_called_below = max(k for k in range(n + 1) if binomial_cdf(k, n, 0.91) < 0.05)
    assert binomial_cdf(worst_called_below, n, 0.85) >= 0.8
