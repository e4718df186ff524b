"""Toolchain: the failing error names an external tool a package runs (``knowledge/toolchain.toml``: Triton
runs its bundled ``ptxas``), so the package's copy of that tool is what failed; the variable the package
reads for the tool's path, pointed at the host toolkit's copy, is the test (issue 20, point 2: the error's
own words name what to change).

The host's toolkit root is what ``python -m sglang.check_env`` printed for the entry's ``home_key``
(``CUDA_HOME``), else the toolkit's documented default. Only on a platform the tool is built for, when the
baseline does not already set the variable, and when a kept log line of the failing launch names the tool
together with an error word (``ptxas fatal``, ``PTXAS error``): a tool merely mentioned is no evidence.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.served import run_platform
from agent.planning.toolchain import Tool, load_tools

if TYPE_CHECKING:
    from agent.planning.generators import GeneratorInput

__all__ = ["TOOL_PREFIX", "ToolchainGenerator"]

#: Ledger ids of toolchain hypotheses start with this.
TOOL_PREFIX = "tool:"
#: Its weight: the component generator's strongest single reading (``BASE_WEIGHT`` 0.08 times
#: ``PACKAGE_FACTOR`` 2 times ``EXPLICIT_FACTOR`` 2): the error's own lines name the tool that failed, as
#: strong as a choice the user made whose package the failing frames run in; no new tunable.
WEIGHT = 0.32
#: Words that make a line naming the tool an error of it.
_ERROR_WORDS = re.compile(r"\b(fatal|error|failed|not defined|unsupported|unknown)\b", re.IGNORECASE)


def _naming_lines(tool: Tool, inp: GeneratorInput) -> list[int]:
    """The failing log's kept lines that name ``tool``'s executable with an error word (1-based)."""
    word = re.compile(rf"(?<![\w/.-]){re.escape(tool.executable)}(?![\w-])", re.IGNORECASE)
    return [ll.line for ll in inp.evidence.log if word.search(ll.text) and _ERROR_WORDS.search(ll.text)]


def _tool_path(tool: Tool, inp: GeneratorInput) -> str:
    """The tool's path in the host's toolkit: check_env's ``home_key`` root, else the documented default."""
    home = ""
    if inp.fingerprint is not None and tool.home_key:
        home = (inp.fingerprint.check_env.get(tool.home_key) or "").strip()
    if not home.startswith("/"):
        home = tool.home
    return f"{home.rstrip('/')}/{tool.path}"


class ToolchainGenerator:
    """One candidate per tool the failing error names (see module docstring)."""

    name = "toolchain"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Candidates ``tool:ID``."""
        if inp.evidence.stage == "ok":
            return []
        tools = load_tools()
        if not tools:
            return []
        platform = run_platform(inp.fingerprint, inp.baseline)
        out = []
        for tool in tools:
            if (platform is not None and platform not in tool.platforms) or tool.env in inp.baseline.env:
                continue
            lines = _naming_lines(tool, inp)
            if not lines:
                continue
            path = _tool_path(tool, inp)
            why = f"the failing error names {tool.executable}, which {tool.package} runs (its own copy unless {tool.env} is set)"
            out.append(Hypothesis(
                id=f"{TOOL_PREFIX}{tool.id}",
                statement=f"The copy of {tool.executable} that {tool.package} runs fails on this host; the host "
                f"toolkit's {tool.executable} ({tool.env}={path}) works",
                component=f"{tool.package}.{tool.executable}",
                weight=WEIGHT,
                rationale=f"{why} ({tool.source})",
                generator=self.name,
                evidence=[Evidence(kind="fact", detail=why, experiment_id=inp.evidence.experiment_id,
                                   lines=lines[:3])],
                interventions=[Intervention(kind="env", names=[tool.env], values=[path], decisive=True,
                                            cost="none", note=f"the host toolkit's {tool.executable}")],
            ))
        return out
