"""What is in play: the platform, the model's traits and the features a deployment turns on.

Before proposing a change an engineer knows what the deployment uses: the model's own config.json (MoE
or dense, vision tower, linear-attention layers, quantization; read from the host at intake,
``tools.model_config``), the platform (CUDA, ROCm, CPU, ... from the fingerprint or the effective
``--device``) and the features the command and SGLang's printed settings turn on (speculative decoding,
LoRA, expert parallelism, disaggregation, hierarchical cache). A change to a subsystem that is not in
play cannot matter, so it is not a candidate.

Which settings configure which subsystem, and when a subsystem is in play, is data:
``knowledge/subsystems.toml`` (its sources are SGLang's server_args.py sections). A fact that is not
known (no config.json on the host, no GPU query) never makes a subsystem "not in play".
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.domain.failure import DEVICE_SYMPTOMS, SYMPTOM_CLASSES
from agent.domain.models import Baseline, Change, Outcome
from agent.planning.platform_rule import platform_id
from tools.fingerprint import HostFingerprint
from tools.flags import FlagCatalog, FlagError
from tools.knowledge_files import KnowledgeFile, check_keys
from tools.load_shapes import FEATURES
from tools.signatures import STAGES

__all__ = ["InPlay", "Knowledge", "load_subsystems", "platform_of", "subsystems_knowledge", "subsystems_of_frame"]

_OFF = frozenset({"", "none", "null", "false", "0", "off", "disabled", "no"})


@dataclass
class Subsystem:
    """One ``[[subsystem]]`` of knowledge/subsystems.toml."""

    id: str
    flags: re.Pattern[str] | None
    env: re.Pattern[str] | None
    in_play_any: list[dict[str, Any]]
    why: str
    source: str
    #: the subsystem's code: a pattern on ``module.function`` of an SGLang frame (None: not given)
    modules: re.Pattern[str] | None = None
    #: every request passes through it, in and out (``carries_requests``)
    carries_requests: bool = False
    #: its settings that bound how many requests it admits (``bounds``; None: none)
    bounds: re.Pattern[str] | None = None
    #: symptom classes its settings are known to cause (``implicated_by``; empty: none)
    implicated_by: frozenset[str] = frozenset()
    #: symptom classes that implicate the user's own settings of it only, not the engine's choices
    #: (``own_settings_implicated_by``; empty: none)
    own_settings_implicated_by: frozenset[str] = frozenset()
    #: request features without which its code runs on the host only (``device_work_only_with``; None: any)
    device_work_only_with: frozenset[str] | None = None
    #: the start-up stage a launch must have reached for its code to have run (``runs_after_stage``)
    runs_after_stage: str | None = None


@dataclass
class ChoiceOption:
    """One ``[[choice_option]]`` of knowledge/subsystems.toml: options read only under some choices of a
    selector flag."""

    selector: str
    #: the selector's values under which the options are read, as the file writes them
    choices: tuple[str, ...]
    flags: re.Pattern[str]


@dataclass
class Knowledge:
    """The whole of knowledge/subsystems.toml."""

    platforms: list[dict[str, Any]] = field(default_factory=list)
    traits: dict[str, list[str]] = field(default_factory=dict)
    subsystems: list[Subsystem] = field(default_factory=list)
    #: (flag pattern, value pattern, conditions, why) of ``[[implementation]]``
    implementations: list[tuple[re.Pattern[str], re.Pattern[str], list[dict[str, Any]], str]] = field(
        default_factory=list)
    choice_options: list[ChoiceOption] = field(default_factory=list)


class SubsystemsError(ValueError):
    """knowledge/subsystems.toml cannot be used (one line naming the file and field)."""


def _load(path: Path) -> Knowledge:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SubsystemsError(f"{path}: {exc}") from None
    _check_subsystem_keys(path, data)
    k = Knowledge(platforms=list(data.get("platform", [])))
    for t in data.get("model_trait", []):
        k.traits[str(t["id"])] = [str(x) for x in t.get("keys", [])]
    for i, s in enumerate(data.get("subsystem", [])):
        for key in ("implicated_by", "own_settings_implicated_by"):
            unknown = [c for c in s.get(key, []) if c not in SYMPTOM_CLASSES]
            if unknown:
                raise SubsystemsError(f"{path}: subsystem #{i + 1}: {key}: {unknown[0]!r} is not a symptom "
                                      f"class (expected one of {', '.join(SYMPTOM_CLASSES)})")
        features = s.get("device_work_only_with")
        if features is not None and (not isinstance(features, list) or any(f not in FEATURES for f in features)):
            raise SubsystemsError(f"{path}: subsystem #{i + 1}: device_work_only_with: {features!r} is not a list of "
                                  f"request features (expected some of {', '.join(FEATURES)})")
        if s.get("runs_after_stage") and s["runs_after_stage"] not in STAGES:
            raise SubsystemsError(f"{path}: subsystem #{i + 1}: runs_after_stage: {s['runs_after_stage']!r} is not a "
                                  f"stage (expected one of {', '.join(STAGES)})")
        try:
            k.subsystems.append(
                Subsystem(
                    id=str(s["id"]),
                    flags=re.compile(s["flags"]) if s.get("flags") else None,
                    env=re.compile(s["env"]) if s.get("env") else None,
                    in_play_any=list(s.get("in_play_any", [])),
                    why=str(s.get("why", "")),
                    source=str(s.get("source", "")),
                    modules=re.compile(s["modules"]) if s.get("modules") else None,
                    carries_requests=bool(s.get("carries_requests", False)),
                    bounds=re.compile(s["bounds"]) if s.get("bounds") else None,
                    implicated_by=frozenset(str(c) for c in s.get("implicated_by", [])),
                    own_settings_implicated_by=frozenset(str(c) for c in s.get("own_settings_implicated_by", [])),
                    device_work_only_with=frozenset(features) if features is not None else None,
                    runs_after_stage=str(s["runs_after_stage"]) if s.get("runs_after_stage") else None,
                )
            )
        except (KeyError, re.error) as exc:
            raise SubsystemsError(f"{path}: subsystem #{i + 1}: {exc}") from None
    for i, m in enumerate(data.get("implementation", [])):
        try:
            k.implementations.append((re.compile(m["flags"]), re.compile(m["values"], re.I),
                                      list(m.get("in_play_any", [])), str(m.get("why", ""))))
        except (KeyError, re.error) as exc:
            raise SubsystemsError(f"{path}: implementation #{i + 1}: {exc}") from None
    for i, c in enumerate(data.get("choice_option", [])):
        try:
            choices = tuple(str(v).strip() for v in c["choices"])
            k.choice_options.append(ChoiceOption(str(c["selector"]), choices, re.compile(c["flags"])))
        except (KeyError, TypeError, re.error) as exc:
            raise SubsystemsError(f"{path}: choice_option #{i + 1}: expected selector, choices and a flags "
                                  f"regex ({exc})") from None
    return k


#: Stages of a launch whose server never came up (``agent.domain.models.Stage``).
_NEVER_READY = frozenset({"launch_failed", "load_failed", "timeout"})

#: The tables of subsystems.toml and the keys of each (``in_play_any`` conditions: ``_holds``).
_KEYS = {
    "platform": ["id", "device", "gpu_vendor", "log_says", "rank_setting", "rank_setting_source", "source"],
    "model_trait": ["id", "keys", "source"],
    "subsystem": ["id", "flags", "env", "in_play_any", "modules", "modules_source", "why", "source",
                  "carries_requests", "bounds", "implicated_by", "own_settings_implicated_by",
                  "device_work_only_with", "runs_after_stage", "runs_after_source"],
    "implementation": ["flags", "values", "in_play_any", "why", "source"],
    "choice_option": ["selector", "choices", "flags", "source"],
}
_CONDITION_KEYS = ["platform", "model", "setting", "above", "matches"]


def _check_subsystem_keys(path: Path, data: dict[str, Any]) -> None:
    """SubsystemsError (one line) for a table or key subsystems.toml does not have."""
    check_keys(path, data, _KEYS, SubsystemsError)
    for table, keys in _KEYS.items():
        for i, entry in enumerate(data.get(table, [])):
            check_keys(path, entry, keys, SubsystemsError, f"{table} #{i + 1}")
            for j, cond in enumerate(entry.get("in_play_any", []) if isinstance(entry, dict) else []):
                check_keys(path, cond, _CONDITION_KEYS, SubsystemsError, f"{table} #{i + 1}: in_play_any #{j + 1}")


def load_subsystems(path: Path | None = None) -> Knowledge:
    """knowledge/subsystems.toml of the knowledge folder in force (empty knowledge when absent).
    Raises SubsystemsError for a file that cannot be parsed."""
    if path is None:
        return _SUBSYSTEMS()
    return _load(path) if path.is_file() else Knowledge()


#: subsystems.toml of the knowledge folder in force, read once per version on disk (``tools.knowledge_files``).
_SUBSYSTEMS = KnowledgeFile("subsystems.toml", _load, absent=Knowledge)


def subsystems_knowledge() -> Knowledge:
    """Alias of ``load_subsystems()`` for callers that only read."""
    return load_subsystems()


def subsystems_of_frame(where: str, k: Knowledge | None = None) -> list[Subsystem]:
    """The subsystems whose code (``modules`` in knowledge/subsystems.toml) an SGLang frame
    ``module.function`` (``sglang.srt.mem_cache.hiradix_cache.writing_check``) is in."""
    know = k if k is not None else load_subsystems()
    return [s for s in know.subsystems if s.modules is not None and s.modules.search(where)]


#: SGLang's flag that picks the device the server runs on (``--device``, server_args.py, every 0.5.x
#: release); its values are the ``device`` of knowledge/subsystems.toml's ``[[platform]]`` entries.
DEVICE_FLAG = "--device"


def platform_of(fp: HostFingerprint | None, device: str | None, k: Knowledge) -> str | None:
    """The platform id (cuda, rocm, cpu, ...): the effective ``--device`` when it names one, else the
    fingerprint's GPU vendor; None when neither is known (``platform_rule.platform_id``)."""
    return platform_id(k.platforms, device, fp.gpu_vendor if fp else None)


