"""``hypoloop flags``: the flag catalog of a host's engine, parsed from its own help."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from agent.cli.common import (
    DEFAULT_LAUNCHER,
    CaseHostOpt,
    HostOpt,
    HostOptions,
    InsecureOpt,
    KeyOpt,
    KnownOpt,
    LauncherOpt,
    PythonOpt,
    fail,
    launcher_words,
    piped_console,
    read_case,
    read_text,
    state_dir,
    with_host_options,
)
from agent.domain.case import Case, CaseError, LauncherSpec, ModelSpec
from agent.review.render import print_hanging
from agent.review.wording import count
from tools.connect import connect_host
from tools.engines import model_flags
from tools.flags import FlagCatalog, FlagError, load_flag_catalog, parse_help
from tools.host import HostError, expand_argv


def flags(
    host: HostOpt = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="a saved `launch_server --help` output")
    ] = None,
    case: CaseHostOpt = None,
    launcher: LauncherOpt = DEFAULT_LAUNCHER,
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    ssh_key: KeyOpt = None,
    known_hosts: KnownOpt = None,
    insecure_accept_host_key: InsecureOpt = False,
    remote_python: PythonOpt = None,
) -> None:
    """The flag catalog of a host's engine, parsed from its own help (SGLang `launch_server --help`,
    vLLM `vllm serve --help=all`; the engine is the case's, or told from `--launcher`)."""
    from agent.run.runtime import ssh_options
    if from_file is not None and (host is not None or case is not None):
        fail("--from-file reads a saved help text; give it alone, or --host/--case to ask a host's engine")
    try:
        if from_file is not None:
            catalog: FlagCatalog = parse_help(read_text(from_file, what="help text"), source=str(from_file))
            if not any(catalog.has(f) for f in model_flags()):
                fail(
                    f"{from_file}: no --model-path or --model flag: expected the output of "
                    "`launch_server --help` or `vllm serve --help=all`"
                )
        elif case is not None or host is not None:
            c = (
                read_case(case, host)
                if case
                else Case(
                    name="flags", model=ModelSpec(path="-"), launcher=LauncherSpec(argv=launcher_words(launcher))
                )
            )
            c = with_host_options(c, HostOptions(host, ssh_key, known_hosts, insecure_accept_host_key, remote_python))
            h = connect_host(c.host.target, env=c.host.env, ssh=ssh_options(c), slurm=c.host.slurm)
            try:
                argv = expand_argv(c.launcher.argv, h)
                catalog = load_flag_catalog(
                    h, argv, cache_dir=state_dir() / "flag-cache", version=None,
                    help_args=c.launcher.engine_impl().data.help_args,
                )
            finally:
                h.close()
        else:
            fail("give --host HOST, --case CASE or --from-file HELP.txt")
    except (CaseError, FlagError, HostError) as exc:
        fail(str(exc))
    if json_out:
        print(catalog.model_dump_json())
        return
    _print_flags(catalog)


def _print_flags(catalog: FlagCatalog) -> None:
    """The catalog for a person: a table when the terminal holds its names and aliases on one line each
    with room for the choices; otherwise a list, one flag a line (its names, value type, default) with
    its choices under it, since a five-column table at 80 columns cut the flag names (``--tokenizer-p…``).
    Piped with no COLUMNS: as on an 80-column terminal. Nothing is cut."""
    console = piped_console()
    specs = list(catalog.flags.values())
    widest = max((len(s.name) for s in specs), default=4) + max(
        (len(", ".join(s.aliases)) for s in specs), default=0
    )
    if console.width >= widest + 16 + 10 + 40:  # borders, the value column, 40 for choices and default
        t = Table("flag", "aliases", "value", "choices", "default", title=count(len(catalog.flags), "flag"))
        for col in t.columns:
            col.overflow = "fold"
        t.columns[0].no_wrap = t.columns[1].no_wrap = True
        for spec in specs:
            t.add_row(
                spec.name,
                ", ".join(spec.aliases),
                spec.value_type if spec.takes_value else "(switch)",
                escape(", ".join(spec.choices or [])),
                escape(str(spec.default or "")),
            )
        console.print(t)
        return
    console.print(count(len(catalog.flags), "flag"), style="bold", highlight=False)
    for spec in specs:
        value = spec.value_type if spec.takes_value else "(switch)"
        default = f"  [default: {spec.default}]" if spec.default else ""
        names = escape(", ".join([spec.name, *spec.aliases]))
        print_hanging(console, f"[bold]{names}[/]  {value}{escape(default)}")
        if spec.choices:
            print_hanging(console, f"    [dim]choices:[/] {escape(', '.join(spec.choices))}")

