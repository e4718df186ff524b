"""Settings against defaults: every setting the baseline makes itself, reverted alone.

Delta debugging over the explicit settings (Zeller, "Yesterday, my program worked. Today, it does not.
Why?", 1999) with one-variable steps: if one explicit flag or environment variable causes the failure,
removing it (so SGLang's default or auto-resolution applies) fixes it. Low weight: the generic fallback
that keeps a run from ending "nothing left to try" while reversions remain in budget. Settings that say
where the server runs and what it loads (knowledge/served.toml, role "place") are never reverted, nor a
"served" one whose removal changes the deployment (the parallel layout), unless the failure surfaced in
the code of a subsystem that setting configures (knowledge/subsystems.toml ``modules``: the weight
loader's sharding code for ``--tp-size``): then it is tried, as a workaround that changes the deployment.
One SGLang can read off the checkpoint (quantization, context length) is an ordinary candidate, unless
the case's intent keeps it (then it is reverted only as a workaround that changes the deployment).
A setting whose words the failing frames or error share (``http_proxy`` and a failing
``http_server`` frame) is a likelier suspect; so is one whose words the code where the failure surfaced
shares and no other of the baseline's settings carries (``--chunked-prefill-size`` and a failing
``prefill_wrapper.forward`` line: among the user's own few settings the word picks out one, however many
of the engine's flags carry it). One whose own value the failing error quotes (``context_length (4096)``
for ``--context-length 4096``, ``flashinfer`` for ``--attention-backend flashinfer``) is the first
suspect: the engine names the user's value as what it refused; so is one that alone of the baseline's
settings holds a value the failing error quotes anywhere in its message (``agent.planning.quoted``: pydantic's
``Value error, invalid literal for int() with base 10: '1.5'`` under ``1 validation error for VllmConfig``
and ``VLLM_CPU_KVCACHE_SPACE=1.5``), whatever frame it surfaced in. Both are marked ``IMPLICATED`` (the
user's deliberate setting in the implicated subsystem): after a workaround served, the chooser still
tries reverting them (``agent.planning.chooser``), so a root fix is looked for before the workaround is
reported (issue 20, point 5). When a ready server leaves requests unanswered and logs no error (symptom
class ``unanswered``), the user's own settings of a subsystem every request passes through
(knowledge/subsystems.toml ``carries_requests``: tokenizer and detokenizer workers, admission queue, batch
limits) are implicated the same way: a lost reply is lost on the request's path, not in a kernel's
numbers. Reverting one that bounds the requests admitted (``bounds``) avoids the overflow that triggers
the fault rather than repairing it: it is marked a workaround. Likewise when the failure's class is one a
subsystem's settings are known to cause (knowledge/subsystems.toml ``implicated_by``: work on a second
device stream and an asynchronous device fault), the user's own settings of that subsystem are
implicated: "what did you change from the defaults, and which of those touches what failed?" is asked
before the general suspects of that kind of failure (``agent.planning.ledger`` weakens those).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.domain.models import Evidence, Hypothesis, Intervention
from agent.planning.budgets import bounded_on_purpose, budget_of
from agent.planning.generators import GeneratorInput
from agent.planning.generators.common import (
    canon,
    engine_package,
    implicated,
    raise_site,
    site_owner,
    specificity,
    stems,
)
from agent.planning.generators.implementations import implementations
from agent.planning.in_play import load_subsystems, subsystems_of_frame
from agent.planning.own_tuning import flip_of
from agent.planning.quoted import failing_lines, held_alone, quoted_values
from agent.planning.served import localising_intent, served_settings, user_keeps
from agent.planning.words import name_words, ordered_words, spelled, spells
from tools.engines import get_engine
from tools.log_records import read_record
from tools.tracebacks import Frame

__all__ = ["IMPLICATED", "SettingsVsDefaultsGenerator", "implicated_setting", "long_prompt_only", "value_quoted"]

#: Weight of "this explicit setting causes the failure"; a setting that selects an implementation (a
#: flag with choices) is a likelier suspect than a tuning knob.
WEIGHT = 0.02
CHOICE_FACTOR = 2.0
#: A switch's other position weighs this much of its revert: tried after it (the revert is the smaller
#: change), as the test when the switch's default is the user's own position.
FLIP_FACTOR = 0.5
#: Multiplier for a setting the failing frames or error name (by a specific shared word).
IMPLICATED_FACTOR = 5.0
#: Weight of a setting whose own value the failing error quotes: as strong as a remedy the error itself
#: names (``agent.planning.generators.remedies.WEIGHT_ERROR``).
WEIGHT_VALUE_QUOTED = 0.3
#: Weight of reverting a setting that changes the deployment when the failure surfaced in the code of the
#: subsystem it configures (knowledge/subsystems.toml ``modules``): the frame is read first, as strongly as
#: an error quoting the user's value; as a change of what is served it still ranks as a costly workaround.
WEIGHT_SURFACED_IN = WEIGHT_VALUE_QUOTED
#: Weight of a flag the launcher refused to parse (its usage error names it): every other launch fails the same way.
WEIGHT_UNPARSED = 1.0
#: The component of the signatures that say the launcher refused its command line (knowledge/signatures.toml).
_COMMAND_LINE = "cli."
#: How the evidence of an implicated setting begins (read back by ``implicated_setting``).
IMPLICATED = "the failure implicates the user's own setting"
#: Values too short or too common to identify a setting when an error quotes them (``-1``, ``on``).
_MIN_QUOTED_LEN = 3
#: Words of a line that tells which way to move a setting ("set --mem-fraction-static to a smaller value",
#: "Please try to increase --mem-fraction-static"): an instruction the remedies generator reads as a value
#: to try, not a sign that the setting as the user wrote it is the culprit (its removal goes anywhere).
_MOVES = re.compile(r"\b(?:smaller|larger|bigger|lower|higher|increase|decrease|reduce|raise)\b", re.IGNORECASE)
_UNQUOTABLE = frozenset({"true", "false", "none", "null", "auto", "default"})


def value_quoted(value: object, text: str) -> bool:
    """Whether ``text`` (the failing error) quotes ``value`` as a whole token: ``4096`` in
    ``context_length (4096)``, not in ``40960``; ``flashinfer`` in ``flashinfer_python`` (a package
    named after the value; ``_`` separates words in Python names); booleans, values of fewer than three characters and
    words such as ``auto`` never count (they identify nothing)."""
    if isinstance(value, bool) or value is None:
        return False
    v = str(value).strip()
    if len(v.lstrip("-")) < _MIN_QUOTED_LEN or v.lower() in _UNQUOTABLE:
        return False
    return re.search(rf"(?<![A-Za-z0-9.-]){re.escape(v)}(?![A-Za-z0-9-]|\.\d)", text, re.I) is not None


def long_prompt_only(inp: GeneratorInput) -> int | None:
    """The prompt length (tokens, the case's ``[reproduce] prompt_tokens``) when only that load failed and
    as a single request (short single requests passed, the failing load had no concurrent requests): the
    failure needs a long prompt, not a batch. None otherwise."""
    ev = inp.evidence
    if "load_only" not in ev.symptoms or ev.burst_failed:
        return None
    return inp.case.reproduce.prompt_tokens


def implicated_setting(h: Hypothesis) -> bool:
    """Whether ``h`` reverts a setting of the user's that the failure implicates (its error quotes the
    value, or the code where it surfaced shares a word only that setting carries)."""
    return h.id.startswith("revert:") and any(e.detail.startswith(IMPLICATED) for e in h.evidence)


def _only_in(name: str, words: set[str], others: Iterable[str]) -> set[str]:
    """The words of ``words`` that setting ``name`` carries and none of ``others`` does."""
    theirs: set[str] = set()
    for o in others:
        if o != name:
            theirs |= stems(o.lstrip("-"))
    return (stems(name.lstrip("-")) & words) - theirs


class SettingsVsDefaultsGenerator:
    """One candidate per explicit baseline setting: ``revert:NAME``."""

    name = "settings"

    def generate(self, inp: GeneratorInput) -> list[Hypothesis]:
        """Reversions of the failing baseline's own flags and environment variables."""
        if inp.evidence.stage == "ok":
            return []
        weigh = _Implication(inp)
        out: list[Hypothesis] = []
        served = served_settings()
        keeps = set()
        # a value the user chose whose reader has other implementations is reverted as an ordinary suspect
        # (a localising test); served, it is the workaround it is (agent.planning.confirm reads user_keeps)
        for k in user_keeps(inp.case, inp.flags, inp.outcomes) - localising_intent(inp.case, inp.flags):
            ks = canon(inp.flags, k)
            keeps.add(ks.name if ks else k)
        for name, value in inp.baseline.flags.items():
            spec = canon(inp.flags, name)
            canonical = spec.name if spec else name
            role = served.role("flag", canonical, inp.flags)
            if role == "place":
                continue  # where it runs and what it loads: never reverted
            checkpoint = inp.fingerprint.checkpoint if inp.fingerprint else {}
            if role == "served" and served.changes_deployment("flag", canonical, None, inp.flags,
                                                              checkpoint=checkpoint, before=value):
                # the parallel layout: reverting it takes other devices, not a cause to test, unless the
                # failure surfaced in the code that layout configures (then it is the workaround to try)
                if (where := weigh.surfaced_in(canonical)) is not None:
                    out.append(self._candidate(inp, "flag", canonical, value, WEIGHT_SURFACED_IN, True, where))
                continue
            # the failure ran on the path a kept value selects: its revert is the localising test (served,
            # it is still the workaround it is: agent.planning.confirm reads user_keeps)
            own = keeps - {canonical} if canonical in keeps and weigh.selected_in_frames(canonical) else keeps
            deployment = served.changes_deployment("flag", canonical, None, inp.flags, own, checkpoint, value)
            purpose = _on_purpose(inp, "flag", canonical)
            if spec is not None and spec.default is not None and str(spec.default) == str(value):
                continue  # set to the default: reverting changes nothing
            choice = bool(spec and spec.choices)
            weight, why = weigh(canonical, value, WEIGHT * (CHOICE_FACTOR if choice else 1.0))
            cand = self._candidate(inp, "flag", canonical, value, weight, deployment or bool(purpose), why, purpose)
            out.append(_bound_lifted(cand) if why and not deployment and weigh.lifts_bound(canonical) else cand)
        for name, value in inp.baseline.env.items():
            if served.role("env", name) == "place":
                continue
            deployment = served.changes_deployment("env", name, None, inp.flags, keeps)
            purpose = _on_purpose(inp, "env", name)
            weight, why = weigh(name, value, WEIGHT)
            out.append(self._candidate(inp, "env", name, value, weight, deployment or bool(purpose), why, purpose))
            if (other := flip_of(value)) is not None and not deployment and not purpose:
                out.append(_flipped(inp, name, value, other, weight * FLIP_FACTOR))
        return out

    def _candidate(self, inp: GeneratorInput, kind: str, name: str, value: object, weight: float,
                   deployment: bool = False, why: str = "", purpose: str = "") -> Hypothesis:
        """``deployment``: the setting defines what is served (knowledge/served.toml) or the user needs
        it (the case's intent): reverting it changes the deployment, so it is tried last, as a
        workaround, and is never the fix. ``why``: how the failure implicates it (an ``IMPLICATED``
        evidence), or empty. ``purpose``: the description's words saying the user set this budget on
        purpose (knowledge/budgets.toml), or empty."""
        shown = "(on)" if value is True else value
        evidence = [Evidence(kind="fact", detail=f"the baseline sets {name}={shown} explicitly",
                             experiment_id=inp.evidence.experiment_id)]
        if why:
            # a deployment change is never the user's setting to revert before a workaround is reported
            # (``implicated_setting``): its reason is told without the IMPLICATED mark
            evidence.append(Evidence(kind="fact", detail=why if deployment else f"{IMPLICATED}: {why}",
                                     experiment_id=inp.evidence.experiment_id))
        return Hypothesis(
            id=f"revert:{name}",
            statement=f"The baseline's own setting {name} {shown} causes the failure; without it "
            f"{get_engine(inp.case.launcher.engine).display}'s default applies and the failure goes away",
            component=f"config.{name.lstrip('-').replace('-', '_')}",
            weight=weight,
            rationale="an explicit setting away from the default is a change someone made; each is reverted alone",
            generator=self.name,
            evidence=evidence,
            interventions=[Intervention(
                kind=kind, names=[name], values=[None], decisive=True,  # type: ignore[arg-type]
                cost="high" if deployment else "none", workaround=deployment,
                note=(f"removes the budget the user set on purpose ({purpose!r}): the engine then sizes it "
                      "itself" if purpose else "changes what is served (the deployment the user asked for)")
                if deployment else "",
            )],
        )


