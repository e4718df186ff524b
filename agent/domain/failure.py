"""What a failed launch shows, read from its outcome: the kept log lines, the Python tracebacks in them,
the warnings, the engine's printed settings, the largest failing burst and the symptom classes.

These are readings of an ``agent.domain.models.Outcome`` (its cached properties ``log``, ``tracebacks``,
``warnings``, ``server_args``, ``concurrency``, ``symptoms``), not a model of their own: the generators,
the ledger and the conclusion read a failing launch through its outcome. Symptom classes are the
classes a hypothesis can trigger on instead of one exact log line (``symptom`` conditions of
``knowledge/hypotheses.toml`` and ``knowledge/symptoms.toml``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Literal, Protocol

from tools.engines import is_settings_dump, settings_marker_in
from tools.logwatch import LogLine
from tools.probe_set import SET_PROBE_ID as GRADED_PROBE_ID
from tools.probes import ProbeResult
from tools.signatures import SignatureMatch
from tools.tracebacks import TRACEBACK_START, Traceback, parse_numbered_lines

__all__ = [
    "DEVICE_SYMPTOMS",
    "SYMPTOM_CLASSES",
    "Launched",
    "SymptomClass",
    "burst_concurrency",
    "kept_lines",
    "parse_server_args",
    "parse_tracebacks",
    "server_args_of",
    "symptom_classes",
    "timed_out_only",
    "warning_lines",
]

#: Classes of symptoms a hypothesis can trigger on instead of one exact log line.
SymptomClass = Literal[
    "nan_inf",  # NaN/Inf probabilities or logits
    "garbage_output",  # degenerate, empty or wrong text without a NaN line
    "accuracy_drop",  # every answer reads fine, but fewer are right than expected (a graded probe set)
    "crash_at_decode",  # ready, then the first generation killed the server
    "hang",  # the log stopped (no error), or a request never returned
    "unanswered",  # a ready server left requests without an answer, with no error line: alive, not crashed
    "oom_weights",  # out of memory while loading the weights
    "oom_kv_pool",  # no room for the KV cache under the static fraction
    "oom_capture",  # out of memory while capturing CUDA graphs
    "oom_runtime",  # out of memory while serving
    "unsupported_arch",  # kernels not built for this GPU generation
    "import_error",  # a library failed to import or load (ImportError, undefined symbol, ...)
    "illegal_memory_access",  # a kernel read or wrote outside its buffers
    "device_assert",  # a kernel assertion (device-side assert)
    "device_fault",  # another asynchronous kernel fault: illegal instruction, misaligned address, launch failure
    "startup_error",  # any other exception before the server was ready
    "load_only",  # single requests pass, concurrent ones fail
    "no_repro",  # the reported failure did not show
]
SYMPTOM_CLASSES: tuple[str, ...] = SymptomClass.__args__  # type: ignore[attr-defined]
#: The symptom classes of a failure on the device itself: a kernel's numbers, memory or code (NaN, an illegal
#: access, a kernel assert or fault, no kernel for this GPU, device memory), not the host's Python around it.
DEVICE_SYMPTOMS: frozenset[str] = frozenset({
    "nan_inf", "illegal_memory_access", "device_assert", "device_fault", "unsupported_arch",
    "oom_weights", "oom_kv_pool", "oom_capture", "oom_runtime",
})


class Launched(Protocol):
    """What the symptom classes read of an outcome (``agent.domain.models.Outcome`` has it)."""

    @property
    def stage(self) -> str:
        """The furthest stage reached."""
        ...

    @property
    def matches(self) -> list[SignatureMatch]:
        """The matched log signatures."""
        ...

    @property
    def probes(self) -> list[ProbeResult]:
        """The probe results, in order."""
        ...

    def signature_ids(self) -> set[str]:
        """Ids of every matched signature."""
        ...

_WARNING = re.compile(r"\bWARN(?:ING)?\b|\bwarn(?:ing)?s?\b|UserWarning|DeprecationWarning|FutureWarning")



def kept_lines(log_excerpt: list[LogLine], matches: Iterable[SignatureMatch]) -> list[LogLine]:
    """The log lines kept of a launch: its excerpt, or for a transcript older than the excerpt, each
    signature's first line (what those transcripts kept)."""
    if log_excerpt:
        return list(log_excerpt)
    seen: dict[int, str] = {}
    for m in matches:
        if m.line_numbers:
            seen.setdefault(m.line_numbers[0], m.first_line)
    return [LogLine(line=n, text=t) for n, t in sorted(seen.items())]


