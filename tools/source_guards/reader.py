"""The reader: the frames of a failure's tracebacks, the guards of each failing line, and the leads they
resolve to (``read_guards``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from tools.flags import FlagCatalog
from tools.source_guards.files import SourceFiles
from tools.source_guards.flips import Want, env_flip, flag_flip
from tools.source_guards.guards import Guard, guards_on_path, locate
from tools.source_guards.models import FrameRead, SourceLead, SourceReading
from tools.source_guards.resolve import Found, Resolver
from tools.tracebacks import Frame, Traceback, missing_import, parse_tracebacks


class SourceReader:
    """Reads installed source files through `read` (a host's `read_text`) and finds guard leads.

    `catalog`: the host's flag catalog (dest -> flag); without it, server-argument dests are spelled as
    flags and marked unknown. `max_files`: files read on the host at most (each is one SFTP round trip
    over SSH); `max_hops`: assignments/calls/imports followed from a condition to a variable.
    """

    def __init__(
        self,
        read: Callable[[str], str | None],
        catalog: FlagCatalog | None = None,
        *,
        max_files: int = 24,
        max_hops: int = 4,
    ) -> None:
        self.catalog = catalog
        self.files = SourceFiles(read, max_files=max_files)
        self.resolver = Resolver(self.files, catalog, max_hops=max_hops)

    def read(self, tracebacks: list[Traceback], *, max_frames: int = 6) -> SourceReading:
        """Leads from the innermost `max_frames` package frames of each traceback (innermost first)."""
        reading = SourceReading()
        if tracebacks:
            last = tracebacks[-1]
            reading.exception = f"{last.exception}: {last.message}" if last.exception else last.message
        seen: set[tuple[Any, ...]] = set()
        frame_no = 0
        for tb in reversed(tracebacks):  # the last printed is the one that ended the process
            # a native frame (a crash's compiled stack) has no Python source to read
            frames = [f for f in tb.frames if not f.native]
            picked = [f for f in frames if self.files.package_root(f.path) is not None][:max_frames]
            for i, frame in enumerate(picked):
                inner = picked[i - 1] if i > 0 else None
                innermost = i == 0 and frames and frames[0] is frame
                for lead in self._read_frame(frame, inner, bool(innermost), tb, reading, frame_no):
                    key = (
                        lead.kind,
                        lead.name,
                        lead.value,
                        lead.unset,
                        tuple(lead.avoid),
                        lead.path,
                        lead.line,
                    )
                    if key not in seen:
                        seen.add(key)
                        reading.leads.append(lead)
                frame_no += 1
        reading.files_read = self.files.files_read
        return reading

    def _read_frame(
        self,
        frame: Frame,
        inner: Frame | None,
        innermost: bool,
        tb: Traceback,
        reading: SourceReading,
        frame_no: int,
    ) -> list[SourceLead]:
        mod = self.files.module(frame.path)
        if mod is None:
            status: Literal["missing", "unparsable"] = (
                "unparsable" if frame.path in self.files.unparsable else "missing"
            )
            reading.frames.append(
                FrameRead(path=frame.path, line=frame.line, function=frame.function, status=status)
            )
            return []
        line = locate(mod, frame)
        if line is None:
            reading.frames.append(
                FrameRead(path=frame.path, line=frame.line, function=frame.function, status="differs")
            )
            return []
        reading.frames.append(
            FrameRead(
                path=frame.path,
                line=frame.line,
                function=frame.function,
                status="read" if line == frame.line else "moved",
                located=line,
            )
        )
        leads: list[SourceLead] = []
        for guard in guards_on_path(mod, line, inner, innermost, tb):
            for found in self.resolver.resolve(guard.test, Want(guard.pol), guard.scope, 0, []):
                lead = self._lead(found, guard, frame, frame_no)
                if lead is not None:
                    leads.append(lead)
        return leads

    def _lead(self, found: Found, guard: Guard, frame: Frame, frame_no: int) -> SourceLead | None:
        mod = guard.scope.module
        base: dict[str, Any] = {
            "polarity": found.want.pol,
            "certain": found.want.sure and found.want.pol is not None,
            "path": mod.path,
            "line": guard.test.lineno,
            "condition": mod.segment(guard.test),
            "guard": guard.kind,
            "via": found.via,
            "frame": frame_no,
            "function": frame.function,
        }
        if found.kind == "env":
            return SourceLead(kind="env", name=found.name, **base, **env_flip(found.want, found.env_type))
        spec = self.resolver.dests.get(found.name)
        if self.catalog is not None and spec is None:
            return None  # not a server argument on this host (a field of some other object)
        flag = spec.name if spec is not None else "--" + found.name.replace("_", "-")
        switch = spec is not None and not spec.takes_value
        return SourceLead(
            kind="flag",
            name=flag,
            dest=found.name,
            known_flag=spec is not None,
            **base,
            **flag_flip(found.want, switch),
        )


def read_guards(
    read: Callable[[str], str | None],
    log_text: str,
    catalog: FlagCatalog | None = None,
    *,
    max_frames: int = 6,
    max_files: int = 24,
    max_hops: int = 4,
) -> SourceReading:
    """Read the installed source at the tracebacks of `log_text` and return the leads found.

    `read(path)` returns a file's text on the host or None (`Host.read_text`); `catalog` is the host's
    flag catalog. Frames: the innermost `max_frames` per traceback whose files belong to `PACKAGES`.
    No launch; at most `max_files` files are read. A log without a traceback gives an empty reading
    (with `missing` still set when an import failure is logged without one).
    """
    tracebacks = parse_tracebacks(log_text)
    reader = SourceReader(read, catalog, max_files=max_files, max_hops=max_hops)
    reading = reader.read(tracebacks, max_frames=max_frames)
    reading.missing = missing_import(log_text, tracebacks)
    return reading
