"""What the LLM planner tells the model: the run's history as Markdown sections, within a token budget.

Sections, in priority order (each capped at a share of the budget, cut at a line boundary with a note
saying how much was left out): the case and budget, the host fingerprint and environment, the current
baseline, the hypothesis ledger, the experiments and outcomes so far, proposals a person rejected, the
log evidence (signature matches with their log line numbers and a short excerpt of the first matching
line), the rule planner's best untested changes, the relevant FINDINGS.md notes, and the flag catalog
(flags named by the baseline, the hypotheses, the findings and the effective-config facts first, with
their choices and defaults; the rest as room allows).

Tokens are estimated at 4 characters each (``estimate_tokens``), the usual rule of thumb for English
and code with GPT-style BPE tokenizers; the budget is approximate by design. Everything returned is
already redacted (``agent.record.redact``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from pydantic import BaseModel, Field

from agent.domain.models import Experiment, FlagValue, Outcome, command_text
from agent.planning.llm_answer import DECISION_OUTLINE
from agent.planning.view import HistoryState, PlannerView, Proposal
from tools.fingerprint import engine_label
from tools.flags import FlagCatalog, FlagError, FlagSpec
from tools.signatures import SignatureMatch

__all__ = ["CHARS_PER_TOKEN", "ContextPack", "SYSTEM_PROMPT", "build_context", "estimate_tokens"]

CHARS_PER_TOKEN = 4

#: Host variables never sent: hypoloop's own (the lab's world, seed and time scale among them).
_PRIVATE_ENV_PREFIX = "HYPOLOOP_"
#: Log lines sent around each fatal line (before, after) in the "Tracebacks and log tail" section.
_AROUND_FATAL = (3, 12)
_TAIL_LINES = 15
#: Signature kinds that carry evidence (progress and ready lines only say the server got further).
_EVIDENCE_KINDS = ("fatal", "error", "warning", "fact")
_EXCERPT_CHARS = 200

SYSTEM_PROMPT = """\
You are the experiment planner of hypoloop, a debugging agent for LLM inference servers (SGLang).
hypoloop runs the scientific method against a GPU host: each experiment launches the server with the
current baseline configuration plus exactly ONE change (one launch flag or one environment variable),
watches the log, sends test requests and classifies the outcome. GPU-host time is scarce: choose the
change most likely to fix the failure per host-second, and reason from the evidence given (log
signatures with their line numbers, effective-config facts, notes of known-good deployments).

Rules. A proposal that breaks one is refused and never executed:
- exactly one change per experiment. "kind" is "flag" (a launch_server option from the flag catalog,
  written as its --long-name) or "env" (an environment variable of the server process);
- a flag value must be legal for the flag (one of its choices, the right type); true turns a switch
  on; null removes the flag or variable from the baseline;
- values are plain tokens: no spaces, quotes or shell characters; no commands;
- never an experiment already run, nor one a person rejected; do not re-test a refuted hypothesis
  with the same change;
- when nothing left is worth a launch, answer with action "conclude" and say why.

You may add hypotheses the ledger lacks ("new_hypotheses", each with the one change that tests it)
and comment on existing ones ("notes"); the ledger's status and probabilities are updated by
hypoloop from the outcomes, not by you.

