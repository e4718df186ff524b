"""Why a run ends before the budget is spent, from the evidence in hand (issue 20: ending rules). Each rule
here ends the run without a fix, so each says what it relies on and needs evidence that no launch
setting can matter: a failure raised while the entry point (or its own launcher) ran an unconditional
chain of module-level imports (``agent.planning.observations.import_time_failure``), a package saying its own installed version is out of
date, the case's port taken on the host; a low P(fix) ends the run only once a change was tried
(``tested_any``). A failure inside argument resolution, a platform or device check, a memory-sizing
step or a kernel choice is reachable by settings and ends nothing here.
"""

from __future__ import annotations

from agent.domain.models import Outcome
from agent.planning.observations import import_time_failure
from agent.planning.package_changes import outdated_package
from agent.planning.view import HistoryState, PlannerView
from agent.review.wording import count

__all__ = ["over_budget", "package_dead_end", "port_taken", "tested_any"]


def package_dead_end(ref: Outcome, state: HistoryState) -> str | None:
    """Why no launch setting can fix the failing run ``ref``, from its traceback alone, or None: Python
    failed while importing a package in a chain of module-level imports every launch runs; or a package's own check says
    its installed version is too old for this deployment (``outdated_package``). Launches spent on flags
    would repeat the same failure. Not when the error itself names a setting (the ``remedies``
    generator's hypotheses): that remedy is tested first."""
    if any(h.generator == "remedies" for h in state.hypotheses):
        return None
    importing = import_time_failure(ref)
    if importing is not None:
        return (f"the failure happens while Python imports {importing}, in a chain of module-level imports "
                "every launch runs (no launch flag decides whether that code runs): the installed packages are "
                "broken or mismatched (no flag change can fix it)")
    outdated = outdated_package(ref.tracebacks)
    if outdated is not None:
        return (f"{outdated} raised the error itself and says its installed version is out of date for this "
                f"deployment: upgrade {outdated} (no launch flag changes an installed package)")
    return None


def tested_any(view: PlannerView) -> bool:
    """Whether this run launched a change yet: before one, a low P(fix) is no evidence that no setting
    matters (the ledger's spread over causes no setting reaches says nothing about this host), so the best
    candidate is launched rather than the run ending without trying any change."""
    return any(e.purpose == "test" and e.change is not None and e.status == "done" for e in view.experiments)


def over_budget(view: PlannerView, cost: float, slots: int) -> str | None:
    """Why ``slots`` more launches of ~``cost`` host-seconds do not fit the case's budget, or None."""
    budget = view.case.budget
    if view.launches + slots > budget.experiments:
        return f"experiment budget spent ({view.launches} of {count(budget.experiments, 'launch')})"
    if view.host_seconds + cost > budget.host_seconds:
        if view.host_seconds < 0.5:  # nothing spent yet: the budget cannot hold one launch
            return (f"host-second budget too small: the next launch needs ~{cost:.0f} s of the "
                    f"{budget.host_seconds:.0f} s allowed")
        return (
            f"host-second budget spent ({view.host_seconds:.0f} of {budget.host_seconds:.0f} s; "
            f"next launch ~{cost:.0f} s)"
        )
    return None


def port_taken(view: PlannerView) -> str | None:
    """Why the run ends when the baseline served on hypoloop's own port while the case's ``--port`` was
    already taken on the host (``HostFingerprint.taken_port``): that conflict is where the reported
    failure is, and no setting of the model fixes it (where a server listens is never an experiment,
    knowledge/served.toml); None otherwise."""
    fp = view.fingerprint
    if fp is None or fp.taken_port is None:
        return None
    who = f" by {fp.taken_by}" if fp.taken_by else ""
    return (
        f"the baseline served correctly on a port of hypoloop's own, but the case's --port {fp.taken_port} "
        f"was already taken on the host{who} before any launch: a server started there cannot listen "
        "(it fails to bind, or its requests reach the other process). That conflict is not a setting of "
        f"the model: stop what holds port {fp.taken_port}, or serve on a free port"
    )
