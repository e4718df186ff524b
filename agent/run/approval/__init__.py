"""Approving experiments: when to ask, what a person sees, what they may answer.

Modes (``--approve``): ``each`` asks before every launch (the default: a GPU host is expensive and
shared), ``risky`` asks only when the experiment's change matches a rule in ``knowledge/risky.toml``,
``auto`` never asks. The approve node ``interrupt()``s with an :class:`ApprovalRequest` (JSON-plain, so
``hypoloop show``, a resumed process and LangGraph Studio all read the same thing) and resumes with an
:class:`ApprovalAnswer`: approve, edit (a different value or variable: still exactly one change, and
it passes the same guard rails as a planner's proposal), reject with a reason, or stop.

Modules: ``policy`` (when to ask), ``request`` (what is asked and answered), ``edit`` (reading and checking
an edit), ``screen`` (the terminal panel and prompt).
"""

from agent.run.approval.edit import EditError, apply_edit, parse_edit
from agent.run.approval.policy import (
    APPROVAL_MODES,
    ApprovalMode,
    RiskRule,
    RiskRulesError,
    default_risk_rules_path,
    load_risk_rules,
    must_ask,
    risky_reasons,
)
from agent.run.approval.request import (
    ApprovalAnswer,
    ApprovalRequest,
    Decision,
    EditOffer,
    HypothesisLine,
    LeadBlocked,
    RequestContext,
    build_request,
    lead_blocked,
)
from agent.run.approval.screen import SHOWN_HYPOTHESES, approval_panel, ask, describe_experiment

__all__ = [
    "APPROVAL_MODES",
    "SHOWN_HYPOTHESES",
    "ApprovalAnswer",
    "ApprovalMode",
    "ApprovalRequest",
    "Decision",
    "EditError",
    "EditOffer",
    "HypothesisLine",
    "LeadBlocked",
    "RequestContext",
    "RiskRule",
    "RiskRulesError",
    "apply_edit",
    "approval_panel",
    "ask",
    "build_request",
    "default_risk_rules_path",
    "describe_experiment",
    "lead_blocked",
    "load_risk_rules",
    "must_ask",
    "parse_edit",
    "risky_reasons",
]