Answer with ONE JSON object and nothing else, shaped like this (every field present; <...> says what
goes there):
""" + DECISION_OUTLINE + "\n"

#: Share of the budget each section may take at most (the flag catalog takes what is left).
_CAPS: dict[str, float] = {
    "Case": 0.08,
    "Host": 0.06,
    "Current baseline": 0.08,
    "Hypothesis ledger": 0.25,
    "Experiments so far": 0.2,
    "Rejected by a person": 0.06,
    "Log evidence": 0.22,
    "Tracebacks and log tail": 0.2,
    "Untested changes the rule planner ranks highest": 0.08,
    "Notes of earlier deployments (FINDINGS.md)": 0.22,
    "Flag catalog": 1.0,
}


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` at ``CHARS_PER_TOKEN`` characters per token (rounded up)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class ContextPack(BaseModel):
    """The system and user messages of a request, and how the budget was spent.

    ``sections``: title -> ``{"chars", "cut"}`` (``cut``: lines left out to fit the budget).
    """

    system: str
    user: str
    est_tokens: int
    budget_tokens: int
    sections: dict[str, dict[str, int]] = Field(default_factory=dict)


def _show(v: FlagValue) -> str:
    return "(unset)" if v is None else ("(on)" if v is True else str(v))


def _flags_text(flags: dict[str, FlagValue]) -> str:
    return command_text(flags) or "(none)"


def _case_section(view: PlannerView, state: HistoryState, cost: float) -> str:
    c, b = view.case, view.case.budget
    # The case's name is left out: a lab case is named after its world, which can encode the answer.
    lines = [
        *([f"description: {c.description}"] if c.description else []),
        f"model: {c.model.path}"
        + (f" (features: {', '.join(c.model.features)})" if c.model.features else ""),
        f"launcher: {' '.join(c.launcher.argv)}",
        f"probes: {', '.join(f'{p.id} ({p.kind})' for p in c.probes)}",
        f"budget: {view.launches} of {b.experiments} launches used (a fix also needs one confirmation "
        f"launch); {view.host_seconds:.0f} of {b.host_seconds:.0f} host-seconds used; next launch ~{cost:.0f} "
        "host-seconds",
    ]
    return "\n".join(lines)


def _host_section(view: PlannerView) -> str:
    fp = view.fingerprint
    lines = []
    if fp is not None:
        lines.append(
            f"GPU: {fp.gpu_count or '?'} x {fp.gpu_name or '?'}, compute capability {fp.compute_capability or '?'}, "
            f"{fp.memory_total_mib or '?'} MiB each, driver {fp.driver_version or '?'}; {engine_label(fp.model_dump())}"
        )
    lines.append(f"target: {view.case.host.target}")
    env = {k: v for k, v in view.case.host.env.items() if not k.startswith(_PRIVATE_ENV_PREFIX)}
    lines.append("host environment: " + (" ".join(f"{k}={v}" for k, v in env.items()) or "(none)"))
    return "\n".join(lines)


def _baseline_section(state: HistoryState) -> str:
    lines = [f"flags: {_flags_text(state.baseline.flags)}"]
    lines.append("env: " + (" ".join(f"{k}={v}" for k, v in state.baseline.env.items()) or "(none)"))
    for a in state.adoptions:
        ch = a.get("change") or {}
        lines.append(
            f"adopted {ch.get('name')}={_show(ch.get('after'))} from {a.get('experiment_id')}: "
            f"the failure moved from {a.get('from_stage')} to {a.get('to_stage')}"
        )
    return "\n".join(lines)


def _ledger_section(state: HistoryState, notes: dict[str, str]) -> str:
    out: list[str] = []
    order = {"confirmed": 0, "supported": 1, "open": 2, "refuted": 3}
    for h in sorted(state.hypotheses, key=lambda h: (order.get(h.status, 4), -h.posterior)):
        by = f", generator {h.generator}" if h.generator else ""
        pkg = f", package {h.package}" if h.package else ""
        out.append(
            f"- [{h.status} p={h.posterior:.2f}] {h.id} ({h.component}{pkg}, source {h.source}{by}): {h.statement}"
        )
        ivs = [
            f"{iv.kind} {iv.names[0]}={'|'.join(_show(v) for v in iv.values)}"
            + (" (decisive)" if iv.decisive else "")
            for iv in h.interventions
        ]
        if ivs:
            out.append("  tested by: " + "; ".join(ivs))
        for e in h.evidence[-3:]:
            lines = f" (log lines {', '.join(map(str, e.lines[:5]))})" if e.lines else ""
            out.append(f"  {e.effect}: {e.detail[:220]}{lines}")
        if h.id in notes:
            out.append(f"  your earlier note: {notes[h.id][:200]}")
    return "\n".join(out) or "(empty: no failure observed yet)"


def _experiment_line(i: int, exp: Experiment, out: Outcome | None) -> str:
    what = exp.change.describe() if exp.change else "no change"
    head = f"{i}. {exp.id} {exp.purpose}: {what} (proposed by {exp.proposed_by})"
    if out is None:
        return head + " -> no outcome"
    facts = ", ".join(f"{k}={v}" for k, v in list(out.facts.items())[:12])
    tail = f" -> {out.summary or out.stage}"
    if facts:
        tail += f"\n   effective config: {facts}"
    return head + tail


def _experiments_section(view: PlannerView) -> str:
    lines = [
        _experiment_line(i, e, view.outcome_of(e.id))
        for i, e in enumerate((e for e in view.experiments if e.status == "done"), start=1)
    ]
    return "\n".join(lines) or "(none yet)"


def _rejections_section(view: PlannerView) -> str:
    return "\n".join(
        f"- {r.change.describe() if r.change else r.experiment_id}: {r.reason}" for r in view.rejections
    )


def _evidence_section(view: PlannerView, state: HistoryState) -> str:
    done = [e for e in view.experiments if e.status == "done" and view.outcome_of(e.id) is not None]
    # The reference (the failure being explained) first, then the newest outcomes.
    ref_id = state.reference.experiment_id if state.reference else None
    done.sort(key=lambda e: (e.id != ref_id, -view.experiments.index(e)))
    out: list[str] = []
    for e in done:
        o = view.outcome_of(e.id)
        assert o is not None
        out.append(f"### {e.id} ({e.purpose}, {o.stage})")
        matches = sorted(
            (m for m in o.matches if m.kind in _EVIDENCE_KINDS),
            key=lambda m: _EVIDENCE_KINDS.index(m.kind),
        )
        # Signatures that read facts from one line (SGLang's server_args=ServerArgs(...)) share it.
        groups: dict[tuple[str, str], list[SignatureMatch]] = {}
        for m in matches:
            groups.setdefault((m.kind, m.first_line), []).append(m)
        for (kind, first), group in groups.items():
            m = group[0]
            lines = ",".join(map(str, m.line_numbers[:6])) + ("..." if len(m.line_numbers) > 6 else "")
            text = " ".join(first.split())
            if len(text) > _EXCERPT_CHARS:
                text = text[:_EXCERPT_CHARS] + "..."
            facts: dict[str, str] = {}
            for g in group:
                facts.update(g.facts)
            ids = ", ".join(g.signature_id for g in group)
            where = f"L{lines}: " if lines else ""
            out.append(
                f"- {ids} [{kind}, {m.stage}] {where}{text}"
                + (f" facts: {json.dumps(facts)}" if facts else "")
            )
            if kind != "fact":
                out.append(f"  meaning: {m.meaning[:200]}")
        for p in o.probes:
            detail = p.error or (p.text or "")
            out.append(f"- probe {p.probe_id}: {p.status} {' '.join(detail.split())[:160]}")
    return "\n".join(out) or "(no outcome yet)"


def _log_section(view: PlannerView, state: HistoryState) -> str:
    """The tracebacks and the lines around each fatal line, and the log's tail, of the failure being
    explained (the reference) and of the newest failing outcome, as the log printed them."""
    shown: list[Outcome] = []
    if state.reference is not None and state.reference.stage != "ok":
        shown.append(state.reference)
    newest = next((o for o in reversed(view.outcomes) if o.stage not in ("ok", "infra_error")), None)
    if newest is not None and all(o.experiment_id != newest.experiment_id for o in shown):
        shown.append(newest)
    out: list[str] = []
    for o in shown:
        lines = {ll.line: ll.text for ll in o.log_excerpt}
        if not lines:
            continue
        fatal = sorted({n for m in o.matches if m.kind in ("fatal", "error") for n in m.line_numbers[:3]})
        keep: set[int] = set()
        for n in fatal:
            keep.update(range(n - _AROUND_FATAL[0], n + _AROUND_FATAL[1] + 1))
        keep.update(sorted(lines)[-_TAIL_LINES:])
        out.append(f"### {o.experiment_id} ({o.stage})")
        prev = None
        for n in sorted(k for k in keep if k in lines):
            if prev is not None and n != prev + 1:
                out.append("  ...")
            text = lines[n] if "server_args=" not in lines[n] else lines[n][:300] + " ..."
            out.append(f"L{n}: {text.rstrip()[:400]}")
            prev = n
    return "\n".join(out)


def _suggestions_section(rule: Proposal) -> str:
    scored = [c for c in rule.considered if isinstance(c.get("score"), int | float)]
    scored.sort(key=lambda c: -float(c["score"]))
    lines = [f"- {c.get('change', '?')}: P(fix)={c.get('p_fix', '?')}" for c in scored[:6]]
    skipped = [c for c in rule.considered if "skipped" in c][:6]
    lines += [f"- skipped for {c.get('hypothesis', '?')}: {c['skipped']}" for c in skipped]
    if rule.experiment is None and rule.conclude_reason:
        lines.append(f"(the rule planner would conclude: {rule.conclude_reason})")
    return "\n".join(lines)


def _findings_section(view: PlannerView) -> str:
    out: list[str] = []
    ranked = sorted(view.findings, key=lambda f: -f.relevance)
    for rf in ranked:
        f = rf.finding
        if rf.relevance < 0.3 and len(out) >= 3:
            continue
        out.append(f"### {f.title} [{f.outcome}, relevance {rf.relevance:.2f}]")
        meta = []
        if f.model:
            meta.append(f"model {f.model}")
        if f.hardware:
            meta.append(f"hardware {f.hardware}")
        if f.flags:
            meta.append("flags " + command_text(f.flags))
        if f.env:
            meta.append("env " + " ".join(f"{k}={v}" for k, v in f.env.items()))
        if f.facts:
            meta.append("facts " + ", ".join(f"{k}={v}" for k, v in f.facts.items()))
        if meta:
            out.append("; ".join(meta))
        text = f.text.strip()
        out.append(text[:700] + (" [...]" if len(text) > 700 else ""))
    return "\n".join(out)


def _spec_line(spec: FlagSpec, *, verbose: bool) -> str:
    if not spec.takes_value:
        kind = "switch"
    elif spec.choices:
        kind = "{" + ",".join(spec.choices) + "}"
    else:
        kind = spec.value_type
    line = f"{spec.name} {kind}"
    if spec.default is not None:
        line += f" default={spec.default}"
    if spec.deprecated:
        line += " (deprecated)"
    if verbose and spec.help:
        line += " — " + " ".join(spec.help.split())[:140]
    return line


def relevant_flags(view: PlannerView, state: HistoryState, flags: FlagCatalog) -> list[str]:
    """Canonical flag names in the order the model should see them: baseline flags, the hypotheses'
    interventions, the findings' flags, flags named after effective-config facts, then flags that share
    a word with a hypothesis's component (``attention``, ``kv``, ``moe`` ...)."""
    seen: dict[str, None] = {}

    def add(name: str) -> None:
        try:
            seen.setdefault(flags.resolve(name).name, None)
        except FlagError:
            pass

    for name in state.baseline.flags:
        add(name)
    for h in state.hypotheses:
        for iv in h.interventions:
            if iv.kind == "flag":
                for n in iv.names:
                    add(n)
    for rf in sorted(view.findings, key=lambda f: -f.relevance):
        for n in rf.finding.flags:
            add(n)
    facts: set[str] = set()
    for o in view.outcomes:
        facts |= set(o.facts)
    for fact in sorted(facts):
        name = "--" + fact.replace("_", "-")
        if name in {o for s in flags.flags.values() for o in s.option_strings}:
            add(name)
    words = {
        w
        for h in state.hypotheses
        for w in h.component.replace("_", ".").replace("-", ".").split(".")
        if len(w) >= 3 and w not in ("the", "backend", "config")
    }
    words |= (
        {"kv", "fp8"} if any("kv" in h.component or "fp8" in h.component for h in state.hypotheses) else set()
    )
    for spec in flags.flags.values():
        if any(w in spec.name for w in words):
            seen.setdefault(spec.name, None)
    return list(seen)


