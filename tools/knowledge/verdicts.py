"""Whether a section of notes reports a launch that worked: verdict words in its heading and prose."""

from __future__ import annotations

import re

from tools.knowledge.models import Outcome

_STRONG_POS = r"fixed|resolved|solved|workaround|finally (?:works|working|serving|runs|running|loads)|works now|now works|now serving"


_WEAK_POS = (
    r"works|worked|working|serving correctly|serves correctly|served correctly|runs fine|running fine|ran fine|"
    r"out of the box|no issues|success(?:ful(?:ly)?)?|passes|passed"
)


_STRONG_NEG = r"unresolved|not (?:yet )?(?:fixed|resolved|solved)|gave up|giving up|still (?:fails|failing|broken|crashes|crashing|hangs|hanging|nan|oom)"


_WEAK_NEG = (
    r"fails?|failed|failing|failure|crash(?:es|ed|ing)?|nans?|hangs?|hung|oom|out of memory|errors?|broken|"
    r"assert(?:ion)?(?:error)?|garbage|segfault(?:s|ed)?|exception|doesn't work|does not work|didn't work|"
    r"did not work|not working|no luck"
)


_VERDICT_RE = re.compile(
    rf"\b(?:(?P<sneg>{_STRONG_NEG})|(?P<spos>{_STRONG_POS})|(?P<wneg>{_WEAK_NEG})|(?P<wpos>{_WEAK_POS}))\b",
    re.IGNORECASE,
)


_VERDICT_NEGATION_RE = re.compile(
    r"(?:\b(?:no|not|never|none of (?:which|them|these|those|it)|nothing|without|neither|nor)|n't)\s+(?:\w+\s+)?$",
    re.IGNORECASE,
)


def _verdicts(text: str) -> list[str]:
    """Verdict tokens in order: 'spos', 'wpos', 'sneg', 'wneg' (negated positives become 'sneg')."""
    out: list[str] = []
    for m in _VERDICT_RE.finditer(text):
        kind = m.lastgroup or ""
        negated = bool(_VERDICT_NEGATION_RE.search(text[max(0, m.start() - 30) : m.start()]))
        if negated:
            if kind in ("spos", "wpos"):
                out.append("sneg")  # "none of which fixed it", "doesn't work"
            continue  # "no NaNs", "without errors": not a failure, not a verdict either
        out.append(kind)
    return out


def verdict_of(text: str) -> Outcome:
    """works / fails by the last verdict word in `text`; unknown without one."""
    kinds = _verdicts(text)
    if not kinds:
        return "unknown"
    return "works" if kinds[-1] in ("spos", "wpos") else "fails"


def section_outcome(title: str, prose: str) -> Outcome:
    """works / fails / unknown for a section (rule in the module docstring).

    1. The heading: a strong failure ("unresolved", "gave up") -> fails; any success word -> works;
       a symptom word ("NaN", "crash") -> tentatively fails.
    2. The prose (code blocks excluded): a strong failure after the last resolution -> fails; a
       resolution ("fixed", "resolved", "finally serving") -> works; else the last verdict word decides.
    3. Else the heading's tentative verdict, else unknown.
    """
    heading = _verdicts(title)
    if "sneg" in heading:
        return "fails"
    if "spos" in heading or "wpos" in heading:
        return "works"
    body = _verdicts(re.sub(r"`([^`]*)`", r"\1", prose))
    last_spos = max((i for i, k in enumerate(body) if k == "spos"), default=-1)
    last_sneg = max((i for i, k in enumerate(body) if k == "sneg"), default=-1)
    if last_sneg > last_spos:
        return "fails"
    if last_spos >= 0:
        return "works"
    if body:
        return "works" if body[-1] == "wpos" else "fails"
    if heading:
        return "fails"
    return "unknown"
