"""Knowledge reader: an engineer's FINDINGS.md notes -> Findings, and how relevant each is to a case.

A findings file is Markdown written by people, so the reader is tolerant and every rule is a
heuristic documented where it is applied:

- **Sections.** A heading that carries a date starts a finding at any level (``#`` to ``######``).
  Without dates anywhere, each ``##`` heading starts one (or the shallowest heading level in use, if
  the file has no ``##``). Deeper undated headings stay inside their section. Text before the first
  section (and under shallower, grouping headings) is context: a section that names no GPU inherits the
  GPU the context names ("same box"); one without a model inherits it from a grouping heading
  ("## GLM-5" over "### 2026-02-01 ..."). A section with no date, command, model, GPU or fact
  (e.g. "## Misc") is not a finding.
- **Commands.** Fenced code blocks (``` or ~~~) and inline code spans holding
  ``python[3] -m sglang.launch_server`` (any ``*.launch_server`` module) or ``sglang serve``: ``\\``
  continuations, ``$`` prompts, ``VAR=value`` prefixes, ``env``/``docker run -e`` wrappers, ``export
  VAR=value`` lines earlier in the same block, ``# comments``, and trailing pipes/redirections.
- **Working command.** The last command whose preceding ``#`` comment reads as success; else the last
  command whose comment does not read as failure; else the last command. Its flags, env and model path
  become the finding's.
- **Outcome.** See ``_outcome``: a verdict in the heading ("works", "fixed", "fails (unresolved)") is the
  author's summary and wins; otherwise a resolution in the prose ("Fixed by", "finally serving") beats
  the failures described before it, so a failure that was then fixed counts as ``works``; otherwise
  the last verdict word in the prose decides; no verdict at all is ``unknown``.
- **Packages.** A ``packages:`` line in the prose (``- Packages: torch==2.9.1, sgl-kernel 0.3.21``) records
  the versions installed when the noted deployment ran (``packages``).

What is recognised is data in the knowledge folder in force (``tools.knowledge.data``), each entry
with its public source: GPUs and their architectures (``hardware.toml``), model families, the words
that name a model feature and model names (``model_families.toml``), and the effective-config facts
(``config_facts.toml``, SGLang ``sglang/srt/server_args.py`` field names, 0.5.x).

Modules: ``sections`` (files and sections), ``commands`` (launch commands), ``verdicts`` (outcome),
``hardware``, ``features``, ``facts``, ``packages`` (what a section names), ``relevance`` (score and flag
difference), ``models`` (what is produced), ``data`` (the knowledge files).
"""


from __future__ import annotations

from tools.knowledge.commands import parse_launch_command
from tools.knowledge.data import check_files as check_knowledge_files
from tools.knowledge.features import infer_features
from tools.knowledge.hardware import gpu_names
from tools.knowledge.models import Finding, FlagDifference, KnowledgeError, LaunchCommand, Outcome
from tools.knowledge.relevance import flag_diff, relevance
from tools.knowledge.sections import MAX_FINDINGS_BYTES, parse_findings, read_findings

__all__ = [
    "MAX_FINDINGS_BYTES",
    "Finding",
    "FlagDifference",
    "KnowledgeError",
    "LaunchCommand",
    "Outcome",
    "check_knowledge_files",
    "flag_diff",
    "gpu_names",
    "infer_features",
    "parse_findings",
    "parse_launch_command",
    "read_findings",
    "relevance",
]