def _flags_section(view: PlannerView, state: HistoryState, flags: FlagCatalog | None) -> str:
    if flags is None:
        return "(no flag catalog: the host's launch_server --help was not read)"
    first = relevant_flags(view, state, flags)
    lines = [f"source: {flags.source or '?'}, version {flags.version or '?'}; {len(flags.flags)} flags"]
    lines += [_spec_line(flags.flags[n], verbose=True) for n in first]
    lines.append("(other flags)")
    lines += [
        _spec_line(s, verbose=False)
        for n, s in sorted(flags.flags.items())
        if n not in first and not s.deprecated
    ]
    return "\n".join(lines)


def _fit(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut at a line boundary to at most ``limit`` characters; returns it and lines cut."""
    if len(text) <= limit:
        return text, 0
    lines = text.split("\n")
    kept: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + 1 > limit - 60:
            break
        kept.append(line)
        size += len(line) + 1
    cut = len(lines) - len(kept)
    if not kept and limit > 80:  # a single long line: keep its start
        kept = [lines[0][: limit - 80] + "..."]
        cut = len(lines) - 1
    return "\n".join([*kept, f"[... {cut} more lines left out to fit the context budget]"]), cut


def build_context(
    view: PlannerView,
    state: HistoryState,
    *,
    flags: FlagCatalog | None,
    rule: Proposal,
    notes: dict[str, str],
    budget_tokens: int,
    cost_s: float,
    redact: Callable[[str], str],
) -> ContextPack:
    """The system and user messages for one planning step, within ``budget_tokens`` (estimated), redacted."""
    sections: list[tuple[str, str]] = [
        ("Case", _case_section(view, state, cost_s)),
        ("Host", _host_section(view)),
        ("Current baseline", _baseline_section(state)),
        ("Hypothesis ledger", _ledger_section(state, notes)),
        ("Experiments so far", _experiments_section(view)),
        ("Rejected by a person", _rejections_section(view)),
        ("Log evidence", _evidence_section(view, state)),
        ("Tracebacks and log tail", _log_section(view, state)),
        ("Untested changes the rule planner ranks highest", _suggestions_section(rule)),
        ("Notes of earlier deployments (FINDINGS.md)", _findings_section(view)),
        ("Flag catalog", _flags_section(view, state, flags)),
    ]
    system = redact(SYSTEM_PROMPT)
    budget_chars = budget_tokens * CHARS_PER_TOKEN
    # Room for the retry messages of this step (a refused answer and the reason).
    remaining = budget_chars - len(system) - 1500
    parts: list[str] = []
    info: dict[str, dict[str, int]] = {}
    for title, text in sections:
        if not text.strip():
            continue
        header = f"## {title}\n"
        limit = min(int(_CAPS.get(title, 0.1) * budget_chars), remaining - len(header))
        if limit < 120:
            info[title] = {"chars": 0, "cut": text.count("\n") + 1}
            continue
        fitted, cut = _fit(redact(text), limit)
        parts.append(header + fitted)
        remaining -= len(header) + len(fitted) + 2
        info[title] = {"chars": len(fitted), "cut": cut}
    parts.append(
        "Decide the next step: one experiment (exactly one change against the current baseline) or a "
        "conclusion. Answer with the JSON object only."
    )
    user = "\n\n".join(parts)
    return ContextPack(
        system=system,
        user=user,
        est_tokens=estimate_tokens(system) + estimate_tokens(user),
        budget_tokens=budget_tokens,
        sections=info,
    )
