"""How much a finding bears on a case, and which flags differ between a failing baseline and a finding."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tools.engines import deployment_flags
from tools.flags import FlagCatalog, FlagError, FlagValue
from tools.knowledge.features import infer_features
from tools.knowledge.hardware import gpu_arch, gpu_names
from tools.knowledge.models import Finding, FlagDifference

_W_HARDWARE = 0.55


_W_FEATURES = 0.30


_W_MODEL = 0.15


def relevance(finding: Finding, *, model: str, features: set[str], gpu_name: str | None) -> float:
    """How much ``finding`` bears on a case, in 0..1 (unitless score for ordering).

    ``0.55 * hardware + 0.30 * features + 0.15 * model`` where
    hardware = 1.0 when the finding's first GPU is ``gpu_name`` (nvidia-smi name or shorthand),
    0.7 when another GPU it names is, 0.5 when only the architecture matches (e.g. RTX 5090 vs RTX PRO
    6000: both SM120), else 0 (also when ``gpu_name`` is None or unrecognised);
    features = Dice overlap of ``features`` (the case's, e.g. {"moe","dsa","nvfp4"}) and the finding's
    features (``Finding.features`` or inferred from its text);
    model = 1.0 for the same model (name after the last ``/``, case-insensitive), 0.5 for the same family
    (leading name, e.g. "glm"), else 0. The outcome is not part of the score: filter on it.
    """
    hardware = 0.0
    wanted = gpu_names(gpu_name) if gpu_name else []
    if wanted and finding.gpus:
        target = wanted[0]
        if finding.gpus[0] == target:
            hardware = 1.0
        elif target in finding.gpus:
            hardware = 0.7
        else:
            arch = gpu_arch(target)
            if arch and arch == gpu_arch(finding.gpus[0]):
                hardware = 0.5
    theirs = set(finding.features) or infer_features(finding.title + "\n" + finding.text)
    ours = {f.lower() for f in features}
    feature_score = 2 * len(ours & theirs) / (len(ours) + len(theirs)) if ours and theirs else 0.0
    model_score = _model_similarity(model, finding.model)
    score = _W_HARDWARE * hardware + _W_FEATURES * feature_score + _W_MODEL * model_score
    return max(0.0, min(1.0, score))


def _model_similarity(a: str | None, b: str | None) -> float:
    if not a or not b:
        return 0.0
    base_a = a.rstrip("/").rsplit("/", 1)[-1].lower()
    base_b = b.rstrip("/").rsplit("/", 1)[-1].lower()
    if base_a == base_b:
        return 1.0
    fam_a = re.match(r"[a-z]+", base_a.replace("meta-", ""))
    fam_b = re.match(r"[a-z]+", base_b.replace("meta-", ""))
    if fam_a and fam_b and fam_a.group(0) == fam_b.group(0):
        return 0.5
    return 0.0


def flag_diff(
    known_good: Mapping[str, FlagValue],
    baseline: Mapping[str, FlagValue],
    *,
    catalog: FlagCatalog | None = None,
) -> list[FlagDifference]:
    """Flags whose values differ between a failing baseline and a known-good finding, sorted by name.

    With a FlagCatalog both sides are first normalised to canonical names (unknown
    names are kept as written), so ``--tp 8`` and ``--tp-size 8`` compare equal. Flags that only
    identify the deployment (model path, host, port) are ignored. Values compare as strings, switches
    as ``True``.
    """

    def canon(name: str) -> str:
        if catalog is None:
            return name
        try:
            return catalog.resolve(name).name
        except FlagError:
            return name

    kept_out = deployment_flags()  # what the server loads and where it listens: not configuration

    def normalised(flags: Mapping[str, FlagValue]) -> dict[str, str | bool]:
        out: dict[str, str | bool] = {}
        for key, value in flags.items():
            name = canon(key)
            if name in kept_out or value is False or value is None:
                continue
            out[name] = value if value is True else str(value)
        return out

    good, base = normalised(known_good), normalised(baseline)
    diffs = [
        FlagDifference(name=name, before=base.get(name), after=good.get(name))
        for name in sorted(set(good) | set(base))
        if good.get(name) != base.get(name)
    ]
    return diffs
