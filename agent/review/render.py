"""Terminal rendering of transcript events with rich: the same view live (``run``) and later (``replay``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from agent.domain.models import command_text
from agent.record.recorded import RecordedRun
from agent.record.transcript import TranscriptEvent
from agent.review.text import (
    alternative_text,
    change_text,
    failure_line,
    print_hanging,
    shown_line,
    summary_line,
)
from agent.review.wording import count, with_probability
from tools.fingerprint import arch_label, engine_label
from tools.installed import import_names_warning
from tools.sanitize import visible, visible_data

_STATUS_STYLE = {"refuted": "red", "supported": "green", "confirmed": "bold green", "open": "yellow"}


class EventRenderer:
    """Prints one or a few lines per event; ``verbose`` adds hypothesis weight updates and tool calls."""

    def __init__(
        self,
        console: Console,
        *,
        verbose: bool = False,
        show_input_errors: bool = True,
        launch_progress: bool = False,
        command_for: Callable[[RecordedRun], str] | None = None,
    ) -> None:
        self.console = console
        self.verbose = verbose
        self.show_input_errors = show_input_errors
        #: A live progress display (agent.run.progress) shows each launch and ends it with its own summary
        #: line, so the "ready after" line is left to it.
        self.launch_progress = launch_progress
        #: The launch command of a run's working configuration (``agent.review.findings.working_command``),
        #: printed with the answer; None: not printed.
        self.command_for = command_for
        self.run: RecordedRun | None = RecordedRun(path=Path("<live>"))
        self._added: list[dict[str, Any]] = []
        #: (experiment id, line) of every log line shown as an observation: a crash's summary names its
        #: fatal line again only when it was not shown already.
        self._shown_lines: set[tuple[Any, Any]] = set()

    #: New hypotheses shown one by one; the rest of a batch is one line (``-v`` shows every one).
    SHOWN_NEW = 3
    #: False: every new hypothesis gets its lines (``replay``, which explains each one).
    batch_new_hypotheses = True

    def flush(self) -> None:
        """Print the batch of new hypotheses held back: the likeliest few in full, the rest in one line."""
        batch, self._added = self._added, []
        batch.sort(key=lambda d: -float(d.get("posterior", 0)))
        for d in batch[: self.SHOWN_NEW]:
            self._hypothesis_added_line(d)
        rest = batch[self.SHOWN_NEW :]
        if rest:
            top = max(float(d.get("posterior", 0)) for d in rest)
            self._p(
                f"  [yellow]+ {count(len(rest), 'more hypothesis', 'more hypotheses')}[/] "
                f"[dim](p ≤ {top:.2f} each; -v lists them)[/]"
            )

    def __call__(self, ev: TranscriptEvent) -> None:
        if self.run is not None:
            self.run.add(ev)  # the working command at the end needs the launches the run made
        if ev.type == "hypothesis.added" and self.batch_new_hypotheses and not self.verbose:
            self._added.append(visible_data(ev.data))  # shown as a few lines once the batch ends
            return
        self.flush()
        handler = getattr(self, "_" + ev.type.replace(".", "_"), None)
        if handler is not None:
            # server log lines, FINDINGS titles, case text, remote output: escapes shown, never acted on
            handler(ev, visible_data(ev.data))
        elif self.verbose:
            self.console.print(f"[dim]{ev.type} {escape(visible(str(ev.data)))}[/]")

    def _p(self, text: str) -> None:
        print_hanging(self.console, text)

    def _run_started(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(
            f"[bold]▶ run {ev.run_id}[/]  case [cyan]{escape(str(d.get('case')))}[/] on {d.get('host')}"
            f"  (approval: {d.get('approval')})"
        )

    def _host_fingerprint(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        if d.get("gpu_count") or d.get("gpu_name"):
            devices = (
                f"{d.get('gpu_count')} × {escape(str(d.get('gpu_name')))} ({escape(arch_label(d))}, "
                f"{d.get('memory_total_mib')} MiB), driver {d.get('driver_version')}"
            )
        else:  # no GPU answered the query: say so, not "0 × None"
            cpus = f", {d.get('cpu_count')} CPUs" if d.get("cpu_count") else ""
            devices = f"CPU only{cpus}"
        self._p(f"  host: {devices}, " + escape(engine_label(d)))
        if (names := import_names_warning([str(n) for n in d.get("notes") or []])) is not None:
            self._p(f"  [yellow]warning:[/] {escape(visible(names))}")
        if d.get("taken_port") is not None:
            who = f" by {escape(str(d.get('taken_by')))}" if d.get("taken_by") else ""
            self._p(
                f"  [yellow]warning:[/] the case's --port {d['taken_port']} is already taken on the host{who}: "
                "hypoloop launches on ports of its own, so its launches do not meet that conflict, but a server "
                "started with the case's own command cannot listen there"
            )

    def _case_warning(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        # what the case asks that the run does anyway (a file from outside its folder, a flag the host's
        # --help lacks, launched as written): the person at the terminal reads it, not only the transcript
        self._p(f"  [yellow]warning:[/] {escape(str(d.get('message')))}")

    def _tool_result(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        if d.get("tool") == "flag_catalog":
            self._p(f"  flag catalog: {count(d.get('flags'), 'flag')} from the launcher's --help")

    def _knowledge_read(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        items = "; ".join(
            escape(f"{f['title']} [{f['outcome']}, relevance {f['relevance']}]") for f in d.get("findings", [])
        )
        self._p(f"  knowledge: {escape(str(d.get('path')))}: {items or 'no findings'}")

    def _hypothesis_added(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._hypothesis_added_line(d)

    def _hypothesis_added_line(self, d: dict[str, Any]) -> None:
        self._p(
            f"  [yellow]+ hypothesis[/] {d['id']} [dim]({d['component']})[/] p={d['posterior']:.2f}: "
            f"{escape(d['statement'])}"
        )

    def _status(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        status = ev.type.split(".", 1)[1]
        ev_text = ""
        if d.get("evidence"):
            e = d["evidence"][-1]
            ev_text = f" — {escape(shown_line(e['detail']))}"
            if e.get("lines"):
                where = f" of {e['experiment_id']}" if e.get("experiment_id") else ""
                ev_text += f" (log line{'s' if len(e['lines']) > 1 else ''} {', '.join(map(str, e['lines']))}{where})"
        shown = with_probability(status, float(d.get("posterior", 0))).split(" ", 1)
        self._p(f"  [{_STATUS_STYLE.get(status, 'white')}]{shown[0]}[/] {d['id']} {shown[1]}{ev_text}")

    _hypothesis_refuted = _status
    _hypothesis_supported = _status
    _hypothesis_confirmed = _status
    _hypothesis_open = _status

    def _hypothesis_updated(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        if self.verbose:
            self._p(f"  [dim]~ {d['id']} p {d['before']:.2f} → {d['posterior']:.2f}[/]")

    def _baseline_changed(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        a = d.get("adoption") or {}
        self._p(
            f"  [bold blue]baseline adopts[/] {escape(change_text(a.get('change')))} "
            f"({a.get('from_stage')} → {a.get('to_stage')})"
        )

    def _experiment_proposed(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        what = {"baseline": "reproduce the baseline", "confirm": "confirm the fix"}.get(
            d["purpose"], change_text(d.get("change"))
        )
        self.console.print()
        self._p(
            f"[bold]experiment {ev.step}[/] [dim]{d['id']}[/]  [bold magenta]{escape(what)}[/]  "
            f"~{d.get('cost_estimate_s', 0):.0f} host-s"
        )
        self._p(f"  [dim]{escape(d.get('rationale', ''))}[/]")

    def _approval_decided(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        reason = f": {escape(str(d['reason']))}" if d.get("reason") else ""
        edit = ""
        if d.get("decision") == "edit":
            edit = f" → runs [bold magenta]{escape(change_text(d.get('change')))}[/] instead ({d.get('edited_experiment_id')})"
        self._p(f"  approval: {d.get('decision')} ({d.get('by', 'user')}){edit}{reason}")

    def _approval_refused(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(f"  [red]answer refused:[/] {escape(str(d.get('reason')))}; asking again")

    def _run_paused(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(
            f"  [yellow]⏸ paused[/], waiting for approval of {d.get('waiting_for')} ({escape(str(d.get('reason')))})"
        )

    def _run_resumed(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        answer = d.get("answer") or {}
        how = f" with answer {answer.get('decision')}" if answer else ""
        self._p(f"[bold]▶ resumed[/] run {ev.run_id} (pid {d.get('pid')}){how}")

    def _server_adopted(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(
            f"  [bold yellow]⏵ server adopted[/] pid {d.get('pid')} on port {d.get('port')}: {escape(str(d.get('reason')))}"
        )

    def _server_lost(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(f"  [red]server lost[/] pid {d.get('pid')}: {escape(str(d.get('reason')))}")

    def _experiment_relaunched(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(f"  [yellow]relaunching[/] {d.get('experiment_id')}: {escape(str(d.get('reason')))}")

    def _experiment_recovered(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(f"  [yellow]recovered[/] {d.get('experiment_id')}: {escape(str(d.get('reason')))}")

    def _slurm_job_pending(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        """What a queued Slurm job waits for (the scheduler's reason, its place in the queue)."""
        place = f", {d['position']} of {d['pending_jobs']} pending" if d.get("position") else ""
        limit = f" (gives up at {d['limit_s']:.0f} s)" if d.get("limit_s") else ""
        self._p(
            f"  [yellow]⏳ Slurm job {d.get('job_id')}[/] ({escape(str(d.get('what') or 'job'))}) pending in partition "
            f"{escape(str(d.get('partition')))}: reason {escape(str(d.get('reason') or 'none given'))}{place}; "
            f"waited {float(d.get('waited_s') or 0):.0f} s{limit}"
        )

    def _server_launched(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(f"  ⏵ server launched on port {d.get('port')} [dim](log {escape(str(d.get('log')))})[/]")

    def _server_ready(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        if self.launch_progress:
            return
        if d.get("stages"):  # the live display's summary line, as it was shown
            self._p(summary_line("ready", sum(d["stages"].values()), d["stages"], None))  # the display's clock
            return
        self._p(f"  [green]✓ ready[/] after {d.get('after_s', 0):.2f} s wall")

    def _server_crashed(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        code = d.get("exit_code")
        how = f"exit code {code}" if code is not None else "still running; stopped by hypoloop"
        if self.launch_progress:  # the progress display's summary line said what happened and when
            self._p(f"    [dim]({how})[/]")
            return
        if d.get("stages") is not None or d.get("failed_at"):  # the live display's lines, as they were shown
            stages = d.get("stages") or {}
            after = sum(stages.values()) if stages else float(d.get("after_s") or 0)  # the display's clock
            self._p(summary_line(str(d.get("status")), after, stages, d.get("failed_at")))
            if d.get("fatal_text") and d.get("fatal_line") is not None:
                shown = {line for exp, line in self._shown_lines if exp == d.get("experiment_id")}
                said = failure_line(int(d["fatal_line"]), shown_line(str(d["fatal_text"])), shown)
                if said:
                    self._p(said)
            self._p(f"    [dim]({how})[/]")
            return
        self._p(f"  [red]✗ {d.get('status')}[/] before ready ({how})")

    _server_timeout = _server_crashed

    def _server_stopped(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(
            f"  ■ server stopped ({'verified' if d.get('verified') else '[red]NOT verified[/]'}), "
            f"{d.get('wall_s')} s wall"
        )

    def _observation(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        if "line" in d:
            self._shown_lines.add((d.get("experiment_id"), d["line"]))
            style = "green" if d.get("kind") == "ready" else "red"
            self._p(f"    [{style}]log:{d['line']}[/] {escape(shown_line(d.get('text', '')))}")

    def _probe_result(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        style = "green" if d.get("ok") else "red"
        text = escape((d.get("text") or d.get("error") or "").replace("\n", " ⏎ "))
        self._p(f"  probe {d.get('probe_id')}: [{style}]{d.get('status')}[/] {text}")

    def _outcome(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        style = "green" if d["stage"] == "ok" else "red"
        t = d.get("timings", {})
        stage, summary = str(d["stage"]), str(d.get("summary", ""))
        if summary == stage or summary.startswith(f"{stage}; "):  # the summary opens with the stage: once
            summary = summary[len(stage) :].removeprefix("; ")
        self._p(
            f"  outcome: [{style}]{escape(stage)}[/]{'; ' + escape(summary) if summary else ''}  "
            f"[dim]({t.get('host_seconds', 0):.0f} host-s)[/]"
        )
        facts = d.get("facts") or {}
        shown = {
            k: facts[k]
            for k in ("kv_cache_dtype", "attention_backend", "nsa_decode_backend", "fp8_gemm_backend")
            if k in facts
        }
        if shown:
            self._p(f"  [dim]effective: {', '.join(f'{k}={v}' for k, v in shown.items())}[/]")

    def _design_none(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        self._p(f"  design: nothing more to run — {escape(str(d.get('reason')))}")

    def _error(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        if d.get("kind") == "input" and not self.show_input_errors:
            return  # the CLI reports bad input itself, as one line on stderr
        self._p(f"  [bold red]error:[/] {escape(str(d.get('message')))}")

    def _conclusion(self, ev: TranscriptEvent, d: dict[str, Any]) -> None:
        if d.get("status") == "error":  # the error event already said what went wrong
            return
        rows = answer_rows(d)
        if rows:
            self.console.print()
            root = d.get("root_cause") or {}
            self._p(f"  [bold green]✓ answer[/] ({d['status']}): {escape(str(root.get('statement') or 'the fix below works'))}")
            for key, value in rows:
                self._p(f"  [bold]{key}[/]: {escape(value)}")
            command = self._working_command()
            if command:
                self._p("  [bold]launch command that worked[/] (copy-paste):")
                # no box and no hard wrap, so it pastes into a shell as printed
                indented = "\n".join("    " + line for line in command.split("\n"))  # pastes the same
                self.console.print(escape(indented), soft_wrap=True, highlight=False)
        self.console.print(conclusion_panel(d, answered=bool(rows)))

    def _working_command(self) -> str:
        if self.run is None or self.command_for is None:
            return ""
        try:
            return self.command_for(self.run)
        except (KeyError, ValueError):  # FindingsWriteError is a ValueError: no working configuration
            return ""


def change_as_command(change: dict[str, Any]) -> str:
    """A change as the words a user adds to (or removes from) the launch command: ``--kv-cache-dtype
    bf16``, ``NCCL_P2P_DISABLE=1``, ``drop --enable-foo``, ``unset FOO``."""
    name, after = str(change.get("name")), change.get("after")
    if after in (None, False):
        return f"{'drop' if change.get('kind') == 'flag' else 'unset'} {name}"
    return command_text({name: after}) if change.get("kind") == "flag" else command_text({}, {name: after})


def answer_rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    """The answer of a conclusion (``Conclusion.model_dump()``), first thing a reader sees: the root fix
    (with any blocker it needs) apart from the workarounds; empty when the run found no fix."""
    fix = d.get("fix")
    if not fix:
        return []
    before = fix.get("before")
    shown_before = "unset" if before is None else ("on" if before is True else str(before))
    needs = [change_as_command(b) for b in d.get("blockers", [])]
    fix_text = change_as_command(fix) + (f" (with {', '.join(needs)})" if needs else "") + f" — was {shown_before}"
    rows = [("fix" if not d.get("root_cause") else "root fix", fix_text)]
    for a in d.get("alternatives", []):
        if not a.get("workaround"):
            rows.append(("also a root fix", alternative_text(a)))
    for a in d.get("alternatives", []):
        if a.get("workaround"):
            rows.append(("workaround", alternative_text(a)))
    return rows


def conclusion_panel(d: dict[str, Any], *, answered: bool = False) -> Panel:
    """A rich panel of a conclusion dict (``Conclusion.model_dump()``); ``answered``: the answer (fix,
    alternatives) was printed above it, so the panel holds the evidence only."""
    t = Table.grid(padding=(0, 1))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")  # a word wider than the column (a path, an id) folds, never ends in '…'
    t.add_row("status", d["status"])
    if d.get("root_cause") and not answered:
        t.add_row(
            "root cause", f"{escape(d['root_cause']['statement'])} [dim]({d['root_cause']['component']})[/]"
        )
    for b in d.get("blockers", []):
        t.add_row("blocker fixed", escape(f"{change_text(b)} (adopted first; the fix was found and confirmed with it in place)"))
    if d.get("fix") and not answered:
        t.add_row("fix", escape(change_text(d["fix"])))
    if d.get("confirmation_experiment_id"):
        t.add_row("confirmed by", d["confirmation_experiment_id"])
    for a in d.get("alternatives", []) if not answered else []:
        t.add_row("alternative", escape(alternative_text(a)))
    # Hypotheses ruled out by the same evidence are one row (a failure while Python imports a package rules
    # out every flag's component at once; a row each repeated one sentence two dozen times).
    ruled: dict[str, list[str]] = {}
    for r in d.get("refuted", []):
        ruled.setdefault(r["evidence"][0]["detail"] if r.get("evidence") else "", []).append(str(r["id"]))
    for why, names in ruled.items():
        who = names[0] if len(names) == 1 else f"{', '.join(names)} ({len(names)} hypotheses)"
        t.add_row("ruled out", f"{escape(who)}: {escape(shown_line(why))}")
    # Open hypotheses left for the same reason are one row (an isolated run often leaves a dozen
    # "deprioritised: the symptom went away with ..." ones; a row each buried the result).
    by_why: dict[str, list[dict[str, Any]]] = {}
    for u in d.get("untested", []):
        by_why.setdefault(str(u["why"]), []).append(u)
    for why, group in by_why.items():
        if len(group) == 1:
            u = group[0]
            t.add_row("open", escape(f"{u['id']} (p={u['posterior']:.2f}, {why})"))
        else:
            ids = ", ".join(str(u["id"]) for u in group)
            top = max(float(u["posterior"]) for u in group)
            many = why.replace("which this hypothesis does not explain", "which none of them explains")
            t.add_row("open", escape(f"{ids} ({len(group)} hypotheses, p ≤ {max(top, 0.01):.2f} each): {many}"))
    for r in d.get("rejected", []):
        t.add_row("rejected", escape(f"{r.get('change') or r['experiment_id']}: {r['reason']}"))
    for e in d.get("edited", []):
        t.add_row(
            "edited",
            escape(f"ran {change_text(e.get('change'))} (proposed: {change_text(e.get('proposed'))})"),
        )
    if d.get("reason"):
        t.add_row("reason", escape(d["reason"]))
    t.add_row("cost", f"{count(d['launches'], 'launch')}, {count(d['host_seconds'], 'host-second', fmt='.0f')}")
    style = {"isolated": "green", "not_isolated": "yellow", "stopped": "yellow", "error": "red"}[d["status"]]
    return Panel(t, title="conclusion", border_style=style)
