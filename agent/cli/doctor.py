"""``hypoloop doctor``: the host's fingerprint in one screen; launches nothing."""

from __future__ import annotations

import json
import re
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agent.cli.common import (
    DEFAULT_LAUNCHER,
    CaseHostOpt,
    HostOpt,
    HostOptions,
    InsecureOpt,
    JsonResult,
    KeyOpt,
    KnownOpt,
    LauncherOpt,
    PythonOpt,
    fail,
    launcher_words,
    piped_console,
    read_case,
    redacted,
    with_host_options,
)
from agent.domain.case import Case, CaseError, LauncherSpec, ModelSpec
from tools.connect import connect_host
from tools.fingerprint import HostFingerprint, arch_label, fingerprint, package_versions, runtime_versions
from tools.host import Host, HostError, expand_argv
from tools.installed import IMPORT_NAMES_NOTE, import_names_warning
from tools.sanitize import visible


def doctor(
    host: HostOpt = None,
    case: CaseHostOpt = None,
    launcher: LauncherOpt = DEFAULT_LAUNCHER,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
    ssh_key: KeyOpt = None,
    known_hosts: KnownOpt = None,
    insecure_accept_host_key: InsecureOpt = False,
    remote_python: PythonOpt = None,
) -> None:
    """The host's fingerprint in one screen: GPUs (or CPU only), driver, CUDA/ROCm, SGLang and its kernel
    packages' versions, and `python -m sglang.check_env` where it runs. Launches nothing."""
    from agent.run.runtime import ssh_options

    try:
        c = (
            read_case(case, host)
            if case
            else Case(name="doctor", model=ModelSpec(path="-"), launcher=LauncherSpec(argv=launcher_words(launcher)))
        )
        c = with_host_options(c, HostOptions(host, ssh_key, known_hosts, insecure_accept_host_key, remote_python))
        h = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
    except (CaseError, HostError) as exc:
        fail(str(exc))
    missing = _launcher_missing(h, c)
    fp = _host_fingerprint(h, c)
    if missing is not None:
        fp.notes.append(f"command not found: {missing}")
    if json_out:
        print(json.dumps(redacted(_doctor_json(c, fp))))
        JsonResult.printed = True  # the launcher's failure below is in that line already: no second one
        _fail_launcher(missing, c, case)
        return
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for k, v in _doctor_rows(c, fp):
        t.add_row(escape(k), escape(v))
    console = piped_console()
    with console.capture() as shown:
        console.print(t)
    # the grid pads every cell to its column's width: a line ends where its text does
    sys.stdout.write("".join(ln.rstrip() + "\n" for ln in shown.get().splitlines()))
    _fail_launcher(missing, c, case)


def _launcher_missing(h: Host, c: Case) -> str | None:
    """The launcher's program (its first word, ``{python}`` filled in) when the host has no such command
    (the shell's ``command -v``), else None. Runs nothing of the launcher; None when the host cannot be asked
    (the fingerprint then says why)."""
    argv = expand_argv(c.launcher.argv, h)
    if not argv:
        return None
    try:
        found = h.run(["sh", "-c", 'command -v "$1" >/dev/null 2>&1', "sh", argv[0]], timeout=30)
    except HostError:
        return None
    return argv[0] if found.returncode != 0 else None


def _fail_launcher(missing: str | None, c: Case, case: str | None) -> None:
    """A launcher the host does not have is a failed check: one line, exit 1 (after the screen)."""
    if missing is not None:
        given = "the case's [launcher] argv" if case else f"--launcher {' '.join(c.launcher.argv)!r}"
        fail(f"{given}: command not found on host {c.host.target}: {missing}; give the launcher command as "
             f"the host runs it, e.g. {DEFAULT_LAUNCHER}", code=1)


def _host_fingerprint(h: Host, c: Case) -> HostFingerprint:
    """The host's fingerprint, then the host closed; when check_env gives no SGLang version, the version
    command is asked, and its failure is a note. A host that cannot be asked: one line, exit 1."""
    try:
        fp = fingerprint(h, gpu_query_argv=c.launcher.gpu_query_argv, version_argv=None,
                         check_env_argv=c.launcher.check_env() or None,
                         import_names_argv=c.launcher.import_names() or None)  # fmt: skip
        if fp.sglang_version is None:  # no check_env: ask the version command; its failure is a finding
            try:
                fp.sglang_version = fingerprint(
                    h, gpu_query_argv=["true"], version_argv=c.launcher.version_argv
                ).sglang_version
            except HostError as exc:
                fp.notes.append(_no_version_note(c, str(exc)))
    except HostError as exc:
        fail(str(exc), code=1)
    finally:
        h.close()
    return fp


def _no_version_note(c: Case, error: str) -> str:
    """One line on a version command that failed: the program it ran (not the script it passed, which
    is hypoloop's own snippet) and its exit code."""
    display = c.launcher.engine_impl().display
    code = re.search(r"exit code (\d+)", error)
    program = c.launcher.version_argv[0] if c.launcher.version_argv else "the version command"
    exited = f" (exit code {code.group(1)})" if code else ""
    if re.search(r"is installed|No module named|PackageNotFoundError", error):
        return (f"no {display} version: {display} is not installed in {program}{exited}; install it there, or "
                "give --launcher the Python that has it")
    return f"no {display} version: its version command ({program}) failed{exited}"


def _doctor_json(c: Case, fp: HostFingerprint) -> dict[str, Any]:
    """``doctor --json``: the host, its GPUs (None: none), driver, runtime and package versions, notes."""
    return {
        "host": c.host.target,
        "gpu_vendor": fp.gpu_vendor,
        "gpus": None if not fp.gpu_count else {
            "name": fp.gpu_name, "count": fp.gpu_count, "compute_capability": fp.compute_capability,
            "arch": fp.gpu_arch, "memory_total_mib": fp.memory_total_mib,
        },
        "driver_version": fp.driver_version,
        "runtime": runtime_versions(fp),
        "sglang_version": fp.sglang_version,
        "packages": package_versions(fp),
        "check_env": fp.check_env,
        "notes": fp.notes,
    }  # fmt: skip


def _doctor_rows(c: Case, fp: HostFingerprint) -> list[tuple[str, str]]:
    """The fingerprint as (label, value) rows for a person, notes last."""
    rows: list[tuple[str, str]] = [("host", c.host.target)]
    if fp.gpu_count:
        where = arch_label(fp.model_dump())
        mem = f", {fp.memory_total_mib} MiB each" if fp.memory_total_mib else ""
        rows.append(("GPUs", f"{fp.gpu_count} × {fp.gpu_name} ({where}{mem})"))
    else:
        rows.append(("GPUs", "none found: a CPU-only host"))
    rows.append(("driver", fp.driver_version or "—"))
    rows += [(k, v) for k, v in runtime_versions(fp).items()]
    rows.append(("SGLang", fp.sglang_version or "not found"))
    pkgs = package_versions(fp)
    if pkgs:
        rows.append(("packages", ", ".join(f"{k} {v}" for k, v in pkgs.items())))
    rows.append(("check_env", "ran" if fp.check_env else "did not run"))
    missing = [n.removeprefix("command not found: ") for n in fp.notes if n.startswith("command not found: ")]
    if missing:
        rows.append(("note", f"not found on the host: {', '.join(missing)}"))
    if (names := import_names_warning(fp.notes)) is not None:
        rows.append(("warning", visible(names)))
    for note in fp.notes:
        if not note.startswith(("command not found: ", IMPORT_NAMES_NOTE)):
            rows.append(("note", visible(note)))
    return rows
