"""A start-up table too large for the device, shrunk by a setting that sizes it.

When the allocation that failed is a tensor whose shape follows settings (knowledge/budgets.toml
``[[table]]``: SGLang's request-to-token table has a row per request served at once and a column per token
of the context) and PyTorch says it asked for more than a share of the device it could ever get, an
engineer does not touch the memory fraction or a backend: no fraction gives one tensor more than the device
has. They shrink the setting that sizes it, to a value at which the table takes a small share of the
device, and keep the rest: a model whose own window is 10M tokens served at a 1M context on an 80 GiB GPU.

The figures are PyTorch's own ("Tried to allocate 80.04 GiB. GPU 0 has a total capacity of 79.19 GiB of
which 51.77 GiB is free": knowledge/signatures.toml ``cuda_out_of_memory`` and ``cuda_oom_capacity``); the
allocating frame is the OOM traceback's innermost engine frame.
"""

from __future__ import annotations

import math
import re

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.budgets import Table, load_budgets
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon
from tools.tracebacks import Frame

__all__ = ["TableSizeGenerator"]

#: Weight of "the failing allocation is a table a setting sizes, larger than the device could give": the
#: allocation's own figures and frame say so, as strong as a budget the engine calls short
#: (``agent.planning.generators.budgets.WEIGHT``).
WEIGHT = 0.3
#: The share of the device's total capacity the shrunk table may take: the rest is for the weights and the
#: KV cache the table indexes.
SHARE = 0.1
#: What a shrunk size must stay above: a context or a request count below this serves nothing useful.
SMALLEST = 1024
_UNITS = {"KiB": 2**-20, "MiB": 2**-10, "GiB": 1.0, "TiB": 2**10}


def _gib(text: str | None) -> float | None:
    """``"80.04 GiB"`` in GiB, or None."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]iB)\s*", text or "")
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def _rounded_down(value: float) -> int:
    """``value`` rounded down to one significant figure (a size an engineer writes: 1000000, 20000)."""
    if value < 1:
        return 0
    step = 10 ** int(math.floor(math.log10(value)))
    return int(value // step * step)


class TableSizeGenerator:
    """One candidate per setting that sizes the table whose allocation failed: ``shrink:NAME``."""

    name = "tables"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Smaller values of the settings that size a start-up table larger than the device can give."""
        facts = inp.evidence.facts
        alloc, capacity = _gib(facts.get("oom_alloc")), _gib(facts.get("oom_capacity"))
        tables = load_budgets().table
        if inp.evidence.stage == "ok" or not tables or alloc is None or capacity is None:
            return []
        hit = self._allocating(inp, tables)
        if hit is None:
            return []
        table, frame = hit
        ratio = capacity * SHARE / alloc
        if ratio >= 1:
            return []  # the table is small beside the device: something else took the memory
        out = []
        for sizer in table.sized_by:
            h = self._candidate(inp, table, frame, sizer.name, sizer.from_checkpoint, alloc, capacity, ratio)
            if h is not None:
                out.append(h)
        return out

    @staticmethod
    def _allocating(inp: GeneratorInput, tables: list[Table]) -> tuple[Table, Frame] | None:
        """The table whose allocation the failing run's out-of-memory traceback was in, and its frame."""
        for tb in inp.evidence.tracebacks:
            if "out of memory" not in f"{tb.exception} {tb.message}".lower():
                continue
            for frame in tb.frames:  # innermost first
                for t in tables:
                    modules, code = t.patterns
                    if frame.module and modules.search(frame.module) and code.search(frame.code or ""):
                        return t, frame
        return None

    def _candidate(self, inp: GeneratorInput, table: Table, frame: Frame, name: str, key: str, alloc: float,
                   capacity: float, ratio: float) -> Hypothesis | None:
        spec = canon(inp.flags, name)
        if inp.flags is not None and spec is None:
            return None  # the host's engine has no such flag
        flag = spec.name if spec else name
        held = inp.baseline.value("flag", flag)
        checkpoint = inp.fingerprint.checkpoint if inp.fingerprint else {}
        source = "the baseline" if held not in (None, True, False) else f"the model's {key}" if key else ""
        now = held if held not in (None, True, False) else checkpoint.get(key) if key else None
        try:
            current = float(str(now))
        except ValueError:
            return None  # the engine chooses it and the log does not say what it chose
        new = _rounded_down(current * ratio)
        if new < SMALLEST or new >= current:
            return None
        where = f"{frame.module} line {frame.line}"
        return Hypothesis(
            id=f"shrink:{flag}",
            statement=f"The start-up table {table.id} ({where}) is sized by {flag} ({int(current)}, from {source}) "
            f"and asked for {alloc:.2f} GiB of a device of {capacity:.2f} GiB; at {flag} {new} it takes at most a "
            f"tenth of the device",
            component=f"memory.{table.id}",
            weight=WEIGHT,
            rationale="no memory fraction or backend gives one tensor more than the device has; a smaller value "
            "of a setting that sizes it does",
            generator=self.name,
            evidence=[Evidence(kind="fact", detail=f"the out-of-memory traceback allocates {table.id} at {where}: "
                               f"{alloc:.2f} GiB asked, {capacity:.2f} GiB in all", experiment_id=inp.evidence.experiment_id,
                               lines=[frame.log_line] if frame.log_line else [])],
            interventions=[Intervention(
                kind="flag", names=[flag], values=[str(new)], decisive=True, cost="low",
                note=f"{table.id} scaled to {SHARE:.0%} of the device ({table.source.split(' (')[0]})",
            )],
        )
