"""Flag catalog: what a launcher's ``--help`` says it accepts, and checks of proposed flag values.

The catalog is read from argparse help text (``python -m sglang.launch_server --help``), never by
importing SGLang: importing ``sglang.srt.server_args`` pulls in torch and triton, and the host that
runs the server is usually not the host that runs the agent.

Facts about the help format (argparse in CPython 3.8-3.14, SGLang 0.5.x ``ServerArgs.add_cli_args``):

- SGLang builds a plain ``argparse.ArgumentParser`` without option groups or
  ``ArgumentDefaultsHelpFormatter``, so most defaults are not printed; where the help prose says
  ``Defaults to X`` / ``Default is 'X'`` / ``'X' (default)`` we take it. Other launchers (the lab, newer
  releases) may use option groups and ``(default: X)`` suffixes; both layouts parse.
- An option with aliases renders as ``--tp-size TP_SIZE, --tp TP_SIZE`` up to Python 3.12 and as
  ``--tp-size, --tp TP_SIZE`` from 3.13.
- Help starts on the invocation line when the invocation fits before the help column, else on the
  next line. Some formatters wrap long ``{a,b,...}`` choice lists onto following lines.
- Deprecated flags say so in their help (``[Deprecated] Use --dsa-decode-backend instead.``,
  ``Note: --x is deprecated now.``).
"""

from __future__ import annotations

from tools.flags.catalog import FlagCatalog, lists_choices
from tools.flags.help import parse_help
from tools.flags.load import load_flag_catalog
from tools.flags.server_args import catalog_from_server_args, non_default_flags
from tools.flags.spec import (
    AmbiguousFlagError,
    CatalogLoadError,
    FlagError,
    FlagSpec,
    FlagValue,
    InvalidFlagValueError,
    UnknownFlagError,
    ValueType,
    documented_choices,
)
from tools.flags.values import value_words

__all__ = [
    "AmbiguousFlagError",
    "CatalogLoadError",
    "FlagCatalog",
    "FlagError",
    "FlagSpec",
    "lists_choices",
    "FlagValue",
    "InvalidFlagValueError",
    "UnknownFlagError",
    "ValueType",
    "documented_choices",
    "catalog_from_server_args",
    "non_default_flags",
    "load_flag_catalog",
    "parse_help",
    "value_words",
]