def _flipped(inp: GeneratorInput, name: str, value: object, other: str, weight: float) -> Hypothesis:
    """``flip:NAME``: the user's own switch ``NAME=value`` in its other position. Its default may be the
    same position as the user's, so the revert alone may change nothing (agent.planning.own_tuning)."""
    return Hypothesis(
        id=f"flip:{name}",
        statement=f"The path the baseline's own switch {name}={value} turns on fails here; in its other "
        f"position ({other}) the failure goes away",
        component=f"env.{name}",
        weight=weight,
        rationale="a switch the user turned on may equal its default, so unsetting it changes nothing; its "
        "other position is the test of the path it selects",
        generator="settings",
        evidence=[Evidence(kind="fact", detail=f"the baseline sets {name}={value} explicitly",
                           experiment_id=inp.evidence.experiment_id)],
        interventions=[Intervention(kind="env", names=[name], values=[other], decisive=True, cost="low")],
    )


def _own_frames(inp: GeneratorInput) -> list[Frame]:
    """The engine's own frames of the failing run's tracebacks, each traceback's outermost module left out:
    it is the process's driver (the scheduler's event loop), in every failure of that process, so its names
    point at nothing in particular."""
    engine = engine_package(inp)
    out = []
    for tb in inp.evidence.tracebacks:
        mine = [fr for fr in tb.frames if fr.package == engine and fr.module]
        driver = mine[-1].module if len(mine) > 1 else None
        out += [fr for fr in mine if fr.module != driver]
    return out


