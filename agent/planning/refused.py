"""Whether the engine refused a value the user chose as unsupported where no setting offers another way.

An engineer who reads "CPU FP8 KV cache is only supported for MHA." (SGLang 0.5.23
srt/mem_cache/kv_cache_configurator.py, raised at start-up for an MLA model on the CPU engine) or
"--kv-cache-dtype fp8_e5m2 is not supported on CPU." (the same release's CPU checks) knows the user's FP8
KV cache cannot be had on this host with this model: the condition the engine names (the model's
attention kind, the platform the host is) is no choice of any setting. Dropping the value is then the
fix, not a workaround that gives up something the user was served: the baseline never served it. Where
the condition names something a setting chooses ("... is only supported by the single-wrapper FlashInfer
path", "... only supported with ep_size == 1"), another implementation may keep the value, and the
value stays the user's intent.

The sentence is read from a failed launch's facts (knowledge/signatures.toml ``value_only_supported`` and
``value_not_supported``: ``unsupported_what``, the thing refused, and ``unsupported_when``, the condition).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.domain.models import Outcome
from tools.flags import FlagCatalog, documented_choices

#: The failing run's facts that say what the engine refused as unsupported and under which condition.
REFUSAL_FACTS = ("unsupported_what", "unsupported_when")

_ENV = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")


def _words(text: str) -> set[str]:
    """Lower-case alphanumeric words of ``text`` (``fp8_e4m3`` -> fp8, e4m3)."""
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w}


def refusals(outcomes: Iterable[Outcome]) -> list[tuple[str, str]]:
    """The (what, condition) pairs the failed launches among ``outcomes`` were refused with, in order."""
    out: list[tuple[str, str]] = []
    for o in outcomes:
        what, when = (o.facts.get(k, "").strip() for k in REFUSAL_FACTS)
        if o.stage != "ok" and what and when and (what, when) not in out:
            out.append((what, when))
    return out


def _names_alternative(condition: str, flags: FlagCatalog, device_flag: str) -> bool:
    """Whether ``condition`` names something a setting chooses: a flag or argparse dest, an environment
    variable, or a choice of any flag (argparse's, or the quoted list of its help); a word that is a choice of
    ``device_flag`` (SGLang 0.5.23's ``--device``, whose help lists 'cuda', 'xpu', 'hpu', 'npu', 'cpu', 'musa') is the platform,
    which is the host's, not a choice (other flags may offer "cpu" too: an offload target)."""
    if "--" in condition or _ENV.search(condition):
        return True
    device = flags.lookup(device_flag)
    platforms = {c.lower() for c in documented_choices(device)} if device is not None else set()
    words = set(re.split(r"[^a-z0-9_.-]+", condition.lower())) - {""} - platforms
    dests = {spec.name.lstrip("-").replace("-", "_") for spec in flags.flags.values()}
    if words & dests:
        return True
    choices = {c.lower() for spec in flags.flags.values() for c in documented_choices(spec)}
    return bool(words & choices)


def refused_here(name: str, value: object, outcomes: Iterable[Outcome], flags: FlagCatalog | None,
                 device_flag: str) -> bool:
    """Whether a failed launch among ``outcomes`` was refused because of flag ``name``'s value ``value``
    itself (the refused thing names a word of the value and a word or the spelling of the flag: "CPU FP8 KV
    cache" for ``--kv-cache-dtype fp8_e4m3``) under a condition that names nothing a setting chooses
    (``_names_alternative``). False without the host's flag catalog (``flags``), which alone says what a
    setting can choose, and for a switch or no value."""
    if flags is None or value in (None, True, False):
        return False
    value_words, name_words = _words(str(value)), _words(name)
    for what, when in refusals(outcomes):
        said = _words(what)
        if not (value_words & said) or not (name_words & said or name in what):
            continue
        if not _names_alternative(when, flags, device_flag):
            return True
    return False
