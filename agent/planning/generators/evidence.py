"""From a launch's log and outcome to ``FailureEvidence``: the lines kept, tracebacks, symptom classes.

``LogExcerpt`` is fed every log line while a launch is watched and keeps what an engineer would read:
each Python traceback whole (with the exception line and the numbered list of possible solutions
SGLang prints after some errors), the lines just before a fatal or error line, warnings, lines that
name a flag to use, and the tail of the log. Memory stays bounded whatever the log's length.

Traceback text is CPython's format (``Traceback (most recent call last):``, ``  File "PATH", line N, in
FUNC``, the source line, the exception line); SGLang logs it as one multi-line record whose first line
carries the log prefix (``Scheduler hit an exception: Traceback ...``; sglang/srt/managers/scheduler.py,
0.5.x).
"""

from __future__ import annotations

import re
from collections import deque

from agent.domain.models import LogLine, Outcome
from agent.planning.generators import FailureEvidence
from tools.engines import is_settings_dump, settings_marker_in
from tools.tracebacks import Traceback, parse_numbered_lines

__all__ = [
    "LogExcerpt",
    "failure_evidence",
    "parse_tracebacks",
    "symptom_classes",
]

#: Lines of the log's end that are always kept.
TAIL_LINES = 80
#: Lines kept before an error line (what led to it).
BEFORE_LINES = 3
#: Lines kept after an exception line (SGLang's numbered "possible solutions" follow it).
AFTER_LINES = 16
#: Upper bound of kept lines besides the tail (a log full of warnings stays bounded).
MAX_KEPT = 600

_TB_START = re.compile(r"Traceback \(most recent call last\)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
_EXC_LINE = re.compile(
    r"^(?:\[[^\]]*\]\s*)?(?P<exc>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b.*|"
    r"AssertionError.*|KeyboardInterrupt.*)$"
)
_INTERESTING = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b|\bWARN(?:ING)?\b|\bwarn(?:ing)?\b|"
    r"\berror\b|\bfailed\b|\bfatal\b|possible solutions|\bUse --|\bset --|\bIncrease --|\bDecrease --|"
    r"\btry --|\bnan\b|\binf\b|out of memory|[Uu]nsupported|not supported|illegal memory|"
    r"device-side assert|undefined symbol|cannot open shared object|Segmentation fault|core dumped",
    re.IGNORECASE,
)
_WARNING = re.compile(r"\bWARN(?:ING)?\b|\bwarn(?:ing)?s?\b|UserWarning|DeprecationWarning|FutureWarning")


class LogExcerpt:
    """Collects the log lines worth keeping as evidence while a log is read (see module docstring)."""

    def __init__(self) -> None:
        self._tail: deque[tuple[int, str]] = deque(maxlen=TAIL_LINES)
        self._before: deque[tuple[int, str]] = deque(maxlen=BEFORE_LINES)
        self._kept: dict[int, str] = {}
        self._in_traceback = False
        self._after = 0

    def _keep(self, lineno: int, text: str) -> None:
        if len(self._kept) < MAX_KEPT:
            self._kept[lineno] = text

    def feed(self, lineno: int, text: str) -> None:
        """One log line (1-based number); lines fed twice are kept once."""
        text = text.rstrip("\r\n")
        if settings_marker_in(text):  # every effective setting, after the engine's own resolution
            self._kept[lineno] = text
        if _TB_START.search(text):
            self._in_traceback = True
            for n, t in self._before:
                self._keep(n, t)
            self._keep(lineno, text)
        elif self._in_traceback:
            self._keep(lineno, text)
            if text[:1] not in (" ", "\t") and not _FRAME.match(text) and text.strip():
                self._in_traceback = False  # the exception line ends the traceback
                self._after = AFTER_LINES
        elif self._after > 0:
            self._keep(lineno, text)
            self._after -= 1
        elif _INTERESTING.search(text):
            for n, t in self._before:
                self._keep(n, t)
            self._keep(lineno, text)
            if _EXC_LINE.match(text.strip()) or "possible solutions" in text:
                self._after = AFTER_LINES
        self._before.append((lineno, text))
        self._tail.append((lineno, text))

    def lines(self) -> list[LogLine]:
        """The kept lines in log order."""
        kept = dict(self._kept)
        kept.update(dict(self._tail))
        return [
            LogLine(line=n, text=t if settings_marker_in(t) else t[:2000])
            for n, t in sorted(kept.items())
        ]


