"""The approval screen at the terminal: the panel a person reads and the prompt that reads an answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agent.domain.models import (
    Experiment,
)
from agent.review.wording import count
from agent.run.approval.edit import EditError
from agent.run.approval.request import ApprovalAnswer, ApprovalRequest, HypothesisLine, LeadBlocked

_PREDICTS = {"fixed": "[green]fixed[/]", "may_fix": "[yellow]may fix[/]", "persists": "[dim]persists[/]"}


def describe_experiment(exp: Experiment) -> str:
    """One line: the change as ``name: before → after``, or what a baseline/confirmation run does."""
    if exp.change is not None:
        return exp.change.describe()
    return {
        "baseline": "reproduce the failure on the baseline (no change)",
        "confirm": "re-run the fix to confirm it (no change)",
    }.get(exp.purpose, exp.purpose)


#: Hypotheses the approval screen lists one by one; the rest are one line (``[h]`` shows them all).
SHOWN_HYPOTHESES = 3


def approval_panel(req: ApprovalRequest, *, full: bool = False, keys: bool = True) -> Panel:
    """The approval screen, read bottom-up from the prompt: the choices, the change and what it tests
    right above them, then the cost, the likeliest few hypotheses and one line for the rest (``full``:
    every open hypothesis with its statement). Fits 80 × 24 for a usual request (tested in tmux).
    ``keys``: the screen is read at the prompt (``h`` lists every hypothesis); False where no key is read
    (``show``, a run left waiting), which names the command that lists them instead. ``[e]dit`` is offered
    only for a change (a baseline or confirmation run has none to edit)."""
    exp = req.experiment
    parts: list[Any] = [*_hypothesis_parts(req, full=full, keys=keys), _facts_grid(req, full=full)]
    if req.lead_blocked is not None:
        parts.append(_lead_blocked_text(req.lead_blocked, full=full))
    if req.error:
        parts.append(f"[bold red]previous answer refused:[/] {escape(req.error)}")
    more = "  [h] list all" if req.hypotheses and not full and keys else ""
    edit = "  [e]dit one change" if editable(exp) else ""
    parts.append(escape(f"[a]pprove{edit}  [r]eject with a reason  [s]top{more}"))
    if req.batch:
        parts.append(escape("[all]: approve this one and the rest of the batch as proposed"))
    return Panel(
        Group(*parts),
        title=f"approve experiment {req.step}? [dim]{exp.id}[/]",
        title_align="left",
        border_style="red" if req.risky else "cyan",
    )


def answer_hint(req: ApprovalRequest, resume: str, *, decision_optional: bool = False) -> str:
    """The ``hypoloop resume`` command line that answers ``req``, with exactly the options that apply to
    it: ``--experiment`` (the answer counts only while this experiment waits), ``approve-all`` only in a
    ``--parallel`` batch, ``edit`` and ``--set`` only for a change (``editable``). ``resume``: the command
    up to the run id (``resume_command``); ``decision_optional``: ``--decision`` in brackets (without it
    ``resume`` asks at the terminal). The choices are joined by "/": a line pasted without picking one is
    refused as an invalid choice, where "|" made the shell pipe it into another command after approving."""
    exp = req.experiment
    can_edit = editable(exp)
    decisions = ["approve", *(["approve-all"] if req.batch else []), *(["edit"] if can_edit else []), "reject", "stop"]
    decision = "--decision " + "/".join(decisions)  # pasted as is: one invalid choice, never a shell pipe
    words = [resume, f"--experiment {exp.id}", f"[{decision}]" if decision_optional else decision,
             "[--reason TEXT]", *(["[--set NAME=VALUE]"] if can_edit else [])]
    return " ".join(words)


def editable(exp: Experiment) -> bool:
    """Whether a person can edit the experiment's change (a baseline or confirmation run has none)."""
    return exp.purpose == "test" and exp.change is not None


