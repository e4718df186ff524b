"""The candidates of a run's past launches, kept from one step to the next (the orchestrator's own time per
step, issue 7).

The rule planner rebuilds its ledger from the run's whole history on every step (``agent.planning.history``),
and every failing launch of that history asks the candidate generators for their candidates
(``LedgerBook.create``). Asked afresh, that is every generator once per past launch per step: a step costs
more the longer the run. What a generator proposes for one launch is a function of that launch's outcome,
the configuration that failed, the outcomes before it, and what does not change during a run (the case,
the host's facts and flag catalog, the knowledge catalog and folder, the findings): so each generator is
asked once per launch and configuration, and its answer is kept here.

- A generator that reads the whole run (later launches too: ``reads_run`` true, e.g. ``switches``, whose
  candidate a later workaround that served supports) is asked again every time.
- The others are given the run only up to the launch (its experiments and outcomes), so what is kept
  cannot depend on anything later.
- What is kept is checked, not trusted: the run's constants are compared with the ones it was kept for
  (all of it is dropped when one differs), and so is each outcome with the one kept under its experiment
  id. The answers are handed out as copies (the ledger multiplies their weights and appends to their
  evidence).

The memo lives in the process (``agent.run.runtime.Runtime`` hands one to every planner it builds), never
in the checkpoint: a run resumed in a new process starts with an empty one and asks the generators again,
which give the same answers, so the planner takes the same decisions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.domain.knowledge_dir import knowledge_dir

if TYPE_CHECKING:  # the runtime holds a memo; what it keeps is the planner's
    from agent.domain.models import Hypothesis, Outcome
    from agent.planning.generators import CandidateGenerator, GeneratorInput

__all__ = ["CandidateMemo", "reads_run"]


def reads_run(gen: CandidateGenerator) -> bool:
    """Whether a generator reads the whole run, later launches included (its ``reads_run`` attribute;
    absent: it reads the failing launch and the run up to it)."""
    return bool(getattr(gen, "reads_run", False))


def _same(a: Any, b: Any) -> bool:
    return a is b or a == b


class CandidateMemo:
    """Each generator's candidates for each past failing launch of one run (see the module docstring).

    ``asked`` counts the times a generator was asked (``answers``), kept or not."""

    def __init__(self) -> None:
        self._context: tuple[Any, ...] | None = None
        #: experiment id -> the outcome the answers under that id were computed from
        self._outcomes: dict[str, Outcome] = {}
        #: (generator, launch, configuration) -> that generator's candidates
        self._kept: dict[tuple[Any, ...], list[Hypothesis]] = {}
        self.asked = 0

    def answers(self, generators: list[CandidateGenerator], inp: GeneratorInput, in_run: bool) -> list[list[Hypothesis]]:
        """Every generator's candidates for the failing launch ``inp`` describes, in ``generators`` order,
        each list the caller's own to change. ``in_run``: the launch is one of the run's outcomes (``inp.outcomes``
        ends with it); otherwise nothing is kept and every generator is asked."""
        if in_run:
            self._check(inp)
        launch = (inp.reference.experiment_id, tuple(o.experiment_id for o in inp.outcomes),
                  inp.baseline.model_dump_json())
        upto: GeneratorInput | None = None
        out: list[list[Hypothesis]] = []
        for gen in generators:
            if not in_run or reads_run(gen):
                self.asked += 1
                out.append(gen.generate(inp))
                continue
            key = (type(gen).__module__, type(gen).__qualname__, gen.name, *launch)
            if key not in self._kept:
                upto = upto or _up_to_launch(inp)
                self.asked += 1
                self._kept[key] = gen.generate(upto)
            out.append([_copy(c) for c in self._kept[key]])
        return out

    def _check(self, inp: GeneratorInput) -> None:
        """Check what is kept against ``inp``: drop all of it when the run's constants differ from the ones
        it was kept for, or an outcome from the one kept under its experiment id."""
        context = (inp.case, inp.fingerprint, inp.findings, inp.flags, inp.catalog, inp.features, knowledge_dir())
        if self._context is None or len(self._context) != len(context) or \
                not all(_same(a, b) for a, b in zip(self._context, context, strict=True)):
            self._forget()
        self._context = context
        for o in [*inp.outcomes, inp.reference]:
            known = self._outcomes.get(o.experiment_id)
            if known is not None and not _same(known, o):
                self._forget()
            self._outcomes[o.experiment_id] = o

    def _forget(self) -> None:
        self._outcomes.clear()
        self._kept.clear()


def _up_to_launch(inp: GeneratorInput) -> GeneratorInput:
    """``inp`` with the run cut at its launch: the experiments and outcomes up to it."""
    ids = {o.experiment_id for o in inp.outcomes}
    return inp.model_copy(update={"experiments": [e for e in inp.experiments if e.id in ids],
                                  "run_outcomes": list(inp.outcomes)})


def _copy(cand: Hypothesis) -> Hypothesis:
    """A kept candidate as the caller's own: its own lists (the ledger appends to its evidence and weighs
    it)."""
    return cand.model_copy(update={"evidence": list(cand.evidence), "interventions": list(cand.interventions),
                                   "cause_signatures": list(cand.cause_signatures)})
