"""Graded wrong output: is a server's accuracy on the probe set below what the case expects?

A case that expects an accuracy (``[reproduce] accuracy``: what the deployment known to be good scores on
hypoloop's probe set, ``knowledge/probe_set.toml``) has every ready launch answer the set
(``tools.probe_set``); the count of right answers is judged here. The launch's answers are "wrong output"
only when the measured accuracy is below the expected level with 95% confidence: a one-sided exact
binomial test of "the true accuracy is at least the expected one" rejects at level 0.05 (the chance of
k or fewer right answers out of n, were the accuracy the expected one, is below 0.05). One odd answer
never decides it. The 95% Wilson score interval of the measured accuracy is stated beside it.

What a set of n questions can see: with 40 questions and an expected 0.95, 36 right (0.90) is not below
with that confidence (p = 0.14) and 35 right (0.875) is (p = 0.048); a drop of a few points, like 91% to
85%, needs hundreds of questions: the set has 200 (knowledge/probe_set.toml), which see that drop 81% of the
time (README.md, "Graded wrong output").

Sources: E. B. Wilson, "Probable inference, the law of succession, and statistical inference", JASA 22
(1927), the score interval; the exact binomial test as in any statistics text (scipy.stats.binomtest with
``alternative="less"`` gives the same p-values).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from statistics import NormalDist

from pydantic import BaseModel

from tools.probe_set import SET_PROBE_ID, SetRun, load_probe_set, run_probe_set
from tools.probes import Probe, ProbeResult

#: The confidence with which an accuracy is called below the expected one (and of the stated interval).
CONFIDENCE = 0.95
#: The id of the probe result that stands for the whole probe set.
PROBE_ID = SET_PROBE_ID


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p): the chance of at most ``k`` successes in ``n`` independent trials
    of success probability ``p`` (exact sum, in log space so large ``n`` does not overflow).

    Raises ValueError for n < 0 or p outside [0, 1].
    """
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_cdf needs n >= 0 and 0 <= p <= 1, got n={n}, p={p}")
    if k < 0:
        return 0.0
    if k >= n or p == 0.0:
        return 1.0
    if p == 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k + 1):
        log_term = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
        total += math.exp(log_term)
    return min(total, 1.0)


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The two-sided Wilson score interval (low, high) of a proportion with ``k`` successes in ``n``
    trials at ``confidence`` (0.95: z = 1.96). Raises ValueError for n < 1 or k outside [0, n]."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    phat = k / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


class Verdict(BaseModel):
    """A measured accuracy against the expected one. ``p_value``: P(at most ``correct`` right of ``asked``
    were the accuracy ``expected``); ``below``: p_value < 1 - ``confidence``; ``low``/``high``: the Wilson
    interval of ``accuracy`` at ``confidence``."""

    correct: int
    asked: int
    expected: float
    accuracy: float
    low: float
    high: float
    p_value: float
    confidence: float
    below: bool

    def text(self) -> str:
        """The verdict in one line, with its numbers."""
        pct = f"{self.confidence:.0%}"
        head = (
            f"accuracy {self.correct}/{self.asked} = {self.accuracy:.3f} "
            f"({pct} Wilson interval {self.low:.3f}-{self.high:.3f}); expected {self.expected:.3f}"
        )
        alpha = 1 - self.confidence
        if self.below:
            return f"{head}: below it with {pct} confidence (one-sided exact binomial p = {self.p_value:.2g} < {alpha:.2g})"
        return f"{head}: not below it with {pct} confidence (one-sided exact binomial p = {self.p_value:.2g} >= {alpha:.2g})"


def judge(correct: int, asked: int, expected: float, confidence: float = CONFIDENCE) -> Verdict:
    """Whether ``correct`` right answers of ``asked`` are below the ``expected`` accuracy with
    ``confidence``: the one-sided exact binomial test (module docstring). Raises ValueError for
    asked < 1, correct outside [0, asked], or expected / confidence outside (0, 1)."""
    if not 0.0 < expected <= 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"judge needs 0 < expected <= 1 and 0 < confidence < 1, got {expected}, {confidence}")
    low, high = wilson_interval(correct, asked, confidence)
    p_value = binomial_cdf(correct, asked, expected)
    return Verdict(
        correct=correct, asked=asked, expected=expected, accuracy=correct / asked, low=low, high=high,
        p_value=p_value, confidence=confidence, below=p_value < 1 - confidence,
    )


