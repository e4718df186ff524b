"""The LLM planner: a model behind any OpenAI-compatible endpoint proposes, the guard rails decide.

It implements the same ``Planner`` protocol as ``RulePlanner`` (``history`` -> ledger, ``propose`` ->
``Proposal``) and is chosen by configuration (``PlannerSpec``, kept in the run's checkpointed state so a
resumed run uses the same planner):

- **Ledger**: the rule planner's evidence bookkeeping (``RulePlanner.history``), over the hypothesis
  catalog plus the hypotheses the model added (kept as catalog entries in ``LLMMemory``). So statuses
  and probabilities always follow from the outcomes, a refuted hypothesis stays refuted, and a model
  hypothesis is refuted or supported by its test like any other.
- **Next step**: procedural steps (the baseline run, the confirmation run, a spent launch budget) are
  taken as the rule planner takes them, without a model call. Otherwise the model gets the context
  (``agent.planning.llm_context``: evidence, ledger, history, findings, flag catalog; redacted) and answers
  with one JSON object: new hypotheses, notes, and one experiment or a conclusion.
- **Guard rails**: the proposed change is normalised through the host's flag catalog
  (``FlagCatalog.validate``: known flag, legal value, no shell characters) and must pass
  ``agent.planning.guard.check_experiment`` (exactly one change, not run before, not rejected, within budget),
  exactly like a person's edit. A refused proposal is never executed: the reason goes back to the
  model, up to ``retries`` more times; then this step falls back to the rule planner.
- **Record**: every request (redacted prompt), answer (text, token counts, latency), error, refusal,
  accepted decision and fallback is a transcript event (``llm.request``, ``llm.response``,
  ``llm.error``, ``llm.invalid``, ``llm.decision``, ``llm.fallback``, ``llm.skipped``), so a run can
  be re-decided offline from the recorded answers (``LLMPlanner.from_recorded``).
- **Cost**: a per-run token budget; the tokens spent are in ``LLMMemory.usage`` and in the conclusion.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agent.domain.models import Change, Evidence, Experiment, FlagValue, Hypothesis, Intervention, Prediction
from agent.planning.catalog import CatalogEntry
from agent.planning.guard import GuardError, check_experiment
from agent.planning.llm_answer import (
    DECISION_SCHEMA,
    DecisionError,
    LLMChange,
    LLMDecision,
    LLMExperiment,
    extract_json,
    parse_decision,
)
from agent.planning.llm_client import (
    ChatClient,
    ChatError,
    ChatRequest,
    ChatResponse,
    OpenAIChatClient,
    RecordedChatClient,
)
from agent.planning.llm_context import ContextPack, build_context, estimate_tokens
from agent.planning.planner import (
    HistoryState,
    Planner,
    PlannerView,
    Proposal,
    RulePlanner,
    default_launch_cost_s,
)
from agent.record.redact import Redactor, run_redactor
from agent.record.transcript import Transcript
from agent.review.wording import count
from tools.flags import FlagCatalog, FlagError
from tools.host import HostError
from tools.ssh import parse_target

__all__ = [
    "DECISION_SCHEMA",
    "DecisionError",
    "LLMDecision",
    "LLMMemory",
    "LLMPlanner",
    "LLMPlannerConfig",
    "LLMUsage",
    "PlannerSpec",
    "extract_json",
    "make_planner",
    "parse_decision",
    "planner_spec_from_options",
    "usage_summary",
]

#: Hypotheses the model may keep in the ledger at once, and add per answer.
_MAX_MODEL_HYPOTHESES = 12
_MAX_NEW_PER_ANSWER = 3
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Formats tried in turn when an endpoint refuses the one asked for (400 naming ``response_format``).
_FORMAT_FALLBACK = {"json_schema": "json_object", "json_object": "text"}


# ---------------------------------------------------------------------------------------------- config


class LLMPlannerConfig(BaseModel):
    """Options of the LLM planner (JSON-plain; kept in the checkpoint, never the key itself).

    ``model``: the endpoint's model name. ``base_url``: an OpenAI-compatible ``.../v1`` URL (``None``:
    api.openai.com). ``api_key_env``: the environment variable holding the key. ``context_tokens``:
    budget of one request's prompt, estimated at 4 characters per token. ``token_budget``: tokens
    (prompt + completion) the whole run may spend. ``max_output_tokens``: completion limit per request.
    ``retries``: how often a refused or failed answer is asked again before the step falls back to the
    rule planner. ``timeout_s``: per request. ``temperature``: ``None`` sends none (OpenAI's reasoning
    models accept only their default). ``response_format``: ``json_schema`` (structured outputs),
    ``json_object`` or ``text``; lowered automatically when the endpoint refuses it. ``redact_hosts``:
    also mask host names and IP addresses in what is sent.
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    context_tokens: int = Field(default=12000, ge=1000)
    token_budget: int = Field(default=300000, ge=1000)
    max_output_tokens: int = Field(default=4096, ge=256)
    retries: int = Field(default=2, ge=0, le=5)
    timeout_s: float = Field(default=180.0, gt=0)
    temperature: float | None = 0.0
    response_format: Literal["json_schema", "json_object", "text"] = "json_schema"
    redact_hosts: bool = False

    def api_key(self) -> str | None:
        """The key from the environment (``None`` when the variable is unset or empty)."""
        return os.environ.get(self.api_key_env) or None

    def endpoint(self) -> str:
        """The base URL as shown to people."""
        return self.base_url or "https://api.openai.com/v1"


