"""``hypoloop lab``: the built-in lab's worlds."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from agent.cli.common import (
    fail,
    piped_console,
)
from agent.review.render import print_hanging

lab_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="the built-in lab: simulated SGLang hosts, one world each (run one with `hypoloop run lab:WORLD`).",
)


@lab_app.command("list")
def lab_list(json_out: Annotated[bool, typer.Option("--json", help="one JSON list")] = False) -> None:
    """The lab worlds, each with its one-line description (the `description` of its case.toml)."""
    import tomllib

    from agent.domain.case import lab_worlds_dir

    worlds = lab_worlds_dir()
    if worlds is None:
        fail("the lab is not installed (pip install -e . from the repository)")
    rows: list[dict[str, str]] = []
    for path in sorted(worlds.glob("*/case.toml")):
        try:
            description = str(tomllib.loads(path.read_text(encoding="utf-8")).get("description") or "")
        except (OSError, tomllib.TOMLDecodeError) as exc:
            description = f"(unreadable case file: {exc})"
        rows.append({"world": path.parent.name, "case": f"lab:{path.parent.name}", "description": description})
    if json_out:
        print(json.dumps(rows))
        return
    console = piped_console()
    for r in rows:
        print_hanging(console, f"[bold]{escape(r['case'])}[/]  {escape(r['description'])}", hang=4)