def warning_lines(lines: list[LogLine]) -> list[LogLine]:
    """The warnings among kept lines (not a traceback's header, not the engine's settings line)."""
    return [ll for ll in lines if _warns(ll.text) and not is_settings_dump(ll.text)]


@functools.lru_cache(maxsize=8192)
def _warns(text: str) -> bool:
    """Whether a log line speaks of a warning and does not start a traceback (cached by the text: every
    kept line of every launch is read again each step)."""
    return bool(_WARNING.search(text)) and not TRACEBACK_START.search(text)


def burst_concurrency(probes: list[ProbeResult]) -> int:
    """The smallest burst of concurrent requests that failed, else the largest one sent (1 without a
    burst). A burst's probe id ends in ``:xN`` (``agent.planning.observations``)."""
    failing = [_probe_concurrency(p.probe_id) for p in probes if not p.ok]
    return min([n for n in failing if n > 1] or [max([1, *(_probe_concurrency(p.probe_id) for p in probes)])])


def server_args_of(lines: list[LogLine]) -> dict[str, str]:
    """The scalar settings of the first engine settings line among ``lines`` (``parse_server_args``)."""
    return next((parse_server_args(ll.text) for ll in lines if settings_marker_in(ll.text)), {})


def parse_tracebacks(lines: list[LogLine]) -> list[Traceback]:
    """Python tracebacks in the kept lines, in log order (a chained exception's tracebacks each count,
    every rank's too), frames innermost first. Parsing and the model: ``tools.tracebacks``."""
    return parse_numbered_lines(((ll.line, ll.text) for ll in lines), unique=False)