class LLMUsage(BaseModel):
    """What the LLM planner spent and how its answers fared, over the whole run.

    Tokens as the endpoint reported them; ``estimated_tokens`` counts those estimated (4 chars/token)
    because the endpoint reported no usage. ``latency_s``: summed wall time of the requests.
    """

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_tokens: int = 0
    latency_s: float = 0.0
    accepted: int = 0
    invalid: int = 0
    errors: int = 0
    fallbacks: int = 0
    budget: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class LLMMemory(BaseModel):
    """The LLM planner's own state across steps (checkpointed with the run): the hypotheses the model
    added (as catalog entries), its latest note per hypothesis, the tokens spent, and what the endpoint
    was found to refuse (a lowered response format, a parameter left out)."""

    hypotheses: list[CatalogEntry] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict)
    usage: LLMUsage = Field(default_factory=LLMUsage)
    response_format: str | None = None
    drop_temperature: bool = False
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None


class PlannerSpec(BaseModel):
    """Which planner a run uses, with its options and memory; ``state["planner"]`` holds its dump."""

    kind: Literal["rules", "llm"] = "rules"
    llm: LLMPlannerConfig | None = None
    memory: LLMMemory = Field(default_factory=LLMMemory)


# ---------------------------------------------------------------------------------------------- planner


class _Refused(Exception):
    """A proposal the guard rails refuse; the message is fed back to the model."""