def excerpt_of_text(text: str) -> list[LogLine]:
    """``LogExcerpt`` over a whole log text (an existing crash log)."""
    ex = LogExcerpt()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        ex.feed(n, line)
    return ex.lines()


def parse_tracebacks(lines: list[LogLine]) -> list[Traceback]:
    """Python tracebacks in the kept lines, in log order (a chained exception's tracebacks each count,
    every rank's too), frames innermost first. Parsing and the model: ``tools.tracebacks``."""
    return parse_numbered_lines(((ll.line, ll.text) for ll in lines), unique=False)


_NAN = re.compile(r"\bnan\b|\binf\b|NaN", re.IGNORECASE)
_OOM = re.compile(r"out of memory|OutOfMemoryError|Not enough memory|no GPU memory for the KV cache|"
                  r"leave no GPU memory|CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)
_ARCH = re.compile(r"[Uu]nsupported (?:GPU |CUDA )?arch|no kernel image is available|"
                   r"is not defined for option 'gpu-name'|not supported on (?:this|sm_?\d+|compute capability)|"
                   r"requires (?:sm_?\d+|compute capability)|built for sm_", re.IGNORECASE)
_IMPORT = re.compile(r"\b(?:ImportError|ModuleNotFoundError)\b|undefined symbol|cannot open shared object|"
                     r"version `GLIBC|libcuda\.so|\.so: cannot", re.IGNORECASE)


def symptom_classes(outcome: Outcome, tracebacks: list[Traceback], text: str) -> list[str]:
    """The symptom classes of a failing outcome (see ``SymptomClass``), most specific first."""
    sigs = outcome.signature_ids()
    exc_text = "\n".join(tb.exception_line for tb in tracebacks)
    fatal_text = "\n".join(m.first_line for m in outcome.matches if m.kind in ("fatal", "error"))
    err_text = f"{exc_text}\n{fatal_text}"
    out: list[str] = []
    if outcome.stage == "ok":
        return ["no_repro"]
    if {"probability_tensor_nan", "nan_in_logits"} & sigs or _NAN.search(exc_text):
        out.append("nan_inf")
    if {"degenerate_output", "wrong_answer"} & sigs and "nan_inf" not in out:
        out.append("garbage_output")
    if {"illegal_memory_access", "rocm_gpu_fault"} & sigs or "illegal memory access" in err_text:
        out.append("illegal_memory_access")
    if "device_side_assert" in sigs:
        out.append("device_assert")
    if {"unsupported_architecture", "no_kernel_image", "ptxas_unknown_gpu_arch"} & sigs or _ARCH.search(err_text):
        out.append("unsupported_arch")
    if _IMPORT.search(err_text):
        out.append("import_error")
    if {"cuda_out_of_memory", "not_enough_memory_kv"} & sigs or _OOM.search(err_text):
        progress = {m.signature_id for m in outcome.matches if m.kind == "progress"}
        if "not_enough_memory_kv" in sigs or re.search(r"KV cache|mem-fraction-static", err_text):
            out.append("oom_kv_pool")
        elif "cuda_graph_capture_failed" in sigs:
            out.append("oom_capture")
        elif outcome.stage in ("load_failed", "launch_failed") and "load_weight_end" not in progress:
            out.append("oom_weights")
        else:
            out.append("oom_runtime")
    load_probes = [p for p in outcome.probes if p.probe_id.startswith("load:")]
    single = [p for p in outcome.probes if not p.probe_id.startswith("load:")]
    if single and all(p.ok for p in single) and any(not p.ok for p in load_probes):
        out.append("load_only")
    if outcome.stage == "timeout" or any(p.status == "timeout" for p in outcome.probes):
        out.append("hang")
    if outcome.stage == "request_failed":
        out.append("crash_at_decode")
    if outcome.stage in ("launch_failed", "load_failed") and not out:
        out.append("startup_error")
    if outcome.stage == "wrong_output" and not {"nan_inf", "garbage_output"} & set(out):
        out.append("garbage_output")
    return out


def parse_server_args(text: str) -> dict[str, str]:
    """Scalar settings of SGLang's ``server_args=ServerArgs(key=value, ...)`` line (0.5.9) or its dict
    form ``server_args={'key': value, ...}`` (0.5.23), or vLLM's ``non-default args: {'key': value}``
    (0.32.0; the engines' markers are in ``knowledge/engines.toml``), values as text (quotes removed;
    lists left out)."""
    marker = settings_marker_in(text)
    if marker is None:
        return {}
    i = text.find(marker)
    out: dict[str, str] = {}
    body = text[i + len(marker) :]
    depth, start, quote = 0, 0, ""
    for j, ch in enumerate(body):  # split at top-level commas only, outside quotes
        if quote:
            quote = "" if ch == quote and body[j - 1] != "\\" else quote
            continue
        if ch in "'\"" and depth >= 1:
            quote = ch
        elif ch in "([{":
            depth += 1
            if depth == 1:
                start = j + 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                _one(body[start:j], out)
                break
        elif depth == 1 and ch == ",":
            _one(body[start:j], out)
            start = j + 1
    return out


def _one(item: str, out: dict[str, str]) -> None:
    item = item.strip()
    m = re.match(r"['\"]?(?P<key>[a-z_][a-z0-9_]*)['\"]?\s*[=:]\s*(?P<value>.*)$", item, re.S)
    if not m:
        return
    value = m.group("value").strip()
    if value[:1] in "[{(":
        return
    out[m.group("key")] = value.strip("'\"")


def failure_evidence(outcome: Outcome) -> FailureEvidence:
    """The evidence of one outcome (failing or not) for the generators."""
    lines = list(outcome.log_excerpt)
    if not lines:  # older transcripts: only each signature's first line was kept
        seen: dict[int, str] = {}
        for m in outcome.matches:
            if m.line_numbers:
                seen.setdefault(m.line_numbers[0], m.first_line)
        lines = [LogLine(line=n, text=t) for n, t in sorted(seen.items())]
    tracebacks = parse_tracebacks(lines)
    text = "\n".join(ll.text for ll in lines)
    warnings = [
        ll for ll in lines
        if _WARNING.search(ll.text) and not _TB_START.search(ll.text) and not is_settings_dump(ll.text)
    ]
    failing = [_probe_concurrency(p.probe_id) for p in outcome.probes if not p.ok]
    conc = min([n for n in failing if n > 1] or [max([1, *(_probe_concurrency(p.probe_id) for p in outcome.probes)])])
    return FailureEvidence(
        experiment_id=outcome.experiment_id,
        stage=outcome.stage,
        signatures=sorted(outcome.signature_ids()),
        failure_signatures=outcome.failure_signatures(),
        facts=dict(outcome.facts),
        log=lines,
        tracebacks=tracebacks,
        warnings=warnings,
        symptoms=symptom_classes(outcome, tracebacks, text),
        probe_texts=[p.text or p.error or "" for p in outcome.probes if not p.ok],
        server_args=next((parse_server_args(ll.text) for ll in lines if settings_marker_in(ll.text)), {}),
        concurrency=conc,
    )


def _probe_concurrency(probe_id: str) -> int:
    m = re.search(r":x(\d+)$", probe_id)
    return int(m.group(1)) if m else 1
