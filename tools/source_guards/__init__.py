"""Read the installed source at a failure's traceback frames and find what guards the failing line.

When a traceback runs through SGLang or a kernel package's Python code, an engineer opens the installed
file at the failing frame and reads which branch conditions lead there; a condition that reads an
environment variable or a server argument names a one-variable experiment. This module does that
without launching anything:

1. `read_guards` parses the log's tracebacks (`tools.tracebacks`) and takes the innermost frames whose
   files belong to SGLang or a kernel package (`PACKAGES`).
2. Each file is read on the host (`Host.read_text`: this machine or over SSH) and parsed with `ast`. The
   failing line is checked against the source line the traceback printed; when they differ (another
   release's traceback), the nearest line with that text in the same function is used, or the line
   with that text when it is unique in the file (a function renamed since); otherwise the frame is
   reported as ``differs`` and not guessed.
3. The conditions on the path to that line: enclosing ``if``/``elif``/``else`` and ``while``, earlier
   ``if ...: return/raise`` exits of the same blocks, the failing ``assert`` itself, and conditional
   expressions in the failing statement. Each has a polarity: what it evaluated to on the failing path.
4. The names in a condition are resolved across a few hops (`max_hops`) of local and module-level
   assignments, ``self.x`` attributes (also ``p.x`` for a parameter annotated with a class, such as
   ``scheduler: Scheduler``), function and method calls (return values and the conditions guarding
   them) and imports (other files read on the host, within `max_files`), down to
   - environment variables: ``os.getenv("X")``, ``os.environ["X"]`` / ``.get("X")``, ``"X" in
     os.environ``, SGLang's ``envs.X.get()`` / ``.is_set()`` (``srt/environ.py``, whose declaration
     gives the variable's type), and helpers such as ``get_bool_env_var("X")`` / ``get_int_env_var``
     (``srt/utils/common.py``): any call whose name speaks of the environment and whose first argument
     is an upper-case name;
   - server arguments: ``server_args.x``, ``self.server_args.x``, ``global_server_args_dict["x"]``
     (SGLang 0.4-0.5.9), ``get_global_server_args().x`` (0.5.x), the 0.5.23 namespace bags
     ``get_exec().kernel.x``, ``get_schedule().x``, ... (``srt/runtime_context.py``), and
     ``getattr(server_args, "x")``; the field name ``x`` is the argparse dest, turned into a flag
     through the host's ``--help`` catalog.
5. Each such name becomes a `SourceLead`: kind, name, the value that flips the condition where the
   comparison shows it (``== "triton"`` on the failing path: anything else, recorded as ``avoid``;
   ``!= "triton"``: ``triton``; a true boolean: off), the file and line of the condition and its text.

An ``ImportError`` / ``ModuleNotFoundError`` / "could not load ... library" is read as well
(`SourceReading.missing`): the guards of the import line say whether a variable avoids it.

Modules: ``reader`` (steps 1 and 5, ``read_guards``), ``files`` (step 2: files read on the host and
their imports), ``guards`` (step 3), ``resolve`` (step 4), ``reads`` (what reads a variable),
``flips`` (the value that flips a condition), ``syntax`` (parsed files), ``models`` (what is found).
"""

from __future__ import annotations

from tools.source_guards.models import FrameRead, LeadValue, SourceLead, SourceReading
from tools.source_guards.reader import SourceReader, read_guards
from tools.source_guards.reads import PACKAGES, ROOT_CALLS, ROOT_NAMES, ROOT_WRAPPERS

__all__ = [
    "PACKAGES",
    "ROOT_CALLS",
    "ROOT_NAMES",
    "ROOT_WRAPPERS",
    "FrameRead",
    "LeadValue",
    "SourceLead",
    "SourceReader",
    "SourceReading",
    "read_guards",
]