class LLMPlanner:
    """Planner backed by a chat model (see the module docstring).

    ``catalog``: hypothesis catalog entries; ``flags``: the host's flag catalog; ``memory``: state from
    earlier steps (``PlannerSpec.memory``); ``transcript``: where exchanges are written (``None``: not
    written); ``client``: a ChatClient (default: ``OpenAIChatClient`` for ``config``).
    """

    name = "llm"

    def __init__(
        self,
        catalog: list[CatalogEntry],
        flags: FlagCatalog | None,
        config: LLMPlannerConfig,
        *,
        memory: LLMMemory | None = None,
        transcript: Transcript | None = None,
        client: ChatClient | None = None,
    ) -> None:
        self.config = config
        self.flags = flags
        self.memory = memory.model_copy(deep=True) if memory is not None else LLMMemory()
        self.memory.usage.budget = config.token_budget
        self.transcript = transcript
        self._catalog = list(catalog)
        self._client = client
        self.rules = RulePlanner([*self._catalog, *self.memory.hypotheses], flags)

    # ----- construction ------------------------------------------------------------------------------

    @classmethod
    def from_recorded(
        cls,
        events: Iterable[Any],
        *,
        catalog: list[CatalogEntry],
        flags: FlagCatalog | None,
        config: LLMPlannerConfig | None = None,
        transcript: Transcript | None = None,
    ) -> LLMPlanner:
        """A planner that re-decides a recorded run offline: the model's answers come from the
        transcript's ``llm.response``/``llm.error`` events, in order (no network). ``config`` defaults
        to the one recorded in the first ``llm.request``. Once the recorded answers are used up, each
        further step falls back to the rule planner (recorded as ``llm.fallback``)."""
        evs = [e if isinstance(e, Mapping) else e.model_dump() for e in events]
        if config is None:
            first = next((e["data"] for e in evs if e.get("type") == "llm.request"), None)
            if first is None or "config" not in first:
                raise ValueError("the transcript holds no llm.request event with the planner's config")
            config = LLMPlannerConfig.model_validate(first["config"])
        return cls(catalog, flags, config, transcript=transcript, client=RecordedChatClient.from_events(evs))

    def spec(self) -> dict[str, Any]:
        """The JSON-plain ``PlannerSpec`` to checkpoint after a step (options and memory)."""
        return PlannerSpec(kind="llm", llm=self.config, memory=self.memory).model_dump(mode="json")

    def checkpoint(self) -> dict[str, Any]:
        """The planner's options and memory (its hypotheses, tokens spent), kept with each step."""
        return self.spec()

    def prediction(self, h: Hypothesis, change: Change | None, facts: dict[str, str] | None = None) -> str:
        """What ``h`` predicts for a change (the rule planner's bookkeeping, model hypotheses included)."""
        return self.rules.prediction(h, change, facts)

    # ----- history -> ledger ------------------------------------------------------------------------

    def history(self, view: PlannerView) -> HistoryState:
        """The rule planner's ledger over the catalog plus the model's hypotheses (``source="model"``)."""
        state = self.rules.history(view)
        by_id = {e.id: e for e in self.memory.hypotheses}
        for h in state.hypotheses:
            entry = by_id.get(h.id)
            if entry is None:
                continue
            h.source = "model"
            h.evidence.insert(
                0, Evidence(kind="fact", detail=f"proposed by the model: {entry.rationale[:300]}")
            )
        return state

    # ----- ledger -> next experiment ----------------------------------------------------------------

    def propose(self, view: PlannerView, state: HistoryState) -> Proposal:
        """The next experiment or conclusion: procedural steps as the rule planner takes them, open
        choices from the model (validated, retried with the refusal reason, else the rule fallback)."""
        rule = self.rules.propose(view, state)
        if self.transcript is not None:  # the exchanges belong to the step being designed
            self.transcript.step = view.launches + 1
        why_not = self._procedural(view, state)
        if why_not:
            self._emit("llm.skipped", {"reason": why_not})
            return rule
        cost = self._cost(state)
        ctx = build_context(
            view,
            state,
            flags=self.flags,
            rule=rule,
            notes=self.memory.notes,
            budget_tokens=self.config.context_tokens,
            cost_s=cost,
            redact=self._redactor(view),
        )
        proposal, reasons, attempts = self._converse(view, state, ctx, cost)
        return proposal if proposal is not None else self._fall_back(rule, reasons, attempts)

    def _converse(
        self, view: PlannerView, state: HistoryState, ctx: ContextPack, cost: float
    ) -> tuple[Proposal | None, list[str], int]:
        """Ask the model until an answer passes (or the tries or tokens run out): the accepted proposal
        (None: none), the reasons the others failed, and the tries made."""
        messages: list[dict[str, str]] = [
            {"role": "system", "content": ctx.system},
            {"role": "user", "content": ctx.user},
        ]
        reasons: list[str] = []
        attempts = 0
        adjustments = 0
        while attempts <= self.config.retries:
            spent = self.memory.usage.total_tokens + self.memory.usage.estimated_tokens
            need = sum(estimate_tokens(m["content"]) for m in messages) + self.config.max_output_tokens
            if spent + need > self.config.token_budget:
                reasons.append(
                    f"LLM token budget spent ({spent} of {self.config.token_budget} tokens; this request "
                    f"needs up to {need})"
                )
                break
            try:
                resp = self._send(messages, ctx, attempts + 1)
            except ChatError as exc:
                adjusted = adjustments < 4 and self._adjust(exc)
                self._emit("llm.error", {"attempt": attempts + 1, **exc.record(), "adjusted": adjusted})
                if adjusted:
                    adjustments += 1
                    continue
                attempts += 1
                reasons.append(f"{exc.kind}: {exc}")
                if exc.kind in ("auth", "config", "exhausted"):
                    break
                continue
            attempts += 1
            self._account(resp, messages)
            try:
                decision = parse_decision(resp.content)
                proposal, accepted = self._realize(decision, view, state, cost)
            except (DecisionError, _Refused) as exc:
                kind = "parse" if isinstance(exc, DecisionError) else "guard"
                reasons.append(str(exc))
                self.memory.usage.invalid += 1
                self._emit("llm.invalid", {"attempt": attempts, "kind": kind, "reason": str(exc)})
                messages = [
                    *messages,
                    {"role": "assistant", "content": resp.content},
                    {"role": "user", "content": _feedback(kind, str(exc))},
                ]
                continue
            self.memory.usage.accepted += 1
            self._emit("llm.decision", {"attempt": attempts, **accepted})
            return proposal, reasons, attempts
        return None, reasons, attempts

    def _send(self, messages: list[dict[str, str]], ctx: ContextPack, attempt: int) -> ChatResponse:
        """One request to the model, recorded (``llm.request``) before it is sent. Raises ChatError
        (counted as an error, its latency added)."""
        request = self._request(messages)
        self._emit(
            "llm.request",
            {
                "attempt": attempt,
                "model": request.model,
                "base_url": self.config.endpoint(),
                "response_format": (request.response_format or {}).get("type", "text"),
                "max_tokens": request.max_tokens,
                "temperature": request.temperature,
                "messages": messages,
                "est_prompt_tokens": sum(estimate_tokens(m["content"]) for m in messages),
                "context": ctx.model_dump(exclude={"system", "user"}),
                "config": self.config.model_dump(mode="json"),
            },
        )
        self.memory.usage.requests += 1
        try:
            return self._chat().complete(request)
        except ChatError as exc:
            self.memory.usage.errors += 1
            self.memory.usage.latency_s = round(self.memory.usage.latency_s + exc.latency_s, 3)
            raise

    def _fall_back(self, rule: Proposal, reasons: list[str], attempts: int) -> Proposal:
        """No acceptable answer: the rule planner's proposal, recorded as ``llm.fallback``."""
        self.memory.usage.fallbacks += 1
        self._emit(
            "llm.fallback",
            {
                "reason": reasons[-1] if reasons else "no answer",
                "reasons": reasons,
                "attempts": attempts,
                "rule_proposal": rule.experiment.change.describe()
                if rule.experiment and rule.experiment.change
                else (rule.experiment.purpose if rule.experiment else f"conclude: {rule.conclude_reason}"),
            },
        )
        if rule.experiment is not None:
            rule.experiment.rationale = f"rule planner (LLM fallback): {rule.experiment.rationale}"
        return rule

    # ----- steps of propose ------------------------------------------------------------------------

    def _procedural(self, view: PlannerView, state: HistoryState) -> str | None:
        """Why this step needs no model (baseline, confirmation, budget), or ``None`` for an open choice."""
        ref, budget = state.reference, view.case.budget
        if ref is None:
            return "the baseline run comes first"
        if ref.stage == "ok":
            return "the failure is fixed: confirming or concluding follows the procedure"
        if view.launches + 2 > budget.experiments:
            return f"launch budget: {view.launches} of {budget.experiments} used, a test needs room for its confirmation"
        if view.host_seconds + self._cost(state) > budget.host_seconds:
            return "host-second budget spent"
        return None

    @staticmethod
    def _cost(state: HistoryState) -> float:
        ref = state.reference
        return ref.timings.host_seconds if ref and ref.timings.host_seconds > 0 else default_launch_cost_s()

    def _redactor(self, view: PlannerView) -> Redactor:
        case = view.case
        hosts: list[str] = []
        if case.host.target.startswith("ssh://"):
            try:
                hosts.append(parse_target(case.host.target).host)
            except HostError:  # refused when the case was loaded; mask what there is
                hosts.append(case.host.target.removeprefix("ssh://"))
        return run_redactor(
            case,
            secrets=[k for k in (self.config.api_key(),) if k],
            hosts=hosts,
            mask_hosts=self.config.redact_hosts,
        )

    def _request(self, messages: list[dict[str, str]]) -> ChatRequest:
        fmt = self.memory.response_format or self.config.response_format
        response_format: dict[str, Any] | None
        if fmt == "json_schema":
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": "hypoloop_decision", "schema": DECISION_SCHEMA, "strict": True},
            }
        elif fmt == "json_object":
            response_format = {"type": "json_object"}
        else:
            response_format = None
        param = self.memory.max_tokens_param or (
            "max_completion_tokens" if self.config.base_url is None else "max_tokens"
        )
        return ChatRequest(
            model=self.config.model,
            messages=messages,
            response_format=response_format,
            max_tokens=self.config.max_output_tokens,
            max_tokens_param=param,
            temperature=None if self.memory.drop_temperature else self.config.temperature,
            timeout_s=self.config.timeout_s,
        )

    def _chat(self) -> ChatClient:
        if self._client is None:
            key = self.config.api_key()
            if key is None and self.config.base_url is None:
                raise ChatError(
                    "config", f"${self.config.api_key_env} is not set (the OpenAI API needs a key)"
                )
            self._client = OpenAIChatClient(base_url=self.config.base_url, api_key=key)
        return self._client

    def _adjust(self, exc: ChatError) -> bool:
        """Adapt to an endpoint that refused a request parameter; True when the request should be
        sent again (not counted as an attempt)."""
        if exc.kind != "bad_request" or not exc.param:
            return False
        if exc.param == "response_format":
            current = self.memory.response_format or self.config.response_format
            lower = _FORMAT_FALLBACK.get(current)
            if lower is None:
                return False
            self.memory.response_format = lower
            return True
        if exc.param == "temperature" and not self.memory.drop_temperature:
            self.memory.drop_temperature = True
            return True
        if exc.param in ("max_tokens", "max_completion_tokens"):
            other: Literal["max_tokens", "max_completion_tokens"] = (
                "max_completion_tokens" if exc.param == "max_tokens" else "max_tokens"
            )
            if self.memory.max_tokens_param == other:
                return False
            self.memory.max_tokens_param = other
            return True
        return False

    def _account(self, resp: ChatResponse, messages: list[dict[str, str]]) -> None:
        usage = self.memory.usage
        estimated = resp.prompt_tokens is None or resp.completion_tokens is None
        prompt = (
            resp.prompt_tokens
            if resp.prompt_tokens is not None
            else sum(estimate_tokens(m["content"]) for m in messages)
        )
        completion = (
            resp.completion_tokens if resp.completion_tokens is not None else estimate_tokens(resp.content)
        )
        if estimated:
            usage.estimated_tokens += prompt + completion
        else:
            usage.prompt_tokens += prompt
            usage.completion_tokens += completion
        usage.latency_s = round(usage.latency_s + resp.latency_s, 3)
        self._emit(
            "llm.response",
            {
                "content": resp.content,
                "reasoning": resp.reasoning,
                "finish_reason": resp.finish_reason,
                "model": resp.model,
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                    "estimated": estimated,
                },
                "latency_s": round(resp.latency_s, 3),
                "run_tokens": usage.total_tokens + usage.estimated_tokens,
            },
        )

    def _realize(
        self, decision: LLMDecision, view: PlannerView, state: HistoryState, cost: float
    ) -> tuple[Proposal, dict[str, Any]]:
        """Turn an accepted answer into a Proposal (and the ``llm.decision`` event data), or raise
        _Refused with the reason. The model's new hypotheses and notes are kept only when accepted."""
        known = {h.id for h in state.hypotheses}
        notes = {n.id: n.assessment for n in decision.notes if n.id in known}
        if decision.action == "conclude":
            text = " ".join((decision.conclusion or decision.reasoning or "no reason given").split())[:500]
            self.memory.notes.update(notes)
            proposal = Proposal(conclude_reason=f"the LLM planner concluded: {text}")
            return proposal, {
                "action": "conclude",
                "conclusion": text,
                "reasoning": decision.reasoning,
                "notes": notes,
            }
        spec = decision.experiment
        if spec is None:
            raise _Refused('action is "experiment" but no experiment was given')
        if len(spec.changes) != 1:
            listed = ", ".join(c.text() for c in spec.changes) or "none"
            raise _Refused(
                f"an experiment changes exactly one variable; this proposal changes {len(spec.changes)} ({listed})"
            )
        change = self._change(spec.changes[0], state)
        rejected = next((r for r in view.rejections if r.change_key == change.key()), None)
        if rejected is not None:
            raise _Refused(f"a person rejected {change.describe()} earlier in this run: {rejected.reason}")
        new_entries, dropped = self._new_entries(decision, state, change, spec.tests)
        live = [h for h in state.hypotheses if h.status in ("open", "supported")]
        live += [self._as_hypothesis(e) for e in new_entries]
        exp = Experiment(
            id=Experiment.make_id(state.baseline, change, "test"),
            purpose="test",
            baseline=state.baseline,
            change=change,
            predictions=[
                Prediction.model_validate({"hypothesis_id": h.id, "expect": self.rules.prediction(h, change)})
                for h in live
            ],
            rationale=self._rationale(spec, decision),
            cost_estimate_s=cost,
            proposed_by=self.name,
        )
        try:
            check_experiment(exp, view=view, flags=self.flags)
        except GuardError as exc:
            raise _Refused(str(exc)) from None
        # Accepted: keep the model's hypotheses and notes from here on.
        room = _MAX_MODEL_HYPOTHESES - len(self.memory.hypotheses)
        self.memory.hypotheses += new_entries[: max(room, 0)]
        self.memory.notes.update(notes)
        self.rules = RulePlanner([*self._catalog, *self.memory.hypotheses], self.flags)
        data = {
            "action": "experiment",
            "experiment_id": exp.id,
            "change": change.model_dump(mode="json"),
            "tests": spec.tests,
            "reasoning": decision.reasoning,
            "new_hypotheses": [e.id for e in new_entries[: max(room, 0)]],
            "dropped": dropped,
            "notes": notes,
        }
        return Proposal(experiment=exp, considered=[{"llm": decision.reasoning[:300]}]), data

    def _change(self, ch: LLMChange, state: HistoryState) -> Change:
        """A Change in canonical form against the baseline, or _Refused (unknown flag, illegal value,
        shell characters, no change)."""
        kind, value = ch.kind, ch.value
        name = ch.name.strip()
        after: FlagValue
        if kind == "flag":
            if self.flags is None:
                raise _Refused("no flag catalog: flag changes cannot be checked on this host")
            try:
                if value is None or value is False:
                    name, after = self.flags.resolve(name).name, None
                else:
                    name, after = self.flags.validate(name, value)
            except FlagError as exc:
                raise _Refused(str(exc)) from None
        else:
            if not _ENV_NAME.match(name):
                raise _Refused(f"env {name!r}: expected a variable name like NCCL_P2P_DISABLE")
            after = None if value is None or value is False else ("1" if value is True else str(value))
        before = state.baseline.value(kind, name)
        if (before is None and after is None) or (
            before is not None and after is not None and str(before) == str(after)
        ):
            raise _Refused(
                f"{name} is already {'(unset)' if before is None else before} in the baseline; an experiment must change it"
            )
        return Change(kind=kind, name=name, before=before, after=after)

    def _new_entries(
        self, decision: LLMDecision, state: HistoryState, change: Change, tests: list[str]
    ) -> tuple[list[CatalogEntry], list[str]]:
        """Catalog entries for the model's new hypotheses (ids ``model:<slug>``); a test that is not a
        legal change is dropped (listed in the second value), a hypothesis this experiment tests
        without its own test gets the experiment's change."""
        entries: list[CatalogEntry] = []
        dropped: list[str] = []
        known = {h.id for h in state.hypotheses}
        existing = {e.id for e in self.memory.hypotheses} | known
        for h in decision.new_hypotheses[:_MAX_NEW_PER_ANSWER]:
            slug = re.sub(r"[^a-z0-9]+", "-", h.id.lower().removeprefix("model:")).strip("-")[:48] or "h"
            hid = f"model:{slug}"
            if hid in existing or h.id in known:
                continue
            iv: Intervention | None = None
            if h.test is not None:
                try:
                    tc = self._change(h.test, state)
                    iv = Intervention(kind=tc.kind, names=[tc.name], values=[tc.after], decisive=h.decisive)
                except _Refused as exc:
                    dropped.append(f"{hid}: test {h.test.text()} dropped: {exc}")
            if iv is None and (h.id in tests or hid in tests):
                iv = Intervention(
                    kind=change.kind, names=[change.name], values=[change.after], decisive=h.decisive
                )
            entries.append(
                CatalogEntry(
                    id=hid,
                    statement=" ".join(h.statement.split())[:300],
                    component=(h.component.strip() or "unknown")[:60],
                    rationale=" ".join((decision.reasoning or h.statement).split())[:300],
                    source=f"LLM planner ({self.config.model})",
                    prior=h.prior,
                    intervention=[iv] if iv else [],
                )
            )
            existing.add(hid)
        return entries, dropped

    @staticmethod
    def _as_hypothesis(e: CatalogEntry) -> Hypothesis:
        return Hypothesis(
            id=e.id,
            statement=e.statement,
            component=e.component,
            prior=e.prior,
            posterior=e.prior,
            source="model",
            interventions=list(e.intervention),
        )

    def _rationale(self, spec: LLMExperiment, decision: LLMDecision) -> str:
        tests = f"tests {', '.join(spec.tests)}: " if spec.tests else ""
        text = " ".join((spec.rationale or decision.reasoning).split())[:400]
        return f"LLM ({self.config.model}): {tests}{text}"

    def _emit(self, type_: str, data: dict[str, Any]) -> None:
        if self.transcript is not None:
            self.transcript.emit(type_, data, node="design")


