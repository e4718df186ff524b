"""Real-engine cases (``bench/real/ENGINE-NAME/``): a case file for a real engine on this host's CPU and
its truth (``truth.toml``, the lab's ``[truth]`` format: ``fixes``, ``chain``, ``expect``), which only
the bench and the tests read, never the agent.

A case names the real-engine bed's folder as ``{engines}`` (``$HYPOLOOP_ENGINES``, default
``~/.cache/hypoloop/engines-v1``, built by ``.ci/real-engines``); `render` writes a copy with the folder
filled in, which is what ``hypoloop run`` is given.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REAL_DIR = Path(__file__).resolve().parent / "real"
PLACEHOLDER = "{engines}"


def engines_root() -> Path:
    """The real-engine bed's folder: ``$HYPOLOOP_ENGINES`` or ``~/.cache/hypoloop/engines-v1``."""
    return Path(os.environ.get("HYPOLOOP_ENGINES") or Path.home() / ".cache" / "hypoloop" / "engines-v1")


@dataclass(frozen=True)
class RealCase:
    """One real case: its folder, the case text (with ``{engines}``) and its truth table."""

    name: str
    folder: Path
    truth: dict[str, Any]

    @property
    def expect(self) -> str:
        """The honest ending: ``isolated`` unless the truth says otherwise."""
        return str(self.truth.get("expect", "isolated"))

    @property
    def chain(self) -> list[list[dict[str, Any]]]:
        """The blockers one behind the other (each link: alternative fixes); [] for a single fix."""
        return list(self.truth.get("chain", []))

    @property
    def launch_limit(self) -> int:
        """Most launches a good run may take: chain length (1 for a single fix) + 3 (issue 22)."""
        return max(1, len(self.chain)) + 3

    def render(self, out_dir: Path, root: Path | None = None) -> Path:
        """Write ``case.toml`` into `out_dir` with ``{engines}`` replaced by the bed's folder (`root`,
        default `engines_root`); returns its path."""
        text = (self.folder / "case.toml").read_text(encoding="utf-8")
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "case.toml"
        path.write_text(text.replace(PLACEHOLDER, str(root or engines_root())), encoding="utf-8")
        return path


def real_cases(prefix: str = "") -> list[RealCase]:
    """The real cases whose folder name starts with `prefix` (``vllm-``, ``sglang-``), sorted by name.
    Raises ValueError naming a truth file that is not valid TOML or has no ``[truth]`` table."""
    out = []
    for folder in sorted(REAL_DIR.glob(f"{prefix}*")):
        if not (folder / "case.toml").is_file():
            continue
        path = folder / "truth.toml"
        try:
            truth = tomllib.loads(path.read_text(encoding="utf-8")).get("truth")
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{path}: {exc}") from None
        if not isinstance(truth, dict):
            raise ValueError(f"{path}: expected a [truth] table")
        out.append(RealCase(folder.name, folder, truth))
    return out


def _norm(value: Any) -> str:
    return str(value).strip().lower()


def _number(value: Any) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


def fix_matches(fix: dict[str, Any], kind: str, name: str, value: Any) -> bool:
    """Whether a change (kind, name, value after) is the truth fix `fix`: ``value = false`` means
    removed; a numeric value is an example (any number counts); otherwise the same value."""
    if fix.get("kind") != kind or fix.get("name") != name:
        return False
    want = fix.get("value", True)
    if want is False:
        return value is None or value is False
    if value is None or value is False:
        return False
    if _number(want) is not None and _number(value) is not None and not isinstance(want, bool):
        return True
    return _norm(want) == _norm(value)


def judge(case: RealCase, result: dict[str, Any]) -> tuple[bool, str]:
    """Whether a ``hypoloop run --json`` result is the right ending for `case`, and why (one line).

    isolated: the fix (and, for a chain, the blockers adopted before it) are root fixes of the truth,
    one per link; a workaround (``root = false``) is named as such and is not right. not_isolated: the
    run ended so (naming the truth's ``package`` when it has one).
    """
    status = result.get("status")
    if case.expect == "not_isolated":
        package = case.truth.get("package")
        named = str(result)
        ok = status == "not_isolated" and (not package or str(package).lower() in named.lower())
        return ok, f"ended {status}"
    root = result.get("root_cause") or {}
    fix = root.get("fix")
    if status != "isolated" or not fix:
        return False, f"ended {status}: {result.get('reason', '')}"
    changes = [*(root.get("blockers") or []), fix]
    links = case.chain or [list(case.truth.get("fixes", []))]

    def which(ch: dict[str, Any]) -> dict[str, Any] | None:
        for link in links:
            for f in link:
                if fix_matches(f, str(ch.get("kind")), str(ch.get("name")), ch.get("after")):
                    return f
        return None

    found = [which(ch) for ch in changes]
    shown = ", ".join(f"{c.get('name')}={c.get('after')}" for c in changes)
    if any(f is None for f in found):
        return False, f"isolated {shown}, not the truth's fix"
    if any(not f.get("root", True) for f in found if f):
        return False, f"isolated {shown}: a workaround, not the root fix"
    covered = sum(any(f in link for f in found) for link in links)
    if covered < len(links):
        return False, f"isolated {shown}: {covered} of {len(links)} links"
    return True, f"isolated {shown}"
