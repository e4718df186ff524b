"""Words of names, help texts and descriptions compared by stem (``routed`` and ``routing`` alike), generic
words left out: a leaf module (no agent imports) shared by the generators and ``agent.planning.served``."""

from __future__ import annotations

import functools
import re

__all__ = ["GENERIC_WORDS", "name_words", "ordered_words", "spelled", "spells", "stem", "stems"]

#: Words too common in module paths, function names and help texts to implicate anything.
GENERIC_WORDS = frozenset(
    """srt python lib dist site packages init self call run forward get set the and for with this that from
    into when use used using not none true false default value values model models layer layers manager
    managers executor entrypoints utils util common base main process worker workers server args arg
    scheduler schedulers
    engine module modules function wrapper wrapped inner outer impl core local global new old
    size type mode enable enables enabled disable disables disabled option options flag support supported
    which will can may only are its has have per max min number num time file path name load loader
    loading weight weights data copy tensor tensors""".split()
)
_SUFFIXES = ("ations", "ation", "ions", "ion", "ings", "ing", "ers", "er", "ed", "es", "s")


def _stem(word: str) -> str:
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    # a silent final e goes too, so that ``page`` and ``paged``, ``cache`` and ``cached`` meet
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word


def stems(text: str) -> set[str]:
    """Stems of the words of ``text`` (split at non-letters and ``_``/``-``/``.``), generic words left out."""
    return set(_stems(text))


@functools.lru_cache(maxsize=4096)
def _stems(text: str) -> frozenset[str]:
    out = set()
    for w in re.split(r"[^A-Za-z0-9]+|_", text):
        w = w.lower()
        if len(w) < 3 or w.isdigit() or w in GENERIC_WORDS:
            continue
        s = _stem(w)
        if s not in GENERIC_WORDS:
            out.add(s)
    return frozenset(out)


def stem(word: str) -> str:
    """The stem of one lower-case word (a known suffix cut when three letters remain)."""
    return _stem(word)


def name_words(text: str) -> set[str]:
    """The lower-case words of an identifier (a module path, a function, a flag or variable name), split
    at non-letters and ``_``, generic words left out, unstemmed; short version words (``v2``) kept, as a
    file ``x_v2`` and a variable ``X_V2`` name the same second implementation."""
    return set(ordered_words(text))


def ordered_words(text: str) -> list[str]:
    """``name_words`` of ``text`` in the order they are written (a generic word left out makes the words on
    either side of it neighbours)."""
    return list(_ordered_words(text))


@functools.lru_cache(maxsize=8192)
def _ordered_words(text: str) -> tuple[str, ...]:
    """``ordered_words`` (cached: the same setting names and log messages are read for every candidate, each
    step)."""
    return tuple(w for w in (p.lower() for p in re.split(r"[^A-Za-z0-9]+|_", text))
                 if len(w) >= 2 and not w.isdigit() and w not in GENERIC_WORDS)


def spelled(word: str, others: set[str]) -> set[str]:
    """The words of ``others`` that ``word`` names: the same word, or (four letters or more) an
    abbreviation of one or one of its abbreviations (``spec`` and ``speculative``)."""
    if len(word) < 4:  # too short to abbreviate or be abbreviated: the same word only
        return {word} if word in others else set()
    return {o for o in others if _names(word, o)}


def spells(word: str, others: set[str]) -> bool:
    """Whether ``word`` names a word of ``others`` (``spelled`` is not empty), stopping at the first."""
    return word in others or (len(word) >= 4 and any(_names(word, o) for o in others))


def _names(word: str, other: str) -> bool:
    """Whether ``word`` (four letters or more) names ``other``: the same word, or one abbreviates the other."""
    return other == word or (len(other) >= 4 and (other.startswith(word) or word.startswith(other)))