def _feedback(kind: str, reason: str) -> str:
    if kind == "parse":
        return (
            f"Your answer could not be read: {reason}. Answer again with exactly one JSON object in the "
            "shape given, and nothing else."
        )
    return (
        f"Refused, not executed: {reason}. Propose a different experiment that follows the rules (exactly "
        "one change against the current baseline, a flag from the catalog with a legal value or a plain "
        "environment variable, not run or rejected before), or conclude. Answer with the JSON object only."
    )


# ---------------------------------------------------------------------------------------------- wiring


def make_planner(
    spec: Mapping[str, Any] | None,
    catalog: list[CatalogEntry],
    flags: FlagCatalog | None,
    *,
    transcript: Transcript | None = None,
    client: ChatClient | None = None,
) -> Planner:
    """The planner a run's checkpointed ``spec`` names (``None``: the rule planner); the one factory.

    Raises ValueError for a spec of kind ``llm`` without its options."""
    s = PlannerSpec.model_validate(spec or {})
    return _BUILDERS[s.kind](s, catalog, flags, transcript, client)


def _build_rules(
    s: PlannerSpec, catalog: list[CatalogEntry], flags: FlagCatalog | None, *_: Any
) -> RulePlanner:
    return RulePlanner(catalog, flags)


def _build_llm(
    s: PlannerSpec,
    catalog: list[CatalogEntry],
    flags: FlagCatalog | None,
    transcript: Transcript | None,
    client: ChatClient | None,
) -> LLMPlanner:
    if s.llm is None:
        raise ValueError("planner kind 'llm' needs its options (model, base_url, ...)")
    return LLMPlanner(catalog, flags, s.llm, memory=s.memory, transcript=transcript, client=client)