def _frame_words(inp: GeneratorInput) -> set[str]:
    """The words (``name_words``) of the engine frames' module paths below the engine's package and their
    functions (``_own_frames``: ``sglang.srt.speculative.eagle_worker_v2`` and ``_draft_extend_for_decode``:
    speculative, eagle, v2, draft, extend, decode)."""
    out: set[str] = set()
    for fr in _own_frames(inp):
        out |= name_words(str(fr.module).split(".", 1)[-1]) | name_words(fr.function or "")
    return out - {engine_package(inp)}


def _frame_pairs(inp: GeneratorInput) -> set[tuple[str, str]]:
    """Adjacent word pairs (``ordered_words``) within one engine frame's module name or function name
    (``_own_frames``: ``mem_cache.unified_radix_cache.load_back`` gives (unified, radix), (radix, cache))."""
    out: set[tuple[str, str]] = set()
    for fr in _own_frames(inp):
        for part in [*str(fr.module).split("."), fr.function or ""]:
            words = ordered_words(part)
            out |= set(zip(words, words[1:], strict=False))
    return out


def _bound_lifted(h: Hypothesis) -> Hypothesis:
    """``h``, a revert that lifts a bound on the requests admitted, marked as the workaround it is: with no
    bound the overflow that triggers the fault no longer happens, and the code that mishandles it is as
    it was (the chooser tries the user's other implicated settings for a root fix first)."""
    iv = h.interventions[0].model_copy(update={
        "workaround": True, "cost": "medium",
        "note": "lifts the bound the user set on admitted requests: the overflow no longer happens, the "
                "code that mishandled it is unchanged"})
    return h.model_copy(update={"interventions": [iv]})


