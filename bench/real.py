"""Real-engine cases: real SGLang and vLLM serving the bed's tiny model on this host's CPU (issue 22).

A case lives in ``bench/real/<engine>-<name>/``: ``case.toml`` is an ordinary hypoloop case in which
``{engines}`` stands for the real-engine bed (``.ci/real-engines``: its environment and its tiny model,
``{engines}/tiny-llama``); ``truth.toml`` beside it holds a ``[truth]`` table in the lab worlds' format
(lab/README.md) and is read only to score a run, never by the agent. ``materialize`` writes the case
with ``{engines}`` filled in (what a user of that bed would have written), next to nothing else, so
the agent cannot see the truth.

The bed: ``$HYPOLOOP_ENGINES`` or ``~/.cache/hypoloop/engines-v1`` (``bed_root``); ``bed_missing`` says
in one line why it cannot be used.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.case import Case, load_case
from lab.world import Truth, WorldError, _Ctx, _parse_truth

REAL_DIR = Path(__file__).resolve().parent / "real"
#: In a real case file, the folder of the real-engine bed.
ENGINES = "{engines}"
BED_FILES = (
    "bin/python",
    ".hypoloop-bed-version",
    "tiny-llama/config.json",
    "tiny-llama/model.safetensors",
    "tiny-llama/healthy.json",
)


def bed_root() -> Path:
    """Where `.ci/real-engines` builds the bed: ``$HYPOLOOP_ENGINES`` or ``~/.cache/hypoloop/engines-v1``."""
    return Path(os.environ.get("HYPOLOOP_ENGINES") or Path.home() / ".cache" / "hypoloop" / "engines-v1")


def bed_missing(root: Path | None = None) -> str | None:
    """One line saying why the bed at ``root`` (default `bed_root()`) cannot be used, or None."""
    root = root or bed_root()
    for rel in BED_FILES:
        if not (root / rel).is_file():
            return f"the real-engine bed at {root} is not built ({rel} missing); build it with .ci/real-engines"
    return None


@dataclass
class _TruthOnly:
    truth: Truth


@dataclass
class RealCase:
    """One real-engine case, shaped like `bench.worlds.BenchWorld` for scoring (``world.truth``,
    ``case``, ``expect``, ``chain``, ``package``). ``folder`` is its source folder, ``case_path`` the
    materialized case file that runs are given, ``engine`` the folder name's prefix."""

    name: str
    engine: str
    folder: Path
    case_path: Path
    case: Case
    world: _TruthOnly
    flaky: bool = False

    @property
    def truth(self) -> Truth:
        """The case's truth (read from truth.toml)."""
        return self.world.truth

    @property
    def expect(self) -> str:
        """How a good run ends: isolated, not_isolated or not_reproduced."""
        return self.truth.expect

    @property
    def chain(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        """The links of a chain case, in order; () otherwise."""
        return self.truth.chain

    @property
    def package(self) -> str | None:
        """The package a not_isolated ending must name, if any."""
        return self.truth.package

    @property
    def max_launches(self) -> int:
        """The most launches a good run may take: chain length (1 for a single link) + 3."""
        return max(1, len(self.chain)) + 3


def load_truth(path: Path) -> Truth:
    """The ``[truth]`` table of ``path``. Raises ValueError (one line naming the file) when it is bad."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if "truth" not in data:
        raise ValueError(f"{path}: expected a [truth] table")
    try:
        truth = _parse_truth(_Ctx(path), data["truth"])
    except WorldError as exc:
        raise ValueError(str(exc)) from None
    assert truth is not None
    return truth


def materialize(folder: Path, out_dir: Path, root: Path | None = None) -> Path:
    """Write ``folder``'s case.toml into ``out_dir`` with ``{engines}`` replaced by the bed's path;
    returns the written file. Only the case is written (never the truth)."""
    root = root or bed_root()
    text = (folder / "case.toml").read_text().replace(ENGINES, str(root))
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "case.toml"
    out.write_text(text)
    return out


def discover(
    engines: list[str] | None = None, names: list[str] | None = None, *, out_dir: Path, root: Path | None = None
) -> list[RealCase]:
    """The real cases under bench/real (sorted), of the given engines (folder prefixes, e.g. sglang,
    vllm; default all) and names (folder names; default all), each materialized under ``out_dir/NAME``.
    Raises ValueError for an unknown name or a bad case/truth file."""
    folders = sorted(p.parent for p in REAL_DIR.glob("*/case.toml") if (p.parent / "truth.toml").is_file())
    known = [f.name for f in folders]
    for name in names or []:
        if name not in known:
            raise ValueError(f"unknown real case {name!r} (known: {', '.join(known) or 'none'})")
    out = []
    for folder in folders:
        engine = folder.name.split("-", 1)[0]
        if engines and engine not in engines:
            continue
        if names and folder.name not in names:
            continue
        path = materialize(folder, out_dir / folder.name, root)
        try:
            case = load_case(str(path))
        except ValueError as exc:
            raise ValueError(str(exc).replace(str(path), str(folder / "case.toml"))) from None
        out.append(
            RealCase(
                name=folder.name,
                engine=engine,
                folder=folder,
                case_path=path,
                case=case,
                world=_TruthOnly(load_truth(folder / "truth.toml")),
            )
        )
    return out