_BUILDERS: dict[str, Callable[..., Planner]] = {"rules": _build_rules, "llm": _build_llm}


def usage_summary(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Tokens and answers of the LLM planner over the run, for the conclusion (``None``: rule planner)."""
    if not spec or spec.get("kind") != "llm":
        return None
    s = PlannerSpec.model_validate(spec)
    u = s.memory.usage
    return {
        "model": s.llm.model if s.llm else None,
        "endpoint": s.llm.endpoint() if s.llm else None,
        "requests": u.requests,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "estimated_tokens": u.estimated_tokens,
        "total_tokens": u.total_tokens + u.estimated_tokens,
        "token_budget": s.llm.token_budget if s.llm else u.budget,
        "latency_s": round(u.latency_s, 2),
        "accepted": u.accepted,
        "refused": u.invalid,
        "errors": u.errors,
        "fallbacks": u.fallbacks,
        "model_hypotheses": [e.id for e in s.memory.hypotheses],
    }


def describe_usage(u: Mapping[str, Any]) -> str:
    """One line about the LLM planner's spending, as printed at the end of a run."""
    est = f", {u['estimated_tokens']} of them estimated" if u.get("estimated_tokens") else ""
    return (
        f"LLM planner ({u.get('model')}): {count(u.get('requests', 0), 'request')}, "
        f"{count(u.get('total_tokens', 0), 'token')} "
        f"of {u.get('token_budget')} ({u.get('prompt_tokens', 0)} prompt + {u.get('completion_tokens', 0)} "
        f"completion{est}), {u.get('latency_s', 0)} s; {count(u.get('accepted', 0), 'proposal')} accepted, "
        f"{u.get('refused', 0)} refused, {count(u.get('errors', 0), 'error')}, "
        f"{count(u.get('fallbacks', 0), 'rule fallback')}"
    )


def llm_notices(console: Any) -> Callable[[Any], None]:
    """A transcript listener that prints the LLM planner's exchanges in one line each."""
    from rich.markup import escape

    def show(ev: Any) -> None:
        d = ev.data
        if ev.type == "llm.request":
            console.print(
                f"  [dim]llm: asking {escape(str(d.get('model')))} (attempt {d.get('attempt')}, "
                f"~{d.get('est_prompt_tokens')} prompt tokens)[/]",
                highlight=False,
            )
        elif ev.type == "llm.response":
            u = d.get("usage") or {}
            console.print(
                f"  [dim]llm: answer in {d.get('latency_s')} s, {u.get('total_tokens')} tokens[/]",
                highlight=False,
            )
        elif ev.type == "llm.invalid":
            console.print(
                f"  [red]llm proposal refused[/] ({d.get('kind')}): {escape(str(d.get('reason')))}",
                highlight=False,
            )
        elif ev.type == "llm.error":
            note = " (adjusting the request)" if d.get("adjusted") else ""
            console.print(
                f"  [red]llm error[/] {d.get('kind')}: {escape(str(d.get('message')))[:200]}{note}",
                highlight=False,
            )
        elif ev.type == "llm.fallback":
            console.print(
                f"  [yellow]llm: falling back to the rule planner[/]: {escape(str(d.get('reason')))}",
                highlight=False,
            )
        elif ev.type == "llm.decision" and d.get("new_hypotheses"):
            console.print(
                f"  [yellow]llm adds hypotheses[/] {', '.join(d['new_hypotheses'])}", highlight=False
            )

    return show


def planner_spec_from_options(
    kind: str,
    *,
    model: str | None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    context_tokens: int | None = None,
    token_budget: int | None = None,
    timeout_s: float | None = None,
    redact_hosts: bool = False,
) -> dict[str, Any] | None:
    """The ``state["planner"]`` of a new run from command-line options (``None``: the rule planner).

    Raises ValueError with a one-line message naming the option: an unknown kind, ``--planner llm``
    without ``--model``, LLM options with the rule planner, a bad number, no key for api.openai.com,
    or a key variable named with ``--api-key-env`` that is not set.
    """
    llm_options = {
        "--model": model,
        "--base-url": base_url,
        "--api-key-env": api_key_env,
        "--llm-context-tokens": context_tokens,
        "--llm-token-budget": token_budget,
        "--llm-timeout": timeout_s,
    }
    if kind not in _BUILDERS:
        raise ValueError(f"--planner {kind}: expected one of {', '.join(_BUILDERS)}")
    if kind == "rules":
        given = [k for k, v in llm_options.items() if v is not None] + (
            ["--redact-hosts"] if redact_hosts else []
        )
        if given:
            raise ValueError(f"{', '.join(given)}: only used with --planner llm")
        return None
    if not model:
        raise ValueError("--planner llm needs --model NAME (the model name the endpoint serves)")
    values: dict[str, Any] = {"model": model, "base_url": base_url, "redact_hosts": redact_hosts}
    for key, v in (
        ("api_key_env", api_key_env),
        ("context_tokens", context_tokens),
        ("token_budget", token_budget),
        ("timeout_s", timeout_s),
    ):
        if v is not None:
            values[key] = v
    try:
        cfg = LLMPlannerConfig.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "?"
        option = {
            "context_tokens": "--llm-context-tokens",
            "token_budget": "--llm-token-budget",
            "timeout_s": "--llm-timeout",
        }.get(field, field)
        raise ValueError(f"{option}: {err['msg']}") from None
    if cfg.api_key() is None and (cfg.base_url is None or api_key_env is not None):
        where = "api.openai.com needs a key" if cfg.base_url is None else "it was named with --api-key-env"
        raise ValueError(f"${cfg.api_key_env} is not set ({where})")
    return PlannerSpec(kind="llm", llm=cfg).model_dump(mode="json")
