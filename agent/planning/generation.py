"""A kernel that needs another GPU generation: the failing kernel's own check names the GPU generation it
runs on (DeepGEMM's ``arch_major == 10``, "requires sm_90a or newer", "requires compute capability 10.0",
"not supported on sm_89"; the log lines are ``knowledge/signatures.toml``'s ``kernel.arch`` signatures,
which set the facts ``kernel_arch_needs``, ``kernel_arch_needs_sm`` and ``kernel_arch_refuses``), and this
host's compute capability (the fingerprint's GPU query) is not among them.

An engineer who reads that reasons: no tuning of that kernel (its batch sizes, memory fraction, CUDA
graphs, a mode of the same implementation) makes it run on this GPU; only a change that stops it from being
used can, that is another implementation of the subsystem whose code called it (knowledge/subsystems.toml
``modules``: a ``*-backend`` choice, a value that turns it off, the user's own setting of it removed), or a
setting whose value is the failing package itself. Every other candidate leaves the failing kernel in use
and is skipped with that reason; and once a setting was changed and the same kernel still failed, that
setting does not decide whether the kernel runs, so its other values are skipped too. When nothing is
left, the ending names the package and the generation it needs (issue 20, points 1 and 7).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent.domain.models import Change, Hypothesis, Outcome
from agent.planning.generators.common import norm, stems
from agent.planning.in_play import InPlay, Subsystem, subsystems_of_frame
from agent.planning.package_changes import is_generic_runtime
from tools.fingerprint import HostFingerprint

if TYPE_CHECKING:
    from agent.planning.view import PlannerView, Proposal

__all__ = ["ArchRule", "WrongGeneration", "arch_rules", "host_meets", "kernel_filter", "kernel_need_said", "possible_share", "wrong_generation"]

#: Values that turn a setting off (SGLang's ``none`` backend, ``disabled`` CUDA-graph backend, a false switch).
_OFF = frozenset({"", "none", "null", "false", "0", "off", "disabled", "no"})
_NEWER = re.compile(r"\+|\bor\s+(?:newer|later|higher|above)\b", re.IGNORECASE)


@dataclass(frozen=True)
class ArchRule:
    """One GPU generation a kernel accepts: ``op`` ``==`` (this major version), ``>=`` (this compute
    capability or newer) or ``!=`` (any but this one), against ``major``.``minor`` (minor None: any)."""

    op: str
    major: int
    minor: int | None = None

    def holds(self, major: int, minor: int) -> bool:
        """Whether a GPU of compute capability ``major``.``minor`` satisfies the rule."""
        if self.op == "==":
            return major == self.major
        if self.op == ">=":
            return (major, minor) >= (self.major, self.minor or 0)
        return (major, minor) != (self.major, self.minor or 0) if self.minor is not None else major != self.major

    def words(self) -> str:
        """The rule in words (``compute capability 10.x``)."""
        cc = f"{self.major}.{'x' if self.minor is None else self.minor}"
        if self.op == ">=":
            return f"compute capability {cc} or newer"
        if self.op == "!=":
            return f"a GPU other than compute capability {cc}"
        return f"compute capability {self.major}.x"


def _sm(text: str) -> tuple[int, int] | None:
    """(major, minor) of an SM version (``sm_90a`` -> (9, 0), ``sm100`` -> (10, 0)) or a compute
    capability (``10.0``) in ``text``; None when it names neither."""
    m = re.search(r"sm_?(\d{2,3})", text, re.IGNORECASE)
    if m:
        digits = m.group(1)
        return int(digits[:-1]), int(digits[-1])
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def arch_rules(needs: str = "", refuses: str = "") -> list[ArchRule]:
    """The generations a kernel accepts, read from the phrase its check states: ``needs`` a condition
    (``arch_major == 10 or (arch_major == 12``: any of them), an SM version (``sm_100a``: that major
    version; ``sm_90a or newer``, ``sm_90+``: that or newer) or a compute capability (``compute capability
    10.0``: that or newer, as CUDA states requirements); ``refuses`` the one generation it does not run on
    (``sm_89``). ``[]`` when neither phrase names a generation."""
    rules = [ArchRule(op, int(n)) for op, n in re.findall(r"arch_major\s*(==|>=)\s*(\d+)", needs)]
    if not rules and (cc := _sm(needs)) is not None:
        capability = bool(re.search(r"capability|\bCC\b", needs, re.IGNORECASE))
        newer = capability or bool(_NEWER.search(needs))
        rules = [ArchRule(">=", cc[0], cc[1]) if newer else ArchRule("==", cc[0])]
    if refuses and (cc := _sm(refuses)) is not None:
        rules.append(ArchRule("!=", cc[0], cc[1]))
    return rules


def host_meets(rules: list[ArchRule], compute_capability: str | None) -> bool | None:
    """Whether a GPU of ``compute_capability`` (``"9.0"``, the fingerprint's) satisfies any of ``rules``;
    None when either is unknown."""
    m = re.match(r"\s*(\d+)\.(\d+)", compute_capability or "")
    if not rules or m is None:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    return any(r.holds(major, minor) for r in rules)


@dataclass
class WrongGeneration:
    """The failing kernel needs another GPU generation than this host's (see the module docstring)."""

    rules: list[ArchRule]
    host: str
    #: the kernel library the failing code called (``deep_gemm``), or None when the frames do not say
    package: str | None
    #: the innermost frame of a known subsystem's code (``module.function``) and its subsystems
    where: str = ""
    subsystems: list[Subsystem] = field(default_factory=list)
    #: words of the failing code (its module and the package it called), lower-case stems
    words: set[str] = field(default_factory=set)

    def need(self) -> str:
        """What the kernel needs, in words."""
        return " or ".join(dict.fromkeys(r.words() for r in self.rules))

    def statement(self) -> str:
        """The finding in one sentence."""
        what = f"{self.package}'s kernel" if self.package else "the failing kernel"
        called = f" (called from {self.where})" if self.where else ""
        return (f"{what}{called} needs {self.need()}, and this GPU is compute capability {self.host}: no "
                "setting of that kernel runs it here")

    def why_not(self, change: Change, play: InPlay) -> str | None:
        """Why ``change`` cannot stop the failing kernel from being used (it leaves it in use), or None
        when it can: a setting of the subsystem that called the kernel removed, set to another
        implementation (a ``*-backend`` choice in use) or to a value that turns it off, or named for that
        code (``--disable-X`` where X is the kernel's package or module); a setting whose value in force
        is the failing package; an environment variable of that subsystem or named for the package."""
        name = change.name
        if change.kind == "env":
            if self._names_code(name) or any(s.env is not None and s.env.search(name) for s in self.subsystems):
                return None
            return self._leaves(change)
        current = (play.setting(name) or "").strip().lower()
        if self.package and current and norm(current) == norm(self.package):
            return None
        ours = {s.id for s in self.subsystems}
        if ours & {s.id for s in play.subsystems_of("flag", name)}:
            after = change.after
            if after is None or self._names_code(name):
                return None
            if current not in _OFF and (name.endswith("-backend") or str(after).strip().lower() in _OFF):
                return None
        return self._leaves(change)

    def _names_code(self, name: str) -> bool:
        """Whether a setting's own words name the failing code (its package or module), ``enable``/
        ``disable`` aside."""
        if self.package and norm(self.package) in norm(name):
            return True  # SGLANG_ENABLE_JIT_DEEPGEMM names deep_gemm
        return bool(self.words & stems(re.sub(r"^-*(?:enable|disable)-", "", name)))

    def _leaves(self, change: Change) -> str:
        subsystem = "/".join(s.id for s in self.subsystems) or "its"
        return (f"{change.describe()} leaves the failing kernel in use: {self.statement()}; only a change "
                f"that stops it from being used (another implementation of the {subsystem} code that calls "
                "it, or turning that off) can help")

    def same_kernel(self, change: Change, tried: list[tuple[Change, Outcome]]) -> str | None:
        """Why another value of ``change``'s setting is not worth a launch: a launch that changed the same
        setting (``tried``: its change and outcome) failed on the same kernel's generation check, so that
        setting does not decide whether the kernel runs. None otherwise."""
        for ch, outcome in tried:
            if ch.kind != change.kind or norm(ch.name) != norm(change.name) or outcome.stage == "ok":
                continue
            if _rules_of(outcome) == self.rules:
                return (f"{ch.describe()} was launched and the same kernel still failed its generation check: "
                        f"{change.name} does not decide whether it runs ({self.statement()})")
        return None


#: A log line that reports a failure (not a warning about a fallback that names a generation).
_FAILED = re.compile(r"Error|Exception|Assertion|Check failed|what\(\)|[Ff]atal")


def _rules_of(outcome: Outcome) -> list[ArchRule]:
    """The generation rules of an outcome's kernel check (its facts), when the phrase that states them is
    in the error the run failed with (a traceback's exception line, or an error line): a warning that a
    kernel needs a newer GPU and was replaced is not the failure."""
    f = outcome.facts
    needs = f.get("kernel_arch_needs") or f.get("kernel_arch_needs_sm") or ""
    refuses = f.get("kernel_arch_refuses", "")
    errors = [tb.exception_line for tb in outcome.tracebacks] + [
        ll.text for ll in outcome.log if _FAILED.search(ll.text)]
    needs = needs if needs and any(needs in e for e in errors) else ""
    refuses = refuses if refuses and any(refuses in e for e in errors) else ""
    return arch_rules(needs, refuses)


def _called_package(outcome: Outcome) -> str | None:
    """The kernel library the failing code runs in or calls: the innermost frame's package when it is
    not the engine's (a frame of a subsystem's code) nor a generic runtime, else the module the innermost
    subsystem frame's failing line calls into (``deep_gemm.fp8_fp4_mega_moe(`` -> ``deep_gemm``)."""
    for tb in reversed(outcome.tracebacks):
        for fr in tb.frames:
            where = f"{fr.module}.{fr.function}"
            if subsystems_of_frame(where):
                m = re.match(r"\s*([A-Za-z_]\w*)\.\w+\s*\(", fr.code or "")
                pkg = m.group(1) if m else None
                return pkg if pkg and pkg != "self" and not is_generic_runtime(pkg) else None
            if fr.package and not is_generic_runtime(fr.package):
                return fr.package
    return None


def wrong_generation(ref: Outcome, fp: HostFingerprint | None) -> WrongGeneration | None:
    """The finding when the failing run ``ref``'s kernel check names GPU generations this host (``fp``'s
    compute capability) is not; None when it names none, the host's is unknown, or the host meets it."""
    rules = _rules_of(ref)
    host = fp.compute_capability if fp is not None else None
    if host_meets(rules, host) is not False:
        return None
    assert host is not None
    found = WrongGeneration(rules=rules, host=host, package=_called_package(ref))
    for tb in reversed(ref.tracebacks):
        frame = next((fr for fr in tb.frames if subsystems_of_frame(f"{fr.module}.{fr.function}")), None)
        if frame is not None:
            found.where = f"{frame.module}.{frame.function}"
            found.subsystems = subsystems_of_frame(found.where)
            parts = (frame.module or "").split(".")
            found.words = stems(" ".join(parts[-2:])) - {s.id for s in found.subsystems}
            break
    if found.package:
        found.words |= stems(found.package)
    return found


def kernel_filter(view: PlannerView, ref: Outcome) -> Callable[[Change, InPlay], str | None]:
    """Why a change leaves a kernel that needs another GPU generation in use, or its setting was already
    seen not to decide whether that kernel runs (``WrongGeneration``); never a reason when the failing run
    ``ref`` shows no such kernel. Read by the rule planner's chooser for every candidate change."""
    wrong = wrong_generation(ref, view.fingerprint)
    if wrong is None:
        return lambda change, play: None
    found = wrong
    tried = [(e.change, o) for e in view.experiments
             if e.change is not None and (o := view.outcome_of(e.id)) is not None]
    return lambda change, play: found.why_not(change, play) or found.same_kernel(change, tried)


def kernel_need_said(proposal: Proposal, view: PlannerView, ref: Outcome) -> Proposal:
    """``proposal`` with the finding said first in its reason to conclude, when the failing run ``ref``'s
    kernel needs another GPU generation (the ending names the package and the generation it needs, and
    why the settings left untested cannot help); any other proposal as it is."""
    if proposal.conclude_reason is None or (wrong := wrong_generation(ref, view.fingerprint)) is None:
        return proposal
    return proposal.model_copy(update={"conclude_reason": (
        f"{wrong.statement()}, and no untested change likely to stop it from being used is left (the other "
        f"candidates leave it in use); {proposal.conclude_reason}")})


def possible_share(p_fix: float, view: PlannerView, ref: Outcome, hypotheses: list[Hypothesis],
                   testable: Callable[[Hypothesis], bool]) -> float:
    """``p_fix`` (a candidate's probability of fixing, over the whole ledger) as a share of what the
    failing run ``ref`` leaves possible, when its kernel needs another GPU generation: the hypotheses left
    with no candidate (``testable`` false: every change they predict fixes leaves the kernel in use, or
    was seen not to decide it) cannot be right, so their probability is not a competitor of the changes
    that remain. ``p_fix`` as it is when there is no such kernel, or nothing is left."""
    if wrong_generation(ref, view.fingerprint) is None:
        return p_fix
    mass = sum(h.posterior for h in hypotheses if h.status in ("open", "supported") and testable(h))
    return min(1.0, p_fix / mass) if mass > 0 else p_fix