def _hypothesis_parts(req: ApprovalRequest, *, full: bool, keys: bool = True) -> list[Any]:
    """The screen's hypotheses: a table of the likeliest few and one line for the rest, or (``full``) one
    block each."""
    parts: list[Any] = []
    if not req.hypotheses:
        return parts
    # The statement goes under its id, so the id keeps a line of its own on a narrow terminal (side by
    # side, an 80-column screen folded ids mid-word: lowprec-kv-cache-attention-n / umerics).
    shown = req.hypotheses if full else _screen_hypotheses(req)
    if full:  # one block each, the id on a line of its own at the panel's full width: never folded
        rows = [
            f"{h.posterior:.2f}  {_PREDICTS[h.predicts]}\n  {escape(h.id)}\n  [dim]{escape(h.statement)}[/]"
            for h in shown
        ]
        parts.append("[bold]p  predicts / hypothesis[/]\n" + "\n".join(rows))
        shown = []
    t = Table(box=None, padding=(0, 1), header_style="bold")
    t.add_column("p", no_wrap=True)
    t.add_column("predicts", no_wrap=True)
    t.add_column(
        "hypothesis" if full else f"hypothesis ({len(shown)} of {len(req.hypotheses)})", overflow="fold"
    )
    for h in shown:
        t.add_row(f"{h.posterior:.2f}", _PREDICTS[h.predicts], escape(h.id))
    rest = [h for h in req.hypotheses if h not in shown]
    if rest and not full:
        preds = sorted({_PREDICTS[h.predicts] for h in rest})
        t.add_row(
            f"≤{max(h.posterior for h in rest):.2f}",
            preds[0] if len(preds) == 1 else "mixed",
            f"+ {len(rest)} more: " + ("press h to list them" if keys else f"hypoloop show {req.run_id} -v lists them"),
        )
    if not full:
        parts.append(t)
    return parts


def _facts_grid(req: ApprovalRequest, *, full: bool) -> Table:
    """The screen's facts right above the choices: cost, batch, risks, why (``full``), purpose, change."""
    exp = req.experiment
    by_id = {h.id: h for h in req.hypotheses}
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")  # a word wider than the column folds: nothing ends in '…'
    grid.add_row(
        "cost",
        f"~{exp.cost_estimate_s:.0f} host-s; so far {req.launches} of "
        f"{count(req.budget_launches, 'launch')}, {req.host_seconds:.0f} of {req.budget_host_seconds:.0f} host-s",
    )
    if req.batch:
        grid.add_row("batch", escape("\n".join(req.batch)))
    for r in req.risky:
        grid.add_row("[red]risky[/]", escape(r))
    if exp.rationale and full:
        grid.add_row("why", f"[dim]{escape(exp.rationale)}[/]")
    if req.tests:
        # the compact screen states the likeliest tested hypothesis; the others by id (``full``: each stated)
        stated = req.tests if full else sorted(req.tests, key=lambda h: -by_id[h].posterior)[:1]
        tested = "; ".join(
            f"{escape(h)} (p={by_id[h].posterior:.2f}): {escape(by_id[h].statement)}" for h in stated
        )
        also = [f"{escape(h)} (p={by_id[h].posterior:.2f})" for h in req.tests if h not in stated]
        grid.add_row("purpose", f"tests {tested}" + (f"; also {', '.join(also)}" if also else ""))
    elif exp.purpose == "baseline":
        grid.add_row("purpose", "reproduce the failure and collect the failing run's log evidence")
    elif exp.rationale:
        grid.add_row("purpose", escape(exp.rationale))
    grid.add_row("change", f"[bold magenta]{escape(describe_experiment(exp))}[/]")
    return grid


def _screen_hypotheses(req: ApprovalRequest) -> list[HypothesisLine]:
    """The hypotheses the compact screen lists: the ``SHOWN_HYPOTHESES`` likeliest, in falling probability
    (ties in the ledger's order). Those the experiment tests are named on its purpose line whatever their
    probability, so a less likely tested one never displaces a likelier one here."""
    return sorted(req.hypotheses, key=lambda h: -h.posterior)[:SHOWN_HYPOTHESES]


