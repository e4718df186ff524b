"""Deterministic text generation for the lab server: right answers to a few probe questions.

No model runs in the lab; this module answers "capital of France", simple arithmetic and anything
else with a plausible generic sentence, and counts tokens with a crude word/punctuation split.
"""

from __future__ import annotations

import re

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_ARITH_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/x×])\s*(-?\d+(?:\.\d+)?)")

GENERIC_ANSWER = (
    "I'm happy to help. Could you give me a little more detail about what you would like to know, "
    "so that I can give you a precise and useful answer?"
)


#: What a reasoning model "thinks" before answering when its chat template lets it (about 60 tokens).
THINKING = (
    "<think>\nOkay, the user is asking a short question. Let me recall what I know about it and check the "
    "facts before I answer, so that the reply is correct and brief. I should answer in the form the user "
    "asked for and not add anything that was not requested.\n</think>\n\n"
)


def count_tokens(text: str) -> int:
    """Approximate token count: words and punctuation marks (at least 1 for non-empty text)."""
    n = len(_TOKEN_RE.findall(text))
    return max(n, 1) if text else 0


def answer(prompt: str, known: list[dict[str, str]] | None = None) -> str:
    """The full (untruncated) answer to a prompt. `known`: the world model's own replies
    (`[[model.answers]]`, `{prompt, answer}`): a prompt listed there (spaces at the ends ignored) gets
    its answer, as a small model trained on a few sentences answers exactly those."""
    for item in known or []:
        if item["prompt"].strip() == prompt.strip():
            return item["answer"]
    low = prompt.lower()
    if "capital" in low and "france" in low:
        if low.rstrip().endswith(" is") or low.rstrip().endswith("is:"):
            return " Paris. It is also the largest city in France."
        return "The capital of France is Paris."
    solved = arithmetic(prompt)
    if solved is not None:
        return _say(*solved)
    if "hello" in low or low.strip() in ("hi", "hey"):
        return "Hello! How can I help you today?"
    return GENERIC_ANSWER


def arithmetic(prompt: str) -> tuple[str, float | None] | None:
    """The first two-number sum, difference, product or quotient in `prompt` (as written) and its value
    (None: division by zero); None when the prompt asks none. These are the questions the lab answers by
    rule, the ones a `degrade_accuracy` fault can get wrong (lab/README.md, "Graded wrong output")."""
    m = _ARITH_RE.search(prompt)
    if not m:
        return None
    a, op, b = float(m.group(1)), m.group(2), float(m.group(3))
    result: float | None
    if op == "+":
        result = a + b
    elif op == "-":
        result = a - b
    elif op in ("*", "x", "×"):
        result = a * b
    else:
        result = a / b if b != 0 else None
    return f"{m.group(1)} {op} {m.group(3)}", result


def _say(written: str, result: float | None) -> str:
    if result is None:
        return "Division by zero is undefined."
    shown = str(int(result)) if float(result).is_integer() else f"{result:.6g}"
    return f"{written} = {shown}. The answer is {shown}."


def wrong_answer(prompt: str, offset: int) -> str | None:
    """A fluent but wrong answer to the arithmetic question in `prompt`: its result off by `offset` (not
    0), said the way a right one is; None when the prompt asks no arithmetic."""
    solved = arithmetic(prompt)
    if solved is None or solved[1] is None:
        return None
    return _say(solved[0], solved[1] + (offset or 1))


def truncate(text: str, max_tokens: int) -> tuple[str, bool]:
    """Cut text after `max_tokens` approximate tokens. Returns (text, was_truncated)."""
    if max_tokens <= 0:
        return "", bool(text)
    pieces = list(_TOKEN_RE.finditer(text))
    if len(pieces) <= max_tokens:
        return text, False
    return text[: pieces[max_tokens - 1].end()], True


def continued(text: str, max_tokens: int) -> str:
    """`text` followed by more plain sentences up to about `max_tokens` tokens: what a healthy model
    writes when told to ignore its end-of-sequence token (SGLang's `ignore_eos`)."""
    out = [text]
    n = count_tokens(text)
    i = 0
    while n < max_tokens:
        sentence = " " + _MORE[i % len(_MORE)]
        out.append(sentence)
        n += count_tokens(sentence)
        i += 1
    return "".join(out)


#: Sentences a healthy model "keeps writing" past its answer (varied, so no repetition check trips).
_MORE = (
    "Paris has been the seat of the French government for most of the country's history.",
    "The city lies on the Seine river in the north of France.",
    "Its museums, cafes and old streets draw visitors from around the world every year.",
    "Many people also know it for its food, its fashion houses and its long history of art.",
    "A short train ride connects it with London, Brussels and several other large cities.",
)


def degenerate(pattern: str, max_tokens: int) -> str:
    """Degenerate output of a broken model: `pattern` repeated once per token."""
    pattern = pattern or "!"
    return pattern * max(1, min(max_tokens, 2048))


def garbage(text: str, max_tokens: int) -> str:
    """Arbitrary wrong text of a broken model: the tokens of `text` cycled to `max_tokens` tokens
    (no NaN, no single repeated character; e.g. mixed-script fragments of an overflowing fp16 model)."""
    pieces = [m.group(0) for m in re.finditer(r"\s*\S+", text)] or ["?"]
    n = max(1, min(max_tokens, 2048))
    return "".join(pieces[i % len(pieces)] for i in range(n))