def _on_purpose(inp: GeneratorInput, kind: str, name: str) -> str:
    """The case description's words saying the user set the budget ``name`` on purpose ("to save memory",
    knowledge/budgets.toml), or empty: removing such a budget goes against what the user asked for."""
    budget = budget_of(kind, name)
    return (bounded_on_purpose(inp.case, budget) or "") if budget is not None else ""


class _Implication:
    """How strongly the failing launch implicates each of the baseline's settings: called with a
    setting's name (the host's canonical spelling of a flag), value and base weight, it returns
    (weight, why) — ``why`` empty when the failure points at the setting by no more than words many
    flags share, or when the setting is not the user's (the case does not set it so: this run adopted
    it past a blocker)."""

    def __init__(self, inp: GeneratorInput) -> None:
        self.inp = inp
        self.imp = implicated(inp)
        self.engine = engine_package(inp)
        site = raise_site(inp)
        self.site_words = site.words if site else set()
        self.site = site.where if site else ""
        #: the flag patterns of the subsystems whose code the failure surfaced in (``site_owner``)
        self.site_flags = [s.flags for s in subsystems_of_frame(self.site) if s.flags is not None] if site else []
        specs = {n: canon(inp.flags, n) for n in inp.baseline.flags}
        self.names = [s.name if s else n for n, s in specs.items()] + list(inp.baseline.env)
        # the user's own: what the case itself sets, not a blocker's change this run adopted
        own = inp.case.baseline
        self.users = {(s.name if (s := canon(inp.flags, n)) else n, str(v)) for n, v in own.flags.items()}
        self.users |= {(n, str(v)) for n, v in own.env.items()}
        # Words of the user's values that name code (a value ``ALGO`` whose code is ``algo_worker.py``),
        # by the setting's canonical name: a knob whose name shares such a word only tunes the code path
        # another setting's value chose. A platform (``cpu``) is where the code runs, not a path one
        # setting chose (knowledge/subsystems.toml ``[[platform]]``).
        platforms = {str(p.get("device") or p.get("id", "")).lower() for p in load_subsystems().platforms}
        values = [*((s.name if (s := specs[n]) else n, v) for n, v in inp.baseline.flags.items()),
                  *inp.baseline.env.items()]
        self.frame_words = _frame_words(inp)
        self.frame_stems = stems(" ".join(sorted(self.frame_words)))
        self.frame_pairs = _frame_pairs(inp)
        failing = failing_lines(inp.evidence)
        # (a line that tells which way to move a setting is a remedy, read as one, not the failure's statement)
        stating = [ll for ll in failing if not _MOVES.search(ll.text)]
        #: the words of the lines that state the failure (its error, a native message before an abort)
        self.failing_words: set[str] = set().union(*(name_words(ll.text) for ll in stating))
        self.failing_text = " ".join(ll.text for ll in stating)
        #: the other lines of the failing run, with their messages' words: what the engine said while it ran
        said = {ll.line for ll in failing}
        #: (a logger's record: a traceback's frame and code lines are where the failure went, not what the
        #: engine said of its settings)
        self.said = [(ll, name_words(rec.message)) for ll in inp.evidence.log
                     if ll.line not in said and (rec := read_record(ll.text.strip())).header]
        #: the settings that alone hold a value the failing error quotes (its message lines included), by
        #: canonical name: the quote picks the setting out whatever frame the error surfaced in
        self.alone = {(s.name if h.kind == "flag" and (s := canon(inp.flags, h.name)) else h.name): h
                      for h in held_alone(quoted_values(failing_lines(inp.evidence)), inp.baseline)}
        self.value_words = {
            n: w for n, v in values
            if isinstance(v, str) and len(v) >= _MIN_QUOTED_LEN and v.lower() not in _UNQUOTABLE | platforms
            and (w := stems(v))
        }

    def __call__(self, name: str, value: object, base: float) -> tuple[float, str]:
        inp, imp = self.inp, self.imp
        # the value the failing code names is a choice of its own subsystem's flag, not this setting's
        theirs = site_owner(inp.flags, self.site_flags, name, value=value) is not None
        if (name, str(value)) not in self.users:
            pass  # set by this run (an adopted blocker): judged by shared words alone, below
        elif not theirs and value_quoted(value, imp.error_text):
            return max(base, WEIGHT_VALUE_QUOTED), f"the failing error quotes its value {value}"
        elif name.startswith("--") and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])",
                                                 f"{imp.error_text} {self.failing_text}"):
            # the error names the flag as the user wrote it; when it is the launcher refusing the command line
            # ("unrecognized arguments: --x", knowledge/signatures.toml component cli.args) nothing else can be
            # tested until the command parses: its removal comes first
            # (a listed flag's bad value is refused on the command line too: its value remedies compete as usual)
            parsed = (inp.flags is None or inp.flags.lookup(name) is not None
                      or not any(c.startswith(_COMMAND_LINE) for m in inp.evidence.matches for c in m.components))
            return max(base, WEIGHT_VALUE_QUOTED if parsed else WEIGHT_UNPARSED), f"the failing error names {name} itself"
        elif not theirs and (held := self.alone.get(name)) is not None:
            return max(base, WEIGHT_VALUE_QUOTED), (f"the failing error quotes its value {value} (log line "
                                                    f"{held.quoted.line.line}), which no other setting holds")
        elif not theirs and (named := self.value_words.get(name, set())) and named <= self.site_words:
            return base * IMPLICATED_FACTOR, (f"the failure surfaced in {self.site}, the code its value "
                                              f"{value} selects")
        elif not theirs and (ran := self.selected_in_frames(name)) is not None:
            return base * IMPLICATED_FACTOR, ran
        elif ((own := _only_in(name, self.site_words - self._chosen(name), self._rivals(name))) and not self._elsewhere(name)
              and site_owner(inp.flags, self.site_flags, name, words=own) is None):
            return base * IMPLICATED_FACTOR, (f"the failure surfaced in {self.site}, whose code names "
                                              f"{', '.join(sorted(own))} as only this setting does")
        elif ((spelt := self.named_by_frames(name)) is not None
              and site_owner(inp.flags, self.site_flags, name, words=stems(name.lstrip("-"))) is None):
            return base * IMPLICATED_FACTOR, spelt
        elif (said := self.announced(name)) is not None:
            return base * IMPLICATED_FACTOR, said
        elif (path := self.on_request_path(name)) is not None:
            return base * IMPLICATED_FACTOR, (f"requests went unanswered on a live server with no error, and "
                                              f"{name} configures the {path} a request passes through")
        elif (caused := self.symptom_implicates(name)) is not None:
            return base * IMPLICATED_FACTOR, caused
        elif (tokens := self.prompt_bound(name)) is not None:
            return base * IMPLICATED_FACTOR, (f"only a single long prompt ({tokens} tokens) failed while short "
                                              f"requests passed, and {name} bounds the prompt tokens one "
                                              "forward pass takes")
        shared = stems(name.lstrip("-")) & imp.words
        if not shared or site_owner(inp.flags, self.site_flags, name, words=shared) is not None:
            return base, ""
        strength = specificity(inp.flags, shared) if inp.flags is not None else 1.0
        return base * max(1.0, IMPLICATED_FACTOR * strength), ""

    def selected_in_frames(self, name: str) -> str | None:
        """Why the failing run went through the code the user's value of setting ``name`` selects although
        the error surfaced below it (in a kernel's wrapper, a shared helper): the failing engine frames'
        names spell every word of the value and a word of the setting's own name (``--speculative-algorithm
        EAGLE`` and ``speculative/eagle_utils.eagle_sample``), and no other of the baseline's values is
        spelled there too. None otherwise."""
        named = self.value_words.get(name)
        if not named or not named <= self.frame_stems:
            return None
        hits = sorted(w for w in name_words(name.lstrip("-")) - {self.engine} if spells(w, self.frame_words))
        if not hits or any(n != name and w <= self.frame_stems for n, w in self.value_words.items()):
            return None
        return (f"the failing frames' names spell its value ({', '.join(sorted(named))}) and {', '.join(hits)} of "
                "its name: the failure ran on the path the user's value selects")

    def _rivals(self, name: str) -> list[str]:
        """The baseline's settings that compete with ``name`` for the failing code's words: all of them,
        except, when that code is a subsystem's own (knowledge/subsystems.toml ``modules``) that ``name``
        configures, those that configure only subsystems whose code is known to be elsewhere (an adopted
        ``--mm-attention-backend``, the vision encoder's, does not take "attention" from
        ``--attention-backend`` when the text attention's own code failed)."""
        if not any(p.search(name) for p in self.site_flags):
            return self.names
        elsewhere = [s.flags for s in load_subsystems().subsystems
                     if s.flags is not None and s.modules is not None and not s.modules.search(self.site)]
        return [o for o in self.names
                if any(p.search(o) for p in self.site_flags) or not any(p.search(o) for p in elsewhere)]

    def named_by_frames(self, name: str) -> str | None:
        """Why the names of the failing engine frames (module path and function, ``_frame_words``) point at
        the user's setting ``name``: every word of its name (the engine's own prefix and generic words left
        out) is one of theirs or abbreviates one (``SPEC_V2`` and ``speculative/eagle_worker_v2``), two
        words at least, and one of the frame words it names no other of the baseline's settings names; as
        ``the failing frames' names (a, b) spell ...``. None otherwise (one shared word is not evidence)."""
        mine = name_words(name.lstrip("-")) - {self.engine}
        hits = {w: spelled(w, self.frame_words) for w in mine}
        if len(mine) < 2 or not all(hits.values()):
            return self.phrase_in_frames(name)
        named = set().union(*hits.values())
        named -= self.rivals_spell(name, named)
        if not named:
            return None
        return (f"the failing frames' names ({', '.join(sorted(set().union(*hits.values())))}) spell every word "
                f"of {name}, and {', '.join(sorted(named))} no other of the baseline's settings")

    def phrase_in_frames(self, name: str) -> str | None:
        """Why a failing frame's name points at the user's setting ``name`` although it does not spell all its
        words: two neighbouring words of the setting's name are neighbours in one frame's module or function
        name, as a phrase (``SGLANG_ENABLE_UNIFIED_RADIX_TREE`` and ``unified_radix_cache``), and no other of
        the baseline's settings spells either word. None otherwise."""
        words = [w for w in ordered_words(name.lstrip("-")) if w != self.engine]
        for pair in zip(words, words[1:], strict=False):
            if pair in self.frame_pairs and not self.rivals_spell(name, set(pair)):
                return (f"a failing frame's name has the words {' '.join(pair)} side by side, as {name} does, "
                        "and no other of the baseline's settings spells them")
        return None

    def rivals_spell(self, name: str, words: set[str]) -> set[str]:
        """Those of ``words`` that a word of another of the baseline's settings (its rivals) spells: words
        that do not single ``name`` out."""
        theirs: set[str] = set()
        for other in self._rivals(name):
            if other != name:
                for w in name_words(other.lstrip("-")) - {self.engine}:
                    theirs |= spelled(w, words)
        return theirs

    def announced(self, name: str) -> str | None:
        """Why the failing run's own log points at the user's setting ``name``: a line the engine wrote
        while it ran spells every word of the setting's name (the engine's own prefix left out, two words at
        least: ``aiter mla gluon is disabled manually`` for ``SGLANG_AITER_MLA_GLUON=0``), so the setting
        took effect and the engine took the path it chose; and the lines that state the failure (its error,
        or the native message a process printed before a signal ended it) name a word of the setting that no
        other of the baseline's settings names (``mla`` in ``asm_mla.cu ... get_heuristic_kernel_mla``): the
        failure is in the path the user's setting chose. As ``the log says ... (line N), and the failure ...``;
        None otherwise (a setting the log never mentions, or words every setting shares)."""
        mine = name_words(name.lstrip("-")) - {self.engine}
        if len(mine) < 2:
            return None
        others = [ws for o in self.names if o != name
                  if len(ws := name_words(o.lstrip("-")) - {self.engine}) >= 2]
        # a line that spells this setting and no other of the baseline's (not the engine's echo of them all)
        line = next((ll for ll, words in self.said if all(spells(w, words) for w in mine)
                     and not any(all(spells(w, words) for w in ws) for ws in others)), None)
        if line is None:
            return None
        named = set().union(*(spelled(w, self.failing_words) for w in mine))
        named -= self.rivals_spell(name, named)
        if not named:
            return None
        message = read_record(line.text.strip()).message.strip()
        return (f"the engine's log says {name} took effect ({message[:120]!r}, line {line.line}), and the lines "
                f"that state the failure name {', '.join(sorted(named))} as no other of the baseline's "
                "settings does: the failure is on the path the user's setting chose")

    def prompt_bound(self, name: str) -> int | None:
        """The failing prompt's length (tokens) when only a single long prompt failed
        (``long_prompt_only``) and setting ``name`` bounds the prompt
        tokens one forward pass takes (knowledge/implementations.toml ``[load] prompt_bounds``); else
        None."""
        tokens = long_prompt_only(self.inp)
        if tokens is None:
            return None
        bounds = {s.name if (s := canon(self.inp.flags, n)) else n for n in implementations().load.prompt_bounds}
        return tokens if name in bounds else None

    def on_request_path(self, name: str) -> str | None:
        """The subsystem (knowledge/subsystems.toml ``carries_requests``) that setting ``name`` configures
        when the failing launch left requests unanswered on a live server (symptom class ``unanswered``:
        no crash, no error line, no wrong numbers): where a request is lost is on its path through the
        server, so the user's own settings there are implicated. None otherwise."""
        if "unanswered" not in self.inp.evidence.symptoms:
            return None
        return next((s.id for s in load_subsystems().subsystems
                     if s.carries_requests and s.flags is not None and s.flags.search(name)), None)

    def symptom_implicates(self, name: str) -> str | None:
        """Why the kind of failure implicates setting ``name`` (an environment variable when it does not
        start with ``-``): it configures a subsystem whose settings are known to cause failures of a class
        this launch shows (knowledge/subsystems.toml ``implicated_by``: work on a second device stream and
        an asynchronous device fault), as ``the failure is an illegal_memory_access, ...``; None otherwise.
        Only the user's own settings get here, away from the engine's default: what the user changed that
        touches what failed is asked before the general suspects of that kind of failure."""
        classes = set(self.inp.evidence.symptoms)
        for s in load_subsystems().subsystems:
            pattern = s.flags if name.startswith("-") else s.env
            seen = sorted(classes & (s.implicated_by | s.own_settings_implicated_by))
            if seen and pattern is not None and pattern.search(name):
                return (f"the failure is {' and '.join(c.replace('_', ' ') for c in seen)}, which settings of the "
                        f"{s.id.replace('_', ' ')} subsystem are known to cause, and the user's {name} configures it")
        return None

    def lifts_bound(self, name: str) -> bool:
        """Whether reverting setting ``name`` lifts a bound on the requests a subsystem on the request path
        admits (knowledge/subsystems.toml ``bounds``) while that path is implicated: the overflow or the
        large batch that triggers the fault then no longer happens, which avoids it (a workaround)."""
        return self.on_request_path(name) is not None and any(
            s.bounds is not None and s.bounds.search(name) for s in load_subsystems().subsystems if s.carries_requests)

    def surfaced_in(self, name: str) -> str | None:
        """Why the failure points at setting ``name`` by where it surfaced: the innermost engine frame is
        code of a subsystem ``name`` configures (knowledge/subsystems.toml ``modules`` and ``flags``), as
        ``the failure surfaced in M.F, code of the S subsystem NAME configures``; None otherwise."""
        if not self.site:
            return None
        subs = [s.id for s in subsystems_of_frame(self.site) if s.flags is not None and s.flags.search(name)]
        if not subs:
            return None
        return f"the failure surfaced in {self.site}, code of the {', '.join(subs)} subsystem {name} configures"

    def _elsewhere(self, name: str) -> bool:
        """Whether the failure surfaced in the code of a known subsystem (knowledge/subsystems.toml
        ``modules``) that a setting defining what is served configures (the checkpoint's number format,
        the parallel layout: knowledge/served.toml) and that setting ``name`` does not: such code works
        on the weights it was given, and its words name its own things (``token`` in fp8's
        ``per_token_group_quant``), not this setting. Code that serves requests (attention, the scheduler)
        is shaped by the batch settings, so its words still implicate them."""
        subs = subsystems_of_frame(self.site) if self.site else []
        served = served_settings().served_flags
        subs = [s for s in subs if s.flags is not None and any(s.flags.search(n) for n in served)]
        return bool(subs) and not any(p is not None and p.search(name) for s in subs for p in (s.flags, s.env))

    def _chosen(self, name: str) -> set[str]:
        """Words of the failing code that another setting's value names (the path it chose)."""
        return set().union(*(w for n, w in self.value_words.items() if n != name and w <= self.site_words))