_COUNT = re.compile(r"\baccuracy (\d+)/(\d+) = ")


def graded_count(probes: Iterable[ProbeResult]) -> tuple[int, int] | None:
    """(right, asked) of the probe set among a launch's ``probes`` (its result's verdict text, ``set_result``),
    or None when the launch answered no probe set."""
    for p in probes:
        if p.probe_id == PROBE_ID and (m := _COUNT.search(f"{p.text or ''} {p.error or ''}")):
            return int(m.group(1)), int(m.group(2))
    return None


def improved_p(better: tuple[int, int], worse: tuple[int, int]) -> float:
    """The one-sided p-value of Fisher's exact test that ``better`` (right, asked) has a higher accuracy than
    ``worse``: the chance, with both drawn from one accuracy, of at least ``better``'s right answers given
    the totals (the hypergeometric upper tail; scipy.stats.fisher_exact with ``alternative="greater"``
    gives the same). Raises ValueError for counts outside 0 <= right <= asked."""
    (a, n1), (c, n2) = better, worse
    if not (0 <= a <= n1 and 0 <= c <= n2):
        raise ValueError(f"improved_p needs 0 <= right <= asked, got {better}, {worse}")
    total = a + c

    def log_pmf(k: int) -> float:
        return (math.lgamma(n1 + 1) - math.lgamma(k + 1) - math.lgamma(n1 - k + 1) + math.lgamma(n2 + 1)
                - math.lgamma(total - k + 1) - math.lgamma(n2 - total + k + 1) - math.lgamma(n1 + n2 + 1)
                + math.lgamma(total + 1) + math.lgamma(n1 + n2 - total + 1))

    top = min(n1, total)
    return min(1.0, sum(math.exp(log_pmf(k)) for k in range(a, top + 1) if total - k <= n2))


def set_result(run: SetRun, expected: float) -> ProbeResult:
    """The probe result that stands for a probe set's answers (``PROBE_ID``): ``wrong_answer`` when the
    accuracy is below ``expected`` with 95% confidence, else ``ok``, the verdict's numbers in ``error`` and
    ``text``; when the server stopped answering, that request's own failure (connection_error, timeout,
    http_error) under this id, since no accuracy was measured."""
    if run.failure is not None:
        note = f"{run.name}: the server stopped answering after {run.asked} questions: {run.failure.error or run.failure.status}"
        return run.failure.model_copy(update={"probe_id": PROBE_ID, "error": note, "latency_s": run.latency_s})
    if run.asked == 0:
        return ProbeResult(probe_id=PROBE_ID, ok=False, status="empty", latency_s=run.latency_s,
                           error=f"{run.name}: no question was asked")
    verdict = judge(run.correct, run.asked, expected)
    text = f"{run.name}: {verdict.text()}"
    if run.wrong:
        text += "; wrong: " + "; ".join(f"{qid} {reply!r}" for qid, reply in run.wrong)
    return ProbeResult(
        probe_id=PROBE_ID,
        ok=not verdict.below,
        status="wrong_answer" if verdict.below else "ok",
        http_status=200,
        text=text,
        latency_s=run.latency_s,
        error=verdict.text() if verdict.below else None,
    )


def probe_set_jobs(expected: float | None, send: Callable[[Probe], ProbeResult],
                   concurrency: int = 1) -> list[Callable[[], ProbeResult]]:
    """What a ready launch asks besides its probes: nothing when the case expects no accuracy, else one
    job that answers the probe set through ``send`` (``concurrency`` questions at once: the case's own
    burst, so that a drop the user sees only under concurrent requests shows) and returns ``set_result``.
    Raises ProbeSetError (a ValueError, one line) for a broken probe set file, which ``run`` checks before
    anything starts."""
    if expected is None:
        return []
    probe_set = load_probe_set()
    return [lambda: set_result(run_probe_set(probe_set, send, concurrency), expected)]
