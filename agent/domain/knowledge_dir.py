"""Which knowledge folder a run reads: ``--knowledge DIR``, else ``$HYPOLOOP_KNOWLEDGE``, else the
repository's ``knowledge/``.

A knowledge folder holds any of ``KNOWLEDGE_FILES`` (each file's header comment says what it holds, and
docs/ARCHITECTURE.md "Where each kind of change goes" lists them): the inference engines
(``engines.toml``, read by ``tools/engines.py``), log signatures, the hypothesis catalog and the
symptom-class rules, flag roles, value limits, risk rules, the rule planner's weights, implementation
choices, what a deployment is (``served.toml``), which subsystems are in play, the localising experiments
(``localisers.toml``), the settings that bound a resource (``budgets.toml``), the implementation switches
(``switches.toml``), where the engine resolves unset arguments (``resolution.toml``), which package a native library or a log line belongs to (``libraries.toml``), what type the
standard messages quoting a value say it must have (``value_types.toml``), and the findings
reader's GPUs, model families and configuration facts.

A file the folder lacks falls back to the repository's own file of that name, so a folder can replace
one file and keep the rest (a folder with only an empty ``hypotheses.toml`` is "no catalog"). A file
that is present is used as it is: an empty ``hypotheses.toml`` is an empty catalog, and a run with it
still has the other candidate generators (``agent/planning/generators``). The files are read through
``tools.knowledge_files`` (once per version on disk; a broken file is one line naming it and the field).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tools.knowledge_files import ENV_VAR, REPOSITORY_DIR

__all__ = [
    "ENV_VAR",
    "KNOWLEDGE_FILES",
    "KnowledgeDirError",
    "chosen_dir",
    "default_dir",
    "knowledge_dir",
    "knowledge_file",
    "use_knowledge",
]

#: The files read from the knowledge folder in force (``knowledge_file`` here, ``knowledge_path`` in
#: ``tools/knowledge_files.py`` for the engines, the signatures and the findings reader's three and the probe set).
KNOWLEDGE_FILES = (
    "engines.toml", "signatures.toml", "hypotheses.toml", "symptoms.toml", "flag_roles.toml", "limits.toml", "risky.toml",
    "planner.toml", "implementations.toml", "served.toml", "subsystems.toml", "hardware.toml",
    "model_families.toml", "config_facts.toml", "packages.toml", "probe_set.toml", "localisers.toml",
    "budgets.toml",
    "switches.toml",
    "resolution.toml",
    "libraries.toml",
    "value_types.toml",
    "toolchain.toml",
)


class KnowledgeDirError(ValueError):
    """A knowledge folder that does not exist or is not a folder (one line naming it)."""


def default_dir() -> Path:
    """The repository's ``knowledge/`` folder."""
    return REPOSITORY_DIR


def check_dir(path: str | Path, *, where: str = "--knowledge") -> Path:
    """``path`` made absolute, or KnowledgeDirError when it is not an existing folder."""
    p = Path(path).expanduser()
    if not p.is_dir():
        what = "does not exist" if not p.exists() else "is not a folder"
        raise KnowledgeDirError(
            f"{where}: {path} {what} (expected a folder with any of {', '.join(KNOWLEDGE_FILES)})"
        )
    return p.resolve()


def unknown_files(folder: Path) -> list[str]:
    """The names of the files in ``folder`` that no part of hypoloop reads (not in ``KNOWLEDGE_FILES``),
    sorted; hidden files (``.gitignore``, an editor's swap file) and subfolders are not counted."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                  and p.name not in KNOWLEDGE_FILES)


def check_known_files(folder: Path, *, where: str = "--knowledge") -> None:
    """KnowledgeDirError naming the first file of ``folder`` hypoloop would not read (a misspelt
    ``hypothesis.toml`` would otherwise be ignored without a word) and the names it reads."""
    unknown = unknown_files(folder)
    if unknown:
        raise KnowledgeDirError(
            f"{where}: {folder / unknown[0]}: not a knowledge file"
            f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}; a knowledge folder holds "
            f"only {', '.join(KNOWLEDGE_FILES)}"
        )


def knowledge_dir() -> Path:
    """The knowledge folder in force: ``$HYPOLOOP_KNOWLEDGE`` when set, else the repository's."""
    env = os.environ.get(ENV_VAR)
    return check_dir(env, where=f"${ENV_VAR}") if env else default_dir()


def chosen_dir() -> str | None:
    """The knowledge folder in force as recorded in a run (run state, ``run.started``): its path when a
    folder other than the repository's own was chosen, None for the repository's (so a transcript made in
    one checkout re-decides and resumes with the knowledge of the checkout that reads it)."""
    folder = knowledge_dir()
    return None if folder == default_dir() else str(folder)


def knowledge_file(name: str) -> Path:
    """``name`` in the knowledge folder in force, else the repository's file of that name."""
    own = knowledge_dir() / name
    return own if own.is_file() else default_dir() / name


@contextlib.contextmanager
def use_knowledge(path: str | Path | None) -> Iterator[Path | None]:
    """Within the block, the knowledge folder is ``path`` (``None``: leave it as it is)."""
    if path is None:
        yield None
        return
    folder = check_dir(path)
    before = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = before