#: NaN or Inf as a whole token (``_`` and ``-`` separate tokens, as in ``probability_tensor_nan``): not the
#: letters inside "maintenance", "finance" or "info".
_NAN = re.compile(r"(?<![A-Za-z0-9])(?:nan|inf)s?(?![A-Za-z0-9])", re.IGNORECASE)
_OOM = re.compile(r"out of memory|OutOfMemoryError|Not enough memory|no GPU memory for the KV cache|"
                  r"leave no GPU memory|CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)
_ARCH = re.compile(r"[Uu]nsupported (?:GPU |CUDA )?arch|no kernel image is available|"
                   r"is not defined for option 'gpu-name'|not supported on (?:this|sm_?\d+|compute capability)|"
                   r"requires (?:sm_?\d+|compute capability)|built for sm_", re.IGNORECASE)
#: The CUDA runtime's texts of a kernel fault other than a memory access or an assert, reported
#: asynchronously as those are (cudaErrorIllegalInstruction, cudaErrorMisalignedAddress,
#: cudaErrorLaunchFailure: CUDA Runtime API, cudaError enum); knowledge/signatures.toml cuda_kernel_fault.
_KERNEL_FAULT = re.compile(r"an illegal instruction was encountered|unspecified launch failure|"
                           r"\bmisaligned address\b", re.IGNORECASE)
_IMPORT = re.compile(r"\b(?:ImportError|ModuleNotFoundError)\b|undefined symbol|cannot open shared object|"
                     r"version `GLIBC|libcuda\.so|\.so: cannot", re.IGNORECASE)


def symptom_classes(outcome: Launched, tracebacks: list[Traceback], text: str) -> list[str]:
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
        out.append("accuracy_drop" if _graded_only(outcome.probes) else "garbage_output")
    if {"illegal_memory_access", "rocm_gpu_fault"} & sigs or "illegal memory access" in err_text:
        out.append("illegal_memory_access")
    if "device_side_assert" in sigs:
        out.append("device_assert")
    if "cuda_kernel_fault" in sigs or _KERNEL_FAULT.search(err_text):
        out.append("device_fault")
    if {"unsupported_architecture", "no_kernel_image", "invalid_device_function", "ptxas_unknown_gpu_arch"} & sigs or _ARCH.search(err_text):
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
    if outcome.stage == "request_failed" and not timed_out_only(outcome):
        out.append("crash_at_decode")
    elif outcome.stage == "request_failed" and not {"nan_inf", "garbage_output", "accuracy_drop"} & set(out):
        out.append("unanswered")
    if outcome.stage in ("launch_failed", "load_failed") and not out:
        out.append("startup_error")
    if outcome.stage == "wrong_output" and not {"nan_inf", "garbage_output", "accuracy_drop"} & set(out):
        out.append("accuracy_drop" if _graded_only(outcome.probes) else "garbage_output")
    return out


def timed_out_only(outcome: Launched) -> bool:
    """Whether a ready server's only failure is that a request got no answer in time: some probe timed
    out, every other failing probe did too, and the log shows no fatal or error line (the server did
    not crash; it was slow or stuck). Slowness on a host shared with other work is weak evidence: the
    same configuration may answer on the next launch."""
    if outcome.stage != "request_failed":
        return False
    failing = [p for p in outcome.probes if not p.ok]
    if not failing or any(p.status != "timeout" for p in failing):
        return False
    return not any(m.kind in ("fatal", "error") for m in outcome.matches)


def _graded_only(probes: list[ProbeResult]) -> bool:
    """Whether the only wrong output is the graded probe set's count (``agent.domain.accuracy``): every
    single answer read fine, fewer were right than the case expects. That is an accuracy drop, not the
    garbage or NaN text a broken kernel gives."""
    wrong = [p for p in probes if p.status in ("empty", "degenerate", "wrong_answer")]
    return bool(wrong) and all(p.probe_id == GRADED_PROBE_ID and p.status == "wrong_answer" for p in wrong)


def parse_server_args(text: str) -> dict[str, str]:
    """Scalar settings of SGLang's ``server_args=ServerArgs(key=value, ...)`` line (0.5.9) or its dict
    form ``server_args={'key': value, ...}`` (0.5.23), or vLLM's ``non-default args: {'key': value}``
    (0.32.0; the engines' markers are in ``knowledge/engines.toml``), values as text (quotes removed;
    lists left out)."""
    marker = settings_marker_in(text)
    if marker is None:
        return {}
    return dict(_settings_after(text, marker))


@functools.lru_cache(maxsize=64)
def _settings_after(text: str, marker: str) -> tuple[tuple[str, str], ...]:
    """``parse_server_args``'s settings of ``text`` after ``marker``, in order. Cached by the text: the
    settings line (about 10,000 characters) of every failing launch is read again each step, as the
    planner rebuilds its ledger from the history."""
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
    return tuple(out.items())


_SETTING = re.compile(r"['\"]?(?P<key>[a-z_][a-z0-9_]*)['\"]?\s*[=:]\s*(?P<value>.*)$", re.S)


def _one(item: str, out: dict[str, str]) -> None:
    item = item.strip()
    m = _SETTING.match(item)
    if not m:
        return
    value = m.group("value").strip()
    if value[:1] in "[{(":
        return
    out[m.group("key")] = value.strip("'\"")


def _probe_concurrency(probe_id: str) -> int:
    m = re.search(r":x(\d+)$", probe_id)
    return int(m.group(1)) if m else 1
