"""What a deployment is: the one list of settings that define what is served and where it runs.

``knowledge/served.toml`` (read here, for the planner's generators, the conclusion and the bench) names
each setting with a role: ``served`` (the model, its checkpoint format, the parallel layout, the context
length, the served name: changing one changes the deployment, so it is never "the fix") or ``place``
(where it runs and listens, which devices and credentials: never changed) or ``intent`` (what the user
chose when the case sets it away from SGLang's default: a quantized KV cache; kept as ``[intent] keep``
is, ``user_keeps``). A case adds its own intent: ``[intent] keep = [...]`` and any ``--flag`` its
description says the user needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from agent.domain.case import Case
from agent.domain.models import Baseline, Outcome
from agent.planning.in_play import DEVICE_FLAG, platform_of, subsystems_knowledge
from agent.planning.refused import refused_here
from agent.planning.words import stems
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, lists_choices
from tools.knowledge_files import KnowledgeFile, KnowledgeFileError, check_keys, read_toml

__all__ = ["HOST_BOUND_FACTS", "SHARD_FACT", "WHOLE_FACT", "OnHost", "Served", "description_keeps", "host_refusals", "lists_choices", "localising_intent", "run_platform", "served_settings",
           "user_keeps", "whole_number"]



class OnHost(NamedTuple):
    """Where a change is judged (``Served.changes_deployment``): the platform id, and the failing run's facts
    that say the engine refused a value with a bound it took from the host (``host_refusals``)."""

    platform: str | None
    refused: dict[str, str]


class Served:
    """The settings of knowledge/served.toml: ``served`` and ``place`` names (flags canonical as
    written there, env names as they are)."""

    def __init__(self, served_flags: frozenset[str], place_flags: frozenset[str],
                 served_env: frozenset[str], place_env: frozenset[str],
                 from_checkpoint: dict[str, str] | None = None,
                 checkpoint_only: dict[str, frozenset[str]] | None = None,
                 divides: dict[str, str] | None = None, need: re.Pattern[str] | None = None) -> None:
        #: flag (any spelling) -> (the value that leaves the choice to the engine, the subsystem whose
        #: implementations read its values): role "intent" (filled by the loader)
        self.intent: dict[str, tuple[str, str]] = {}
        #: words of a sentence in which a user says a setting is needed, not incidental ([description] need)
        self.need = need
        #: words of a sentence saying a feature is on for a purpose ([description] on_purpose), or None
        self.on_purpose: re.Pattern[str] | None = None
        #: flag (any spelling) -> the config.json digest key that declares its value ("" : none)
        self.from_checkpoint = from_checkpoint or {}
        #: flag (any spelling) -> values only a checkpoint made in that format can serve (lower case)
        self.checkpoint_only = checkpoint_only or {}
        #: flag (any spelling) -> the config.json digest key its value must divide (the attention heads)
        self.divides = divides or {}
        #: flag (any spelling) -> value -> the declared checkpoint values it also loads (``accepts``)
        self.accepts: dict[str, dict[str, frozenset[str]]] = {}
        #: flag (any spelling) -> platform ids on which the engine sizes it from the host (``host_sized_on``)
        self.host_sized: dict[str, frozenset[str]] = {}
        #: flag (any spelling) -> every spelling of its setting, for those ``host_sized_on``
        self.spellings: dict[str, frozenset[str]] = {}
        #: served flag (name as written) -> the value the engine prints for it when the flag is not given
        #: (``default``; "None" for one the engine takes from the checkpoint), for ``chosen_in_log``
        self.unset: dict[str, str] = {}
        self.served_flags = served_flags
        self.place_flags = place_flags
        self.served_env = served_env
        self.place_env = place_env

    def chosen_in_log(self, printed: dict[str, str]) -> dict[str, str]:
        """The served settings an engine's printed settings (``printed``: argparse dest -> value, SGLang's
        ``server_args`` line) show away from the value it prints when the flag is not given: the user's
        own choices, as flags (``{"--quantization": "fp8"}``). For a log read without its case, whose
        settings line prints every setting (defaults and the engine's own resolutions alike), these are
        the settings known to be the user's."""
        out: dict[str, str] = {}
        for name, unset in self.unset.items():
            value = printed.get(name.lstrip("-").replace("-", "_"))
            if value not in (None, "", "None", unset):
                out[name] = str(value)
        return out

    @property
    def flags(self) -> frozenset[str]:
        """Every flag that defines the deployment (served or place)."""
        return self.served_flags | self.place_flags

    @property
    def env(self) -> frozenset[str]:
        """Every environment variable that defines the deployment."""
        return self.served_env | self.place_env

    def changes_deployment(self, kind: str, name: str, after: object, flags: FlagCatalog | None = None,
                           keeps: set[str] | frozenset[str] = frozenset(),
                           checkpoint: dict[str, str] | None = None, before: object = None,
                           platform: str | OnHost | None = None) -> bool:
        """Whether changing the setting from ``before`` (None: unknown or unset) to ``after`` (None:
        removing it) changes what is served: a setting the user needs (``keeps``), or a ``served`` one,
        except one SGLang can take from the checkpoint (``from_checkpoint``) removed or set while the
        checkpoint's config.json digest (``checkpoint``) is unknown, or removed or set to what that
        digest declares. A known checkpoint that declares no value (no ``quantization_config``) means
        removing or changing the baseline's value changes the format served, unless that value is one
        only a checkpoint made in it can serve (``checkpoint_only``: AWQ, GPTQ, ...): the engine cannot
        make it from these weights, so the baseline never served it and removing it serves what these
        weights are. Likewise a value that cannot split the model (``divides``: a tensor-parallel size that
        does not divide the checkpoint's attention heads) was never served: removing it, or a value that
        divides them, keeps what is served. A setting the engine sizes from the host on this ``platform``
        (``host_sized_on``: the CPU engine's ranks, one per NUMA node) that the case left to the engine's
        default says how the same host runs, not what is served; so does one whose value the engine refused
        with a bound it took from this host (``platform`` an ``OnHost`` whose ``refused`` are the failing
        run's facts: ``host_bounded``/``host_limit`` say "the ranks (dp_size * tp_size * pp_size = 8) should
        be smaller than or equal to number of numa node on the machine 6"), fitted within it, or lowered
        after a rank said its shard of a weight did not fit a kernel (``shard_split_by`` names it: fewer
        ranks serve the same model on the same box; a GPU's fewer ranks give devices back, a change). Raising
        the setting that keeps experts whole (``WHOLE_FACT``) after a slice of them did not fit keeps it too."""
        canon = canonical_flag(flags, name) if kind == "flag" else name
        if name in keeps or canon in keeps:
            return True
        platform, refused = (platform.platform, platform.refused) if isinstance(platform, OnHost) else (platform, None)
        if self.role(kind, name, flags) != "served" or _experts_kept_whole(canon, before, after, refused):
            return False
        sized = [n for n, on in self.host_sized.items() if platform and platform in on and
                 (n == name or canonical_flag(flags, n) == canon)]
        if sized and (before is None or _fits_host(self.spellings.get(sized[0], frozenset(sized)), before, after,
                                                   refused)):
            return False
        if self._unservable_split(flags, canon, before, after, checkpoint):
            return False
        key = next((k for n, k in self.from_checkpoint.items() if n == name or canonical_flag(flags, n) == canon), None)
        if key is None:
            return True
        declared = (checkpoint or {}).get(key) if key else None
        if after is None:
            # SGLang takes the checkpoint's own value. A checkpoint that is known (its config.json read)
            # and declares no value for a non-numeric setting, or another one than the baseline's,
            # serves something else: removing ``--quantization fp8`` from a bf16 checkpoint serves bf16.
            if not key or not checkpoint or before is None or _numeric(before):
                return False
            if declared is None and self._checkpoint_only(flags, canon, before):
                return False
            return declared is None or not _same_format(declared, before)
        if not key:
            return True  # a new value the checkpoint cannot vouch for
        if declared is None:
            # unknown checkpoint: nothing says otherwise; a known one that declares nothing: a value
            # other than the baseline's changes the format served
            return bool(checkpoint) and before is not None and not _numeric(after) and \
                not _same_format(str(after), before)
        try:
            return float(str(after)) > float(declared)  # a shorter window than the model's keeps the model
        except ValueError:
            return str(after).strip().lower() != declared.strip().lower()

    def _unservable_split(self, flags: FlagCatalog | None, canon: str, before: object, after: object,
                          checkpoint: dict[str, str] | None) -> bool:
        """``before`` does not divide the checkpoint's count it must divide, and ``after`` (None: the
        engine's default, one) does."""
        key = next((k for n, k in self.divides.items() if canonical_flag(flags, n) == canon), None)
        total = whole_number((checkpoint or {}).get(key)) if key else None
        was, now = whole_number(before), (1 if after is None else whole_number(after))
        if not (total and was and now):
            return False
        return total % was != 0 and total % now == 0

    def unservable(self, flags: FlagCatalog | None, name: str, value: object,
                   checkpoint: dict[str, str] | None) -> bool:
        """Whether setting ``name`` to ``value`` cannot serve these weights: a ``checkpoint_only`` value
        (AWQ, GPTQ, ...) while the checkpoint's config.json is known and declares no such format (the
        engine reads that format's parameters from the checkpoint's own files and refuses the launch); or,
        for a setting with ``accepts``, another value than the one the checkpoint declares, unless the same
        format in another spelling (``awq_marlin`` for ``awq``) or one ``accepts`` lists for it (SGLang
        0.5.23 configs/model_config.py _verify_quantization: "Quantization method specified in the model
        config (X) does not match the quantization method specified in the `quantization` argument (Y).")."""
        canon = canonical_flag(flags, name)
        key = next((k for n, k in self.from_checkpoint.items() if canonical_flag(flags, n) == canon), None)
        if not key or not checkpoint:
            return False
        declared = checkpoint.get(key)
        if declared is None:
            return self._checkpoint_only(flags, canon, value)
        accepts = next((a for n, a in self.accepts.items() if canonical_flag(flags, n) == canon), None)
        if accepts is None or _numeric(value) or _same_format(declared, value):
            return False
        loads = accepts.get(str(value).strip().lower(), frozenset())
        return "*" not in loads and declared.strip().lower() not in loads

    def _checkpoint_only(self, flags: FlagCatalog | None, canon: str, value: object) -> bool:
        values = next((v for n, v in self.checkpoint_only.items() if canonical_flag(flags, n) == canon), frozenset())
        return str(value).strip().lower() in values

    def chosen(self, name: str, value: object, flags: FlagCatalog | None = None) -> bool:
        """Whether a case setting flag ``name`` to ``value`` made a choice of its own that is intent (role
        "intent", a value other than the one that leaves the choice to the engine)."""
        entry = self._intent_entry(name, flags)
        if entry is None or value is None or value is False:
            return False
        return str(value).strip().lower() != entry[0].strip().lower()

    def read_by(self, name: str, flags: FlagCatalog | None = None) -> str | None:
        """The subsystem (knowledge/subsystems.toml id) whose implementations read the values of intent
        setting ``name``, or None."""
        entry = self._intent_entry(name, flags)
        return (entry[1] or None) if entry is not None else None

    def _intent_entry(self, name: str, flags: FlagCatalog | None) -> tuple[str, str] | None:
        canon = canonical_flag(flags, name)
        return next((e for n, e in self.intent.items() if n == name or canonical_flag(flags, n) == canon), None)

    def role(self, kind: str, name: str, flags: FlagCatalog | None = None) -> str | None:
        """``served``, ``place`` or None for a setting (a flag spelled any way the host accepts). An
        ``intent`` setting has no role here: only the case's own value of it is kept (``user_keeps``)."""
        if kind == "env":
            return "place" if name in self.place_env else "served" if name in self.served_env else None
        canon = canonical_flag(flags, name)
        for role, names in (("place", self.place_flags), ("served", self.served_flags)):
            if name in names or canon in {canonical_flag(flags, n) for n in names}:
                return role
        return None


#: The failing run's facts (knowledge/signatures.toml) that say which settings an error bounded by a
#: figure of the host (argparse dests, multiplied), and that figure.
HOST_BOUND_FACTS = ("host_bounded", "host_limit")
#: The failing run's fact naming the setting (argparse dest) whose split gave a rank a shard of a weight that
#: a kernel refused (knowledge/signatures.toml ``rank_shard_refused``).
SHARD_FACT = "shard_split_by"
#: The failing run's fact naming the setting (argparse dest) that hands each rank whole experts instead of a
#: slice of each, so a larger value of it shrinks the split that gave the refused shard (knowledge/
#: signatures.toml ``expert_shard_refused``: the MoE layer's split is tp_size / ep_size).
WHOLE_FACT = "shard_whole_by"


def _fits_host(names: Iterable[str], before: object, after: object, refused: dict[str, str] | None) -> bool:
    """Whether the engine refused ``before`` with a bound taken from the host (``refused``'s
    ``host_bounded`` names one of the setting's spellings ``names`` as an argparse dest, and ``before``
    is above ``host_limit``) and ``after`` (None: the engine's default, one) is within it; or a rank's
    shard at ``before`` did not fit a kernel (``shard_split_by`` names the setting) and ``after`` is fewer."""
    facts = refused or {}
    bounded = _dests(facts, HOST_BOUND_FACTS[0])
    limit, was = whole_number(facts.get(HOST_BOUND_FACTS[1])), whole_number(before)
    now = 1 if after is None else whole_number(after)
    dests = {n.lstrip("-").replace("-", "_") for n in names}
    split = _dests(facts, SHARD_FACT)
    if split & dests and was and now and now < was:
        return True  # a rank's shard did not fit a kernel: fewer ranks on the same host
    if not (bounded & dests and limit and was and now):
        return False
    return was > limit >= now


def _experts_kept_whole(name: str, before: object, after: object, refused: dict[str, str] | None) -> bool:
    """Whether ``after`` raises setting ``name`` (a flag) above ``before`` (None: the engine's default, one)
    after a rank's slice of the routed experts did not fit a kernel and the failing run's ``WHOLE_FACT``
    names it: more of the same GPUs then hold whole experts, the same model on the same devices."""
    was, now = (1 if before is None else whole_number(before)), whole_number(after)
    return name.lstrip("-").replace("-", "_") in _dests(refused or {}, WHOLE_FACT) and was is not None \
        and now is not None and now > was


def _dests(facts: dict[str, str], key: str) -> set[str]:
    """The argparse dests a fact names, ``*``-joined as the engine multiplies them (``dp_size * tp_size``)."""
    return {d.strip() for d in facts.get(key, "").split("*") if d.strip()}


def host_refusals(outcomes: Iterable[Outcome]) -> dict[str, str]:
    """The host bounds the failed launches among ``outcomes`` were refused with (their ``HOST_BOUND_FACTS``),
    and the setting whose split gave a rank a shard a kernel refused (``SHARD_FACT``), for
    ``Served.changes_deployment``'s ``refused``; empty when none was."""
    out: dict[str, str] = {}
    for o in outcomes:
        if o.stage != "ok" and all(k in o.facts for k in HOST_BOUND_FACTS):
            out.update({k: o.facts[k] for k in HOST_BOUND_FACTS})
        for fact in (SHARD_FACT, WHOLE_FACT):
            if o.stage != "ok" and fact in o.facts:
                out[fact] = o.facts[fact]
    return out


def _same_format(a: str, b: object) -> bool:
    """Whether two spellings name one format (``modelopt`` in config.json, ``modelopt_fp4`` as a flag)."""
    x, y = a.strip().lower(), str(b).strip().lower()
    return x == y or x.startswith(y) or y.startswith(x)


def whole_number(value: object) -> int | None:
    """A positive whole number written as ``value`` (a rank count, a head count), or None."""
    try:
        n = int(str(value).strip())
    except ValueError:
        return None
    return n if n > 0 else None


def _numeric(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def canonical_flag(flags: FlagCatalog | None, name: str) -> str:
    """The host's canonical spelling of flag ``name`` (its ``--help`` entry's name; ``name`` itself when
    ``flags`` is None or the host does not know the flag)."""
    if flags is None:
        return name
    return flags.canonical_name(name) or name


def _load(path: Path) -> Served:
    data = read_toml(path, KnowledgeFileError)
    check_keys(path, data, ["setting", "description"], KnowledgeFileError)
    need = _need_words(path, data.get("description", {}), "need")
    on_purpose = _need_words(path, data.get("description", {}), "on_purpose")
    sets: dict[tuple[str, str], set[str]] = {}
    intent: dict[str, tuple[str, str]] = {}
    from_ckpt: dict[str, str] = {}
    only: dict[str, frozenset[str]] = {}
    divides: dict[str, str] = {}
    host_sized: dict[str, frozenset[str]] = {}
    spellings: dict[str, frozenset[str]] = {}
    unset: dict[str, str] = {}
    accepts: dict[str, dict[str, frozenset[str]]] = {}
    for i, s in enumerate(data.get("setting", [])):
        check_keys(path, s, ["name", "kind", "role", "aliases", "from_checkpoint", "checkpoint_only", "divides",
                             "default", "read_by", "host_sized_on", "accepts", "source"],
                   KnowledgeFileError, f"setting #{i + 1}")
        kind, role = str(s.get("kind", "flag")), str(s.get("role", ""))
        if kind not in ("flag", "env") or role not in ("served", "place", "intent") or not s.get("name"):
            raise ValueError(f"{path}: setting #{i + 1}: expected name, kind flag|env and role served|place|intent")
        if role == "intent":
            if kind != "flag" or "default" not in s:
                raise ValueError(f"{path}: setting #{i + 1}: an intent setting is a flag with a default")
            for n in [str(s["name"]), *map(str, s.get("aliases", []))]:
                intent[n] = (str(s["default"]), str(s.get("read_by", "")))
            continue
        sets.setdefault((kind, role), set()).update([str(s["name"]), *map(str, s.get("aliases", []))])
        for n in [str(s["name"]), *map(str, s.get("aliases", []))]:
            if "from_checkpoint" in s:
                from_ckpt[n] = str(s["from_checkpoint"])
            if s.get("checkpoint_only"):
                only[n] = frozenset(str(v).lower() for v in s["checkpoint_only"])
            if s.get("divides"):
                divides[n] = str(s["divides"])
            if isinstance(s.get("accepts"), dict):
                accepts[n] = {str(k).lower(): frozenset(str(v).lower() for v in vs) for k, vs in s["accepts"].items()}
            if role == "served" and kind == "flag" and n == str(s["name"]) and ("default" in s or s.get("from_checkpoint")):
                unset[n] = str(s.get("default", "None"))
            if s.get("host_sized_on"):
                host_sized[n] = frozenset(str(v) for v in s["host_sized_on"])
                spellings[n] = frozenset([str(s["name"]), *map(str, s.get("aliases", []))])
    served = Served(
        frozenset(sets.get(("flag", "served"), set())), frozenset(sets.get(("flag", "place"), set())),
        frozenset(sets.get(("env", "served"), set())), frozenset(sets.get(("env", "place"), set())),
        from_ckpt, only, divides, need,
    )
    served.intent, served.host_sized, served.spellings, served.unset = intent, host_sized, spellings, unset
    served.on_purpose, served.accepts = on_purpose, accepts
    return served


def _need_words(path: Path, table: object, field: str) -> re.Pattern[str] | None:
    """``[description] <field>`` (``need`` or ``on_purpose``: words, each a regular expression) as one
    case-insensitive pattern matched as whole words, or None when the file names none. Raises
    ``KnowledgeFileError`` naming the field."""
    check_keys(path, table, ["need", "on_purpose", "source"], KnowledgeFileError, "description")
    words = table.get(field, []) if isinstance(table, dict) else []
    if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
        raise KnowledgeFileError(f"{path}: field 'description.{field}': expected a list of words")
    if not words:
        return None
    try:
        return re.compile(r"\b(?:" + "|".join(words) + r")\b", re.I)
    except re.error as exc:
        raise KnowledgeFileError(f"{path}: field 'description.{field}': not a regex: {exc}") from None


def served_settings() -> Served:
    """knowledge/served.toml of the knowledge folder in force (empty when absent). Raises ValueError
    naming the file and entry for a malformed one."""
    return _SERVED()


#: served.toml of the knowledge folder in force, read once per version on disk (``tools.knowledge_files``).
_SERVED = KnowledgeFile("served.toml", _load, absent=lambda: Served(frozenset(), frozenset(), frozenset(), frozenset()))


#: Where a clause of a sentence ends: a semicolon, or a comma or a conjunction that does not go on to another
#: flag ("keep --tp-size 2 and --quantization fp8" is one clause; "keeping --x ray and capping the cache to
#: keep memory small" two: the need word of the second says nothing of the first's flag).
_CLAUSE = re.compile(r";\s*|(?:,|\s+(?:and|but|so|while|then))\s+(?!--)")


def _selectors() -> frozenset[str]:
    """Flags that put a subsystem in play by being set at all, whatever their value (knowledge/subsystems.toml
    ``in_play_any`` ``{ setting = FLAG }``: ``--speculative-algorithm EAGLE`` turns speculative decoding on)."""
    return frozenset(str(c["setting"]) for s in subsystems_knowledge().subsystems for c in s.in_play_any
                     if set(c) == {"setting"})


def description_keeps(case: Case) -> set[str]:
    """Settings the user says they need: the case's ``[intent] keep`` plus every ``--flag`` or
    ``ENV_NAME`` the description names in a clause that says it is needed ("we need --context-length
    65536"; the words that say so are knowledge/served.toml's ``[description] need``; a clause ends at a
    semicolon, or at a comma or conjunction not followed by another flag, ``_CLAUSE``), and every feature
    the case's baseline turns on (a ``--flag`` set to true, not a ``--disable-``/``--no-`` one) that such a
    sentence, or one saying a feature is on for a purpose (``[description] on_purpose``: "with routing
    replay enabled for the trainer"), names in words: a word of the flag's name (generic words such as
    "enable" left out) shares its stem with a word of the sentence; a feature's selector set to any value
    (``_selectors``: "we serve it with EAGLE speculative decoding" and ``--speculative-algorithm``) is one.
    "We serve MODEL with FEATURE" is such a sentence: the feature is part of what the user deploys."""
    keep = set(case.intent.keep)
    settings = served_settings()
    said = [p for p in (settings.need, settings.on_purpose) if p is not None]
    if not said:
        return keep
    switched_on = [n for n, v in case.baseline.flags.items()
                   if (v is True and not re.match(r"--(?:disable|no)-", n)) or (v not in (None, False) and n in _selectors())]
    for sentence in re.split(r"(?<=[.!?])\s+|\n", case.description or ""):
        for clause in _CLAUSE.split(sentence):
            if settings.need is not None and settings.need.search(clause):
                keep |= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", clause))
        if not any(p.search(sentence) for p in said):
            continue
        words = stems(re.sub(r"(?<![\w-])--[a-z][a-z0-9-]*", " ", sentence))
        keep |= {n for n in switched_on if stems(n.lstrip("-")) & words}
    return keep


def user_keeps(case: Case, flags: FlagCatalog | None = None, outcomes: Iterable[Outcome] = ()) -> set[str]:
    """Settings the user needs kept (``description_keeps``) plus each ``intent`` setting the case's own
    baseline sets away from SGLang's default (``Served.chosen``: the user's FP8 KV cache): changing or
    removing one changes the deployment the user asked for, so it is a workaround, never the fix (issue
    20, point 5). An intent value a failed launch among ``outcomes`` was refused for, under a condition no
    setting chooses (``agent.planning.refused.refused_here``: "CPU FP8 KV cache is only supported for
    MHA."), was never served on this host and is not kept, unless the description says the user needs it.
    ``flags`` resolves other spellings of a flag (None: names as written)."""
    keep = description_keeps(case)
    served, seen = served_settings(), list(outcomes)
    for name, value in case.baseline.flags.items():
        if served.chosen(name, value, flags) and not refused_here(name, value, seen, flags, DEVICE_FLAG):
            keep |= {name, canonical_flag(flags, name)}
    return keep


def localising_intent(case: Case, flags: FlagCatalog | None) -> set[str]:
    """The values the case's baseline chose for the deployment (knowledge/served.toml role ``intent``,
    ``Served.chosen``) whose reader has other implementations (``read_by``), and which the user did not say
    they need (``description_keeps``): reverting one is the quickest test of whether the failure lives in
    the path that value selects (EAGLE's draft tree, an FP8 KV cache), so it is ranked as the ordinary
    candidate it is before it is launched. When it serves it is still the workaround it is
    (``FixKeeper._fix_kind`` reads ``user_keeps``), and the reader's other implementations are tried with
    the user's value kept (``intent_alternatives``) before it is reported."""
    served, said = served_settings(), description_keeps(case)
    out: set[str] = set()
    for name, value in case.baseline.flags.items():
        if served.chosen(name, value, flags) and served.read_by(name, flags) and name not in said:
            out |= {name, canonical_flag(flags, name)}
    return out


def run_platform(fingerprint: HostFingerprint | dict[str, object] | None, config: Baseline | None) -> str | None:
    """The platform id (knowledge/subsystems.toml ``[[platform]]``) a configuration runs on: its own
    ``--device`` when it names one, else the host's GPU vendor; None when neither is known."""
    fp = HostFingerprint.model_validate(fingerprint) if isinstance(fingerprint, dict) else fingerprint
    device = config.flags.get(DEVICE_FLAG) if config is not None else None
    return platform_of(fp, str(device) if device not in (None, True, False) else None, subsystems_knowledge())