def platform_in_log(text: str, k: Knowledge) -> tuple[str, str] | None:
    """(platform id, the log line that shows it) when a line of the server's own log ``text`` shows
    which platform the host is (a ``[[platform]]``'s ``log_says`` regexes, knowledge/subsystems.toml);
    None when no line does. Raises SubsystemsError for a regex that does not compile."""
    for p in k.platforms:
        for pattern in p.get("log_says", []):
            try:
                rx = re.compile(str(pattern))
            except re.error as exc:
                raise SubsystemsError(f"subsystems.toml: platform {p.get('id')}: log_says {pattern!r}: {exc}") from None
            for line in text.splitlines():
                if m := rx.search(line):
                    return str(p["id"]), _around(line.strip(), m.group(0)[-40:])
    return None


def _around(line: str, hit: str, width: int = 160) -> str:
    """``line`` as quoted to a person: whole when short, else the part around ``hit`` (an engine's
    configuration dump is one line of thousands of characters) with ``…`` where it was cut. A pattern that
    spans a long stretch (``server_args=.*'device': 'cpu'``) passes its match's tail: that is what shows."""
    if len(line) <= width:
        return line
    at = max(0, line.rfind(hit))
    start = max(0, at - (width - len(hit)) // 2)
    part = line[start : start + width]
    return ("…" if start > 0 else "") + part + ("…" if start + width < len(line) else "")


def gpu_vendor_of(platform: str, k: Knowledge) -> str | None:
    """The fingerprint's ``gpu_vendor`` that means ``platform`` (``none`` for a CPU host), or None."""
    for p in k.platforms:
        if p.get("id") == platform and p.get("gpu_vendor"):
            return str(p["gpu_vendor"])
    return None


def device_for(platform: str | None, k: Knowledge) -> str | None:
    """The ``--device`` value that runs on ``platform`` (``cpu`` on a CPU host), or None."""
    for p in k.platforms:
        if p.get("id") == platform and p.get("device"):
            return str(p["device"])
    return None


class InPlay:
    """Whether a change touches a subsystem in play on this deployment.

    ``baseline``: the configuration the change is made against; ``server_args``: every effective
    setting SGLang printed for it (argparse dests); ``flags``: the host's flag catalog (to canonicalise
    names and read defaults).
    """

    def __init__(
        self,
        fp: HostFingerprint | None,
        baseline: Baseline,
        server_args: dict[str, str],
        flags: FlagCatalog | None,
        knowledge: Knowledge | None = None,
    ) -> None:
        self.k = knowledge if knowledge is not None else load_subsystems()
        self.fp = fp
        self.baseline = baseline
        self.server_args = server_args
        self.flags = flags
        self.platform = platform_of(fp, self.setting(DEVICE_FLAG), self.k)

    # ----- facts ----------------------------------------------------------------------------------

    def setting(self, name: str) -> str | None:
        """The effective value of a flag as text: the baseline's (``"true"`` for a switch), else what
        SGLang printed, else the help's default; None when unset."""
        spec = None
        if self.flags is not None:
            try:
                spec = self.flags.resolve(name)
            except FlagError:
                spec = None
        names = spec.option_strings if spec else [name]
        for n in names:
            if n in self.baseline.flags:
                v = self.baseline.flags[n]
                return "true" if v is True else (None if v is None else str(v))
        dest = (spec.name if spec else name).lstrip("-").replace("-", "_")
        if dest in self.server_args:
            v = self.server_args[dest]
            return None if v in ("None", "") else v
        if spec is not None and spec.takes_value:
            return spec.default
        return None

    def trait(self, trait: str) -> bool | None:
        """Whether the model has ``trait`` by its config.json; None when the config is unknown."""
        if self.fp is None or not self.fp.checkpoint:
            return None
        keys = set(self.fp.checkpoint.get("keys", "").split())
        wanted = self.k.traits.get(trait)
        if wanted is None:
            return None
        return any(w in keys for w in wanted)

    def _holds(self, cond: dict[str, Any]) -> bool | None:
        """One ``in_play_any`` condition: True, False, or None (unknown)."""
        if "platform" in cond:
            if self.platform is None:
                return None
            return self.platform in cond["platform"]
        if "model" in cond:
            return self.trait(str(cond["model"]))
        if "setting" in cond:
            value = self.setting(str(cond["setting"]))
            if value is None or value.strip().lower() in _OFF:
                return False
            if "above" in cond:
                try:
                    return float(value) > float(cond["above"])
                except ValueError:
                    return None
            if "matches" in cond:
                return re.fullmatch(str(cond["matches"]), value.strip(), re.IGNORECASE) is not None
            return True
        return None

    # ----- the question ---------------------------------------------------------------------------

    def subsystems_of(self, kind: str, name: str) -> list[Subsystem]:
        """The subsystems a setting configures (by knowledge/subsystems.toml's patterns)."""
        out = []
        for s in self.k.subsystems:
            pat = s.flags if kind == "flag" else s.env
            if pat is not None and pat.search(name):
                out.append(s)
        return out

    def implicated_here(self, kind: str, name: str, classes: set[str]) -> list[tuple[Subsystem, str]]:
        """The subsystems the setting ``name`` configures whose settings are known to cause one of the
        symptom ``classes`` (``implicated_by``) and that are in play here (or not known to be out), each
        with the first such class: where a failure with no frame of its own (a silent accuracy drop) is
        looked for first."""
        out = []
        for s in self.subsystems_of(kind, name):
            seen = sorted(classes & s.implicated_by)
            results = [self._holds(c) for c in s.in_play_any]
            if seen and not (results and all(r is False for r in results)):
                out.append((s, seen[0]))
        return out

    def _own_device(self, change: Change) -> str | None:
        """Why removing ``--device`` cannot matter, or None: the host's platform, read from the host
        itself (the fingerprint's GPU query; CPU-only when no GPU tool answered), is the one the
        baseline's device names. Without the flag the engine picks a device by itself, and a host has
        no other platform to pick (SGLang 0.5.23 srt/utils/common.py get_device on a CPU-only host:
        'No accelerator ... is available')."""
        if change.kind != "flag" or self._canonical(change.name) != DEVICE_FLAG:
            return None
        host = platform_of(self.fp, None, self.k)
        current = self.setting(DEVICE_FLAG)
        own = next((str(p.get("device", "")) for p in self.k.platforms if p.get("id") == host), "")
        if not host or not current or current.split(":")[0].strip().lower() != own.lower():
            return None
        return (f"{DEVICE_FLAG} {current} names this host's own platform ({host}, by its GPU query): without "
                "it the engine picks a device by itself, and this host has no other")

    def _canonical(self, name: str) -> str:
        """The host's canonical spelling of flag ``name`` (itself when the catalog does not know it)."""
        if self.flags is None:
            return name
        try:
            return self.flags.resolve(name).name
        except FlagError:
            return name

    def _other_choice(self, name: str) -> str | None:
        """Why flag ``name`` is not read here, or None: it is an option of some choices of a selector
        (``[[choice_option]]``) and the selector's effective value is another one, or it is unset."""
        canon = self._canonical(name)
        for co in self.k.choice_options:
            if not co.flags.search(canon):
                continue
            value = self.setting(co.selector)
            wanted = " or ".join(co.choices)
            if value is None and self.flags is None and not self.server_args:
                continue  # nothing says what the selector is: not known to be out of play
            if value is None or value.strip().lower() in _OFF:
                return f"{name} is read only under {co.selector} {wanted}, and {co.selector} is not set here"
            if value.strip().lower() not in {c.lower() for c in co.choices}:
                return f"{name} is an option of {co.selector} {wanted}, not of the {value} this deployment selects"
        return None

    def off_the_device(self, change: Change, symptoms: Iterable[str], features: Iterable[str]) -> str | None:
        """Why ``change`` cannot cause this failure, or None: the failure is on the device (its ``symptoms``
        include one of ``DEVICE_SYMPTOMS``), and every subsystem the setting configures runs its code on the
        host only unless a request asks for one of its ``device_work_only_with`` features, which none of the
        failing launch's requests (``features``) did: the output parsers read text the model already made."""
        on_device = sorted(set(symptoms) & DEVICE_SYMPTOMS)
        subs = self.subsystems_of(change.kind, change.name)
        if not on_device or not subs or any(s.device_work_only_with is None for s in subs):
            return None
        if any(set(features) & (s.device_work_only_with or frozenset()) for s in subs):
            return None
        s = subs[0]
        needs = " or ".join(sorted(s.device_work_only_with or ()))
        return (f"{change.name} configures {s.id}, whose code reaches the device only for requests with {needs}: "
                f"the failing requests asked none, and the failure is on the device ({on_device[0]})")

    def not_reached(self, change: Change, failing: Outcome) -> str | None:
        """Why ``change`` cannot cause the ``failing`` launch's failure, or None: every subsystem the setting
        configures runs its code only once a launch reached a start-up stage (``runs_after_stage``) of which
        the failing launch printed no progress line (knowledge/signatures.toml ``stage``), and its error
        does not name the setting (an argument check that refuses the setting's value names it)."""
        subs = self.subsystems_of(change.kind, change.name)
        if not subs or any(s.runs_after_stage is None for s in subs) or failing.stage not in _NEVER_READY:
            return None  # a server that came up went through every start-up stage
        reached = {m.stage for m in failing.matches if m.kind == "progress"}
        if any(s.runs_after_stage in reached for s in subs):
            return None
        spellings = {change.name.lstrip("-").lower(), change.name.lstrip("-").replace("-", "_").lower()}
        errors = [m.first_line for m in failing.matches if m.kind in ("error", "fatal")]
        for tb in failing.tracebacks:  # the error, and the code it surfaced in
            errors += [tb.exception_line or ""] + [f"{f.module}.{f.function} {f.code or ''}" for f in tb.frames]
        if any(sp in line.lower() for line in errors for sp in spellings):
            return None
        s = subs[0]
        return (f"{change.name} configures {s.id}, whose code first runs once a launch is past the "
                f"{s.runs_after_stage} stage's start: this launch failed before it, and its error does not name "
                "the setting")

    def why_not(self, change: Change) -> str | None:
        """Why ``change`` cannot matter here (its subsystem is not in play), or None. A removal of a
        setting the user made is always allowed: it restores SGLang's own choice, except removing the
        device setting that names the host's own platform (``_own_device``)."""
        if change.after is None:
            return self._own_device(change)
        for s in self.subsystems_of(change.kind, change.name):
            results = [self._holds(c) for c in s.in_play_any]
            if not results or any(r is not False for r in results):
                continue  # in play, or not known to be out of play
            return f"{change.name} configures {s.id}, which is not in play here: {s.why}"
        if change.kind == "flag" and (why := self._other_choice(change.name)):
            return why
        if change.kind == "flag" and isinstance(change.after, str):
            for flags, values, conds, why in self.k.implementations:
                if not flags.search(change.name) or not values.fullmatch(change.after.strip()):
                    continue
                results = [self._holds(c) for c in conds]
                if results and all(r is False for r in results):
                    return f"{change.name} {change.after} does not run on this host's platform ({self.platform}): {why}"
        return None
