"""The ``hypoloop`` command line: one module per command over the shared ``common`` (the typer app,
consoles, exit codes, shared options) and ``drive`` (driving a run for ``run`` and ``resume``);
``entry.main`` is the console script.

Exit codes: 0 finished (isolated, not isolated or stopped), 1 the run ended in error, 2 bad input
(case file, log file, flags, a refused answer), 3 waiting for an approval with no terminal attached, 4 the
run is in use by another hypoloop process, 130 interrupted.
"""

from __future__ import annotations

from agent.cli import analyze, doctor, findings, flags, lab, replay, report, resume, run, runs, show
from agent.cli.common import app, state_dir
from agent.cli.entry import main

# The commands in the order the help lists them.
app.command()(run.run)
app.command()(analyze.analyze)
app.command()(flags.flags)
app.command()(replay.replay)
app.command()(report.report)
app.command()(doctor.doctor)
app.add_typer(lab.lab_app, name="lab")
app.add_typer(findings.findings_app, name="findings")
app.command("runs")(runs.runs)
app.command()(show.show)
app.command()(resume.resume)

__all__ = ["app", "main", "state_dir"]