def _lead_blocked_text(lb: LeadBlocked, *, full: bool = False) -> Group:
    """The note on the leading hypothesis whose test was rejected (see ``lead_blocked``): on the compact
    screen the offered edits on one line (the screen keeps to 80 × 24); ``full`` says what tests
    instead and why each edit."""
    instead = f" This experiment tests {', '.join(lb.instead)} instead." if lb.instead and full else ""
    lines: list[Any] = [
        Text.from_markup(
            f"[bold yellow]⚠ the leading hypothesis {escape(lb.hypothesis_id)} (p={lb.posterior:.2f}) can no "
            f"longer be tested as proposed:[/] its test [magenta]{escape(lb.rejected)}[/] was rejected "
            f"({escape(lb.reason)}).{escape(instead)}"
        )
    ]
    if lb.edits and not full:
        offers = ", ".join(f"[bold magenta]{escape(o.set)}[/]" for o in lb.edits)
        lines.append(Text.from_markup(f"  to test it another way, \\[e]dit with one of: {offers} (h: why each)"))
    elif lb.edits:
        lines.append(Text("  to test it another way, [e]dit with one of:"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold magenta", overflow="fold")
        grid.add_column(overflow="fold")
        for offer in lb.edits:
            grid.add_row(f"    {escape(offer.set)}", escape(offer.why))
        lines.append(grid)
    else:
        lines.append(Text("  no other test of it is known: edit a change of your own, approve, or stop."))
    return Group(*lines)


def ask(
    req: ApprovalRequest,
    console: Console,
    *,
    check_edit: Callable[[list[str]], Experiment],
    read: Callable[[str], str] | None = None,
) -> ApprovalAnswer:
    """Show the approval screen and read an answer at the terminal; asks again after a refused edit.

    ``check_edit`` validates an edit exactly as the approve node will (raising EditError). ``read``
    defaults to ``console.input``; EOFError (Ctrl-D) and KeyboardInterrupt propagate to the caller.
    """
    reader = read or (lambda prompt: console.input(Text(prompt)))  # Text: no markup, no highlighting
    console.print(approval_panel(req))
    exp_id = req.experiment.id
    offers = [("a", "approve"), *([("all", "all")] if req.batch else []),
              *([("e", "edit")] if editable(req.experiment) else []), ("r", "reject"), ("h", "hypotheses"), ("s", "stop")]
    prompt = " / ".join(f"[{k}]{w[len(k):]}" if w.startswith(k) else f"{k} ({w})" for k, w in offers) + ": "
    while True:
        word = reader(prompt).strip().lower()
        if word in ("h", "hypotheses", "more"):
            console.print(approval_panel(req, full=True))
            continue
        if word in ("a", "approve", "y", "yes"):
            return ApprovalAnswer(decision="approve", experiment_id=exp_id)
        if word in ("all", "approve-all") and req.batch:
            return ApprovalAnswer(decision="approve", all=True, experiment_id=exp_id)
        if word in ("e", "edit") and not editable(req.experiment):
            console.print(f"a {req.experiment.purpose} run changes nothing, so there is nothing to edit: "
                          "approve, reject or stop it")
            continue
        if word in ("e", "edit"):
            while True:  # a refused edit asks for the change again; empty goes back to the menu
                text = reader(
                    "one change (e.g. --attention-backend triton, NCCL_P2P_DISABLE=1, or a new value; "
                    "empty: back): "
                ).strip()
                if not text:
                    break
                try:
                    new = check_edit([text])
                except EditError as exc:
                    console.print(f"[bold red]edit refused:[/] {escape(str(exc))}", highlight=False)
                    continue
                console.print(f"edited: [bold magenta]{escape(describe_experiment(new))}[/]", highlight=False)
                return ApprovalAnswer(decision="edit", set=[text], experiment_id=exp_id)
            continue
        if word in ("r", "reject", "n", "no"):
            reason = reader("reason (recorded; this experiment will not be proposed again): ").strip()
            if not reason:
                console.print("a rejection needs a reason")
                continue
            return ApprovalAnswer(decision="reject", reason=reason, experiment_id=exp_id)
        if word in ("s", "stop", "q", "quit"):
            return ApprovalAnswer(decision="stop", experiment_id=exp_id)
        console.print("answer " + ", ".join(k for k, _ in offers[:-1]) + f" or {offers[-1][0]} (" + ", ".join(
            w if k == w else f"{k}: {w}" for k, w in offers) + ")")
