"""What reading the installed source found: leads (a variable or flag guarding the failing line), the
frames read, and the reading as a whole."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tools.tracebacks import MissingImport

LeadValue = str | bool | None


class SourceLead(BaseModel):
    """An environment variable or server argument in a condition on the path to a failing line.

    ``kind``/``name``: ``env`` and the variable's name, or ``flag`` and the canonical flag name from the
    host's ``--help`` (``--attention-backend``; when the catalog has no flag with that dest, the dest
    spelled as a flag and ``known_flag`` False). ``dest`` is the server-argument field.
    ``value``: the value that flips the condition, where it can be read off it (``True`` for a switch
    to turn on); ``unset``: removing the variable or flag flips it; ``avoid``: the value(s) the failing
    path needs, so any other value flips it (``value`` None then). ``polarity``: what the condition
    evaluated to on the failing path (None: not known, e.g. inside a called helper); ``certain``:
    the flip is read exactly and changing this variable alone flips the condition (not one operand of
    an ``or`` that held).
    ``path``/``line``/``condition``: the guard (file on the host, 1-based line, source text);
    ``via``: the hops from the guard to the variable (``file:line: text``); ``frame``: the frame's index
    (0 = innermost frame read), ``function`` its function.
    """

    kind: Literal["env", "flag"]
    name: str
    dest: str | None = None
    known_flag: bool = True
    value: LeadValue = None
    unset: bool = False
    avoid: list[str] = Field(default_factory=list)
    polarity: bool | None = None
    certain: bool = False
    path: str
    line: int
    condition: str
    guard: str = "if"
    via: list[str] = Field(default_factory=list)
    frame: int = 0
    function: str = ""

    def where(self) -> str:
        """``path:line``."""
        return f"{self.path}:{self.line}"

    def flip_text(self) -> str:
        """What flips the condition, for people: ``=0``, ``unset``, ``!= triton``, ``(on)``."""
        if self.unset:
            return "unset"
        if self.value is True:
            return "(on)"
        if self.value is not None:
            return f"={self.value}"
        if self.avoid:
            return "!= " + " / ".join(self.avoid)
        return "changed"


class FrameRead(BaseModel):
    """One frame the reader looked at: where, and what became of it (``read``, ``missing`` on the
    host, ``unparsable``, ``moved`` when the printed source line was found elsewhere, ``differs`` when
    it was not found at all)."""

    path: str
    line: int
    function: str
    status: Literal["read", "moved", "missing", "unparsable", "differs"]
    located: int | None = None


class SourceReading(BaseModel):
    """What reading the installed source at a failure's tracebacks found (no launch).

    ``exception``: the innermost traceback's ``Type: message``; ``leads`` innermost frame first;
    ``missing``: the module/package/library a failed import names; ``files_read``: how many files were
    read on the host.
    """

    exception: str = ""
    frames: list[FrameRead] = Field(default_factory=list)
    leads: list[SourceLead] = Field(default_factory=list)
    missing: MissingImport | None = None
    files_read: int = 0

    def avoidable(self) -> bool:
        """Whether some variable or flag guards the failing line (a lead exists)."""
        return bool(self.leads)
