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

Its options, memory and spec live in ``agent.planning.llm_spec``; what is accepted of an answer (the
checked change, the model's new hypotheses, the feedback on a refusal) in ``agent.planning.llm_accept``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from agent.domain.models import Change, Evidence, Experiment, Hypothesis, Prediction
from agent.planning.catalog import CatalogEntry
from agent.planning.guard import GuardError, check_experiment
from agent.planning.llm_accept import Refused, as_hypothesis, feedback, fresh_entries, single_change
from agent.planning.llm_answer import (
    DECISION_SCHEMA,
    DecisionError,
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
from agent.planning.llm_spec import (
    LLMMemory,
    LLMPlannerConfig,
    LLMUsage,
    PlannerSpec,
    describe_usage,
    llm_notices,
    planner_spec_from_options,
    usage_summary,
)
from agent.planning.view import (
    HistoryState,
    Planner,
    PlannerView,
    Proposal,
    default_launch_cost_s,
)
from agent.record.redact import Redactor, run_redactor
from agent.record.transcript import Transcript
from tools.flags import FlagCatalog
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
    "describe_usage",
    "extract_json",
    "llm_notices",
    "parse_decision",
    "planner_spec_from_options",
    "usage_summary",
]

#: Builds the rule planner over a hypothesis catalog and the host's flag catalog (``RulePlanner``).
RulesFactory = Callable[[list[CatalogEntry], FlagCatalog | None], Planner]

#: Hypotheses the model may keep in the ledger at once (``agent.planning.llm_accept``: per answer).
_MAX_MODEL_HYPOTHESES = 12
#: Formats tried in turn when an endpoint refuses the one asked for (400 naming ``response_format``).
_FORMAT_FALLBACK = {"json_schema": "json_object", "json_object": "text"}


# ---------------------------------------------------------------------------------------------- planner


class LLMPlanner:
    """Planner backed by a chat model (see the module docstring).

    ``catalog``: hypothesis catalog entries; ``flags``: the host's flag catalog; ``memory``: state from
    earlier steps (``PlannerSpec.memory``); ``transcript``: where exchanges are written (``None``: not
    written); ``client``: a ChatClient (default: ``OpenAIChatClient`` for ``config``); ``rules``: builds
    the rule planner over a catalog and flag catalog (``agent.planning.planner.RulePlanner``), whose
    bookkeeping keeps the ledger and takes the procedural steps.
    """

    name = "llm"

    def __init__(
        self,
        catalog: list[CatalogEntry],
        flags: FlagCatalog | None,
        config: LLMPlannerConfig,
        *,
        rules: RulesFactory,
        memory: LLMMemory | None = None,
        transcript: Transcript | None = None,
        client: ChatClient | None = None,
    ) -> None:
        self.config = config
        self._rules = rules
        self.flags = flags
        self.memory = memory.model_copy(deep=True) if memory is not None else LLMMemory()
        self.memory.usage.budget = config.token_budget
        self.transcript = transcript
        self._catalog = list(catalog)
        self._client = client
        self.rules = rules([*self._catalog, *self.memory.hypotheses], flags)

    # ----- construction ------------------------------------------------------------------------------

    @classmethod
    def from_recorded(
        cls,
        events: Iterable[Any],
        *,
        catalog: list[CatalogEntry],
        flags: FlagCatalog | None,
        rules: RulesFactory,
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
        return cls(catalog, flags, config, rules=rules, transcript=transcript, client=RecordedChatClient.from_events(evs))

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
            self.transcript.step = view.next_step
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
            except (DecisionError, Refused) as exc:
                kind = "parse" if isinstance(exc, DecisionError) else "guard"
                reasons.append(str(exc))
                self.memory.usage.invalid += 1
                self._emit("llm.invalid", {"attempt": attempts, "kind": kind, "reason": str(exc)})
                messages = [
                    *messages,
                    {"role": "assistant", "content": resp.content},
                    {"role": "user", "content": feedback(kind, str(exc))},
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
        Refused with the reason. The model's new hypotheses and notes are kept only when accepted."""
        known = {h.id for h in state.hypotheses}
        notes = {n.id: n.assessment for n in decision.notes if n.id in known}
        if decision.action == "conclude":
            return self._conclusion(decision, notes)
        spec = decision.experiment
        change = single_change(spec, state.baseline, self.flags)
        assert spec is not None  # single_change refuses an answer without one
        rejected = next((r for r in view.rejections if r.change_key == change.key()), None)
        if rejected is not None:
            raise Refused(f"a person rejected {change.describe()} earlier in this run: {rejected.reason}")
        new_entries, dropped = fresh_entries(
            decision,
            state,
            change,
            spec.tests,
            kept={e.id for e in self.memory.hypotheses},
            flags=self.flags,
            model=self.config.model,
        )
        live = [h for h in state.hypotheses if h.status in ("open", "supported")]
        live += [as_hypothesis(e) for e in new_entries]
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
            raise Refused(str(exc)) from None
        # Accepted: keep the model's hypotheses and notes from here on.
        room = _MAX_MODEL_HYPOTHESES - len(self.memory.hypotheses)
        self.memory.hypotheses += new_entries[: max(room, 0)]
        self.memory.notes.update(notes)
        self.rules = self._rules([*self._catalog, *self.memory.hypotheses], self.flags)
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

    def _conclusion(self, decision: LLMDecision, notes: dict[str, str]) -> tuple[Proposal, dict[str, Any]]:
        """The model's conclusion as a Proposal (and the ``llm.decision`` event data); its notes are kept."""
        text = " ".join((decision.conclusion or decision.reasoning or "no reason given").split())[:500]
        self.memory.notes.update(notes)
        proposal = Proposal(conclude_reason=f"the LLM planner concluded: {text}")
        return proposal, {
            "action": "conclude",
            "conclusion": text,
            "reasoning": decision.reasoning,
            "notes": notes,
        }

    def _rationale(self, spec: LLMExperiment, decision: LLMDecision) -> str:
        tests = f"tests {', '.join(spec.tests)}: " if spec.tests else ""
        text = " ".join((spec.rationale or decision.reasoning).split())[:400]
        return f"LLM ({self.config.model}): {tests}{text}"

    def _emit(self, type_: str, data: dict[str, Any]) -> None:
        if self.transcript is not None:
            self.transcript.emit(type_, data, node="design")
