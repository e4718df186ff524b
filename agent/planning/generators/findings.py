"""Known-good diff: the differences between a relevant known-good deployment (FINDINGS.md) and the
failing one, each alone.

Flags, environment variables and effective-config facts (``kv_cache_dtype=bf16`` there, ``fp8_e4m3``
here: the flag named after the fact sets it). What a deployment *is* (model, parallel layout) is never
copied. A candidate carries ``support`` = the finding's relevance: when another generator already
proposes the same change, the planner multiplies that candidate's weight by ``1 + support`` instead of
adding a second hypothesis (``agent.planning.planner``).
"""

from __future__ import annotations

import re

from agent.domain.models import Change, Evidence, FlagValue, Hypothesis, Intervention, value_key
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import canon, fact_flag, specificity, stems, words_with_stems
from agent.planning.in_play import InPlay
from agent.planning.served import served_settings
from agent.planning.weights import weights as tunables

__all__ = ["KnownGoodDiffGenerator"]

# The relevance a finding needs and the weight of a difference no other generator explains (times
# 1 + relevance) are tunables: knowledge/planner.toml, [ledger] finding_min_relevance and
# finding_hypothesis_weight.


def _same(a: FlagValue, b: FlagValue) -> bool:
    return value_key(a) == value_key(b)


class KnownGoodDiffGenerator:
    """One candidate per difference to each relevant known-good finding: ``finding:NAME=VALUE``."""

    name = "known_good_diff"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Differences in flags, env and effective-config facts, each with its finding as evidence."""
        ledger = tunables().ledger
        out: dict[str, Hypothesis] = {}
        for rf in inp.findings:
            f = rf.finding
            if f.outcome != "works" or rf.relevance < ledger.finding_min_relevance:
                continue
            diffs: list[tuple[Intervention, str, str]] = []
            for name, value in f.flags.items():
                spec = canon(inp.flags, name) if inp.flags is not None else None
                cname = spec.name if spec else (name if inp.flags is None else None)
                if cname is None or served_settings().role("flag", cname, inp.flags) is not None:
                    continue
                if not _same(inp.baseline.flags.get(cname), value):
                    diffs.append((Intervention(names=[cname], values=[value], decisive=False),
                                  f"{cname}={value}", f"known-good '{f.title}' runs with {cname} {value}"))
            for name, value in f.env.items():
                if name not in served_settings().env and inp.baseline.env.get(name) != value:
                    diffs.append((Intervention(kind="env", names=[name], values=[value], decisive=False),
                                  f"{name}={value}", f"known-good '{f.title}' runs with {name}={value}"))
            for fact, value in f.facts.items():
                ours = inp.evidence.facts.get(fact)
                if ours is None or _same(ours, value):
                    continue
                spec = fact_flag(inp.flags, fact)
                names = [spec.name] if spec else ["--" + fact.replace("_", "-")]
                # a finding's `--attention-backend flashinfer` and its effective `attention_backend=flashinfer`
                # are one difference: the fact joins the flag's hypothesis (as evidence) instead of a twin
                same_flag = f"{names[0]}={value}"
                key = same_flag if spec and (same_flag in out or any(k == same_flag for _, k, _ in diffs)) else f"{fact}={value}"
                diffs.append((Intervention(names=names, values=[value], decisive=False, fact=fact),
                              key, f"known-good '{f.title}' had {fact}={value}; this run has {ours}"))
            for iv, key, why in diffs:
                cid = f"finding:{key}"
                if cid in out:  # the same difference seen another way: one hypothesis, both reasons
                    known = out[cid]
                    detail = f"{why} (relevance {rf.relevance:.2f})"
                    if all(e.detail != detail for e in known.evidence):
                        known.evidence.append(Evidence(kind="finding", detail=detail))
                    continue
                name = iv.fact or iv.names[0]
                out[cid] = Hypothesis(
                    id=cid,
                    statement=f"The failing configuration differs from a known-good one in {name}; "
                    f"setting it to {iv.values[0]} avoids the failure",
                    component=f"config.{name.lstrip('-').replace('-', '_')}",
                    weight=ledger.finding_hypothesis_weight * (1.0 + rf.relevance),
                    rationale=why,
                    generator=self.name,
                    evidence=[Evidence(kind="finding", detail=f"{why} (relevance {rf.relevance:.2f})")],
                    interventions=[iv],
                    source="finding",
                    support=rf.relevance,
                )
        for cand in _named_paths(inp):
            out.setdefault(cand.id, cand)
        return list(out.values())


#: A path written in the notes as code (``/models/x``, ``~/ckpt``).
_PATH = re.compile(r"`(?P<p>(?:/|~/)[^`\s]+)`")
#: Weight of "the notes name the file this unset path setting wants".
NAMED_PATH_WEIGHT = 0.12


def _named_paths(inp: GeneratorInput) -> list[Hypothesis]:
    """A file the case's notes name for a feature the run turns on, for a path setting of that feature
    the baseline leaves unset: "trained an EAGLE3 draft head ... the checkpoint is in
    `/models/x-eagle3`" and an unset ``--speculative-draft-model-path`` while speculative decoding is on.
    The sentence and the path must share a specific word with the flag's name (``draft``); the flag's
    subsystem must be in play (``agent.planning.in_play``)."""
    if inp.flags is None or inp.evidence.stage == "ok":
        return []
    play = InPlay(inp.fingerprint, inp.baseline, inp.evidence.server_args, inp.flags)
    path_flags = [
        spec for spec in inp.flags.flags.values()
        if spec.takes_value and not spec.deprecated and spec.name.endswith("-path")
        and not any(n in inp.baseline.flags for n in spec.option_strings)
        and served_settings().role("flag", spec.name, inp.flags) is None
        and play.subsystems_of("flag", spec.name)  # a path of a feature, not of the deployment
    ]
    out: list[Hypothesis] = []
    for rf in inp.findings:
        for sentence in re.split(r"(?<=\.)\s+|\n", rf.finding.text):
            for m in _PATH.finditer(sentence):
                path = m.group("p")
                words = stems(sentence) | stems(path)
                for spec in path_flags:
                    change = Change(kind="flag", name=spec.name, after=path)
                    if play.why_not(change) is not None:
                        continue
                    shared = stems(spec.name) & words - {"path", "model", "file", "dir"}
                    if not shared or specificity(inp.flags, shared) < 0.25:
                        continue
                    # the feature the flag configures must be on: a subsystem with a setting condition
                    cid = f"finding:{spec.name}={path}"
                    out.append(Hypothesis(
                        id=cid,
                        statement=f"{spec.name} is unset, so the feature it configures falls back to a default "
                        f"that does not fit; the notes name {path} for it",
                        component=f"config.{spec.name.lstrip('-').replace('-', '_')}",
                        weight=NAMED_PATH_WEIGHT,
                        rationale=f"the notes '{rf.finding.title}' name {path} beside "
                        f"{', '.join(words_with_stems(sentence, shared)) or ', '.join(sorted(shared))}",
                        generator="known_good_diff",
                        evidence=[Evidence(kind="finding", detail=f"{rf.finding.source}: {sentence.strip()}")],
                        # decisive: the claim is that this unset setting is the cause, so the notes' file
                        # in it must fix the failure (as a revert of the user's own setting must)
                        interventions=[Intervention(names=[spec.name], values=[path], decisive=True, cost="none")],
                        source="finding",
                    ))
    return out
